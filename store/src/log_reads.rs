//! [`EventLog`]'s reads of threads: pages (a fork read through its sources), the stream
//! readers' cursors, who owns a thread, and the caches of owners and fork points.

use super::*;

impl EventLog {
    /// Who owns the thread (`None`: it does not exist, or is a workflow stream). Access checks
    /// call this on every thread request, so it avoids the writer: an owner never changes once
    /// the thread's first event, `thread-created`, is committed, and is cached from then on.
    pub async fn thread_owner(&self, thread_id: &str) -> Result<Option<String>, StoreError> {
        self.check_caches();
        let cached = self.owners().get(thread_id).cloned();
        if cached.is_some() {
            return Ok(cached);
        }
        // Every append request asks this first: it waits for a failover as the append would,
        // rather than being refused before it reaches the writer.
        let first = self
            .patiently(|| self.inner.backend.read_thread(thread_id, 0, 1))
            .await?;
        let Some(first) = first.first() else {
            return Ok(None);
        };
        if let EventBody::ThreadCreated(created) = first.decode()?.body {
            self.owners()
                .insert(thread_id.to_string(), created.owner.clone());
            return Ok(Some(created.owner));
        }
        if StreamKind::of(thread_id) != StreamKind::Thread {
            return Ok(None);
        }
        // Not a thread created the usual way: the writer's aggregate decides (not cached).
        Ok(self.thread_state(thread_id).await?.owner)
    }

    /// Empties the owner and fork caches if an erasure was seen since they were filled.
    fn check_caches(&self) {
        use std::sync::atomic::Ordering;
        let seen = self.inner.heads.erasures();
        if self.inner.caches_at.swap(seen, Ordering::AcqRel) != seen {
            self.owners().clear();
            self.forks().clear();
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, LruCache<String, String>> {
        // A panic while holding this lock cannot leave the map half-updated in a way that
        // matters (entries are whole), so a poisoned lock is still used.
        self.inner
            .owners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Events of `thread_id` with `id > after`, in order, at most `limit`. A fork is read
    /// through: its source's events up to the fork point, then its own ([`fork`]).
    pub async fn read_thread(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut reads = backend::Visible(&self.inner.backend);
        let segments = self.segments(&mut reads, thread_id).await?;
        fork::read_segments(&mut reads, &segments, thread_id, after, limit).await
    }

    /// [`EventLog::read_thread`] for a stream reader that was woken for `head`: the page holds
    /// every event of the thread up to it. With standbys configured (Postgres,
    /// `--read-database-url`) the page is read on one that has replayed the log up to `head`
    /// and up to the whole log's head known here (what this process acknowledged or was told of
    /// before the read), or on the primary if none has within a short wait.
    pub async fn read_thread_seen(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
        head: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let need = head.max(self.inner.heads.global_head());
        let mut reads = backend::Seen {
            backend: &self.inner.backend,
            need,
        };
        let segments = self.segments(&mut reads, thread_id).await?;
        fork::read_segments(&mut reads, &segments, thread_id, after, limit).await
    }

    /// The log streams `thread_id` is read from, deepest source first, with the highest id read
    /// from each (see [`fork::segments`]).
    async fn segments(
        &self,
        reads: &mut impl fork::RawReads,
        thread_id: &str,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        self.check_caches();
        fork::segments(
            reads,
            thread_id,
            &|stream| self.forks().get(stream).cloned(),
            &|stream, answer| {
                self.forks().insert(stream.to_string(), answer);
            },
        )
        .await
    }

    /// Calls `f` on each event of `thread_id` with id below `before`, in order, a page at a
    /// time. With `before` a fork's first own id, that is the prefix it reads through: what a
    /// fold of the whole log starts the fork's document from.
    pub async fn for_each_before(
        &self,
        thread_id: &str,
        before: i64,
        mut f: impl FnMut(&StoredEvent) + Send,
    ) -> Result<(), StoreError> {
        let mut after = 0;
        while after < before {
            let page = self.read_thread(thread_id, after, 5_000).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            page.iter().filter(|e| e.id < before).for_each(&mut f);
        }
        Ok(())
    }

    /// What `thread_id` reads through, if it is a fork.
    pub async fn fork_source(&self, thread_id: &str) -> Result<Option<ForkOf>, StoreError> {
        self.check_caches();
        if let Some(known) = self.forks().get(thread_id).cloned() {
            return Ok(known);
        }
        // Every append request asks this first: it waits for a failover as the append would,
        // rather than being refused before it reaches the writer.
        let first = self
            .patiently(|| self.inner.backend.read_thread(thread_id, 0, 1))
            .await?;
        let Some(first) = first.first() else {
            return Ok(None);
        };
        let source = fork::fork_of(first);
        self.forks().insert(thread_id.to_string(), source.clone());
        Ok(source)
    }

    fn forks(&self) -> std::sync::MutexGuard<'_, LruCache<String, Option<ForkOf>>> {
        // As for `owners`: entries are whole, so a poisoned lock is still used.
        self.inner
            .forks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A reader of `thread_id`'s events after `cursor`, served from the thread's hot tail when
    /// it provably holds them, else from the store (see [`ThreadFeed`]).
    pub fn feed(&self, thread_id: &str, cursor: i64) -> ThreadFeed {
        ThreadFeed::new(self.clone(), thread_id, cursor)
    }

    /// Events of all threads with `id > after`, in order, at most `limit`.
    pub async fn read_all(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.backend.read_all(after, limit).await
    }

    /// Which thread holds confirmation request `request_id`.
    pub async fn confirmation_thread(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        self.inner.backend.confirmation_thread(request_id).await
    }

    /// What a client's read must hold: every event this process acknowledged or was told of
    /// before the read. Standbys that hold it may serve it ([`Sight::Upto`]).
    pub fn client_sight(&self) -> Sight {
        Sight::Upto(self.inner.heads.global_head())
    }

    /// [`EventLog::read_thread`] of what `sight` must hold.
    pub async fn read_thread_in(
        &self,
        sight: Sight,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        match sight {
            Sight::Committed => self.read_thread(thread_id, after, limit).await,
            Sight::Upto(head) => self.read_thread_seen(thread_id, after, limit, head).await,
        }
    }

    /// [`EventLog::read_all`] of what `sight` must hold.
    pub async fn read_all_in(
        &self,
        sight: Sight,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        match (sight, &self.inner.backend) {
            (Sight::Upto(head), Backend::Postgres(pg)) => {
                pg.read_all_seen(after, limit, head).await
            }
            _ => self.read_all(after, limit).await,
        }
    }

    /// The highest id a read of `sight` folds up to: the log's head, or on standbys the head
    /// the reader must see (a standby may not hold more yet).
    pub async fn head_in(&self, sight: Sight) -> Result<i64, StoreError> {
        match (sight, &self.inner.backend) {
            (Sight::Upto(head), Backend::Postgres(pg)) if pg.reads_on_standbys() => Ok(head),
            _ => self.inner.backend.max_id().await,
        }
    }

    /// The stored document of read model `model` for `key`, with the id it was folded up to.
    pub async fn load_doc_in(
        &self,
        sight: Sight,
        model: &str,
        key: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        match (sight, &self.inner.backend) {
            (Sight::Upto(head), Backend::Postgres(pg)) => pg.load_doc_seen(model, key, head).await,
            (_, backend) => backend.load_doc(model, key).await,
        }
    }

    /// Every stored document of read model `model` (`(key, doc, last_id)`) and the checkpoint
    /// they were folded from; no document is older than the checkpoint.
    pub async fn model_docs_in(
        &self,
        sight: Sight,
        model: &str,
    ) -> Result<(i64, Vec<(String, String, i64)>), StoreError> {
        match (sight, &self.inner.backend) {
            (Sight::Upto(head), Backend::Postgres(pg)) => pg.model_docs_seen(model, head).await,
            (_, backend) => {
                let checkpoint = backend.checkpoint(model).await?;
                Ok((checkpoint, backend.load_docs(model).await?))
            }
        }
    }
}

/// What a read must hold, and so where it may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sight {
    /// Everything committed, read on the primary: this process's own work (recovery of runs,
    /// erasure, retention, the projector).
    Committed,
    /// Every event up to this id at least: a client's read ([`EventLog::client_sight`]), which
    /// a standby that holds it may serve (Postgres, `--read-database-url`; docs/ha.md).
    Upto(i64),
}
