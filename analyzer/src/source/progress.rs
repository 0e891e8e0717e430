//! Progress on stderr while a large log is read: nothing for a read that ends within a second;
//! after that, on a terminal, one line redrawn in place (`reading LOG: [=====>    ] 412 of
//! 980 MB, 230 MB/s`) and erased when done; elsewhere (a CI log), for a log of at least
//! [`MIN_LOGGED_BYTES`], a line every [`LOGGED_EVERY`]. Never on stdout, so reports and exports
//! written there stay as they are; small logs in tests print nothing.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// A read this long is silent.
const QUIET_FOR: Duration = Duration::from_secs(1);
/// How often a terminal's line is redrawn.
const REDRAW_EVERY: Duration = Duration::from_millis(200);
/// Off a terminal, logs smaller than this are read silently whatever the time.
pub const MIN_LOGGED_BYTES: u64 = 64 << 20;
/// Off a terminal, how often a line is written.
const LOGGED_EVERY: Duration = Duration::from_secs(5);
/// Records between two looks at the clock: a look costs tens of ns, a record a few hundred.
const RECORDS_PER_LOOK: u32 = 4096;

pub struct Progress {
    name: String,
    total: u64,
    start: Instant,
    last: Option<Instant>,
    terminal: bool,
    countdown: u32,
    drawn: bool,
}

impl Progress {
    /// Progress of the read of `total` bytes of the log at `path`; `None` when nothing would
    /// ever be shown (stderr is not a terminal and the log is small).
    pub fn new(path: &Path, total: u64) -> Option<Progress> {
        let terminal = std::io::stderr().is_terminal();
        if !terminal && total < MIN_LOGGED_BYTES {
            return None;
        }
        Some(Progress {
            name: path.display().to_string(),
            total,
            start: Instant::now(),
            last: None,
            terminal,
            countdown: RECORDS_PER_LOOK,
            drawn: false,
        })
    }

    /// Called for each record: `offset` bytes of the log have been read.
    #[inline]
    pub fn at(&mut self, offset: u64) {
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = RECORDS_PER_LOOK;
            self.look(offset);
        }
    }

    #[cold]
    fn look(&mut self, offset: u64) {
        let now = Instant::now();
        let elapsed = now.duration_since(self.start);
        if elapsed < QUIET_FOR {
            return;
        }
        let every = if self.terminal {
            REDRAW_EVERY
        } else {
            LOGGED_EVERY
        };
        if self.last.is_some_and(|l| now.duration_since(l) < every) {
            return;
        }
        self.last = Some(now);
        let line = line(&self.name, offset, self.total, elapsed, self.terminal);
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            self.drawn = true;
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }
}

impl Drop for Progress {
    /// Erases the terminal's line; a logged read ends with nothing more (the report follows).
    fn drop(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

const MB: f64 = 1e6;

/// `waitshim-analyze: reading LOG: 412 of 980 MB (42%), 230 MB/s`, with a bar on a terminal.
pub fn line(name: &str, done: u64, total: u64, elapsed: Duration, bar: bool) -> String {
    let total = total.max(done).max(1);
    let share = done as f64 / total as f64;
    let rate = done as f64 / MB / elapsed.as_secs_f64().max(1e-3);
    let figures = format!(
        "{:.0} of {:.0} MB ({:.0}%), {rate:.0} MB/s",
        done as f64 / MB,
        total as f64 / MB,
        share * 100.0
    );
    if bar {
        const WIDTH: usize = 30;
        let filled = ((share * WIDTH as f64) as usize).min(WIDTH);
        format!(
            "waitshim-analyze: reading {name} [{}{}] {figures}",
            "=".repeat(filled),
            " ".repeat(WIDTH - filled)
        )
    } else {
        format!("waitshim-analyze: reading {name}: {figures}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_how_far_and_how_fast() {
        let s = Duration::from_secs(2);
        assert_eq!(
            line("big.log", 400_000_000, 1_000_000_000, s, false),
            "waitshim-analyze: reading big.log: 400 of 1000 MB (40%), 200 MB/s"
        );
        assert_eq!(
            line("big.log", 500_000_000, 1_000_000_000, s, true),
            "waitshim-analyze: reading big.log [===============               ] 500 of 1000 MB (50%), 250 MB/s"
        );
        // A file that grew past its size at the start: never past 100%.
        assert!(line("g.log", 30, 10, s, true)
            .contains("[==============================] 0 of 0 MB (100%)"));
    }
}
