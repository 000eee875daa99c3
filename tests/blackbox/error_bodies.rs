//! A failure of the server's own — the database gone, the disk full, a read-model row that no
//! longer decodes — answers 5xx `{"error": {"code", "message", "errorId"}}` with a generic
//! message. The cause (SQL, paths, the driver's words) is only in the server's log, on the line
//! that carries the same error id.

use crate::common;
use crate::pg_outage::PrivatePostgres;

use std::time::{Duration, Instant};

use common::*;

/// Words of a cause that must never reach a body: the drivers', the SQL's, the OS's.
const INTERNAL_WORDS: &[&str] = &[
    "sqlx",
    "sqlite",
    "postgres",
    "database",
    "pool",
    "select",
    "insert",
    "update ",
    "read_models",
    "os error",
    "no space",
    "disk",
    "connection",
    "refused",
    "decode",
    "expected",
    "line 1",
    "/tmp",
    "threadstream.db",
];

/// Asserts that `r` is a `status` of the 5xx contract: code `code`, the generic message with
/// its `errorId`, nothing of the cause (no [`INTERNAL_WORDS`], not the data dir); and that the
/// server's log has the id on a line naming the cause (one of `causes`). Returns the id.
pub(crate) async fn assert_generic_5xx(
    s: &Server,
    r: &Resp,
    status: u16,
    code: &str,
    causes: &[&str],
) -> String {
    let (got_code, message) = r.error(status, "a failure of the server's own");
    assert_eq!(got_code, code, "{}", r.text);
    let v = r.json();
    let id = v["error"]["errorId"]
        .as_str()
        .unwrap_or_else(|| panic!("a 5xx body carries an errorId: {}", r.text))
        .to_string();
    let generic = match code {
        "internal" => "internal error",
        _ => "the store is unavailable; retry later",
    };
    assert_eq!(message, format!("{generic}; reference {id}"), "{}", r.text);
    assert_eq!(
        v["error"].as_object().map(|o| o.len()),
        Some(3),
        "only code, message and errorId: {}",
        r.text
    );
    let body = r.text.to_lowercase();
    for word in INTERNAL_WORDS {
        assert!(!body.contains(word), "the body names {word:?}: {}", r.text);
    }
    assert!(
        !r.text.contains(&*s.data_dir().to_string_lossy()),
        "the body names the data dir: {}",
        r.text
    );
    // The server writes the line before the response; its stderr reaches the test a little later.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let logs = s.logs();
        let lines: Vec<&str> = logs.lines().filter(|l| l.contains(&id)).collect();
        if !lines.is_empty() {
            assert_eq!(lines.len(), 1, "the failure is logged once: {lines:#?}");
            let line = lines[0].to_lowercase();
            assert!(
                causes.iter().any(|c| line.contains(&c.to_lowercase())),
                "the log line of {id} names the cause (one of {causes:?}): {}",
                lines[0]
            );
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "error id {id} is not in the server's log:\n{logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `sql` on the server's store (its SQLite file, or its Postgres database); returns the
/// first column of its first row, if any, as an integer.
async fn exec(s: &Server, sql: &str) -> Option<i64> {
    use sqlx::{Connection, Row};
    match &s.database_url {
        None => {
            let url = format!(
                "sqlite://{}",
                s.data_dir().join("threadstream.db").display()
            );
            let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("open");
            let row = sqlx::query(sql).fetch_optional(&mut conn).await.expect(sql);
            conn.close().await.expect("close");
            row.and_then(|r| r.try_get(0).ok())
        }
        Some(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            let row = sqlx::query(sql).fetch_optional(&mut conn).await.expect(sql);
            conn.close().await.expect("close");
            row.and_then(|r| r.try_get(0).ok())
        }
    }
}

#[tokio::test]
async fn a_read_model_row_that_does_not_decode_is_a_generic_503_with_its_cause_in_the_log() {
    bounded(90, async {
        let mut s = Server::start().await;
        s.ingest_ok(
            "eb-corrupt",
            &[run_start("r", "o"), text_delta("r", "o", "hi")],
        )
        .await;
        // Wait for the projector to store the thread's status document.
        let deadline = Instant::now() + Duration::from_secs(20);
        let count =
            "SELECT count(*) FROM read_models WHERE model = 'status' AND key = 'eb-corrupt'";
        while exec(&s, count).await != Some(1) {
            assert!(
                Instant::now() < deadline,
                "the status document was never stored"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Damaged while the server runs (it refuses to start on a document that does not
        // decode).
        s.store_damaged = true;
        exec(
            &s,
            "UPDATE read_models SET doc = '{\"not\": \"a status\"' \
             WHERE model = 'status' AND key = 'eb-corrupt'",
        )
        .await;
        let r = s.get("/instance-ai/threads/eb-corrupt/status").await;
        assert_generic_5xx(&s, &r, 503, "unavailable", &["cannot be decoded"]).await;
        // Other threads are served as before.
        s.ingest_ok("eb-fine", &[run_start("r", "o")]).await;
        s.get("/instance-ai/threads/eb-fine/status")
            .await
            .ok_json("another thread's status");
    })
    .await
}

#[tokio::test]
async fn a_stopped_postgres_gives_generic_503s_with_the_cause_in_the_log() {
    let pg = PrivatePostgres::start();
    bounded(120, async {
        let s = Server::start_with(pg.opts()).await;
        s.ingest_ok("eb-pg", &[run_start("r", "o")]).await;
        pg.stop();
        // The driver's words for a server that is gone, as sqlx reports them.
        let causes = [
            "pool timed out",
            "error communicating with database",
            "connection",
        ];
        let r = s.ingest("eb-pg", &[text_delta("r", "o", "lost")]).await;
        assert_generic_5xx(&s, &r, 503, "unavailable", &causes).await;
        let r = s.get("/instance-ai/threads/eb-pg/status").await;
        let first = assert_generic_5xx(&s, &r, 503, "unavailable", &causes).await;
        let r = s.get("/instance-ai/threads/eb-pg/messages").await;
        let second = assert_generic_5xx(&s, &r, 503, "unavailable", &causes).await;
        assert_ne!(first, second, "every failure gets its own id");
        pg.pg_ctl_start();
        let deadline = Instant::now() + Duration::from_secs(30);
        while s.get("/instance-ai/threads/eb-pg/status").await.status != 200 {
            assert!(Instant::now() < deadline, "no recovery:\n{}", s.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_provider_that_cannot_be_reached_ends_the_run_without_its_address_or_the_os_words() {
    bounded(90, async {
        // A port nothing listens on: bound (so no other socket of the suite can take it) but
        // never listening, so a connection is refused.
        let held = tokio::net::TcpSocket::new_v4().unwrap();
        held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = held.local_addr().unwrap().port();
        let s = Server::start_with(Opts {
            model: "openai/gpt-test".into(),
            extra_args: [
                "--openai-base-url",
                &format!("http://127.0.0.1:{port}/v1"),
                "--openai-api-key",
                "sk-test",
                "--llm-max-retries",
                "0",
            ]
            .map(String::from)
            .to_vec(),
            ..Opts::default()
        })
        .await;
        let run = s.chat("eb-provider", "hi").await;
        let events = s.follow_run("eb-provider", &run, |_| None).await;
        let error = events
            .iter()
            .map(|e| e.json())
            .find(|v| v["type"] == "error")
            .unwrap_or_else(|| panic!("the run has an error event:\n{}", s.logs()));
        let content = error["payload"]["content"].as_str().unwrap();
        assert!(content.contains("cannot connect"), "{content}");
        // What the client reads names neither the provider's address nor the OS's words...
        for e in &events {
            for secret in [&port.to_string(), "127.0.0.1", "os error", "refused", "tcp"] {
                assert!(
                    !e.data.contains(secret),
                    "an event names {secret:?}: {}",
                    e.data
                );
            }
        }
        // ...which the log has, on the line of the run's failure.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !s
            .logs()
            .lines()
            .any(|l| l.contains("run failed") && l.to_lowercase().contains("refused"))
        {
            assert!(
                Instant::now() < deadline,
                "the run's failure is logged with its cause:\n{}",
                s.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}
