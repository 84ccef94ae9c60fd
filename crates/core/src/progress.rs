//! Progress lines for long commands (`punctual run`, `check`, `import`, `local drain`).
//!
//! On a terminal, one line rewritten in place (`\r`). Anywhere else (a CI log, a pipe, a file)
//! carriage returns pile up into one enormous line, so a line is printed per tenth of the work
//! instead — or, where the total is unknown, at most one per interval — each on its own line.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Where progress goes (stderr) and how often.
#[derive(Debug)]
pub struct Progress {
    total: u64,
    tty: bool,
    /// The last tenth printed (non-terminal, known total).
    tenth: Option<u64>,
    /// The interval between lines when the total is unknown (non-terminal).
    every: Duration,
    last: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// Progress over `total` units of work.
    pub fn new(total: u64) -> Self {
        Self::on(total, std::io::stderr().is_terminal())
    }

    /// Progress whose total is unknown: on a terminal every update, elsewhere one line per
    /// `every`.
    pub fn timed(every: Duration) -> Self {
        Self { every, ..Self::on(0, std::io::stderr().is_terminal()) }
    }

    /// As [`Progress::new`], with the terminal test given (tests).
    pub fn on(total: u64, tty: bool) -> Self {
        Self { total, tty, tenth: None, every: Duration::from_secs(10), last: None, drawn: false }
    }

    /// Whether `update(done, …)` would print, and records that it did: on a terminal always;
    /// elsewhere when `done` enters a new tenth of the total (the first update and the last
    /// included), or, without a total, when `every` has passed since the last line.
    pub fn due(&mut self, done: u64) -> bool {
        if self.tty {
            return true;
        }
        if let Some(tenth) = (done.min(self.total) * 10).checked_div(self.total) {
            if self.tenth.is_some_and(|t| t >= tenth) {
                return false;
            }
            self.tenth = Some(tenth);
            return true;
        }
        let now = Instant::now();
        if self.last.is_some_and(|l| now.duration_since(l) < self.every) {
            return false;
        }
        self.last = Some(now);
        true
    }

    /// Shows `line()` for `done` units done, when [`Progress::due`] says so.
    pub fn update(&mut self, done: u64, line: impl FnOnce() -> String) {
        if !self.due(done) {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r{}", line());
            self.drawn = true;
        } else {
            let _ = writeln!(err, "{}", line().trim_end());
        }
        let _ = err.flush();
    }

    /// Ends the in-place line on a terminal (elsewhere every line already ended).
    pub fn finish(&mut self) {
        if self.tty && self.drawn {
            eprintln!();
            self.drawn = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_a_terminal_a_line_per_tenth_not_per_update() {
        let mut p = Progress::on(300, false);
        let printed = (1..=300).filter(|d| p.due(*d)).count();
        assert_eq!(printed, 11, "one line per 10 % of 300 updates: 0 %, 10 %, … 100 %");
        let mut p = Progress::on(300, true);
        assert_eq!((1..=300).filter(|d| p.due(*d)).count(), 300, "a terminal redraws every update");
    }

    #[test]
    fn off_a_terminal_without_a_total_a_line_per_interval() {
        let mut p = Progress { every: Duration::from_secs(3600), ..Progress::on(0, false) };
        assert!(p.due(1));
        assert!(!p.due(2), "a second line within the interval");
    }
}
