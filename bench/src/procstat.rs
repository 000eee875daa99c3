//! Memory and CPU of a process from `/proc/<pid>/status` (VmRSS) and `/proc/<pid>/stat`
//! (utime + stime), the same summed over every process of a name (Postgres's) or over a process
//! and its children (one Postgres node's), a sampler that keeps the highest RSS seen over a
//! window, and the kernel's send queues of a listening port's connections (`/proc/net/tcp`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::report::Usage;

/// Resident set size in KiB (0 when the process is gone).
pub fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Bytes the process caused to be written to storage (`write_bytes` of `/proc/<pid>/io`).
pub fn write_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("write_bytes:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Bytes queued in the kernel for sending (unsent and unacknowledged: `tx_queue` of
/// `/proc/net/tcp` and `tcp6`) on every connection whose local port is `port`: memory a server's
/// slow readers cost that its RSS does not show.
pub fn tcp_send_queue_bytes(port: u16) -> u64 {
    let port = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let mut cols = line.split_whitespace();
                    let local = cols.nth(1)?;
                    let queues = cols.nth(2)?;
                    if !local.ends_with(&port) {
                        return None;
                    }
                    let tx = queues.split(':').next()?;
                    u64::from_str_radix(tx, 16).ok()
                })
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Jiffies of the whole machine: (busy, total) from the `cpu` line of `/proc/stat`.
pub fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// CPU time (user + system) in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    stat(pid).map_or(0.0, |s| s.cpu)
}

/// What the CPU figures need of `/proc/<pid>/stat`.
struct Stat {
    /// The command name (`comm`, field 2).
    comm: String,
    /// utime + stime, seconds.
    cpu: f64,
    /// cutime + cstime: of its children that ended and were waited for, seconds.
    children_cpu: f64,
    /// Its parent (field 4).
    ppid: u32,
}

fn stat(pid: u32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: count fields after its closing paren.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let f: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // f starts at field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17.
    let ticks = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf only reads a configuration value; it has no memory effects.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(Stat {
        comm,
        cpu: (ticks(14) + ticks(15)) as f64 / hz,
        children_cpu: (ticks(16) + ticks(17)) as f64 / hz,
        ppid: ticks(4) as u32,
    })
}

/// CPU seconds of `pid` and its children: its own, the living children's, and the ended
/// children's (in its children's time once it waited for them). Two readings' difference is
/// what the process and its children spent between them, children that came and went
/// included: a Postgres node's postmaster and its backends.
pub fn tree_cpu_seconds(pid: u32) -> f64 {
    let Some(parent) = stat(pid) else {
        return 0.0;
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let children: f64 = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .filter(|s| s.ppid == pid)
        .map(|s| s.cpu)
        .sum();
    parent.cpu + parent.children_cpu + children
}

/// Every process whose command name is `comm`: pid → (its CPU seconds, its ended children's,
/// its command line with NULs as blanks).
fn processes_named(comm: &str) -> HashMap<u32, (f64, f64, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let s = stat(pid).filter(|s| s.comm == comm)?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            Some((pid, (s.cpu, s.children_cpu, cmdline.trim().to_string())))
        })
        .collect()
}

/// The CPU of every Postgres process over a window: the postmaster, its background processes
/// (checkpointer, background writer, WAL writer, autovacuum, …) and every backend, of every
/// database of the cluster. A backend that ends within the window is counted too: once the
/// postmaster has waited for it, its CPU is in the postmaster's children's time, which the sum
/// takes (so each process counts from the window's start, or its own start, to its end).
pub struct ProcessGroupWindow {
    comm: String,
    /// The database measured: backends of other databases are reported apart.
    database: String,
    start: HashMap<u32, (f64, f64, String)>,
}

/// What [`ProcessGroupWindow`] measured.
#[derive(Debug, Clone, Default)]
pub struct GroupUsage {
    /// CPU seconds of every process of the group over the window.
    pub cpu_seconds: f64,
    /// Of which backends of other databases that were alive at the window's end (other tests
    /// sharing the cluster, and the bench's own sampler on its admin database).
    pub other_databases_cpu_seconds: f64,
    /// Processes seen at the end.
    pub processes: usize,
}

impl ProcessGroupWindow {
    /// The Postgres processes (`comm` is `postgres`); `database` is the one the load uses.
    pub fn postgres(database: &str) -> ProcessGroupWindow {
        ProcessGroupWindow {
            comm: "postgres".into(),
            database: database.into(),
            start: processes_named("postgres"),
        }
    }

    pub fn finish(self) -> GroupUsage {
        let end = processes_named(&self.comm);
        let total = |m: &HashMap<u32, (f64, f64, String)>| -> f64 {
            m.values().map(|(own, children, _)| own + children).sum()
        };
        let other: f64 = end
            .iter()
            .filter(|(_, (_, _, cmd))| backend_database(cmd).is_some_and(|d| d != self.database))
            .map(|(pid, (own, _, _))| own - self.start.get(pid).map_or(0.0, |s| s.0))
            .sum();
        GroupUsage {
            cpu_seconds: crate::report::round((total(&end) - total(&self.start)).max(0.0), 2),
            other_databases_cpu_seconds: crate::report::round(other.max(0.0), 2),
            processes: end.len(),
        }
    }
}

/// The database of a Postgres backend from its process title (`postgres: <cluster>: <user>
/// <database> <host> <state>`); `None` for the postmaster and background processes.
fn backend_database(cmdline: &str) -> Option<&str> {
    let rest = cmdline.strip_prefix("postgres: ")?;
    // The cluster's name (Debian's `15/main: `) comes before the user, when there is one.
    let rest = match rest.split_once(": ") {
        Some((_, r)) => r,
        None => rest,
    };
    let w: Vec<&str> = rest.split_whitespace().collect();
    let host = w.get(2)?;
    (host.contains('(') || host.starts_with('[')).then(|| w[1])
}

/// Measures a window: RSS at start, highest RSS (sampled every 50 ms), RSS at end, CPU used.
pub struct Window {
    pid: u32,
    process: String,
    start: Instant,
    rss_start: u64,
    cpu_start: f64,
    written_start: u64,
    machine_start: (u64, u64),
    max: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Window {
    pub fn start(pid: u32, process: &str) -> Window {
        let rss_start = rss_kb(pid);
        let max = Arc::new(AtomicU64::new(rss_start));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (max, stop) = (max.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    max.fetch_max(rss_kb(pid), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        Window {
            pid,
            process: process.into(),
            start: Instant::now(),
            rss_start,
            cpu_start: cpu_seconds(pid),
            written_start: write_bytes(pid),
            machine_start: machine_jiffies(),
            max,
            stop,
            task: Some(task),
        }
    }

    /// For this process (store scenarios).
    pub fn this_process() -> Window {
        Window::start(std::process::id(), "bench")
    }

    pub fn max_so_far(&self) -> u64 {
        self.max.load(Ordering::Relaxed).max(rss_kb(self.pid))
    }

    pub async fn finish(mut self) -> Usage {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let wall = self.start.elapsed().as_secs_f64();
        let rss_end = rss_kb(self.pid);
        let cpu = cpu_seconds(self.pid) - self.cpu_start;
        let (busy, total) = machine_jiffies();
        let machine = 100.0 * (busy - self.machine_start.0) as f64
            / (total - self.machine_start.1).max(1) as f64;
        Usage {
            process: self.process.clone(),
            rss_start_kb: self.rss_start,
            rss_max_kb: self.max.load(Ordering::Relaxed).max(rss_end),
            rss_end_kb: rss_end,
            cpu_seconds: crate::report::round(cpu, 2),
            cpu_percent: crate::report::round(100.0 * cpu / wall.max(1e-9), 1),
            machine_busy_percent: crate::report::round(machine, 1),
            disk_written_mb: crate::report::round(
                write_bytes(self.pid).saturating_sub(self.written_start) as f64 / 1e6,
                1,
            ),
        }
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to at least `want` (up to the hard limit).
/// Child processes (the server) inherit it. Returns the soft limit in force afterwards.
pub fn raise_nofile(want: u64) -> u64 {
    let Ok((soft, hard)) = rlimit::Resource::NOFILE.get() else {
        return 0;
    };
    if soft >= want {
        return soft;
    }
    let target = want.min(hard);
    match rlimit::Resource::NOFILE.set(target, hard) {
        Ok(()) => target,
        Err(_) => soft,
    }
}
