//! The `threadstream` command line: a thin layer over the `threadstream-api` crate. The
//! commands and their dispatch are here; `serve`'s flags are in `serve_flags.rs`, the log tools'
//! (export, import, replay, analytics, traces, erase) in `log_tools.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use threadstream_agent as agent;
use threadstream_api as api;
use threadstream_api::Config;
use threadstream_audit as audit;
use threadstream_audit::progress::Progress;

mod log_tools;
mod serve_flags;
use log_tools::{
    analytics, erase, export, import, replay, traces, AnalyticsArgs, EraseArgs, ExportArgs,
    ImportArgs, ReplayArgs, TracesArgs,
};
use serve_flags::{ServeArgs, StoreArgs};

#[derive(Parser)]
#[command(
    name = "threadstream",
    version,
    about = "Event-sourced CQRS backend for AI-agent conversations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP/SSE service.
    Serve(Box<ServeArgs>),
    /// Read-model maintenance.
    Projections {
        #[command(subcommand)]
        command: ProjectionsCommand,
    },
    /// Write stored events as NDJSON (one event per line), streaming: the whole log, or a
    /// thread, a run, a user's threads, a time range (filters combine). With `--format parquet
    /// --out DIR`: Parquet files by day with the derived analytics tables, continued by
    /// `--since-id`.
    Export(ExportArgs),
    /// Load NDJSON written by `export` into a store, keeping ids and seqs; every event is checked
    /// against the thread rules and nothing is stored unless every line is accepted.
    Import(ImportArgs),
    /// Re-emit a thread's events with their original timing, as NDJSON on stdout or as the n8n
    /// SSE stream on a local port.
    Replay(ReplayArgs),
    /// Check the log's invariants and every read model against a fresh fold; exit status 1 when
    /// anything is wrong.
    Verify {
        #[command(flatten)]
        log: LogArgs,
    },
    /// Per-run analytics: a text summary, or the runs as JSON or CSV.
    Analytics(AnalyticsArgs),
    /// Erase a thread (with its forks) or every stream of a user, for real: events, read
    /// models, attachments and idempotency records go, an `erased` tombstone records it
    /// (docs/operations.md, "Erasure and retention"). Prints the answer as JSON. Run it again
    /// to finish an erasure that was interrupted. On SQLite it refuses while a server runs on
    /// the data dir (erase through its admin route).
    Erase(EraseArgs),
    /// After erasures on Postgres: rewrite the tables erasures delete from (`VACUUM FULL`) and
    /// move the WAL on, so no file of the database keeps an erased byte, nor, once they have
    /// replayed it, any standby's (docs/operations.md, "Erasure and retention"). Appends wait
    /// while each table is rewritten. Needs `CHECKPOINT` and `pg_switch_wal()` rights. On
    /// SQLite it has nothing to do: every erasure overwrites as it goes.
    Scrub {
        #[command(flatten)]
        log: LogArgs,
    },
    /// A thread's runs as OpenTelemetry traces rebuilt from the log (the GenAI spans the server
    /// exports live): posted to an OTLP/HTTP collector, or written as OTLP/JSON on stdout.
    Traces(TracesArgs),
    /// Print the OpenAPI document `GET /openapi.json` serves (docs/openapi.json is its output).
    Openapi,
    /// Bearer tokens for the tokens file.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print the sha256 (hex) of a token read from stdin: what the tokens file stores.
    Hash,
}

/// Which store a tool works on.
#[derive(clap::Args)]
struct LogArgs {
    /// Folder of the embedded SQLite log (`threadstream.db`).
    #[arg(long, env = "THREADSTREAM_DATA_DIR", default_value = api::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
}

impl LogArgs {
    fn config(self) -> anyhow::Result<Config> {
        let mut config = Config::new(([127, 0, 0, 1], 0).into(), self.data_dir);
        self.store.apply(&mut config);
        Ok(config)
    }

    async fn open(self) -> anyhow::Result<threadstream_store::EventLog> {
        api::open_log(&self.config()?).await
    }
}

#[derive(Subcommand)]
enum ProjectionsCommand {
    /// Drop every read model and rebuild it from the log (stop the server first); with
    /// `--name`, rebuild that one beside the live one and switch atomically (the server may run).
    Rebuild {
        #[command(flatten)]
        log: LogArgs,
        /// The read model to rebuild.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(api::background::projector::MODELS))]
        name: Option<String>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let workers = match &cli.command {
        Command::Serve(a) => a.worker_threads.map(usize::from),
        _ => None,
    }
    .unwrap_or_else(default_worker_threads);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?
        .block_on(run(cli))
}

/// The runtime's worker threads when `--worker-threads` is not given: one fewer than the
/// machine's cores, at least one. The core left over is for the threads that are not the
/// runtime's (the SQLite writer and syncer) and the store beside it: with a worker on every
/// core, workers woke one another to steal what one could run, and parked again
/// (docs/performance.md, "The runtime's worker threads").
fn default_worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let logs = tracing_subscriber::fmt::layer()
        // Logs never mix with what a tool writes to stdout (NDJSON, reports).
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into())
                // The GenAI spans are for the OTLP layer, not the log: without it they are
                // never built.
                .add_directive(
                    format!("{}=off", agent::telemetry::TARGET)
                        .parse()
                        .expect("a valid directive"),
                ),
        );
    let otel = match &cli.command {
        Command::Serve(a) => a.otel.settings(),
        _ => None,
    };
    let (otlp, _flush_on_exit) = match otel {
        Some(settings) => {
            let (layer, guard) = api::telemetry::otlp_layer(&settings)?;
            (Some(layer), Some(guard))
        }
        None => (None, None),
    };
    tracing_subscriber::registry().with(logs).with(otlp).init();
    match cli.command {
        Command::Serve(a) => api::serve(a.config()?, shutdown_signal()).await,
        Command::Projections {
            command: ProjectionsCommand::Rebuild { log, name: None },
        } => {
            let n = api::rebuild_projections(&log.config()?).await?;
            println!("rebuilt read models from {n} events");
            Ok(())
        }
        Command::Projections {
            command:
                ProjectionsCommand::Rebuild {
                    log,
                    name: Some(name),
                },
        } => {
            let mut bar: Option<Progress> = None;
            let mut progress = |at: i64, head: i64| {
                bar.get_or_insert_with(|| Progress::new(format!("rebuild {name}"), head as u64))
                    .update(at as u64)
            };
            let n = api::rebuild_projection(&log.config()?, &name, &mut progress).await?;
            println!("rebuilt read model {name} from {n} events and switched to it");
            Ok(())
        }
        Command::Export(a) => export(a).await,
        Command::Import(a) => import(a).await,
        Command::Replay(a) => replay(a).await,
        Command::Verify { log } => {
            let log = log.open().await?;
            let report = audit::verify::verify(&log).await;
            log.shutdown().await;
            let report = report?;
            println!("{report}");
            if !report.is_clean() {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Analytics(a) => analytics(a).await,
        Command::Erase(a) => erase(a).await,
        Command::Scrub { log } => {
            let log = log.open().await?;
            let scrubbed = log.scrub_erased().await;
            log.shutdown().await;
            if scrubbed? {
                println!("erased tables rewritten, WAL switched and checkpointed");
            } else {
                println!("nothing to scrub: SQLite erasures overwrite freed pages as they go");
            }
            Ok(())
        }
        Command::Traces(a) => traces(a).await,
        Command::Openapi => {
            print!("{}", api::http::document_json());
            Ok(())
        }
        Command::Token {
            command: TokenCommand::Hash,
        } => {
            // From stdin, not an argument: a token on the command line would land in the
            // shell history and the process list.
            let mut token = String::new();
            std::io::stdin().read_line(&mut token)?;
            println!(
                "{}",
                api::auth::hash_token(token.trim_end_matches(['\r', '\n']))
            );
            Ok(())
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed here, before the server starts
/// listening: installed on the future's first poll (as `tokio::signal::ctrl_c()` does), a
/// SIGTERM that came right after the "listening" line killed the process instead of stopping it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let int = signal(SignalKind::interrupt());
        let term = signal(SignalKind::terminate());
        async move {
            match (int, term) {
                (Ok(mut int), Ok(mut term)) => {
                    tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use threadstream_store::NotifyMode;

    use super::*;

    /// Parses a command line as if no `THREADSTREAM_*` (or other) variable the CLI reads were
    /// set, so a CI machine's `DATABASE_URL` cannot change what the defaults look like.
    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        static CLEARED: std::sync::Once = std::sync::Once::new();
        CLEARED.call_once(|| {
            fn clear(cmd: &clap::Command) {
                for arg in cmd.get_arguments() {
                    if let Some(var) = arg.get_env() {
                        std::env::remove_var(var);
                    }
                }
                cmd.get_subcommands().for_each(clear);
            }
            clear(&Cli::command());
        });
        Cli::try_parse_from(std::iter::once("threadstream").chain(args.iter().copied()))
    }

    /// docs/configuration.md's table of flags is what `serve` takes: every flag of `serve` has
    /// a row with its variable and, where clap holds one, its default (`off` for a switch);
    /// every flag a row names is one of `serve`'s.
    #[test]
    fn the_configuration_doc_lists_every_serve_flag_as_it_is() {
        let doc = include_str!("../docs/configuration.md");
        let rows: Vec<Vec<&str>> = doc
            .lines()
            .skip_while(|l| !l.starts_with("| flag | env | default |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect();
        assert!(
            rows.len() > 50,
            "the table was not found: {} rows",
            rows.len()
        );
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").expect("a serve subcommand");
        let flags_of = |cell: &str| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|code| code.strip_prefix("--"))
                .map(|f| f.split(' ').next().unwrap_or(f).to_string())
                .collect()
        };
        let mut problems = Vec::new();
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" {
                continue;
            }
            let Some(row) = rows
                .iter()
                .find(|r| flags_of(r[0]).iter().any(|f| f == long))
            else {
                problems.push(format!("--{long}: no row"));
                continue;
            };
            if let Some(env) = arg.get_env() {
                let env = format!("`{}`", env.to_string_lossy());
                if !row[1].contains(&env) {
                    problems.push(format!("--{long}: env {env}, the row says {}", row[1]));
                }
            }
            let defaults = arg.get_default_values();
            let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
            if switch {
                if row[2] != "off" {
                    problems.push(format!(
                        "--{long}: a switch, the row's default is {}",
                        row[2]
                    ));
                }
            } else if let [default] = defaults {
                let default = default.to_string_lossy();
                if row[2] != default && row[2] != format!("`{default}`") {
                    problems.push(format!(
                        "--{long}: default {default}, the row says {}",
                        row[2]
                    ));
                }
            }
        }
        for row in &rows {
            for flag in flags_of(row[0]) {
                if !serve
                    .get_arguments()
                    .any(|a| a.get_long() == Some(flag.as_str()))
                {
                    problems.push(format!("the row of --{flag}: no such flag of serve"));
                }
            }
        }
        assert!(
            problems.is_empty(),
            "docs/configuration.md's flags:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every flag's default is the one the config structs have, so the two cannot drift.
    #[test]
    fn serve_without_flags_is_the_default_config() {
        let Command::Serve(args) = parse(&["serve"]).unwrap().command else {
            panic!("not serve");
        };
        let from_flags = args.config().unwrap();
        let defaults = Config::new(api::DEFAULT_ADDR, api::DEFAULT_DATA_DIR.into());
        // `Config` holds keys and has no `PartialEq`; its `Debug` shows every field (keys as
        // set/unset), which is what is compared here.
        assert_eq!(format!("{from_flags:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn a_zero_duration_is_refused_with_the_flag_named() {
        for flag in [
            "--sse-ping-secs",
            "--stream-long-poll-secs",
            "--shutdown-grace-secs",
            "--head-timeout-secs",
            "--run-orphan-secs",
            "--idempotency-window-secs",
            "--llm-idle-timeout-secs",
            "--session-ttl-secs",
            "--max-tokens",
            "--worker-threads",
        ] {
            let err = parse(&["serve", flag, "0"]).err().expect(flag);
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{flag}"
            );
            let text = err.to_string();
            assert!(
                text.contains(flag) && text.contains("0 is not in 1.."),
                "{flag}: {text}"
            );
        }
        assert!(parse(&["serve", "--sse-ping-secs", "1"]).is_ok());
    }

    #[test]
    fn enumerated_flags_take_only_their_values() {
        let err = parse(&["serve", "--notify", "http://cache:6379"])
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("must be `postgres` or a redis:// URL"),
            "{err}"
        );
        let Command::Serve(args) = parse(&["serve", "--notify", "redis://127.0.0.1:6379"])
            .unwrap()
            .command
        else {
            panic!("not serve");
        };
        assert_eq!(
            args.config().unwrap().notify,
            NotifyMode::Redis("redis://127.0.0.1:6379".into())
        );
        assert!(parse(&["analytics", "--format", "xml"]).is_err());
        assert!(parse(&["analytics", "--format", "csv"]).is_ok());
        assert!(parse(&["projections", "rebuild", "--name", "nope"]).is_err());
        assert!(parse(&["projections", "rebuild", "--name", "thread_list"]).is_ok());
        assert!(parse(&["replay", "--thread", "t", "--speed", "0"]).is_err());
    }
}
