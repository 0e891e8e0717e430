//! Progress on stderr while a large log is read, by the first read (`reading LOG`) and by every
//! later pass over it (an export reads a log again for the per-wait events and the thread
//! states: `writing perfetto trace from LOG (the per-wait events)`). Nothing is shown during the
//! command's first `QUIET_FOR` (counted from the first pass's start, so a command of three
//! short passes that ends within a second shows nothing, and one whose third pass starts after a
//! second shows that pass); after that, on a terminal, one line redrawn in place (`reading LOG
//! [=====>    ] 412 of 980 MB (42%), 230 MB/s`) and erased when the pass ends; elsewhere (a CI
//! log), a line as soon as the second has passed and then one every `LOGGED_EVERY`, whatever
//! the log's size. Never on stdout, so reports and exports written there stay as they are.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The command's first second is silent.
const QUIET_FOR: Duration = Duration::from_secs(1);
/// How often a terminal's line is redrawn.
const REDRAW_EVERY: Duration = Duration::from_millis(200);
/// Off a terminal, how often a line is written after the first.
const LOGGED_EVERY: Duration = Duration::from_secs(5);
/// Records (or reads) between two looks at the clock: a look costs tens of ns, a record a few
/// hundred.
const RECORDS_PER_LOOK: u32 = 4096;

/// When the first pass of this command started: the quiet second counts from there.
fn command_start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// What the later passes over a log are for (`writing perfetto trace`), set by the command.
static TASK: Mutex<Option<String>> = Mutex::new(None);

/// Names what the passes over a log that follow its first read do (`writing perfetto trace`),
/// for their progress lines; `None`: they say `reading LOG again`.
pub fn set_task(task: Option<&str>) {
    command_start();
    let mut t = TASK.lock().unwrap_or_else(|e| e.into_inner());
    *t = task.map(str::to_string);
}

/// The label of a later pass over the log at `path`, reading it for `what` (`the per-wait
/// events`).
pub fn again_label(path: &Path, what: &str) -> String {
    let task = TASK.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match task {
        Some(task) => format!("{task} from {} ({what})", path.display()),
        None => format!("reading {} again ({what})", path.display()),
    }
}

pub struct Progress {
    label: String,
    total: u64,
    start: Instant,
    last: Option<Instant>,
    terminal: bool,
    countdown: u32,
    drawn: bool,
}

impl Progress {
    /// Progress of the first read of the `total` bytes of the log at `path`.
    pub fn new(path: &Path, total: u64) -> Progress {
        Self::labelled(format!("reading {}", path.display()), total)
    }

    /// Progress of a pass over `total` bytes, said as `label` (`reading big.log`).
    pub fn labelled(label: String, total: u64) -> Progress {
        command_start();
        Progress {
            label,
            total,
            start: Instant::now(),
            last: None,
            terminal: std::io::stderr().is_terminal(),
            countdown: RECORDS_PER_LOOK,
            drawn: false,
        }
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
        if now.duration_since(command_start()) < QUIET_FOR {
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
        let elapsed = now.duration_since(self.start);
        let line = line(&self.label, offset, self.total, elapsed, self.terminal);
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
    /// Erases the terminal's line; a logged pass ends with nothing more (the report follows).
    fn drop(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

/// A byte stream whose reading shows its progress: what a later pass over a log reads through.
pub struct Counted<R> {
    inner: R,
    done: u64,
    next_look: u64,
    progress: Progress,
}

/// Bytes read between two looks at the clock by [`Counted`]: a later pass spends microseconds
/// on each record it writes out, so this is a few ms at most.
const BYTES_PER_LOOK: u64 = 64 << 10;

impl<R: Read> Counted<R> {
    pub fn new(inner: R, progress: Progress) -> Self {
        Counted {
            inner,
            done: 0,
            next_look: BYTES_PER_LOOK,
            progress,
        }
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        // Reads come in chunks of any size: a look at the clock every [`BYTES_PER_LOOK`].
        if self.done >= self.next_look {
            self.next_look = self.done + BYTES_PER_LOOK;
            self.progress.look(self.done);
        }
        Ok(n)
    }
}

const MB: f64 = 1e6;

/// `waitshim-analyze: reading LOG: 412 of 980 MB (42%), 230 MB/s`, with a bar on a terminal.
pub fn line(label: &str, done: u64, total: u64, elapsed: Duration, bar: bool) -> String {
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
            "waitshim-analyze: {label} [{}{}] {figures}",
            "=".repeat(filled),
            " ".repeat(WIDTH - filled)
        )
    } else {
        format!("waitshim-analyze: {label}: {figures}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_how_far_and_how_fast() {
        let s = Duration::from_secs(2);
        assert_eq!(
            line("reading big.log", 400_000_000, 1_000_000_000, s, false),
            "waitshim-analyze: reading big.log: 400 of 1000 MB (40%), 200 MB/s"
        );
        assert_eq!(
            line("reading big.log", 500_000_000, 1_000_000_000, s, true),
            "waitshim-analyze: reading big.log [===============               ] 500 of 1000 MB (50%), 250 MB/s"
        );
        // A file that grew past its size at the start: never past 100%.
        assert!(line("reading g.log", 30, 10, s, true)
            .contains("[==============================] 0 of 0 MB (100%)"));
    }
}
