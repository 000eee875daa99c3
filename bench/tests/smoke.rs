//! The load tool's smoke run: every scenario with `--quick` through the real binary (about a
//! minute on a debug build), so no part of the tool rots. It checks that the JSON report holds sane numbers, not that targets are met
//! (those are judged on full runs on a quiet machine: docs/performance.md). The HA scenarios
//! start a Patroni cluster (`scripts/ha-cluster.sh`): Patroni, etcd and HAProxy must be installed
//! (tests/conformance/install.sh), as for the HA tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

/// The `threadstream` binary of the same profile: `cargo test --workspace` has built it next
/// to ours; on `cargo test -p threadstream-bench` alone, build it.
fn server_binary(bench: &Path) -> PathBuf {
    let dir = bench.parent().expect("bench binary has a folder");
    let candidate = dir.join("threadstream");
    if candidate.exists() {
        return candidate;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let release = dir.ends_with("release");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "threadstream", "--bin", "threadstream"]);
    if release {
        cmd.arg("--release");
    }
    let mut child = cmd.spawn().expect("cargo runs");
    // Never hang the suite on a build lock: give up after 10 minutes.
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed().as_secs() > 600 {
            let _ = child.kill();
            panic!("building threadstream took over 10 minutes: run `cargo build` first");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(status.success(), "building the threadstream binary failed");
    assert!(candidate.exists(), "{} not built", candidate.display());
    candidate
}

fn check_report(r: &Value) {
    let name = r["scenario"].as_str().expect("scenario name");
    let rows = r["rows"].as_array().expect("rows");
    assert!(!rows.is_empty(), "{name}: no rows");
    assert!(
        !r["checks"].as_array().expect("checks").is_empty(),
        "{name}: no target checks"
    );
    for row in rows {
        let label = format!("{name}: {}", row["name"]);
        let tp = row["throughput"].as_f64().expect("throughput");
        assert!(tp > 0.0 && tp.is_finite(), "{label}: throughput {tp}");
        assert!(row["count"].as_u64().expect("count") > 0, "{label}: count");
        if let Some(l) = row["latency"].as_object() {
            let (p50, p99, max) = (
                l["p50_ms"].as_f64().expect("p50"),
                l["p99_ms"].as_f64().expect("p99"),
                l["max_ms"].as_f64().expect("max"),
            );
            assert!(
                0.0 <= p50 && p50 <= p99 && p99 <= max,
                "{label}: p50 {p50} ≤ p99 {p99} ≤ max {max} does not hold"
            );
            assert!(max < 60_000.0, "{label}: max latency {max} ms");
        }
        if let Some(u) = row["usage"].as_object() {
            assert!(u["rss_max_kb"].as_u64().expect("rss") > 0, "{label}: RSS");
            assert!(
                u["cpu_seconds"].as_f64().expect("cpu") >= 0.0,
                "{label}: CPU"
            );
        }
    }
}

/// Runs the bench with `args` and `--json`; its stdout and the JSON it wrote.
fn run_bench(args: &[&str]) -> (String, Value) {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_threadstream-bench"));
    let server = server_binary(&bench);
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = Command::new(&bench)
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--server-bin")
        .arg(&server)
        .output()
        .expect("bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = std::fs::read_to_string(&json).expect("json written");
    (stdout, serde_json::from_str(&json).expect("valid JSON"))
}

#[test]
fn quick_scenarios_write_sane_reports() {
    let started = Instant::now();
    // Eleven ports free now, so the HA scenarios do not take those of an HA test beside them.
    let base = threadstream_ha_cluster::free_port_range()
        .expect("eleven consecutive free ports")
        .to_string();
    let (stdout, reports) = run_bench(&["all", "--quick", "--ha-port-base", &base]);
    assert!(stdout.contains("configuration"), "no table printed");
    let reports = reports.as_array().expect("an array of reports");
    let names: Vec<&str> = reports
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "ingest-sqlite",
            "ingest-postgres",
            "ingest-http",
            "long-thread",
            "fanout",
            "live-latency",
            "idle-sse",
            "replay",
            "rebuild",
            "parquet-export",
            "ttft",
            "slow-consumers",
            "erasure",
            "erasure-postgres",
            "compaction",
            "agent-load",
            "partitioned-log",
            "durable-streams",
            "failover",
            "standby-fanout"
        ]
    );
    for r in reports {
        check_report(r);
        assert_eq!(r["quick"], true);
        // Correctness is judged on quick runs too (only speed waits for a quiet machine):
        // every watcher's stream exact against the log, every ingest ack in it, the merged
        // audit order of the partitioned log whole, nothing acknowledged lost in a failover.
        for c in r["checks"].as_array().expect("checks") {
            let target = c["target"].as_str().unwrap_or("");
            if target.contains("every watcher")
                || target.contains("every ingest post")
                || target.contains("merged audit order")
                || target.contains("nothing acknowledged lost")
                || target.contains("`threadstream verify` clean")
                || target.contains("every thread's text the same")
            {
                assert_eq!(
                    c["met"], true,
                    "{}: {target}: {}",
                    r["scenario"], c["measured"]
                );
            }
        }
    }
    let ds = reports
        .iter()
        .find(|r| r["scenario"] == "durable-streams")
        .expect("durable-streams ran");
    check_append_cost(ds);
    eprintln!("smoke run took {:.1} s", started.elapsed().as_secs_f64());
}

/// durable-streams' append-cost phase (#35 part 4) at quick size: one row per server
/// (threadstream on SQLite and on Postgres, the reference), each with its CPU per appended value,
/// the client's CPU and the machine's idle time; every stream read back whole on each; the
/// threadstream-over-reference ratios and the checks present.
fn check_append_cost(r: &Value) {
    let rows: Vec<&Value> = r["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|row| row["name"].as_str().unwrap_or("").contains("append cost"))
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(rows.len(), 3, "one append-cost row per server: {names:?}");
    for (row, server) in rows.iter().zip(["on SQLite", "on Postgres", "reference"]) {
        let label = row["name"].as_str().unwrap();
        assert!(label.contains(server), "{label}: expected {server}");
        let e = &row["extra"];
        for f in [
            "cpu_us_per_value",
            "server_cpu_us_per_value",
            "offered_values_per_s",
            "achieved_values_per_s",
            "client_cpu_seconds",
        ] {
            let v = e[f].as_f64().unwrap_or(-1.0);
            assert!(v > 0.0 && v.is_finite(), "{label}: {f} = {}", e[f]);
        }
        let idle = e["machine_idle_percent"].as_f64().expect("idle %");
        assert!((0.0..=100.0).contains(&idle), "{label}: idle {idle}");
        assert!(e["sustained"].is_boolean(), "{label}: sustained");
        assert_eq!(
            e["streams_verified"], e["producers"],
            "{label}: every stream read back whole and in order"
        );
        assert_eq!(e["producer_errors"], 0, "{label}: producer errors");
        if server == "on Postgres" {
            assert!(
                e["store_cpu_seconds"].as_f64().unwrap_or(0.0) > 0.0,
                "{label}: Postgres's CPU"
            );
        }
    }
    for key in [
        "append_cost_reference_over_threadstream_sqlite",
        "append_cost_reference_over_threadstream_postgres",
    ] {
        let x = r["ratios"][key].as_f64().unwrap_or(-1.0);
        assert!(
            x > 0.0 && x.is_finite(),
            "ratio {key} = {}",
            r["ratios"][key]
        );
    }
    let checks = r["checks"].as_array().expect("checks");
    let costs = checks
        .iter()
        .filter(|c| {
            c["target"]
                .as_str()
                .unwrap_or("")
                .starts_with("append cost")
        })
        .count();
    assert_eq!(
        costs, 3,
        "two ratio checks and the sustained check: {checks:?}"
    );
    let answers = checks
        .iter()
        .find(|c| {
            c["target"]
                .as_str()
                .unwrap_or("")
                .contains("every check of threadstream's answers")
        })
        .expect("the answers check");
    assert_eq!(answers["met"], true, "{}", answers["measured"]);
}

/// agent-load behind Debian's HAProxy (tests/conformance/install.sh installs it) with one
/// instance killed mid-load: every watcher, resumed through HAProxy, still exact.
#[test]
fn quick_agent_load_behind_haproxy_survives_a_kill() {
    let (_, r) = run_bench(&[
        "agent-load",
        "--quick",
        "--haproxy",
        "--kill-one-after",
        "0.8",
    ]);
    check_report(&r);
    let checks = r["checks"].as_array().expect("checks");
    for want in [
        "every watcher gets",
        "every ingest post",
        "reconnects through HAProxy",
    ] {
        let c = checks
            .iter()
            .find(|c| c["target"].as_str().unwrap_or("").contains(want))
            .unwrap_or_else(|| panic!("no check {want:?}: {checks:?}"));
        assert_eq!(c["met"], true, "{}: {}", c["target"], c["measured"]);
    }
}

/// agent-load on both stores (SQLite, then Postgres): every watcher and ingest post exact on
/// each, and the cost fields of issue #35 present and sane in each row.
#[test]
fn quick_agent_load_on_both_stores_reports_its_cost() {
    let (_, r) = run_bench(&["agent-load", "--quick", "--store", "both"]);
    check_report(&r);
    let rows = r["rows"].as_array().expect("rows");
    let stores: Vec<&str> = rows
        .iter()
        .map(|row| row["extra"]["store"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(stores, ["sqlite", "postgres"], "one instance on each store");
    for row in rows {
        let e = &row["extra"];
        let label = format!("{}", row["name"]);
        for f in [
            "server_cpu_us_per_appended",
            "server_cpu_us_per_delivered",
            "server_cpu_us_per_live_run_second",
            "server_plus_store_cpu_us_per_appended",
            "log_bytes_per_text_delta",
            "all_bytes_per_text_delta",
            // The floor (src/agent_load/floor.rs), its parts, and the row's ratio to it.
            "floor_parse_us",
            "floor_decide_row_us",
            "floor_four_sse_writes_us",
            "floor_us_per_token",
            "ratio_to_floor",
        ] {
            let v = e[f].as_f64().unwrap_or(-1.0);
            assert!(v > 0.0 && v.is_finite(), "{label}: {f} = {}", e[f]);
        }
        let parts: f64 = [
            "floor_parse_us",
            "floor_decide_row_us",
            "floor_four_sse_writes_us",
        ]
        .iter()
        .map(|f| e[f].as_f64().unwrap_or(0.0))
        .sum();
        let floor = e["floor_us_per_token"].as_f64().unwrap_or(0.0);
        assert!(
            (parts - floor).abs() < 0.05,
            "{label}: the floor is its parts' sum"
        );
        let idle = e["machine_idle_percent"].as_f64().expect("idle %");
        assert!((0.0..=100.0).contains(&idle), "{label}: idle {idle}");
        assert!(e["text_deltas"].as_u64().unwrap_or(0) > 0, "{label}");
        if e["store"] == "postgres" {
            assert!(
                e["store_cpu_seconds"].as_f64().unwrap_or(0.0) > 0.0,
                "{label}"
            );
            assert!(e["wal_bytes_written"].as_u64().unwrap_or(0) > 0, "{label}");
        }
    }
    let checks = r["checks"].as_array().expect("checks");
    for want in ["every watcher gets", "every ingest post"] {
        let found: Vec<_> = checks
            .iter()
            .filter(|c| c["target"].as_str().unwrap_or("").contains(want))
            .collect();
        assert_eq!(found.len(), 2, "{want:?} once per store: {checks:?}");
        for c in found {
            assert_eq!(c["met"], true, "{}: {}", c["target"], c["measured"]);
        }
    }
    assert!(
        checks
            .iter()
            .any(|c| c["target"].as_str().unwrap_or("").contains("30 % idle")),
        "no idle check: {checks:?}"
    );
}
