//! Graceful shutdown: SIGTERM in the middle of a slow demo run. The process
//! exits 0 within `--shutdown-grace-secs`; the SSE client sees the run end with `run-finish
//! {status: cancelled, reason: service_shutdown}` and then a clean end of stream; after a
//! restart every acknowledged event is there with its id and no run is left live. While it
//! drains, `/readyz` is 503 `shutting_down` and `/healthz` still 200.

use crate::common;

use std::time::Duration;

use common::*;

const GRACE_SECS: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_run_cancels_it_and_exits_within_grace() {
    bounded(120, async {
        let mut s = Server::start_with(Opts {
            // Slow deltas: the run is certainly live when the signal comes.
            demo_delay_ms: 200,
            extra_args: vec!["--shutdown-grace-secs".into(), GRACE_SECS.to_string()],
            ..Opts::default()
        })
        .await;
        // Acknowledged appends of another thread, before the signal.
        let acked = s
            .ingest_ok(
                "sd-ingest",
                &[
                    run_start("r1", "o1"),
                    text_delta("r1", "o1", "kept"),
                    run_finish("r1", "o1", "completed"),
                ],
            )
            .await;
        let run_id = s.chat("sd-run", "a long answer, please").await;
        let mut sse = s.sse("sd-run", Cursor::None).await;
        // Wait for the run's first streamed text: it is executing.
        loop {
            let ev = sse
                .next_event(Duration::from_secs(20))
                .await
                .expect("run events");
            if ev.ty() == "text-delta" {
                break;
            }
        }

        let (status, took) = s.stop_timed(Duration::from_secs(GRACE_SECS + 3)).await;
        assert!(
            status.success(),
            "exit status after SIGTERM: {status:?}\n{}",
            s.logs()
        );
        assert!(
            took <= Duration::from_secs(GRACE_SECS),
            "exit took {took:?}, grace is {GRACE_SECS}s\n{}",
            s.logs()
        );

        // The stream carried the run's cancellation, then ended cleanly (no I/O error).
        let mut finish = None;
        loop {
            match sse.next_event(Duration::from_secs(10)).await {
                Ok(ev) => {
                    let v = ev.json();
                    if v["type"] == "run-finish" && v["runId"] == run_id.as_str() {
                        finish = Some(v);
                    }
                }
                Err(SseError::Eof) => break,
                Err(e) => panic!("the stream did not end cleanly: {e:?}\n{}", s.logs()),
            }
        }
        let finish = finish.unwrap_or_else(|| panic!("no run-finish on the stream\n{}", s.logs()));
        assert_eq!(finish["payload"]["status"], "cancelled", "{finish}");
        assert_eq!(finish["payload"]["reason"], "service_shutdown", "{finish}");

        s.restart().await;
        // Nothing acknowledged is missing, with the ids it was given.
        let events = s.read_until_id("sd-ingest", *acked.last().unwrap()).await;
        let ids: Vec<i64> = events.iter().map(|e| e.id()).collect();
        assert_eq!(ids, acked, "acknowledged ids after restart");
        // No run left live, and the stored run-finish is the shutdown's (not `interrupted`).
        let st = s.status("sd-run").await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        let stored = s
            .read_idle("sd-run", Cursor::None, Duration::from_millis(500))
            .await;
        let fin: Vec<_> = stored
            .iter()
            .map(|e| e.json())
            .filter(|v| v["type"] == "run-finish")
            .collect();
        assert_eq!(fin.len(), 1, "{fin:?}");
        assert_eq!(
            fin[0]["payload"]["reason"], "service_shutdown",
            "{:?}",
            fin[0]
        );
        // A new run is accepted on the restarted server.
        let again = s.chat("sd-run", "hello").await;
        assert_ne!(again, run_id);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_server_exits_promptly_on_sigterm() {
    bounded(60, async {
        let mut s = Server::start().await;
        let mut sse = s.sse("sd-idle", Cursor::None).await;
        let (status, took) = s.stop_timed(Duration::from_secs(12)).await;
        assert!(status.success(), "{status:?}\n{}", s.logs());
        // Nothing to cancel: no waiting out the grace period.
        assert!(
            took < Duration::from_secs(3),
            "idle exit took {took:?}\n{}",
            s.logs()
        );
        match sse.next_event(Duration::from_secs(5)).await {
            Err(SseError::Eof) => {}
            other => panic!("open stream did not end cleanly: {other:?}"),
        }
    })
    .await;
}

/// From SIGTERM on, `/readyz` is 503 `shutting_down` while `/healthz` stays 200 and requests are
/// still served for `--shutdown-unready-ms`; then the process stops as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_draining_and_healthz_stays_200() {
    bounded(60, async {
        let mut s = Server::start_with(Opts {
            extra_args: vec!["--shutdown-unready-ms".into(), "2000".into()],
            ..Opts::default()
        })
        .await;
        assert_eq!(s.get("/readyz").await.status, 200);
        let mut sse = s.sse("sd-unready", Cursor::None).await;
        // Before the signal: the process's 2 s begin after it.
        let signalled = std::time::Instant::now();
        s.sigterm();
        let deadline = signalled + Duration::from_millis(1500);
        let r = loop {
            let r = s.get("/readyz").await;
            if r.status == 503 {
                break r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "/readyz still {} after SIGTERM",
                r.status
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let v = r.json();
        assert_eq!(v["ready"], false, "{v}");
        assert_eq!(v["cause"], "shutting_down", "{v}");
        // Still serving while a load balancer takes it out: liveness and ordinary requests.
        let h = s.get("/healthz").await;
        assert_eq!(h.status, 200, "healthz while draining: {}", h.text);
        s.ingest_ok(
            "sd-unready",
            &[run_start("r1", "o1"), run_finish("r1", "o1", "completed")],
        )
        .await;
        let evs = sse
            .read_until(Duration::from_secs(5), |e| e.ty() == "run-finish")
            .await;
        assert_eq!(evs.len(), 2, "{:?}", id_data(&evs));
        assert!(
            signalled.elapsed() < Duration::from_millis(2000),
            "the checks above outlasted --shutdown-unready-ms"
        );
        // Then it stops: within the unready time plus the (idle) stop.
        let status = s.wait_exit(Duration::from_secs(8)).await;
        assert!(status.success(), "{status:?}\n{}", s.logs());
        assert!(
            signalled.elapsed() >= Duration::from_millis(2000),
            "exited {:?} after SIGTERM, before --shutdown-unready-ms",
            signalled.elapsed()
        );
    })
    .await;
}
