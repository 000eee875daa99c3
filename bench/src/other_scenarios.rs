//! rebuild (the `threadstream projections rebuild` command over a big log) and ttft (time to
//! first token: `POST /chat` → first `text-delta` on an open stream).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use threadstream_store::{Durability, EventLog};
use tokio::io::AsyncWriteExt;

use crate::data::fill_thread;
use crate::report::{Latency, Report, Row, Usage};
use crate::server::{Server, Store};
use crate::sse::{event_type, Read, SseConn};
use crate::Ctx;

/// A SQLite log in `dir` of `threads` threads of 10 runs of 100 events each, plus each thread's
/// thread-created: 1,001 events per thread.
pub async fn fill_log(dir: &std::path::Path, threads: usize) -> anyhow::Result<()> {
    let t_fill = Instant::now();
    let log = EventLog::open_sqlite(dir, Durability::Normal).await?;
    let ids: Vec<String> = (0..threads).map(|i| format!("rb-{i}")).collect();
    for chunk in ids.chunks(50) {
        let r =
            futures::future::join_all(chunk.iter().map(|t| fill_thread(&log, t, 10, 100, 1000)))
                .await;
        for x in r {
            x?;
        }
    }
    log.shutdown().await;
    eprintln!(
        "  filled {} events in {:.1} s",
        threads * 1001,
        t_fill.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs `bin ARGS` to the end; its wall time, resource usage (CPU, peak RSS) and stdout.
pub async fn run_tool(
    bin: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
    process: &str,
) -> anyhow::Result<(f64, Usage, String)> {
    let process = process.to_string();
    tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let start = Instant::now();
        let child = std::process::Command::new(&bin)
            .args(&args)
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let pid = child.id() as libc::pid_t;
        let mut status = 0;
        // wait4, not Child::wait: it also returns the child's resource usage (its peak RSS).
        // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
        #[allow(unsafe_code)]
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our own unwaited child, and both pointers are to live locals.
        #[allow(unsafe_code)]
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        let secs = start.elapsed().as_secs_f64();
        if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!("{process} failed (status {status})");
        }
        let mut out = String::new();
        if let Some(mut o) = child.stdout {
            use std::io::Read as _;
            let _ = o.read_to_string(&mut out);
        }
        let cpu = ru.ru_utime.tv_sec as f64
            + ru.ru_utime.tv_usec as f64 / 1e6
            + ru.ru_stime.tv_sec as f64
            + ru.ru_stime.tv_usec as f64 / 1e6;
        let usage = Usage {
            process,
            rss_start_kb: 0,
            rss_max_kb: ru.ru_maxrss as u64,
            rss_end_kb: 0,
            cpu_seconds: crate::report::round(cpu, 2),
            cpu_percent: crate::report::round(100.0 * cpu / secs, 1),
            machine_busy_percent: 0.0,
            disk_written_mb: 0.0,
        };
        Ok((secs, usage, out))
    })
    .await?
}

pub async fn rebuild(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let threads = if ctx.quick { 20 } else { 1000 };
    // Per thread: 10 runs of 100 events, plus its thread-created.
    let events = threads * 1001;
    let dir = tempfile::tempdir()?;
    fill_log(dir.path(), threads).await?;
    let bin = ctx.bin()?;
    let data_dir = dir.path().to_path_buf();
    // BENCH_KEEP_DIR=1 keeps the log for profiling the rebuild by hand.
    let _dir = if std::env::var_os("BENCH_KEEP_DIR").is_some() {
        eprintln!("  keeping {}", data_dir.display());
        let _ = dir.keep();
        None
    } else {
        Some(dir)
    };
    let (secs, usage, out) = run_tool(
        bin,
        vec![
            "projections".into(),
            "rebuild".into(),
            "--data-dir".into(),
            data_dir.into(),
        ],
        "threadstream projections rebuild",
    )
    .await?;
    let row = Row::new(
        format!("projections rebuild (history, status, thread list) of {events} events, {threads} threads"),
        "threadstream",
        events as u64,
        secs,
        "events/s",
    )
    .usage(usage)
    .extra("output", out.trim().to_string());
    report.check(
        "rebuild every projection from a 1,000,000-event log at ≥ 300,000 events/s",
        format!("{:.0} events/s ({events} events)", row.throughput),
        row.throughput >= 300_000.0 && events >= 1_000_000,
    );
    report.row(row);
    Ok(())
}

/// A fake OpenAI-compatible provider on loopback: answers every chat completion at once with a
/// streamed text (first chunk in the first write) and `[DONE]`. Records, per request, its own
/// time from having read the request to having written the first chunk.
async fn fake_openai() -> anyhow::Result<(std::net::SocketAddr, Arc<Mutex<Vec<u64>>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let own = Arc::new(Mutex::new(Vec::new()));
    let own2 = own.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let own = own2.clone();
            tokio::spawn(async move {
                if crate::fake_llm::read_request_body(&mut s).await.is_err() {
                    return;
                }
                let t_req = Instant::now();
                let chunk = |c: &str| {
                    format!("data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{c:?}}},\"finish_reason\":null}}]}}\n\n")
                };
                let first = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n{}",
                    chunk("Hello")
                );
                if s.write_all(first.as_bytes()).await.is_err() {
                    return;
                }
                own.lock()
                    .expect("own")
                    .push(t_req.elapsed().as_nanos() as u64);
                let rest = format!(
                    "{}data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n",
                    chunk(" there.")
                );
                let _ = s.write_all(rest.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    Ok((addr, own))
}

struct Ttft {
    /// Event types the stream carried before the first text-delta (first run).
    before_text: Vec<String>,
    first_any: Vec<u64>,
    first_text: Vec<u64>,
    post: Vec<u64>,
}

/// `n` runs, each on a new thread whose stream is already open: POST /chat, then the times to
/// the first model delta (reasoning or text) and the first text-delta on the stream.
async fn ttft_runs(server: &Server, n: usize) -> anyhow::Result<Ttft> {
    let client = crate::client::http_client();
    let mut out = Ttft {
        before_text: Vec::new(),
        first_any: Vec::new(),
        first_text: Vec::new(),
        post: Vec::new(),
    };
    for i in 0..n {
        let thread = format!("ttft-{i}");
        let mut conn = SseConn::connect(
            server.addr,
            &format!("/instance-ai/events/{thread}"),
            None,
            None,
        )
        .await?;
        // The thread is new: the server sends the response head with the first frame, so give
        // it a moment to open the stream before the run starts.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
        let reader = tokio::spawn(async move {
            loop {
                let r = conn
                    .read_some(64 * 1024, &mut |_, data, at| {
                        let t = String::from_utf8_lossy(event_type(data)).into_owned();
                        let _ = tx.send((t, at));
                    })
                    .await;
                if !matches!(r, Ok(Read::Data)) {
                    return;
                }
            }
        });
        let t0 = Instant::now();
        let resp = client
            .post(server.url(&format!("/instance-ai/chat/{thread}")))
            .header("content-type", "application/json")
            .body(r#"{"message":"hello"}"#)
            .send()
            .await?;
        let acked = Instant::now();
        if !resp.status().is_success() {
            bail!("POST /chat answered {}", resp.status());
        }
        let (mut any, mut text) = (None, None);
        let mut finished = false;
        while text.is_none() || !finished {
            let Ok(Some((t, at))) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await
            else {
                break;
            };
            match t.as_str() {
                "reasoning-delta" | "text-delta" if any.is_none() => any = Some(at),
                _ => {}
            }
            if i == 0 && text.is_none() && t != "text-delta" {
                out.before_text.push(t.clone());
            }
            if t == "text-delta" && text.is_none() {
                text = Some(at);
                // Stop the run: the next iteration must not compete with it.
                let _ = client
                    .post(server.url(&format!("/instance-ai/chat/{thread}/cancel")))
                    .send()
                    .await;
            }
            if t == "run-finish" {
                finished = true;
            }
        }
        reader.abort();
        let any = any.context("no model delta within 10 s")?;
        let text = text.context("no text-delta within 10 s")?;
        out.first_any.push((any - t0).as_nanos() as u64);
        out.first_text.push((text - t0).as_nanos() as u64);
        out.post.push((acked - t0).as_nanos() as u64);
    }
    Ok(out)
}

pub async fn ttft(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = if ctx.quick { 5 } else { 100 };
    // 1. The demo model at --demo-delay-ms 0.
    let dir = tempfile::tempdir()?;
    let server = Server::start(
        &ctx.bin()?,
        Store::Sqlite(dir.path()),
        &["--demo-delay-ms", "0"],
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = server.rss_kb();
    let w = crate::procstat::Window::start(server.pid, "server");
    let demo = ttft_runs(&server, n).await?;
    let usage = w.finish().await;
    server.stop().await;

    // 2. An OpenAI-compatible fake provider on loopback that answers at once.
    let (fake, own) = fake_openai().await?;
    let dir2 = tempfile::tempdir()?;
    let base = format!("http://{fake}/v1");
    let server = Server::start(
        &ctx.bin()?,
        Store::Sqlite(dir2.path()),
        &["--model", "openai/fake", "--openai-base-url", &base],
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss_openai = server.rss_kb();
    let w = crate::procstat::Window::start(server.pid, "server");
    let openai = ttft_runs(&server, n).await?;
    let usage_openai = w.finish().await;
    server.stop().await;
    let own: Vec<u64> = own.lock().expect("own").clone();
    let own_p50 = Latency::from_nanos(own.clone())
        .map(|l| l.p50_ms)
        .unwrap_or(0.0);
    // The model's own time to its first chunk, subtracted per run (request i ↔ run i: the
    // runs are sequential and each makes one model call before its first text).
    let net: Vec<u64> = openai
        .first_text
        .iter()
        .enumerate()
        .map(|(i, t)| t.saturating_sub(own.get(i).copied().unwrap_or(0)))
        .collect();

    let secs = |v: &Vec<u64>| v.iter().sum::<u64>() as f64 / 1e9;
    let r_net = Row::new(
        "POST /chat → first text-delta, fake OpenAI provider, minus its own time",
        "threadstream",
        n as u64,
        secs(&net),
        "runs/s",
    )
    .latency(Latency::from_nanos(net))
    .usage(usage_openai)
    .extra("idle_rss_kb", idle_rss_openai)
    .extra("provider_own_time_p50_ms", crate::report::round(own_p50, 4))
    .extra("events_before_first_text", openai.before_text.join(","));
    let r_demo_any = Row::new(
        "POST /chat → first model delta (demo model, delay 0)",
        "threadstream",
        n as u64,
        secs(&demo.first_any),
        "runs/s",
    )
    .latency(Latency::from_nanos(demo.first_any))
    .usage(usage)
    .extra("idle_rss_kb", idle_rss);
    let r_demo_text = Row::new(
        "POST /chat → first text-delta (demo model: reasoning deltas come first)",
        "info",
        n as u64,
        secs(&demo.first_text),
        "runs/s",
    )
    .latency(Latency::from_nanos(demo.first_text));
    let r_post = Row::new(
        "POST /chat answered (demo)",
        "info",
        n as u64,
        secs(&demo.post),
        "runs/s",
    )
    .latency(Latency::from_nanos(demo.post));
    let l = r_net.latency.clone().context("no samples")?;
    report.check(
        "time to first token p50 ≤ 5 ms (fake provider on loopback, its own time subtracted)",
        format!("{:.2} ms", l.p50_ms),
        l.p50_ms <= 5.0,
    );
    report.check(
        "time to first token p99 ≤ 20 ms",
        format!("{:.2} ms", l.p99_ms),
        l.p99_ms <= 20.0,
    );
    let idle_mb = idle_rss.max(idle_rss_openai) as f64 / 1024.0;
    report.check(
        "server idle RSS ≤ 30 MB",
        format!("{idle_mb:.1} MB"),
        idle_mb <= 30.0,
    );
    report.row(r_net);
    report.row(r_demo_any);
    report.row(r_demo_text);
    report.row(r_post);
    Ok(())
}
