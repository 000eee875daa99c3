//! Run ownership when several instances share one Postgres log.
//!
//! The instance that executes a run holds a lease on it and renews all its leases on a timer. An
//! instance that dies stops renewing; once its leases expire, another instance claims them (one
//! wins each) and recovers the run through the runtime: a run waiting on a confirmation is
//! resumed there (and stays answerable), a run that was executing is finished with `tool-error`s
//! for its open calls and `run-finish {status: "error", reason: "interrupted"}`. So no thread
//! stays stuck with a live run, and an orphan is noticed within `orphan_after`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::StreamExt;
use threadstream_agent::{AgentRuntime, Recovery};
use threadstream_domain::clock::now_ms;
use threadstream_store::{EventLog, RunLeaseStore, StoreError};
use tokio::sync::watch;

/// Claimed runs recovered at once (each a read of its thread and a few appends).
const RECOVER_AT_ONCE: usize = 16;

/// This instance's leases: cheap to clone.
#[derive(Clone)]
pub struct RunLeases {
    /// The store's leases (Postgres: the instances sharing it agree through them).
    store: Arc<dyn RunLeaseStore>,
    owner: String,
    /// A lease lasts this long past its last renewal.
    ttl: Duration,
    /// Renewing and reaping both run this often.
    tick: Duration,
    /// Chat runs this instance holds but was not executing at the last tick.
    idle: Arc<Mutex<std::collections::HashSet<(String, String)>>>,
    /// Runs an agent posts to through this instance (ingest), by `(thread, run)`.
    posting: Arc<Mutex<HashMap<(String, String), Posting>>>,
    /// Runs whose lease is held while their `run-start` is being appended
    /// ([`RunLeases::hold_starting_run`]): not released for want of a live run meanwhile.
    starting: Arc<Mutex<std::collections::HashSet<(String, String)>>>,
}

/// An ingest agent's run, seen from the instance its posts arrive at.
#[derive(Default)]
struct Posting {
    /// Its posts here that wait to be stored.
    waiting: usize,
    /// When this instance last extended its lease.
    extended: Option<Instant>,
}

impl RunLeases {
    /// Leases that make an orphaned run noticed within `orphan_after`: they last two thirds of
    /// it and are renewed (and others reaped) every sixth.
    pub fn new(store: Arc<dyn RunLeaseStore>, orphan_after: Duration) -> Self {
        let owner = format!("{}-{}", std::process::id(), uuid::Uuid::now_v7().simple());
        RunLeases {
            store,
            owner,
            ttl: orphan_after * 2 / 3,
            tick: (orphan_after / 6).max(Duration::from_millis(100)),
            idle: Default::default(),
            posting: Default::default(),
            starting: Default::default(),
        }
    }

    fn expiry(&self) -> i64 {
        now_ms() + self.ttl.as_millis() as i64
    }

    /// Takes over the lease of `run_id`, whose `run-start` this instance has just stored though
    /// the lease was held: by a start of the same run id that was not stored (its instance died
    /// waiting for the write order, or lost the race to this one). A failure is logged, not
    /// returned: the run goes on, only without that protection.
    async fn take_over(&self, thread_id: &str, run_id: &str) {
        if let Err(e) = self
            .store
            .hold(thread_id, run_id, &self.owner, self.expiry())
            .await
        {
            tracing::warn!(error = &e as &dyn std::error::Error, thread = %thread_id, run = %run_id, "could not take the run's lease");
        }
    }

    /// Lets go of a lease this instance holds (not one another instance has taken over since).
    async fn release(&self, thread_id: &str, run_id: &str) -> Result<(), StoreError> {
        self.store.release(thread_id, run_id, &self.owner).await
    }

    /// Takes the lease of a run this instance is about to start (a chat run, a follow-up run,
    /// an ingest agent's `run-start`), before its `run-start` is appended: taken after it, a
    /// `kill -9` in between left a live run no lease named, which no instance ever finished
    /// (seen in the agent-load kill bench: 9 of 10 runs finished). Until
    /// [`StartingLease::settle`], the upkeep keeps the lease though the log has no such run yet;
    /// if this instance dies first, the one that claims it finds no such run and lets it go.
    ///
    /// Only a free lease is taken: a client may name the run (AG-UI's `runId`, an agent's
    /// `run-start`), and a start that reuses a live run's id is refused by the log; taking its
    /// lease, then letting it go, would leave that live run without one.
    /// A failure is logged: the run goes on, only without that protection.
    pub async fn hold_starting_run(&self, thread_id: &str, run_id: &str) -> StartingLease {
        let key = (thread_id.to_string(), run_id.to_string());
        // Marked before the row exists, so an upkeep tick that sees the row sees the mark; not
        // marked again by a second start of the same run here (the first one's mark).
        let mut marked = self.starting.lock().expect("starting").insert(key.clone());
        let taken = match self
            .store
            .hold_free(thread_id, run_id, &self.owner, self.expiry())
            .await
        {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(error = &e as &dyn std::error::Error, thread = %thread_id, run = %run_id, "could not take the run's lease");
                false
            }
        };
        if marked && !taken {
            self.starting.lock().expect("starting").remove(&key);
            marked = false;
        }
        StartingLease {
            leases: self.clone(),
            key: Some(key),
            marked,
            taken,
        }
    }

    /// An ingest post for `runs` (runs it continues, not starts) has just arrived: the agent is
    /// alive, so they are not orphaned, whichever instance holds their leases and whether that
    /// one still runs (behind a load balancer an agent's posts land anywhere; without this, the
    /// death or rolling restart of the instance that stored a `run-start` would close the run
    /// under an agent still posting). Extended on arrival, not once stored: a post can wait for
    /// the write order longer than a lease on a saturated store. While the returned guard lives
    /// (until the append returns), the upkeep keeps extending them every tick.
    ///
    /// A run's lease is extended at most once a tick here (its posts come token by token, and
    /// each extension is a Postgres round trip), so it always reaches at least a lease time
    /// minus a tick (half of `orphan_after`) past the agent's latest post.
    pub async fn agent_posting(&self, thread_id: &str, runs: Vec<String>) -> PostingGuard {
        let mut due = Vec::new();
        {
            let mut posting = self.posting.lock().expect("posting");
            for run in &runs {
                let p = posting
                    .entry((thread_id.to_string(), run.clone()))
                    .or_default();
                p.waiting += 1;
                if p.extended.is_none_or(|t| t.elapsed() >= self.tick) {
                    p.extended = Some(Instant::now());
                    due.push(run.clone());
                }
            }
        }
        for run in &due {
            self.extend_for_activity(thread_id, run).await;
        }
        PostingGuard {
            posting: self.posting.clone(),
            thread_id: thread_id.to_string(),
            runs,
        }
    }

    /// Extends the lease of `run_id` (whoever holds it) by a lease time from now: the one place
    /// an agent's activity extends a lease. A failure is logged.
    async fn extend_for_activity(&self, thread_id: &str, run_id: &str) {
        if let Err(e) = self.store.extend(thread_id, run_id, self.expiry()).await {
            tracing::warn!(error = &e as &dyn std::error::Error, thread = %thread_id, run = %run_id, "could not extend the run's lease");
        }
    }

    /// Extends the leases of runs whose posts still wait here (unless extended in the last half
    /// tick: so at least every tick while they wait), and forgets runs with none waiting that
    /// are due for an extension anyway.
    async fn extend_while_waiting(&self) {
        let due: Vec<(String, String)> = {
            let mut posting = self.posting.lock().expect("posting");
            posting.retain(|_, p| {
                p.waiting > 0 || p.extended.is_some_and(|t| t.elapsed() < self.tick)
            });
            posting
                .iter_mut()
                .filter(|(_, p)| {
                    p.waiting > 0 && p.extended.is_none_or(|t| t.elapsed() >= self.tick / 2)
                })
                .map(|(k, p)| {
                    p.extended = Some(Instant::now());
                    k.clone()
                })
                .collect()
        };
        for (thread_id, run_id) in due {
            self.extend_for_activity(&thread_id, &run_id).await;
        }
    }

    /// Renews this instance's leases, drops those of runs that ended, and recovers runs whose
    /// owner stopped renewing. Ends when `stop` fires.
    pub async fn run(self, log: EventLog, runtime: AgentRuntime, mut stop: watch::Receiver<bool>) {
        // After the store was unreachable, every instance's leases may have expired meanwhile
        // (the outage cut them all off): claim none until one lease time after the last
        // failure, so the others renew theirs first instead of having their live runs taken
        // over (a run waiting on a confirmation finished as interrupted, an agent's run closed).
        let mut failed_at: Option<tokio::time::Instant> = None;
        // Renewal also runs on a timer of its own: a tick that recovers many runs of a dead
        // instance can outlast a lease, and this instance's own runs must not
        // expire meanwhile, or a third instance would finish them as interrupted.
        let _renewer = AbortOnDrop(tokio::spawn(self.clone().renew_forever()));
        loop {
            let may_claim = failed_at.is_none_or(|t| t.elapsed() > self.ttl);
            if let Err(e) = self.tick_once(&log, &runtime, may_claim).await {
                failed_at = Some(tokio::time::Instant::now());
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "run lease upkeep failed; retrying"
                );
            }
            tokio::select! {
                _ = tokio::time::sleep(self.tick) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Renews this instance's leases, and those of runs whose posts wait here, every tick
    /// (errors are the upkeep's to report).
    async fn renew_forever(self) {
        loop {
            if let Err(e) = self.store.renew_all(&self.owner, self.expiry()).await {
                tracing::debug!(error = &e as &dyn std::error::Error, "lease renewal failed");
            }
            self.extend_while_waiting().await;
            tokio::time::sleep(self.tick).await;
        }
    }

    async fn tick_once(
        &self,
        log: &EventLog,
        runtime: &AgentRuntime,
        may_claim: bool,
    ) -> Result<(), StoreError> {
        self.store.renew_all(&self.owner, self.expiry()).await?;
        for key in self.store.held_by(&self.owner).await? {
            if self.starting.lock().expect("starting").contains(&key) {
                continue;
            }
            let (thread_id, run_id) = key;
            let state = log.thread_state(&thread_id).await?;
            // Held while the run is live and while its background tasks outlive it.
            if state.open_run(&run_id).is_none() {
                self.release(&thread_id, &run_id).await?;
                continue;
            }
            // A chat run still live in the log that this process no longer executes (its task
            // ended without a run-finish, e.g. every append failed during a store outage):
            // recover it here, as another instance would. Seen twice, to skip the instant
            // between taking a lease and starting the run's task.
            let key = (thread_id.clone(), run_id.clone());
            if runtime.is_running(&thread_id, &run_id)
                || !runtime.started_by_chat(&thread_id, &run_id).await?
            {
                self.idle.lock().expect("idle").remove(&key);
                continue;
            }
            if !self.idle.lock().expect("idle").insert(key.clone()) {
                self.idle.lock().expect("idle").remove(&key);
                tracing::warn!(thread = %thread_id, run = %run_id, "recovering a live run no task executes");
                if let Recovery::Interrupted { .. }
                | Recovery::TasksInterrupted { .. }
                | Recovery::Idle = runtime.recover(&thread_id).await?
                {
                    self.release(&thread_id, &run_id).await?;
                }
            }
        }
        if !may_claim {
            return Ok(());
        }
        let claimed = self
            .store
            .claim_expired(&self.owner, now_ms(), self.expiry())
            .await?;
        // A dead instance's runs are recovered together, not one after another: each is a few
        // appends, which the writer batches, so they all close about one lease time after the
        // instance died however many it held.
        let recovered: Vec<Result<(), StoreError>> = futures::stream::iter(claimed)
            .map(|(thread_id, run_id)| self.recover_claimed(log, runtime, thread_id, run_id))
            .buffer_unordered(RECOVER_AT_ONCE)
            .collect()
            .await;
        recovered.into_iter().collect()
    }

    /// Recovers a run whose lease this instance just claimed from a dead one.
    async fn recover_claimed(
        &self,
        log: &EventLog,
        runtime: &AgentRuntime,
        thread_id: String,
        run_id: String,
    ) -> Result<(), StoreError> {
        // The run is not live: it finished, or its start was never stored (its instance died
        // between taking the lease and appending). Whatever else runs on the thread is not this
        // lease's to recover.
        if log
            .thread_state(&thread_id)
            .await?
            .open_run(&run_id)
            .is_none()
        {
            return self.release(&thread_id, &run_id).await;
        }
        match runtime.recover(&thread_id).await? {
            Recovery::Resumed { run_id } => {
                tracing::info!(thread = %thread_id, run = %run_id, "took over an orphaned run waiting on a confirmation");
            }
            Recovery::Interrupted { run_id: finished } => {
                tracing::warn!(thread = %thread_id, run = %finished, "finished an orphaned run as interrupted");
                self.release(&thread_id, &run_id).await?;
            }
            Recovery::TasksInterrupted { tasks } => {
                tracing::warn!(thread = %thread_id, run = %run_id, tasks, "completed orphaned background tasks as interrupted");
                self.release(&thread_id, &run_id).await?;
            }
            Recovery::Idle => self.release(&thread_id, &run_id).await?,
        }
        Ok(())
    }
}

/// The lease of a run whose start is being appended ([`RunLeases::hold_starting_run`]).
pub struct StartingLease {
    leases: RunLeases,
    key: Option<(String, String)>,
    /// This start put the key in [`RunLeases::starting`].
    marked: bool,
    /// This start inserted the lease (it was free).
    taken: bool,
}

impl StartingLease {
    /// The append is over: `stored` if the run's start was stored (the lease stays, renewed
    /// with this instance's others, taken over if another held it), otherwise the lease this
    /// start took is let go.
    pub async fn settle(mut self, stored: bool) {
        let Some(key) = self.key.take() else {
            return;
        };
        if self.marked {
            self.leases.starting.lock().expect("starting").remove(&key);
        }
        let (thread_id, run_id) = key;
        match (stored, self.taken) {
            // Run ids are unique in a thread: whoever held the lease, its start was not stored.
            (true, false) => self.leases.take_over(&thread_id, &run_id).await,
            (false, true) => {
                if let Err(e) = self.leases.release(&thread_id, &run_id).await {
                    tracing::warn!(error = &e as &dyn std::error::Error, thread = %thread_id, run = %run_id, "could not release the lease of a run not started");
                }
            }
            _ => {}
        }
    }
}

impl Drop for StartingLease {
    /// Not settled (the request was dropped mid-append): the upkeep decides, as for any lease,
    /// from whether the run is live.
    fn drop(&mut self) {
        if let Some(key) = self.key.take().filter(|_| self.marked) {
            self.leases.starting.lock().expect("starting").remove(&key);
        }
    }
}

/// The runtime's follow-up runs are leased like chat runs.
impl threadstream_agent::RunStarts for RunLeases {
    fn starting<'a>(
        &'a self,
        thread_id: &'a str,
        run_id: &'a str,
    ) -> BoxFuture<'a, Box<dyn threadstream_agent::StartingRun>> {
        Box::pin(async move {
            Box::new(self.hold_starting_run(thread_id, run_id).await)
                as Box<dyn threadstream_agent::StartingRun>
        })
    }
}

impl threadstream_agent::StartingRun for StartingLease {
    fn settle(self: Box<Self>, stored: bool) -> BoxFuture<'static, ()> {
        Box::pin(StartingLease::settle(*self, stored))
    }
}

/// An ingest post in progress ([`RunLeases::agent_posting`]): its runs' leases are kept
/// extended until it is dropped.
pub struct PostingGuard {
    posting: Arc<Mutex<HashMap<(String, String), Posting>>>,
    thread_id: String,
    runs: Vec<String>,
}

impl Drop for PostingGuard {
    fn drop(&mut self) {
        let mut posting = self.posting.lock().expect("posting");
        for run in self.runs.drain(..) {
            if let Some(p) = posting.get_mut(&(self.thread_id.clone(), run)) {
                p.waiting -= 1;
            }
        }
    }
}

/// Aborts its task when dropped (when the upkeep stops, or its own task is dropped).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
