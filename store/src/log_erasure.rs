//! [`EventLog`]'s erasures: planned, run by the writer, scrubbed from the read side, and what
//! they left (docs/operations.md, "Erasure and retention").

use super::*;

impl EventLog {
    /// The first events of every log stream with an owner, and the id they were read up to:
    /// a scan of the whole log, which [`EventLog::plan_erasure`] can find any scope's streams in
    /// (the erasure bench's baseline; the sweeper and the erase routes look up through indexes).
    pub async fn stream_heads(&self) -> Result<(Vec<StreamHead>, i64), StoreError> {
        self.inner.backend.stream_heads(0).await
    }

    /// Plans an erasure outside the write lock ([`erasure`]): the streams of the scope found in
    /// `heads` (from [`EventLog::stream_heads`]; `None`, as every caller but the erasure bench's
    /// baseline: the scope's own heads looked up through indexes, as of now, no scan of the log),
    /// and on SQLite their ids.
    pub async fn plan_erasure(
        &self,
        request: ErasureRequest,
        heads: Option<&(Vec<StreamHead>, i64)>,
    ) -> Result<ErasurePlan, StoreError> {
        let read;
        let (heads, planned_through) = match heads {
            Some(h) => h,
            None => {
                read = self.inner.backend.scope_heads(&request.scope).await?;
                &read
            }
        };
        let mut streams = std::collections::BTreeSet::new();
        erasure::add_scope(&request.scope, heads, &mut streams);
        streams.remove(erasure::STREAM);
        streams.remove(threadstream_domain::subscription::LOG_STREAM);
        let mut known = std::collections::BTreeMap::new();
        if let Backend::Sqlite(_) = &self.inner.backend {
            // Whether the user's subscriptions are among those of the subscriptions' log stream
            // only the writer can tell (its aggregate): their ids are read in case it is erased.
            let subscriptions = threadstream_domain::subscription::LOG_STREAM.to_string();
            let user_scope = request.scope.user_id.is_some();
            for stream in streams.iter().chain(user_scope.then_some(&subscriptions)) {
                let mut ids = Vec::new();
                let mut after = 0;
                loop {
                    let page = self.inner.backend.read_thread(stream, after, 5_000).await?;
                    let Some(last) = page.last() else { break };
                    after = last.id;
                    ids.extend(page.iter().map(|e| e.id));
                }
                known.insert(stream.clone(), ids);
            }
        }
        Ok(ErasurePlan {
            request,
            streams,
            known,
            planned_through: *planned_through,
        })
    }

    /// Plans and runs an erasure, and scrubs the files after it ([`EventLog::erase_planned`]).
    pub async fn erase(
        &self,
        request: ErasureRequest,
    ) -> Result<Result<Erasure, NotErased>, StoreError> {
        let plan = self.plan_erasure(request, None).await?;
        self.erase_planned(plan, true).await
    }

    /// Runs a planned erasure (one transaction: rows deleted, tombstone stored; on Postgres the
    /// bulk deleted before the writer takes it up) and answers once the tombstone is durable. Then this process forgets the streams (owner
    /// and fork caches, hot tails) and, with `scrub`, takes the text out of the files
    /// ([`EventLog::scrub`]; several erasures in a row may scrub once, at the end).
    pub async fn erase_planned(
        &self,
        plan: ErasurePlan,
        scrub: bool,
    ) -> Result<Result<Erasure, NotErased>, StoreError> {
        // Postgres deletes the bulk before the writer, outside the write order: appends to
        // other streams are not held up behind it (docs/performance.md, "erasure-postgres").
        // The erasure log and the subscriptions' log are the writer's to change alone (the
        // latter is begun again from the other users' state, see `crate::erasure`).
        let ahead = match &self.inner.backend {
            Backend::Postgres(pg) => {
                if plan.request.scope.idle_before_ms.is_some() {
                    // The writer checks a retention erasure's threads for live runs under the
                    // order: their aggregates are loaded now, between appends, not then.
                    for s in &plan.streams {
                        self.thread_state(s).await?;
                    }
                }
                let mut streams = plan.streams.clone();
                streams.remove(erasure::STREAM);
                streams.remove(threadstream_domain::subscription::LOG_STREAM);
                let user = plan.request.scope.user_id.as_deref();
                tracing::debug!(
                    streams = streams.len(),
                    "erasure: deleting, before the write order"
                );
                Some(pg.erase_ahead(&streams, user).await?)
            }
            Backend::Sqlite(_) => None,
        };
        let (reply, rx) = oneshot::channel();
        let (acked, acked_rx) = oneshot::channel();
        self.inner
            .tx
            .send(writer::WriterMsg::Erase {
                plan: Box::new(plan),
                ahead,
                reply,
                acked,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        let tombstone = match rx.await.map_err(|_| StoreError::Closed)?? {
            Ok(t) => t,
            Err(not) => return Ok(Err(not)),
        };
        acked_rx.await.map_err(|_| StoreError::Closed)??;
        let EventBody::Erased(erased) = tombstone.decode()?.body else {
            return Err(StoreError::refused("the erasure log holds a non-tombstone"));
        };
        let streams: Vec<String> = erased.streams.iter().map(|s| s.stream.clone()).collect();
        self.inner.heads.erased(&streams, tombstone.id);
        if scrub {
            self.scrub(&streams).await?;
        }
        Ok(Ok(Erasure {
            tombstone,
            erased: *erased,
        }))
    }

    /// After erasures: SQLite's thread index forgets `streams` and both WALs are checkpointed
    /// and truncated (the freed pages were zeroed as they were freed, `secure_delete`);
    /// Postgres vacuums the tables erasures delete from. See docs/operations.md.
    pub async fn scrub(&self, streams: &[String]) -> Result<(), StoreError> {
        match &self.inner.backend {
            Backend::Sqlite(b) => {
                let path = b.path();
                let streams = streams.to_vec();
                tokio::task::spawn_blocking(move || erasure::sqlite::scrub_files(&path, &streams))
                    .await
                    .map_err(|e| StoreError::unavailable("scrub after erasure", e))?
            }
            Backend::Postgres(pg) => pg.vacuum_erased().await,
        }
    }

    /// `threadstream scrub`, after erasures: on Postgres the tables erasures delete from are
    /// rewritten (`VACUUM FULL`, an exclusive lock on each while it runs) and the WAL is switched
    /// and checkpointed, so the erased rows' bytes are in no table file and, once standbys and
    /// slots have moved past them, in no kept WAL segment of any node (`wal_recycle = off`;
    /// docs/operations.md). `false` on SQLite, where every erasure already overwrites them.
    pub async fn scrub_erased(&self) -> Result<bool, StoreError> {
        match &self.inner.backend {
            Backend::Sqlite(_) => Ok(false),
            Backend::Postgres(pg) => pg.scrub_erased().await.map(|()| true),
        }
    }

    /// The streams named by the tombstones of every erasure of `user` (`None`: the user was
    /// never erased): what a repeated `erase --user` scrubs after a crash between an erasure's
    /// commit and its scrub. Reads the erasure log whole (an operator's command, not a route).
    pub async fn user_erased_streams(&self, user: &str) -> Result<Option<Vec<String>>, StoreError> {
        let mut found: Option<Vec<String>> = None;
        let mut after = 0;
        loop {
            let page = self
                .inner
                .backend
                .read_thread(erasure::STREAM, after, 5_000)
                .await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for e in &page {
                if let EventBody::Erased(erased) = e.decode()?.body {
                    if erased.scope.user_id.as_deref() == Some(user) {
                        found
                            .get_or_insert_with(Vec::new)
                            .extend(erased.streams.iter().map(|s| s.stream.clone()));
                    }
                }
            }
        }
        Ok(found)
    }

    /// Deletes every idempotency record of `user` (their scope) outside an erasure's
    /// transaction: a user with no stream left, or a repeated erasure; returns how many went.
    pub async fn erase_user_keys(&self, user: &str) -> Result<u64, StoreError> {
        self.inner.backend.erase_user_keys(user).await
    }

    /// `(tombstone id, highest erased id)` when the log stream `stream` was erased.
    pub async fn erased_stream(&self, stream: &str) -> Result<Option<(i64, i64)>, StoreError> {
        self.inner.backend.erased_stream(stream).await
    }
}
