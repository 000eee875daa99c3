//! Memory and CPU of a process from `/proc/<pid>/status` (VmRSS) and `/proc/<pid>/stat`
//! (utime + stime), a sampler that keeps the highest RSS seen over a window, and the kernel's
//! send queues of a listening port's connections (`/proc/net/tcp`).

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
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name (field 2) may contain spaces: count fields after its closing paren.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let ticks = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf only reads a configuration value; it has no memory effects.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(14) + ticks(15)) as f64 / hz
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
