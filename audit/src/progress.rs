//! Progress of a long operation: a redrawn bar on stderr when stderr is a terminal, else a log
//! line on stdout at every tenth of the way (and at the end).

use std::io::{IsTerminal, Write};

pub struct Progress {
    label: String,
    total: u64,
    terminal: bool,
    last_tenth: u64,
}

impl Progress {
    pub fn new(label: impl Into<String>, total: u64) -> Self {
        Progress {
            label: label.into(),
            total,
            terminal: std::io::stderr().is_terminal(),
            last_tenth: 0,
        }
    }

    /// Reports that `done` of the total units are done.
    pub fn update(&mut self, done: u64) {
        let done = done.min(self.total);
        let pct = (done * 100).checked_div(self.total).unwrap_or(100);
        if self.terminal {
            let filled = (pct / 5) as usize;
            eprint!(
                "\r{} [{}{}] {pct:3}% {done}/{}",
                self.label,
                "#".repeat(filled),
                ".".repeat(20 - filled),
                self.total
            );
            if done == self.total {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        } else {
            let tenth = pct / 10;
            if tenth > self.last_tenth || done == self.total {
                self.last_tenth = tenth;
                println!("{}: {done}/{} ({pct}%)", self.label, self.total);
            }
        }
    }
}
