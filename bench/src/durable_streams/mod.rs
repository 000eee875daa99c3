//! `durable-streams`: threadstream's `/v1/stream/*` against the reference server,
//! `@durable-streams/server` (its `DurableStreamTestServer`, file-backed: LMDB and segment
//! files), both started here and driven with the same load one after the other:
//!
//! - append cost: real `IdempotentProducer`s offering a fixed rate (open loop, default 5,000
//!   values/s, 10 per request), which one Node process sustains with headroom; each server's CPU
//!   per appended value over the phase (threadstream on SQLite and on Postgres, with Postgres's
//!   processes counted, and the reference), the client's CPU and the machine's idle time beside
//!   it; every stream read back and checked;
//! - append: 100 concurrent real `IdempotentProducer`s (`@durable-streams/client`, run by
//!   `bench/node/producers.mjs`), one JSON stream each, every stream read back and checked;
//! - catch-up: a 100,000-value JSON stream read from offset -1 with plain HTTP GETs following
//!   `Stream-Next-Offset` until `Stream-Up-To-Date`, checked value by value;
//! - live fan-out: 1,000 SSE readers (`live=sse`) of one stream while a writer appends
//!   timestamped messages at a steady rate; latency is received − sent, per reader per message,
//!   and every reader must get every message in the stream's order.
//!
//! The Node side (the reference server and the producers) lives in `bench/node/` and uses the
//! packages pinned in `tests/conformance/durable-streams` (`bash tests/conformance/install.sh`).

use anyhow::{ensure, Context};

use crate::report::Report;
use crate::server::Server;
use crate::Ctx;

mod catchup;
mod fanout;
mod producers;
mod setup;

use catchup::*;
use fanout::*;
use producers::*;
use setup::*;
pub use setup::{Opts, Phase};

pub async fn durable_streams(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let load = Load::new(ctx.quick);
    let o = &ctx.ds;
    let limit = crate::procstat::raise_nofile(4 * load.readers as u64 + 1024);
    ensure!(
        limit >= 2 * load.readers as u64 + 256,
        "open-file limit {limit} is too low for {} SSE readers",
        load.readers
    );

    // Append cost first, each server on a fresh store, back to back: the comparison is made
    // with the machine in as near the same state as one run allows.
    let mut costs = Vec::new();
    if o.phases.contains(&Phase::Cost) {
        let mut servers = Vec::new();
        if o.cost_on_sqlite {
            servers.push(Which::Threadstream);
        }
        if o.cost_on_postgres {
            servers.push(Which::ThreadstreamPostgres);
        }
        servers.push(Which::Reference);
        for which in servers {
            eprintln!("  {}: append cost", which.cost_label());
            let m = append_cost(ctx, o, &load, which)
                .await
                .with_context(|| format!("append cost of {}", which.cost_label()))?;
            costs.push(m);
        }
        cost_checks(o, &load, &costs, report);
    }

    let phases: Vec<Phase> = o
        .phases
        .iter()
        .copied()
        .filter(|p| *p != Phase::Cost)
        .collect();
    let mut results = Vec::new();
    if !phases.is_empty() {
        for which in [Which::Threadstream, Which::Reference] {
            let dir = tempfile::tempdir()?;
            let server = start(ctx, which, dir.path(), None).await?;
            let m = measure(&load, &phases, which, &server).await;
            server.stop().await;
            results.push(m.with_context(|| format!("measuring {}", which.label()))?);
        }
        phase_checks(&results[0], &results[1], report);
    }

    // Every check of threadstream's answers, over every phase and store.
    let mut ts_problems: Vec<String> = costs
        .iter()
        .filter(|c| c.which != Which::Reference)
        .flat_map(|c| {
            c.problems
                .iter()
                .map(|p| format!("{}: {p}", c.which.cost_label()))
        })
        .collect();
    if let Some(ts) = results.first() {
        ts_problems.extend(ts.problems.iter().cloned());
    }
    report.check(
        "every check of threadstream's answers passed (all values, in order)",
        if ts_problems.is_empty() {
            "all passed".into()
        } else {
            ts_problems.join("; ")
        },
        ts_problems.is_empty(),
    );
    for c in &costs {
        for p in &c.problems {
            report.note(format!("{}: {p}", c.which.cost_label()));
        }
    }
    for (which, m) in [Which::Threadstream, Which::Reference].iter().zip(&results) {
        for p in &m.problems {
            report.note(format!("{}: {p}", which.label()));
        }
    }
    if o.phases.contains(&Phase::Cost) {
        report.note(format!(
            "Load: append cost {} values/s offered by {} IdempotentProducers ({} values/s each, \
             {} values per request, one batch every {:.0} ms on a timer per producer, open loop) \
             for {:.0} s; CPU from /proc over the phase (stream creation and the read-back \
             check outside it); on Postgres every postgres process of the cluster is counted \
             with the server.",
            o.cost_rate,
            o.cost_producers,
            o.cost_rate / o.cost_producers as f64,
            load.batch,
            1000.0 * load.batch as f64 * o.cost_producers as f64 / o.cost_rate,
            o.cost_secs,
        ));
    }
    if !phases.is_empty() {
        report.note(format!(
            "Load: append {} producers × {:.0} s, {} values per request, lingerMs 5, maxInFlight 5; \
             catch-up {} values pre-filled in POSTs of {}; fan-out {} readers, {} messages/s for {:.0} s.",
            load.producers,
            load.append_secs,
            load.batch,
            load.catchup_values,
            load.fill_batch,
            load.readers,
            load.rate,
            load.fanout_secs
        ));
    }
    report.note(
        "The load generators (Node producers, the Rust readers) share the 2 cores with the server.",
    );
    for c in costs {
        report.row(c.row);
    }
    for m in results {
        for r in m.rows {
            report.row(r);
        }
    }
    Ok(())
}

/// The append-cost checks: threadstream's CPU per appended value against the reference's, on
/// each store measured, and whether every server sustained the offered rate.
fn cost_checks(o: &Opts, load: &Load, costs: &[CostMeasured], report: &mut Report) {
    let Some(rf) = costs.iter().find(|c| c.which == Which::Reference) else {
        return;
    };
    for c in costs.iter().filter(|c| c.which != Which::Reference) {
        let x = rf.us_per_value / c.us_per_value.max(f64::MIN_POSITIVE);
        report.ratio(&format!("append_cost_reference_over_{}", c.which.key()), x);
        let unsustained: Vec<&str> = [c, rf]
            .iter()
            .filter(|m| !m.sustained)
            .map(|m| m.which.cost_label())
            .collect();
        report.check(
            &format!(
                "append cost: {} CPU per appended value ≥ 10× less than the reference's \
                 ({:.0} values/s offered, {} per request)",
                c.which.cost_label(),
                o.cost_rate,
                load.batch
            ),
            format!(
                "{:.1} vs {:.1} µs per value: {:.2}× less{}",
                c.us_per_value,
                rf.us_per_value,
                x,
                if unsustained.is_empty() {
                    String::new()
                } else {
                    format!(" (rate not sustained by {})", unsustained.join(", "))
                }
            ),
            x >= 10.0 && unsustained.is_empty() && c.problems.is_empty(),
        );
    }
    report.check(
        &format!(
            "append cost: every server sustained ≥ {:.0} % of the offered {:.0} values/s",
            SUSTAINED * 100.0,
            o.cost_rate
        ),
        costs
            .iter()
            .map(|c| {
                format!(
                    "{} {:.0}/s ({:.1} %; client {:.0} % of a core, machine {:.0} % idle)",
                    c.which.cost_label(),
                    c.achieved_values_per_s,
                    100.0 * c.achieved_values_per_s / o.cost_rate,
                    c.client_core_percent,
                    c.machine_idle_percent
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        costs.iter().all(|c| c.sustained),
    );
}

/// The checks of the append, catch-up and fan-out phases that ran.
fn phase_checks(ts: &Measured, rf: &Measured, report: &mut Report) {
    let clean = ts.problems.is_empty();
    let ratio = |a: f64, b: f64| a / b.max(f64::MIN_POSITIVE);
    if let (Some(t), Some(r)) = (ts.append_values_per_s, rf.append_values_per_s) {
        let x = ratio(t, r);
        report.ratio("append_threadstream_over_reference", x);
        report.check(
            "append throughput ≥ 10× the reference's (100 IdempotentProducers)",
            format!("{t:.0} vs {r:.0} values/s: {x:.2}×"),
            x >= 10.0 && clean,
        );
    }
    if let (Some(t), Some(r)) = (ts.catchup_values_per_s, rf.catchup_values_per_s) {
        let x = ratio(t, r);
        report.ratio("catchup_threadstream_over_reference", x);
        report.check(
            "catch-up read ≥ 5× the reference's speed (100,000-value stream)",
            format!("{t:.0} vs {r:.0} values/s: {x:.2}×"),
            x >= 5.0 && clean,
        );
    }
    if let (Some(t), Some(r)) = (ts.fanout_p99_ms, rf.fanout_p99_ms) {
        report.ratio("fanout_p99_threadstream_over_reference", ratio(t, r));
        report.check(
            "live fan-out p99 ≤ the reference's (1,000 SSE readers)",
            format!("{t:.2} ms vs {r:.2} ms"),
            t <= r && clean,
        );
    }
}

async fn measure(
    load: &Load,
    phases: &[Phase],
    which: Which,
    server: &Server,
) -> anyhow::Result<Measured> {
    let base = server.url("");
    let mut m = Measured {
        rows: Vec::new(),
        append_values_per_s: None,
        catchup_values_per_s: None,
        fanout_p99_ms: None,
        problems: Vec::new(),
    };
    if phases.contains(&Phase::Append) {
        eprintln!("  {}: append", which.label());
        let (row, v) = append(load, which, server, &base, &mut m.problems).await?;
        m.rows.push(row);
        m.append_values_per_s = Some(v);
    }
    if phases.contains(&Phase::Catchup) {
        eprintln!("  {}: catch-up", which.label());
        let (row, v) = catchup(load, which, server, &base, &mut m.problems).await?;
        m.rows.push(row);
        m.catchup_values_per_s = Some(v);
    }
    if phases.contains(&Phase::Fanout) {
        eprintln!("  {}: fan-out", which.label());
        let (row, v) = fanout(load, which, server, &base, &mut m.problems).await?;
        m.rows.push(row);
        m.fanout_p99_ms = Some(v);
    }
    Ok(m)
}
