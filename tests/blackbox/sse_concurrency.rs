//! Many writers, many readers, one thread: 20 concurrent writers ingest text-delta batches into a
//! single live run while 10 readers connect, drop and resume with `Last-Event-ID` at random
//! points (seeded). Every reader must end with exactly the thread's events — the same ids and
//! bytes as a fresh full read, in order, with no duplicate and no gap.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const WRITERS: usize = 20;
const BATCHES: usize = 10;
const PER_BATCH: usize = 10;
const READERS: usize = 10;
const SEED: u64 = 0x5EED_2024;

const THREAD: &str = "t-concurrency";
const RUN: &str = "run-conc";
const ORCH: &str = "orch-conc";

fn token(w: usize, b: usize, k: usize) -> String {
    format!("w{w:02}b{b:02}e{k:02};")
}

/// What one writer got acknowledged.
struct Acked {
    writer: usize,
    ids: Vec<i64>,
}

/// What one reader saw, and how many connections it used.
struct ReaderLog {
    reader: usize,
    events: Vec<SseEvent>,
    connections: usize,
}

async fn writer(s: Arc<Server>, w: usize) -> Vec<Acked> {
    let mut rng = StdRng::seed_from_u64(SEED ^ (w as u64 * 7919));
    let mut out = Vec::new();
    for b in 0..BATCHES {
        let events: Vec<_> = (0..PER_BATCH)
            .map(|k| text_delta(RUN, ORCH, &token(w, b, k)))
            .collect();
        let ids = s.ingest_ok(THREAD, &events).await;
        assert!(!ids.is_empty(), "writer {w} batch {b}: no ids acknowledged");
        out.push(Acked { writer: w, ids });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..15))).await;
    }
    out
}

async fn reader(s: Arc<Server>, r: usize) -> ReaderLog {
    let mut rng = StdRng::seed_from_u64(SEED.wrapping_add(r as u64 * 104_729));
    tokio::time::sleep(Duration::from_millis(rng.gen_range(0..300))).await;
    let mut seen: Vec<SseEvent> = Vec::new();
    let mut connections = 0;
    loop {
        // The first connection starts with no cursor (the second half of the readers send an explicit 0); every
        // later one resumes with the browser's Last-Event-ID.
        let cursor = match seen.last() {
            None if r < READERS / 2 => Cursor::None,
            None => Cursor::Header("0".into()),
            Some(e) => Cursor::Header(e.id_field.clone().expect("frame id")),
        };
        let mut sse = s.sse(THREAD, cursor).await;
        connections += 1;
        let take = rng.gen_range(1..=150usize);
        for _ in 0..take {
            let e = sse.next_event(Duration::from_secs(30)).await.unwrap_or_else(|err| {
                panic!(
                    "reader {r}: {err:?} on connection {connections} after {} events (last id {:?})",
                    seen.len(),
                    seen.last().map(|e| e.id())
                )
            });
            if let Some(prev) = seen.last() {
                assert!(
                    e.id() > prev.id(),
                    "reader {r}: id {} after {} (connection {connections})",
                    e.id(),
                    prev.id()
                );
            }
            let done = e.ty() == "run-finish";
            seen.push(e);
            if done {
                return ReaderLog {
                    reader: r,
                    events: seen,
                    connections,
                };
            }
        }
        // Drop the connection at this random point, sometimes pause before resuming.
        drop(sse);
        if rng.gen_bool(0.3) {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..40))).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_writers_ten_resuming_readers_see_exactly_the_log() {
    bounded(240, async {
        let s = Arc::new(Server::start().await);
        let first = s.ingest_ok(THREAD, &[run_start(RUN, ORCH)]).await;
        assert_eq!(first.len(), 1);

        let readers: Vec<_> = (0..READERS)
            .map(|r| tokio::spawn(reader(s.clone(), r)))
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(writer(s.clone(), w)))
            .collect();
        let mut acked: Vec<Acked> = Vec::new();
        for w in writers {
            acked.extend(w.await.expect("writer task"));
        }
        let last = s
            .ingest_ok(THREAD, &[run_finish(RUN, ORCH, "completed")])
            .await;
        let last_id = last[0];

        let mut logs = Vec::new();
        for r in readers {
            logs.push(r.await.expect("reader task"));
        }

        // The truth: one fresh read of the whole thread.
        let full = s.read_until_id(THREAD, last_id).await;
        assert_strictly_increasing(&full, "full read");
        assert_eq!(full.first().unwrap().id(), first[0]);
        assert_eq!(full.last().unwrap().ty(), "run-finish");
        let truth = id_data(&full);

        // Every acknowledged id is in the log exactly once; nothing unacknowledged is.
        let mut all_acked: HashSet<i64> = HashSet::new();
        all_acked.insert(first[0]);
        all_acked.insert(last_id);
        for a in &acked {
            for id in &a.ids {
                assert!(all_acked.insert(*id), "id {id} acknowledged twice (writer {})", a.writer);
            }
        }
        let in_log: HashSet<i64> = truth.iter().map(|(id, _)| *id).collect();
        assert_eq!(in_log, all_acked, "the log's ids differ from the acknowledged ids");

        // No text was lost, duplicated or reordered within a writer (deltas may be merged).
        let text: String = full
            .iter()
            .map(|e| e.json())
            .filter(|v| v["type"] == "text-delta")
            .map(|v| v["payload"]["text"].as_str().unwrap().to_string())
            .collect();
        let tokens: Vec<&str> = text.split_terminator(';').collect();
        assert_eq!(tokens.len(), WRITERS * BATCHES * PER_BATCH, "token count");
        let mut per_writer: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for t in &tokens {
            let w: usize = t[1..3].parse().expect("token writer");
            per_writer.entry(w).or_default().push(format!("{t};"));
        }
        for w in 0..WRITERS {
            let want: Vec<String> = (0..BATCHES)
                .flat_map(|b| (0..PER_BATCH).map(move |k| token(w, b, k)))
                .collect();
            assert_eq!(per_writer.get(&w), Some(&want), "writer {w}'s text in the log");
        }

        // Every reader: exactly the truth.
        for log in &logs {
            assert!(log.connections >= 2, "reader {} never resumed", log.reader);
            let got = id_data(&log.events);
            if got != truth {
                let got_ids: Vec<i64> = got.iter().map(|(i, _)| *i).collect();
                let want_ids: Vec<i64> = truth.iter().map(|(i, _)| *i).collect();
                let missing: Vec<_> = want_ids.iter().filter(|i| !got_ids.contains(i)).take(10).collect();
                let extra: Vec<_> = got_ids.iter().filter(|i| !want_ids.contains(i)).take(10).collect();
                panic!(
                    "reader {} ({} connections) saw {} events, the log has {}; missing {missing:?}, extra {extra:?}",
                    log.reader,
                    log.connections,
                    got.len(),
                    truth.len()
                );
            }
        }
    })
    .await
}

/// Resident memory of a process in KiB (Linux).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Readers that stop reading while a large backlog is appended lose nothing: when they resume
/// reading they get every frame, in order, byte for byte as a fresh read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_catch_up_without_missing_anything() {
    const STALLED: usize = 8;
    const BATCHES: usize = 80;
    const PER: usize = 100;
    bounded(240, async {
        let s = Server::start().await;
        let t = "t-slow";
        let first = s.ingest_ok(t, &[run_start("r1", "o1")]).await;
        // Readers that read one frame and then stop reading (their sockets fill up).
        let mut stalled = Vec::new();
        for _ in 0..STALLED {
            let mut sse = s.sse(t, Cursor::None).await;
            let e = sse.next_event(Duration::from_secs(10)).await.expect("first frame");
            assert_eq!(e.id(), first[0]);
            stalled.push(sse);
        }
        let pid = s.pid().expect("pid");
        let rss_before = rss_kib(pid);
        let chunk = "z".repeat(2000);
        let mut last = 0;
        for b in 0..BATCHES {
            let events: Vec<_> = (0..PER)
                .map(|k| text_delta("r1", "o1", &format!("{b}:{k}:{chunk}")))
                .collect();
            last = *s.ingest_ok(t, &events).await.last().unwrap();
        }
        let ids = s.ingest_ok(t, &[run_finish("r1", "o1", "completed")]).await;
        last = last.max(ids[0]);
        // Give the server time to do whatever it does with the backlog.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let rss_after = rss_kib(pid);
        let written_kib = (BATCHES * PER * 2000 / 1024) as u64;
        let grown = rss_after.saturating_sub(rss_before);
        eprintln!(
            "server RSS {rss_before} KiB -> {rss_after} KiB (+{grown} KiB) while {STALLED} readers stalled over {written_kib} KiB of events"
        );
        // Informational only: RSS is dominated by SQLite's page cache (32 MiB per pooled
        // connection), so it cannot tell a per-reader buffer from cached pages at this size.
        // Each stalled reader now catches up: everything, in order, nothing twice.
        let truth = id_data(&s.read_until_id(t, last).await);
        for (i, mut sse) in stalled.into_iter().enumerate() {
            let mut got = vec![(first[0], String::new())];
            loop {
                let e = sse
                    .next_event(Duration::from_secs(30))
                    .await
                    .unwrap_or_else(|err| panic!("stalled reader {i}: {err:?} after {} frames", got.len()));
                let id = e.id();
                got.push((id, e.data));
                if id >= last {
                    break;
                }
            }
            got[0].1 = truth[0].1.clone();
            assert_eq!(got.len(), truth.len(), "stalled reader {i}: frame count");
            assert!(got == truth, "stalled reader {i}: frames differ from a fresh read");
        }
    })
    .await
}
