//! What a scenario reports: rows (a measured configuration each: ours, a baseline, a variant),
//! the checks against the targets, and the machine it ran on. Printed as a table and
//! written as JSON.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

/// Latency percentiles of a set of samples, in milliseconds (nearest-rank percentiles).
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    /// `None` when there are no samples.
    pub fn from_nanos(mut v: Vec<u64>) -> Option<Latency> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let pick = |p: f64| {
            let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
            v[rank - 1] as f64 / 1e6
        };
        Some(Latency {
            samples: v.len(),
            p50_ms: pick(0.50),
            p99_ms: pick(0.99),
            max_ms: *v.last().expect("non-empty") as f64 / 1e6,
        })
    }

    pub fn from_durations(v: &[Duration]) -> Option<Latency> {
        Latency::from_nanos(v.iter().map(|d| d.as_nanos() as u64).collect())
    }
}

/// Memory and CPU of the measured process over the measured window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Usage {
    /// `server` (a `threadstream` process) or `bench` (this process: store scenarios).
    pub process: String,
    pub rss_start_kb: u64,
    pub rss_max_kb: u64,
    pub rss_end_kb: u64,
    /// utime + stime over the window, seconds.
    pub cpu_seconds: f64,
    /// `cpu_seconds` / wall seconds × 100 (200 % = both cores of this machine).
    pub cpu_percent: f64,
    /// How busy the whole machine was over the window (all processes, both cores = 100).
    pub machine_busy_percent: f64,
    /// Bytes written to storage over the window (`/proc/<pid>/io` write_bytes), MB.
    pub disk_written_mb: f64,
}

/// One measured configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    /// `threadstream`, `baseline`, `variant` (an explicit non-default option) or `info`.
    pub kind: String,
    /// Things counted (events, deliveries, connections, …).
    pub count: u64,
    pub seconds: f64,
    /// `count / seconds`.
    pub throughput: f64,
    pub unit: String,
    pub latency: Option<Latency>,
    pub usage: Option<Usage>,
    pub extra: Map<String, Value>,
}

impl Row {
    pub fn new(name: impl Into<String>, kind: &str, count: u64, seconds: f64, unit: &str) -> Row {
        Row {
            name: name.into(),
            kind: kind.into(),
            count,
            seconds,
            throughput: if seconds > 0.0 {
                count as f64 / seconds
            } else {
                0.0
            },
            unit: unit.into(),
            latency: None,
            usage: None,
            extra: Map::new(),
        }
    }

    pub fn latency(mut self, l: Option<Latency>) -> Row {
        self.latency = l;
        self
    }

    pub fn usage(mut self, u: Usage) -> Row {
        self.usage = Some(u);
        self
    }

    pub fn extra(mut self, key: &str, v: impl Into<Value>) -> Row {
        self.extra.insert(key.into(), v.into());
        self
    }
}

/// A target of the issue and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total_mb: u64,
    pub load_avg_at_start: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total_mb = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            / 1024;
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        Machine {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model,
            mem_total_mb,
            load_avg_at_start: load
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub quick: bool,
    pub command: String,
    pub machine: Machine,
    pub rows: Vec<Row>,
    pub ratios: Map<String, Value>,
    pub checks: Vec<Check>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(scenario: &str, quick: bool) -> Report {
        Report {
            scenario: scenario.into(),
            quick,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine: Machine::probe(),
            rows: Vec::new(),
            ratios: Map::new(),
            checks: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, r: Row) {
        eprintln!("  measured: {}", r.name);
        self.rows.push(r);
    }

    pub fn ratio(&mut self, name: &str, v: f64) {
        self.ratios.insert(name.into(), round(v, 2).into());
    }

    pub fn check(&mut self, target: &str, measured: String, met: bool) {
        self.checks.push(Check {
            target: target.into(),
            measured,
            met,
        });
    }

    pub fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }

    pub fn print(&self) {
        println!(
            "\n== {}{} ==  ({} cores, {}, load {})",
            self.scenario,
            if self.quick { " (quick)" } else { "" },
            self.machine.nproc,
            self.machine.cpu_model,
            self.machine.load_avg_at_start
        );
        println!(
            "{:<58} {:>14} {:>11} {:>9} {:>9} {:>9} {:>9} {:>6}",
            "configuration", "throughput", "unit", "p50 ms", "p99 ms", "max ms", "RSS MB", "CPU%"
        );
        for r in &self.rows {
            let (p50, p99, max) = match &r.latency {
                Some(l) => (
                    format!("{:.3}", l.p50_ms),
                    format!("{:.3}", l.p99_ms),
                    format!("{:.3}", l.max_ms),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            let (rss, cpu) = match &r.usage {
                Some(u) => (
                    format!("{:.1}", u.rss_max_kb as f64 / 1024.0),
                    format!("{:.0}", u.cpu_percent),
                ),
                None => ("-".into(), "-".into()),
            };
            println!(
                "{:<58} {:>14.0} {:>11} {:>9} {:>9} {:>9} {:>9} {:>6}",
                truncate(&format!("[{}] {}", r.kind, r.name), 58),
                r.throughput,
                r.unit,
                p50,
                p99,
                max,
                rss,
                cpu
            );
            if !r.extra.is_empty() {
                println!("      {}", Value::Object(r.extra.clone()));
            }
        }
        for (k, v) in &self.ratios {
            println!("ratio {k}: {v}");
        }
        for c in &self.checks {
            println!(
                "{} {} — measured {}",
                if c.met { "MET    " } else { "NOT MET" },
                c.target,
                c.measured
            );
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

pub fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}
