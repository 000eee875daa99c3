//! Progress of a long operation: an `indicatif` bar on stderr when stderr is a terminal, else a
//! log line on stdout at every tenth of the way (and at the end), which a script or a test can
//! read.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    label: String,
    total: u64,
    /// Hidden (draws nothing) when stderr is not a terminal.
    bar: ProgressBar,
    last_tenth: u64,
}

impl Progress {
    pub fn new(label: impl Into<String>, total: u64) -> Self {
        Self::with_target(label, total, ProgressDrawTarget::stderr())
    }

    fn with_target(label: impl Into<String>, total: u64, target: ProgressDrawTarget) -> Self {
        let label = label.into();
        let style = ProgressStyle::with_template("{msg} [{bar:20}] {percent:>3}% {pos}/{len}")
            .expect("the template is valid")
            .progress_chars("#>.");
        let bar = ProgressBar::with_draw_target(Some(total), target)
            .with_style(style)
            .with_message(label.clone());
        Progress {
            label,
            total,
            bar,
            last_tenth: 0,
        }
    }

    /// Reports that `done` of the total units are done.
    pub fn update(&mut self, done: u64) {
        let done = done.min(self.total);
        if !self.bar.is_hidden() {
            self.bar.set_position(done);
            if done == self.total {
                self.bar.finish();
            }
            return;
        }
        let pct = (done * 100).checked_div(self.total).unwrap_or(100);
        let tenth = pct / 10;
        if tenth > self.last_tenth || done == self.total {
            self.last_tenth = tenth;
            println!("{}", self.line(done, pct));
        }
    }

    fn line(&self, done: u64, pct: u64) -> String {
        format!("{}: {done}/{} ({pct}%)", self.label, self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_on_a_terminal_shows_the_position() {
        let term = indicatif::InMemoryTerm::new(4, 80);
        let mut p = Progress::with_target(
            "rebuild history",
            200,
            ProgressDrawTarget::term_like(Box::new(term.clone())),
        );
        p.update(50);
        p.update(500);
        assert!(p.bar.is_finished());
        let screen = term.contents();
        assert!(
            screen.contains("rebuild history [####################] 100% 200/200"),
            "{screen}"
        );
    }

    #[test]
    fn log_lines_name_the_label_and_the_share() {
        let p = Progress::with_target("import", 8, ProgressDrawTarget::hidden());
        assert_eq!(p.line(4, 50), "import: 4/8 (50%)");
    }
}
