//! schemathesis (PyPI, pinned in `tests/conformance/install.sh`) against a real server, driven
//! by the served `/openapi.json` with every check (`checks.enabled = true`): no 5xx, status codes, content
//! types, headers and bodies as documented, schema-violating input refused, schema-valid input
//! accepted, and the rest; the coverage, fuzzing and stateful phases (sequences of calls along
//! the links schemathesis infers). Its settings and the exceptions with their reasons are in
//! `tests/conformance/openapi/schemathesis.toml`; docs/openapi.md describes both runs.
//!
//! Twice: on loopback without authentication, and with a tokens file as alice, with bob's thread
//! id in every thread id parameter (`schemathesis-other-user.toml`): every request naming bob's
//! thread must be a 404 (or the 400/405/413/422 of a malformed request), and bob's thread must be
//! as it was afterwards. Each run prints how many requests it sent.
//!
//! Seeds: the project's (`seed` in `schemathesis.toml`) with every phase, then, on loopback,
//! two more drawn per run (`fuzzing` and `stateful` only, fewer examples: the examples and
//! coverage phases send the same requests whatever the seed). Each run prints its seed and the
//! command that replays it; a failing run's message holds both. `THREADSTREAM_ST_SEEDS=a,b`
//! replaces the drawn seeds (to replay one: `THREADSTREAM_ST_SEEDS=<seed> cargo test
//! --workspace --test blackbox -- schemathesis_finds_nothing_on_loopback`).
//!
//! The runs take minutes, so they run in the first (SQLite, default engine) pass of
//! `scripts/test.sh` only: with `THREADSTREAM_TEST_STORE=postgres` or
//! `THREADSTREAM_TEST_HTTP1_ENGINE=hyper` the test says so and returns.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::auth::{write_tokens, TOKEN_A, TOKEN_B};
use crate::common::*;
use crate::openapi::openapi_venv;

/// Wall-time bound of one schemathesis run (one to two minutes on a quiet machine, the stateful
/// phase included).
const RUN_LIMIT: Duration = Duration::from_secs(420);

fn config_dir() -> PathBuf {
    conformance_dir().join("openapi")
}

/// Examples per operation in a drawn seed's fuzzing phase (the project's seed: the config's 20).
const DRAWN_SEED_EXAMPLES: u32 = 5;
/// Scenarios of a drawn seed's stateful phase (the project's seed: the config's 50).
const DRAWN_SEED_SCENARIOS: u32 = 25;
/// How many seeds each run draws besides the project's.
const DRAWN_SEEDS: usize = 2;

/// The project's seed: `seed = N` in `schemathesis.toml`.
fn project_seed() -> u64 {
    let config = std::fs::read_to_string(config_dir().join("schemathesis.toml")).unwrap();
    config
        .lines()
        .find_map(|l| l.strip_prefix("seed = "))
        .and_then(|n| n.trim().parse().ok())
        .expect("`seed = N` in schemathesis.toml")
}

/// The seeds to try besides the project's: `THREADSTREAM_ST_SEEDS` (comma-separated), else
/// [`DRAWN_SEEDS`] drawn now.
fn other_seeds() -> Vec<u64> {
    if let Ok(list) = std::env::var("THREADSTREAM_ST_SEEDS") {
        return list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("THREADSTREAM_ST_SEEDS: {s:?} is not a seed"))
            })
            .collect();
    }
    use std::hash::{BuildHasher, Hasher};
    (0..DRAWN_SEEDS)
        .map(|_| {
            // A process-random hasher (std's RandomState), reduced to what a person can retype.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::UNIX_EPOCH
                    .elapsed()
                    .unwrap()
                    .as_nanos(),
            );
            h.finish() % 1_000_000_000
        })
        .collect()
}

/// One schemathesis run's seed and how much it generates.
#[derive(Clone, Copy)]
struct Seed {
    seed: u64,
    /// The project's: the config's phases and counts. A drawn one: `fuzzing` and `stateful`,
    /// [`DRAWN_SEED_EXAMPLES`] and [`DRAWN_SEED_SCENARIOS`].
    project: bool,
}

/// Why this pass skips the runs, if it does.
fn skip_reason() -> Option<String> {
    if store_kind() == StoreKind::Postgres {
        return Some("THREADSTREAM_TEST_STORE=postgres".into());
    }
    http1_engine().map(|e| format!("THREADSTREAM_TEST_HTTP1_ENGINE={e}"))
}

/// What one run sent and found.
struct Outcome {
    /// HTTP requests sent (the entries of its HAR report).
    requests: usize,
    /// Test cases generated (its JSON report).
    test_cases: u64,
    operations: u64,
    /// `(method, url, status)` of every request.
    exchanges: Vec<(String, String, u16)>,
    /// The `Idempotency-Key` of every request that sent one.
    idempotency_keys: Vec<String>,
}

/// Runs `st run <server>/openapi.json --checks all` with `config`, `env` set; fails the test on
/// any failure or error schemathesis reports, with its output.
async fn schemathesis(
    s: &Server,
    config: &Path,
    env: &[(&str, &str)],
    phases: &[&str],
    seed: Seed,
) -> Outcome {
    let st = openapi_venv().join("st");
    assert!(
        st.is_file(),
        "{} is missing: install it with `bash tests/conformance/install.sh`",
        st.display()
    );
    let reports = tempfile::tempdir().unwrap();
    // A drawn seed: fewer examples and scenarios, from a copy of the config that says so.
    let drawn_config = tempfile::NamedTempFile::new().unwrap();
    let phases: Vec<&str> = if seed.project {
        phases.to_vec()
    } else {
        let config_text = std::fs::read_to_string(config).unwrap();
        let fewer = config_text.replace(
            "\nphases.stateful.generation.max-examples = 50\n",
            &format!("\nphases.stateful.generation.max-examples = {DRAWN_SEED_SCENARIOS}\n"),
        );
        assert_ne!(
            fewer, config_text,
            "the stateful phase's count in {config:?}"
        );
        std::fs::write(drawn_config.path(), fewer).unwrap();
        phases
            .iter()
            .copied()
            .filter(|p| matches!(*p, "fuzzing" | "stateful"))
            .collect()
    };
    let config = if seed.project {
        config
    } else {
        drawn_config.path()
    };
    let mut args: Vec<String> = vec![
        "--config-file".into(),
        config.display().to_string(),
        "--no-color".into(),
        "run".into(),
        s.url("/openapi.json"),
        "--phases".into(),
        phases.join(","),
        "--seed".into(),
        seed.seed.to_string(),
    ];
    if !seed.project {
        args.extend(["--max-examples".into(), DRAWN_SEED_EXAMPLES.to_string()]);
    }
    // How to run this again: the whole test with this seed, or schemathesis by hand against a
    // server started as the test starts it.
    let replay = format!(
        "seed {seed}: replay with `{again} cargo test --workspace --test blackbox -- {test}`, or by hand against `target/debug/threadstream serve --data-dir <empty dir> \
         --webhook-targets loopback`: `{env}SCHEMATHESIS_HOOKS={hooks} {st} {args}`{config_note}",
        seed = seed.seed,
        // The project's seed runs first in every run of the test; a drawn one, when named.
        again = if seed.project {
            String::new()
        } else {
            format!("THREADSTREAM_ST_SEEDS={}", seed.seed)
        },
        test = std::thread::current().name().unwrap_or("schemathesis"),
        env = env
            .iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        hooks = config_dir().join("hooks.py").display(),
        st = st.display(),
        args = args.join(" "),
        config_note = if seed.project {
            String::new()
        } else {
            format!(
                " (with `phases.stateful.generation.max-examples = {DRAWN_SEED_SCENARIOS}` in the config)"
            )
        },
    );
    println!("schemathesis, {replay}");
    let mut cmd = tokio::process::Command::new(&st);
    cmd.args(&args)
        // Every check: `checks.enabled = true` in the config (`--checks all` on the command
        // line would override the config's per-operation exceptions).
        .args(["--report", "json,har", "--report-dir"])
        .arg(reports.path())
        // hooks.py: a fresh Idempotency-Key per request (docs/openapi.md, "Hooks").
        .env("SCHEMATHESIS_HOOKS", config_dir().join("hooks.py"))
        .envs(env.iter().copied())
        .kill_on_drop(true);
    let started = Instant::now();
    let out = tokio::time::timeout(RUN_LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis did not finish within {RUN_LIMIT:?}; {replay}"))
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Reports are named `<format>-<time>.json`.
    let report_of = |format: &str| -> Value {
        let file = std::fs::read_dir(reports.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{format}-")))
            })
            .unwrap_or_else(|| {
                panic!("schemathesis wrote no {format} report:\n{stdout}\n{stderr}")
            });
        serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
    };
    let report = report_of("json");
    let none = |key: &str| report[key].as_array().is_none_or(Vec::is_empty);
    let passed = out.status.success()
        && none("failures")
        && none("errors")
        && report["test_cases"]["with_failures"] == 0
        && report["test_cases"]["errored"] == 0;
    // A failing run's reports (the HAR holds every exchange, the failing case's included) are
    // kept under target/: the stateful phase depends on the server's answers, so a failure may
    // not come again with the same seed.
    let kept = (!passed).then(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/schemathesis-failures")
            .join(format!(
                "{}-{}",
                std::process::id(),
                std::time::SystemTime::UNIX_EPOCH
                    .elapsed()
                    .unwrap()
                    .as_millis()
            ));
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(reports.path()).unwrap() {
            let e = e.unwrap().path();
            std::fs::copy(&e, dir.join(e.file_name().unwrap())).unwrap();
        }
        dir
    });
    assert!(
        passed,
        "schemathesis found failures (exit {:?}; failures {}, errors {}, test cases {}; reports kept in {kept:?}); {replay}:\n{stdout}\n{stderr}",
        out.status.code(),
        report["failures"],
        report["errors"],
        report["test_cases"]
    );
    assert_eq!(
        report["complete"], true,
        "the run did not complete; {replay}:\n{stdout}"
    );
    // Every phase the config enables ran and passed, the stateful one included.
    for phase in phases.iter().filter(|p| **p != "examples") {
        assert_eq!(
            report["phases"][phase]["status"], "success",
            "the {phase} phase: {}",
            report["phases"]
        );
    }
    let har = report_of("har");
    let exchanges: Vec<(String, String, u16)> = har["log"]["entries"]
        .as_array()
        .expect("HAR entries")
        .iter()
        .map(|e| {
            (
                e["request"]["method"].as_str().unwrap().to_string(),
                e["request"]["url"].as_str().unwrap().to_string(),
                e["response"]["status"].as_u64().unwrap() as u16,
            )
        })
        .collect();
    let idempotency_keys: Vec<String> = har["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            e["request"]["headers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|h| {
            h["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case("idempotency-key"))
        })
        .map(|h| h["value"].as_str().unwrap_or_default().to_string())
        .collect();
    let outcome = Outcome {
        requests: exchanges.len(),
        idempotency_keys,
        test_cases: report["test_cases"]["generated"].as_u64().unwrap(),
        operations: report["operations"]["tested"].as_u64().unwrap(),
        exchanges,
    };
    println!(
        "schemathesis, seed {}: {} requests, {} test cases, {} operations, in {:.0?}",
        seed.seed,
        outcome.requests,
        outcome.test_cases,
        outcome.operations,
        started.elapsed()
    );
    // Every operation of the document, none skipped.
    let operations = &report["operations"];
    assert!(
        operations["tested"] == operations["total"]
            && operations["skipped"] == 0
            && operations["errored"] == 0,
        "not every operation was tested: {operations}"
    );
    // The hook ran: the valid keys sent are fresh (`st-<run>-<n>-…`), each one once; the
    // malformed ones the coverage phase sends on purpose are left as drawn.
    let fresh: Vec<&String> = outcome
        .idempotency_keys
        .iter()
        .filter(|k| k.starts_with("st-"))
        .collect();
    // A drawn seed's few examples send few keys (8 in one run of 5 examples per operation).
    assert!(
        fresh.len() >= if seed.project { 50 } else { 1 },
        "only {} of {} Idempotency-Keys came from hooks.py",
        fresh.len(),
        outcome.idempotency_keys.len()
    );
    let distinct: std::collections::HashSet<_> = fresh.iter().collect();
    assert_eq!(
        distinct.len(),
        fresh.len(),
        "an Idempotency-Key was sent twice"
    );
    let documented = outcome.operations;
    // Enough examples per operation to find real bugs (the config asks for 20 random ones per
    // operation on top of the coverage phase's; a drawn seed, DRAWN_SEED_EXAMPLES).
    let per_operation = if seed.project {
        20
    } else {
        u64::from(DRAWN_SEED_EXAMPLES)
    };
    assert!(
        outcome.requests as u64 >= per_operation * documented,
        "only {} requests for {documented} operations",
        outcome.requests
    );
    outcome
}

/// hooks.py's own unit tests (`test_hooks.py`): which path parameters the second hook sends
/// encoded as themselves, for histories a schemathesis run reaches only with some seeds (a
/// query's value echoed back is not an answer, drawn seed 944602905).
#[test]
fn the_hooks_encode_a_link_value_only_when_it_is_raw() {
    let out = std::process::Command::new(openapi_venv().join("python"))
        .args(["-m", "unittest", "-v", "test_hooks"])
        .current_dir(config_dir())
        .output()
        .expect("the schemathesis venv's python runs (tests/conformance/install.sh)");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "test_hooks.py failed:\n{log}");
    assert!(
        log.contains("Ran 4 tests"),
        "test_hooks.py ran other tests:\n{log}"
    );
}

#[tokio::test]
async fn schemathesis_finds_nothing_on_loopback_without_auth() {
    if let Some(reason) = skip_reason() {
        println!("schemathesis runs in the SQLite pass only; skipped: {reason}");
        return;
    }
    // The project's seed, then the drawn ones, each against a fresh server (a finding then
    // replays from its seed alone).
    let seeds = std::iter::once(Seed {
        seed: project_seed(),
        project: true,
    })
    .chain(other_seeds().into_iter().map(|seed| Seed {
        seed,
        project: false,
    }));
    for seed in seeds {
        let s = Server::start().await;
        // Every phase, the stateful one included: hooks.py percent-encodes the raw values links
        // carry into paths, which schemathesis 4.32.5 sends decoded (docs/openapi.md, "Hooks").
        let outcome = schemathesis(
            &s,
            &config_dir().join("schemathesis.toml"),
            &[],
            &["examples", "coverage", "fuzzing", "stateful"],
            seed,
        )
        .await;
        println!(
            "loopback without auth, seed {}: schemathesis sent {} requests",
            seed.seed, outcome.requests
        );
        // Still serving.
        s.get("/healthz")
            .await
            .ok_json("healthz after schemathesis");
    }
}

/// The statuses a request naming another user's thread may get: 404, as if it did not exist, or
/// the refusal of a malformed request before the thread is looked at.
const OTHER_USERS_THREAD: &[u16] = &[404, 400, 405, 413, 422];

#[tokio::test]
async fn schemathesis_finds_nothing_with_tokens_and_another_users_thread() {
    if let Some(reason) = skip_reason() {
        println!("schemathesis runs in the SQLite pass only; skipped: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_tokens(
        &tokens,
        &[
            (TOKEN_A, "alice", "user", None),
            (TOKEN_B, "bob", "user", None),
        ],
    );
    let s = Server::start_with(Opts {
        extra_args: vec!["--tokens-file".into(), tokens.display().to_string()],
        ..Opts::default()
    })
    .await;

    // Bob's thread, with a finished run in it.
    let bob_thread = "bob-thread-1";
    let bob = |req: reqwest::RequestBuilder| req.bearer_auth(TOKEN_B);
    let created = s
        .try_send(bob(s
            .client
            .post(s.url("/instance-ai/threads"))
            .json(&json!({"threadId": bob_thread, "title": "Bob's"}))))
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text);
    let events = json!({"events": [
        run_start("r1", "o1"),
        text_delta("r1", "o1", "Hi Bob"),
        run_finish("r1", "o1", "completed"),
    ]});
    let ingested = s
        .try_send(bob(s
            .client
            .post(s.url(&format!("/instance-ai/threads/{bob_thread}/events")))
            .json(&events)))
        .await
        .unwrap();
    assert_eq!(ingested.status, 200, "{}", ingested.text);
    let before = bobs_view(&s, bob_thread).await;

    // The run: alice's token, bob's thread id in every thread id parameter.
    let fragment = std::fs::read_to_string(config_dir().join("schemathesis-other-user.toml"))
        .expect("schemathesis-other-user.toml");
    let shared = std::fs::read_to_string(config_dir().join("schemathesis.toml")).unwrap();
    let config = dir.path().join("schemathesis.toml");
    // The fragment holds only top-level keys, so it goes in front of the shared file's tables.
    std::fs::write(&config, format!("{fragment}\n{shared}")).unwrap();
    let outcome = schemathesis(
        &s,
        &config,
        &[
            ("THREADSTREAM_ST_TOKEN", TOKEN_A),
            ("THREADSTREAM_ST_OTHER_THREAD", bob_thread),
        ],
        &["examples", "coverage", "fuzzing", "stateful"],
        Seed {
            seed: project_seed(),
            project: true,
        },
    )
    .await;
    println!(
        "tokens file, alice with bob's thread ids: schemathesis sent {} requests",
        outcome.requests
    );

    let naming_bob: Vec<_> = outcome
        .exchanges
        .iter()
        .filter(|(_, url, _)| url.contains(bob_thread))
        .collect();
    // A CORS preflight answers every path alike (204, no body) without looking it up: it tells
    // nothing about the thread.
    // Nor does an admin route's 403 (`admin_only`): every caller who is not an admin gets it for
    // every thread, before any is looked up.
    let naming_bob: Vec<_> = naming_bob
        .into_iter()
        .filter(|(method, _, status)| !(method == "OPTIONS" && *status == 204))
        .filter(|(_, url, status)| !(url.contains("/instance-ai/admin/") && *status == 403))
        .collect();
    assert!(
        naming_bob.len() >= 100,
        "only {} requests named bob's thread",
        naming_bob.len()
    );
    let leaks: Vec<_> = naming_bob
        .iter()
        .filter(|(_, _, status)| !OTHER_USERS_THREAD.contains(status))
        .collect();
    assert!(
        leaks.is_empty(),
        "requests naming another user's thread answered other than {OTHER_USERS_THREAD:?}: {leaks:#?}"
    );
    let mut statuses: Vec<u16> = naming_bob.iter().map(|(_, _, st)| *st).collect();
    statuses.sort_unstable();
    statuses.dedup();
    println!(
        "{} requests named bob's thread; statuses {statuses:?}",
        naming_bob.len()
    );
    assert!(statuses.contains(&404), "no request got the 404");
    assert_eq!(
        bobs_view(&s, bob_thread).await,
        before,
        "bob's thread changed"
    );
}

/// Bob's thread as he sees it: its summary, messages and status.
async fn bobs_view(s: &Server, thread: &str) -> (Value, Value, Value) {
    let get = |path: String| async move {
        s.try_send(s.client.get(s.url(&path)).bearer_auth(TOKEN_B))
            .await
            .unwrap()
            .ok_json(&path)
    };
    let list = get("/instance-ai/threads".into()).await;
    let summary = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == thread)
        .cloned()
        .expect("bob's thread in his list");
    (
        summary,
        get(format!("/instance-ai/threads/{thread}/messages")).await,
        get(format!("/instance-ai/threads/{thread}/status")).await,
    )
}
