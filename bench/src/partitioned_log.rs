//! `partitioned-log`: the measured prototype behind docs/scaling.md.
//!
//! 1. **The order lock's ceiling.** One database, 1 and 3 writers (each an `EventLog`, as each
//!    instance has one), threads streaming one event per append: how far appends go when every
//!    commit of every instance takes the one advisory lock of the database.
//! 2. **Threads partitioned over several databases**, each with its own log and its own order
//!    (threads hashed to a partition; a thread never moves). Appends per second for 1, 2 and 4
//!    partitions, and the **merged audit order**: every partition's events keyed by (the running
//!    maximum of its commit timestamps, the partition, its id), sorted. Checked whole: each
//!    partition's events keep their order in the merge, every thread's seqs run 1..n in it, a
//!    resume from a cursor taken anywhere (per partition: last id and running maximum) gives
//!    exactly the rest, and how often a client's append acknowledged before its next one (to
//!    another partition) lands after it in the merged order (a causal inversion) is counted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use threadstream_store::{EventLog, NotifyMode};

use crate::data::{cmd, create, delta, run_start};
use crate::report::{round, Report, Row};
use crate::Ctx;

/// The partition of a thread: FNV-1a of its id (stable across processes and versions).
pub fn partition_of(thread: &str, partitions: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in thread.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % partitions as u64) as usize
}

/// What a drive appended.
struct Drive {
    events: u64,
    errors: u64,
    secs: f64,
    /// The causal probe's appends, in the order they were acknowledged: (partition, id).
    probe: Vec<(usize, i64)>,
}

/// `threads` threads, each appending one delta at a time to `logs[route(thread)]` for `dur`;
/// meanwhile a probe client appends to 8 threads in turn, each append after the last one's
/// acknowledgement.
async fn drive(
    logs: &[EventLog],
    route: &(dyn Fn(&str) -> usize + Sync),
    threads: usize,
    dur: Duration,
) -> anyhow::Result<Drive> {
    let names: Vec<String> = (0..threads).map(|i| format!("t-{i}")).collect();
    let probes: Vec<String> = (0..8).map(|i| format!("probe-{i}")).collect();
    for t in names.iter().chain(&probes) {
        logs[route(t)]
            .append(t, vec![create(), cmd(&run_start(&format!("r-{t}"), "a1"))])
            .await?;
    }
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::with_capacity(threads);
    for t in names {
        let log = logs[route(&t)].clone();
        tasks.push(tokio::spawn(async move {
            let c = cmd(&delta(&format!("r-{t}"), "a1", "token "));
            let (mut n, mut e) = (0u64, 0u64);
            while Instant::now() < deadline {
                match log.append(&t, vec![c.clone()]).await {
                    Ok(_) => n += 1,
                    Err(_) => e += 1,
                }
            }
            (n, e)
        }));
    }
    let probe_logs: Vec<(usize, EventLog)> = probes
        .iter()
        .map(|t| (route(t), logs[route(t)].clone()))
        .collect();
    let probe = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut k = 0usize;
        while Instant::now() < deadline {
            let i = k % 8;
            let t = format!("probe-{i}");
            let c = cmd(&delta(&format!("r-{t}"), "a1", "probe "));
            if let Ok(stored) = probe_logs[i].1.append(&t, vec![c]).await {
                seen.push((probe_logs[i].0, stored[0].id));
            }
            k += 1;
        }
        seen
    });
    let mut d = Drive {
        events: 0,
        errors: 0,
        secs: 0.0,
        probe: Vec::new(),
    };
    for t in tasks {
        let (n, e) = t.await?;
        d.events += n;
        d.errors += e;
    }
    d.secs = start.elapsed().as_secs_f64();
    d.probe = probe.await?;
    Ok(d)
}

/// One event of a partition, as the audit merge reads it.
#[derive(Clone, PartialEq, Eq, Debug)]
struct AuditEvent {
    /// (running max ts up to this event in its partition, partition, id): the merge key.
    key: (i64, usize, i64),
    thread: String,
    seq: i64,
}

/// A partition's events after `after_id`, keyed, the running maximum seeded with `floor`.
async fn read_partition(
    url: &str,
    p: usize,
    after_id: i64,
    floor: i64,
) -> anyhow::Result<Vec<AuditEvent>> {
    let mut conn = PgConnection::connect(url).await?;
    let rows: Vec<(i64, i64, String, i64)> = sqlx::query_as(
        "SELECT id, ts, aggregate_id, sequence FROM events WHERE id > $1 ORDER BY id",
    )
    .bind(after_id)
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    let mut max = floor;
    Ok(rows
        .into_iter()
        .map(|(id, ts, thread, seq)| {
            max = max.max(ts);
            AuditEvent {
                key: (max, p, id),
                thread,
                seq,
            }
        })
        .collect())
}

/// The merged audit order of the partitions from a cursor (per partition: last id, running max).
async fn merged(urls: &[String], cursor: &[(i64, i64)]) -> anyhow::Result<Vec<AuditEvent>> {
    let mut all = Vec::new();
    for (p, url) in urls.iter().enumerate() {
        all.extend(read_partition(url, p, cursor[p].0, cursor[p].1).await?);
    }
    // Keys are unique (partition, id): a sort is the k-way merge.
    all.sort_by_key(|e| e.key);
    Ok(all)
}

/// The checks of the merged order; `Ok(summary)` or the first violation.
async fn check_audit(urls: &[String], probe: &[(usize, i64)]) -> anyhow::Result<(bool, String)> {
    let start = vec![(0i64, i64::MIN); urls.len()];
    let order = merged(urls, &start).await?;
    // 1. Each partition's events in its own id order.
    let mut last_id = vec![0i64; urls.len()];
    for e in &order {
        let (_, p, id) = e.key;
        if id <= last_id[p] {
            return Ok((
                false,
                format!("partition {p}: id {id} after {}", last_id[p]),
            ));
        }
        last_id[p] = id;
    }
    // 2. Every thread's seqs 1..n, in order.
    let mut next: HashMap<&str, i64> = HashMap::new();
    for e in &order {
        let n = next.entry(e.thread.as_str()).or_insert(1);
        if e.seq != *n {
            return Ok((
                false,
                format!("thread {}: seq {} where {} was due", e.thread, e.seq, n),
            ));
        }
        *n += 1;
    }
    // 3. Resume from cursors taken at ten points: exactly the rest.
    for cut in (1..10).map(|k| k * order.len() / 10) {
        let mut cursor = vec![(0i64, i64::MIN); urls.len()];
        for e in &order[..cut] {
            let (max, p, id) = e.key;
            cursor[p] = (id, max);
        }
        let rest = merged(urls, &cursor).await?;
        if rest != order[cut..] {
            return Ok((
                false,
                format!("resume at {cut} of {}: a different rest", order.len()),
            ));
        }
    }
    // 4. The probe's appends, each acknowledged before the next began: inversions in the merge.
    let pos: HashMap<(usize, i64), usize> = order
        .iter()
        .enumerate()
        .map(|(i, e)| ((e.key.1, e.key.2), i))
        .collect();
    let mut inversions = 0u64;
    for w in probe.windows(2) {
        if pos.get(&w[0]) > pos.get(&w[1]) {
            inversions += 1;
        }
    }
    Ok((
        true,
        format!(
            "{} events merged from {} partition(s): per-partition order kept, every thread's seqs 1..n, 9 resumes exact; {inversions} causal inversions in {} consecutive acknowledged probe appends",
            order.len(),
            urls.len(),
            probe.len().saturating_sub(1)
        ),
    ))
}

pub async fn partitioned_log(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let threads: usize = if ctx.quick { 100 } else { 1000 };
    let dur = Duration::from_secs_f64(if ctx.quick { 1.5 } else { 10.0 });
    let writers: &[usize] = if ctx.quick { &[1, 2] } else { &[1, 3] };
    let partitions: &[usize] = if ctx.quick { &[1, 2] } else { &[1, 2, 4] };

    // 1. One database, several writers: the order lock's ceiling.
    let mut one_writer = 0.0;
    for &w in writers {
        let (url, name) = crate::pg::create_db(&ctx.pg_admin, "tsbench_lock").await?;
        let r = async {
            let mut logs = Vec::new();
            for _ in 0..w {
                logs.push(EventLog::open_postgres(&url, NotifyMode::Postgres).await?);
            }
            let load = crate::agent_load::load_avg();
            let per = threads.div_ceil(w);
            let route = move |t: &str| {
                let i: usize = t
                    .rsplit('-')
                    .next()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
                (i / per).min(w - 1)
            };
            let d = drive(&logs, &route, threads, dur).await;
            for l in &logs {
                l.shutdown().await;
            }
            anyhow::Ok((d?, load))
        }
        .await;
        crate::pg::drop_db(&ctx.pg_admin, &name).await;
        let (d, load) = r?;
        let row = Row::new(
            format!("1 database, {w} writer(s) (instances), {threads} threads, 1 event per append"),
            if w == 1 { "threadstream" } else { "variant" },
            d.events,
            d.secs,
            "events/s",
        )
        .extra("append_errors", d.errors)
        .extra("load_avg_start", load);
        if w == 1 {
            one_writer = row.throughput;
        } else {
            report.ratio(
                &format!("one_database_{w}_writers / 1_writer"),
                row.throughput / one_writer.max(1e-9),
            );
        }
        report.row(row);
    }

    // 2. Partitioned over several databases, one order each, and the merged audit order.
    let mut base = 0.0;
    let mut all_ok = true;
    for &p in partitions {
        let mut dbs = Vec::new();
        for _ in 0..p {
            dbs.push(crate::pg::create_db(&ctx.pg_admin, "tsbench_part").await?);
        }
        let urls: Vec<String> = dbs.iter().map(|d| d.0.clone()).collect();
        let r = async {
            let mut logs = Vec::new();
            for u in &urls {
                logs.push(EventLog::open_postgres(u, NotifyMode::Postgres).await?);
            }
            let load = crate::agent_load::load_avg();
            let route = move |t: &str| partition_of(t, p);
            let d = drive(&logs, &route, threads, dur).await;
            for l in &logs {
                l.shutdown().await;
            }
            let d = d?;
            let audit = check_audit(&urls, &d.probe).await?;
            anyhow::Ok((d, audit, load))
        }
        .await;
        for (_, name) in &dbs {
            crate::pg::drop_db(&ctx.pg_admin, name).await;
        }
        let (d, (ok, summary), load) = r?;
        all_ok &= ok;
        let row = Row::new(
            format!("{p} partition(s) (databases), one order each, {threads} threads"),
            if p == 1 { "threadstream" } else { "variant" },
            d.events,
            d.secs,
            "events/s",
        )
        .extra("append_errors", d.errors)
        .extra("audit_merge", summary.clone())
        .extra("load_avg_start", load);
        if p == 1 {
            base = row.throughput;
        } else {
            report.ratio(
                &format!("{p}_partitions / 1 (same machine, same Postgres server)"),
                round(row.throughput / base.max(1e-9), 2),
            );
        }
        report.row(row);
        if !ok {
            report.note(format!("{p} partitions: {summary}"));
        }
    }
    report.check(
        "the merged audit order of every partitioning keeps each partition's order, each thread's seqs, and resumes exactly",
        if all_ok { "all checks held".into() } else { "a check failed (notes)".into() },
        all_ok,
    );
    report.note(
        "All partitions are databases of the machine's one Postgres server, on the same 2 cores as \
         this process: the partitioned rows show what the order lock costs, not what separate \
         servers would add.",
    );
    Ok(())
}
