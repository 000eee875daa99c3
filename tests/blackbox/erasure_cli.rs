//! `threadstream erase` beside a running server, on both stores: on SQLite the CLI refuses
//! while a server holds the data dir (it could not tell the server, whose caches and thread
//! index would keep the thread) and points to the admin route, and erases once the server is
//! stopped; on Postgres it erases and the running server learns of it from the head
//! notification (its routes answer 404 and its streams signal the erased history).

use crate::common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_erases_beside_a_running_server_only_where_the_server_learns_of_it() {
    bounded(120, async {
        let mut s = Server::start().await;
        let ids = s
            .ingest_ok(
                "ec-t",
                &[
                    run_start("r1", "o"),
                    text_delta("r1", "o", "held in the server's caches"),
                    run_finish("r1", "o", "completed"),
                ],
            )
            .await;
        // A reader brings the thread into the server's hot tail and owner cache.
        let read = s.read_until_id("ec-t", ids[2]).await;
        assert_eq!(read.len(), 3);
        assert_eq!(
            s.get("/instance-ai/threads/ec-t/messages").await.status,
            200
        );

        let (ok, out, err) = cli_on(&s, &["erase", "--thread", "ec-t"]).await.parts();
        if s.database_url.is_none() {
            assert!(!ok, "the CLI erased beside a running server:\n{out}");
            assert!(
                err.contains("a server is running on the data dir")
                    && err.contains("POST /instance-ai/admin/erase"),
                "{err}"
            );
            // Nothing changed: the thread is whole, in the store and in the server.
            assert_eq!(s.read_until_id("ec-t", ids[2]).await.len(), 3);
            assert_eq!(
                s.get("/instance-ai/threads/ec-t/messages").await.status,
                200
            );
            s.stop().await;
            let (ok, out, err) = cli_on(&s, &["erase", "--thread", "ec-t"]).await.parts();
            assert!(ok, "erase with the server stopped:\n{out}\n{err}");
            s.restart().await;
        } else {
            assert!(ok, "erase beside a server on Postgres:\n{out}\n{err}");
        }
        // The server (on Postgres the same process, told by the notification) has forgotten it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = s.get("/instance-ai/threads/ec-t/messages").await;
            if r.status == 404 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still served: {} {}",
                r.status,
                r.text
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut sse = s.sse("ec-t", Cursor::header_id(ids[0])).await;
        let signal = sse
            .next_event(Duration::from_secs(5))
            .await
            .expect("the erased-history signal");
        assert_eq!(signal.ty(), "status", "{}", signal.data);
        assert!(signal.data.contains("history-erased"), "{}", signal.data);
    })
    .await;
}
