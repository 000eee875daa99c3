//! parquet-export: `threadstream export --format parquet` of a 1,000,000-event log against the
//! NDJSON export of the same log: events per second of each, and the size of the Parquet files
//! (events and derived tables) against the NDJSON file; on the rebuild scenario's repetitive
//! text, and on the same events with varied text.

use std::path::Path;

use threadstream_store::{Durability, EventLog};

use crate::data::{cmd, create, realistic_run};
use crate::other_scenarios::{fill_log, run_tool};
use crate::report::{Report, Row};
use crate::Ctx;

/// Bytes of every file under `dir`.
fn size_of(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            size_of(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// The log the export reads.
#[derive(Clone, Copy)]
enum Text {
    /// The rebuild scenario's log: every delta a numbered word (`word17 `), very repetitive.
    Repetitive,
    /// The same events with every delta's text drawn at random: one to three words of a
    /// vocabulary of 5,000 random-letter words, as a model's tokens vary.
    Varied,
}

/// xorshift64*: reproducible draws without a dependency.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A log like [`fill_log`]'s whose deltas carry varied text.
async fn fill_varied_log(dir: &Path, threads: usize) -> anyhow::Result<()> {
    let mut draws = Draws(0x9e37_79b9_7f4a_7c15);
    let vocabulary: Vec<String> = (0..5000)
        .map(|_| {
            let len = 2 + draws.below(9);
            (0..len)
                .map(|_| (b'a' + draws.below(26) as u8) as char)
                .collect()
        })
        .collect();
    let log = EventLog::open_sqlite(dir, Durability::Normal).await?;
    for t in 0..threads {
        let thread = format!("vt-{t}");
        log.append(&thread, vec![create()]).await?;
        let mut commands = Vec::with_capacity(1000);
        for r in 0..10 {
            for mut v in realistic_run(&format!("{thread}-r{r}"), 100) {
                if v["type"] == "text-delta" || v["type"] == "reasoning-delta" {
                    let words: Vec<&str> = (0..1 + draws.below(3))
                        .map(|_| vocabulary[draws.below(5000) as usize].as_str())
                        .collect();
                    v["payload"]["text"] = format!("{} ", words.join(" ")).into();
                }
                commands.push(cmd(&v));
            }
        }
        log.append(&thread, commands).await?;
    }
    log.shutdown().await;
    Ok(())
}

/// One log exported both ways: the Parquet row, the NDJSON row, and the bytes of each.
async fn measure(ctx: &Ctx, text: Text, threads: usize) -> anyhow::Result<(Row, Row, u64, u64)> {
    let events = (threads * 1001) as u64;
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("data");
    let what = match text {
        Text::Repetitive => {
            fill_log(&data_dir, threads).await?;
            "repetitive text"
        }
        Text::Varied => {
            fill_varied_log(&data_dir, threads).await?;
            "varied text"
        }
    };
    let bin = ctx.bin()?;

    let out = dir.path().join("parquet");
    let (secs, usage, printed) = run_tool(
        bin.clone(),
        vec![
            "export".into(),
            "--data-dir".into(),
            data_dir.clone().into(),
            "--format".into(),
            "parquet".into(),
            "--out".into(),
            out.clone().into(),
        ],
        "threadstream export --format parquet",
    )
    .await?;
    let exported: serde_json::Value = serde_json::from_str(printed.trim())?;
    anyhow::ensure!(
        exported["events"] == events,
        "the export wrote {} events of {events}",
        exported["events"]
    );
    let parquet_bytes = size_of(&out)?;
    let parquet = Row::new(
        format!("export --format parquet of {events} events, {what} (+ derived tables)"),
        "threadstream",
        events,
        secs,
        "events/s",
    )
    .usage(usage)
    .extra("bytes", parquet_bytes)
    .extra("files", exported["files"].as_array().map_or(0, Vec::len));

    let ndjson_file = dir.path().join("log.ndjson");
    let (secs, usage, _) = run_tool(
        bin,
        vec![
            "export".into(),
            "--data-dir".into(),
            data_dir.into(),
            "--output".into(),
            ndjson_file.clone().into(),
        ],
        "threadstream export (NDJSON)",
    )
    .await?;
    let ndjson_bytes = std::fs::metadata(&ndjson_file)?.len();
    let ndjson = Row::new(
        format!("baseline: export as NDJSON of {events} events, {what}"),
        "threadstream",
        events,
        secs,
        "events/s",
    )
    .usage(usage)
    .extra("bytes", ndjson_bytes);
    Ok((parquet, ndjson, parquet_bytes, ndjson_bytes))
}

pub async fn parquet_export(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let threads = if ctx.quick { 20 } else { 1000 };
    let events = (threads * 1001) as u64;
    for text in [Text::Repetitive, Text::Varied] {
        let (parquet, ndjson, parquet_bytes, ndjson_bytes) = measure(ctx, text, threads).await?;
        let ratio = ndjson_bytes as f64 / parquet_bytes as f64;
        let what = match text {
            Text::Repetitive => "repetitive text",
            Text::Varied => "varied text",
        };
        report.ratio(
            &format!("NDJSON bytes / Parquet bytes, {what}"),
            crate::report::round(ratio, 2),
        );
        // The targets are judged on the varied text: the repetitive one flatters both.
        if let Text::Varied = text {
            report.check(
                "export 1,000,000 events to Parquet at ≥ 300,000 events/s",
                format!("{:.0} events/s ({events} events)", parquet.throughput),
                parquet.throughput >= 300_000.0 && events >= 1_000_000,
            );
            report.check(
                "Parquet files ≤ 1/5 of the NDJSON export's size",
                format!("{parquet_bytes} B vs {ndjson_bytes} B (1/{ratio:.1})"),
                ratio >= 5.0,
            );
        }
        report.row(parquet);
        report.row(ndjson);
    }
    Ok(())
}
