//! `waitshim-analyze top`: a live view of a log while its program runs. Once a second it reads
//! the frames written since the last look (the live log source, [`Follower`]), folds them into
//! the report's model kept small for a long run ([`state`]), and redraws a table of the objects threads waited on most in that interval, with
//! the run's highwater mark and any deadlock ([`view`]). It finds a running program's log through
//! `/proc` ([`procfs`]), and works the same on a log whose program has exited.

pub mod procfs;
pub mod state;
pub mod view;

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use waitshim_format::end_reason;

use crate::report::fmt_ns;
use crate::source::live::Follower;
use crate::symbolize::Symbolizer;
use state::{LiveState, Totals};
use view::{ObjectRow, Screen, Status};

/// Exit code when the log or the process cannot be read.
pub const EXIT_FAILED: i32 = 1;
/// Bytes read per refresh at most: a large log is caught up with over several quick refreshes,
/// so the screen and the keys stay responsive meanwhile.
const READ_BUDGET: u64 = 64 << 20;
/// Rows of the table in `--once` output.
const ONCE_ROWS: usize = 30;

/// Which log to follow.
#[derive(Debug, Clone)]
pub enum Source {
    File(PathBuf),
    /// The log of a running process, found through `/proc/PID/maps`.
    Pid(i32),
}

#[derive(Debug, Clone)]
pub struct TopOptions {
    pub source: Source,
    pub interval: Duration,
    /// Print one screen as plain text and exit.
    pub once: bool,
    /// Symbolize creation sites (else module+offset).
    pub symbols: bool,
}

/// Runs `top`; returns the exit code.
pub fn run(opts: &TopOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut top = match Top::open(opts) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze top: {e}");
            return EXIT_FAILED;
        }
    };
    if opts.once {
        return top.once(opts.interval, out);
    }
    if !std::io::stdout().is_terminal() {
        let _ = writeln!(
            err,
            "waitshim-analyze top: standard output is not a terminal; use --once for a plain-text \
             table"
        );
        return EXIT_FAILED;
    }
    match top.interactive(opts.interval) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze top: terminal: {e}");
            EXIT_FAILED
        }
    }
}

/// The live view's state between refreshes.
pub struct Top {
    follower: Follower,
    state: LiveState,
    /// The process given with `--pid` (else the log's own pid is used).
    pid: Option<i32>,
    symbols: bool,
    /// The symbolizer and the module list it was built from.
    sym: Option<(u64, Symbolizer)>,
    /// Creation sites resolved so far, by object.
    sites: HashMap<u64, String>,
    /// Each object's totals at the previous refresh.
    prev: HashMap<u64, Totals>,
    /// What changed during the last interval (objects that changed only).
    delta: HashMap<u64, Totals>,
    /// When the interval measured by `delta` began; None while the log is being caught up with.
    interval_start: Option<Instant>,
    /// Whether `delta` covers one interval (else everything read so far).
    has_interval: bool,
    /// The refresh interval asked for (`--interval`).
    configured: Duration,
    /// Whether the program is known to have ended: checked in /proc until it is.
    ended: bool,
    alive: Option<bool>,
    caught_up: bool,
    /// The program has ended and everything it wrote has been read: the log is not read again.
    finished: bool,
    io_error: Option<String>,
}

impl Top {
    pub fn open(opts: &TopOptions) -> Result<Self, String> {
        let (follower, pid) = match &opts.source {
            Source::File(path) => (Follower::open(path).map_err(|e| e.to_string())?, None),
            Source::Pid(pid) => {
                let (path, file) = procfs::find_log(*pid).map_err(|e| e.to_string())?;
                let f = Follower::from_file(file, &path).map_err(|e| e.to_string())?;
                (f, Some(*pid))
            }
        };
        Ok(Top {
            follower,
            state: LiveState::new(),
            pid,
            symbols: opts.symbols,
            sym: None,
            sites: HashMap::new(),
            prev: HashMap::new(),
            delta: HashMap::new(),
            interval_start: None,
            has_interval: false,
            configured: opts.interval,
            ended: false,
            alive: None,
            caught_up: false,
            finished: false,
            io_error: None,
        })
    }

    fn pid(&self) -> Option<i32> {
        self.pid.or_else(|| self.state.run().map(|r| r.pid as i32))
    }

    /// Reads what is new in the log and measures the interval since the last refresh.
    pub fn refresh(&mut self) {
        if !self.ended {
            // A process that cannot be inspected counts as the program unless it started
            // after the run did.
            let started = self.state.run().map(|r| (r.mono_ns, &[][..]));
            self.alive = self.pid().map(|pid| {
                procfs::writes_log(pid, self.follower.file(), self.follower.path(), started)
                    != procfs::Writes::No
            });
            self.ended = self.state.run_end().is_some() || self.alive == Some(false);
        }
        if !self.finished {
            let live = !self.ended;
            let state = &mut self.state;
            match self.follower.poll(live, READ_BUDGET, |r| state.add(r)) {
                Ok(p) => {
                    self.caught_up = p.caught_up;
                    // Once the program has ended, a look that finds nothing new is the last.
                    self.finished = self.ended && p.caught_up && p.bytes == 0;
                }
                Err(e) => {
                    self.io_error = Some(format!(
                        "read error at offset {}: {e}",
                        self.follower.offset()
                    ));
                    self.caught_up = true;
                }
            }
        }
        if self.state.run_end().is_some() {
            self.ended = true;
        }

        self.delta.clear();
        for o in self.state.model.objects.values() {
            let id = o.object_id;
            let now = Totals::of(o);
            let before = self.prev.insert(id, now).unwrap_or_default();
            let d = Totals {
                wait_ns: now.wait_ns.saturating_sub(before.wait_ns),
                contended: now.contended.saturating_sub(before.contended),
                acquisitions: now.acquisitions.saturating_sub(before.acquisitions),
                max_waiters: now.max_waiters,
            };
            if d.wait_ns > 0 || d.contended > 0 || d.acquisitions > 0 {
                self.delta.insert(id, d);
            }
        }
        self.has_interval = self.interval_start.is_some();
        self.interval_start = self.caught_up.then(Instant::now);
        if !self.ended {
            let delta = &self.delta;
            for id in self.state.evict(|id| !delta.contains_key(&id)) {
                self.prev.remove(&id);
                self.sites.remove(&id);
            }
        }
    }

    fn once(&mut self, interval: Duration, out: &mut dyn Write) -> i32 {
        self.refresh();
        while !self.caught_up {
            self.refresh();
        }
        // A running program: look again after one interval, so the table shows that interval.
        if !self.ended {
            std::thread::sleep(interval);
            self.refresh();
        }
        let screen = self.screen(ONCE_ROWS);
        match out.write_all(crate::plain::guarded(&view::plain(&screen)).as_bytes()) {
            Ok(()) => 0,
            Err(_) => EXIT_FAILED,
        }
    }

    fn interactive(&mut self, interval: Duration) -> std::io::Result<()> {
        use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

        install_quit_signals();
        let mut terminal = ratatui::try_init()?;
        let result = (|| -> std::io::Result<()> {
            let mut next_refresh = Instant::now();
            let mut redraw = true;
            loop {
                if Instant::now() >= next_refresh {
                    self.refresh();
                    // Catching up with a large log: refresh again at once.
                    next_refresh = if self.caught_up {
                        Instant::now() + interval
                    } else {
                        Instant::now()
                    };
                    redraw = true;
                }
                if redraw {
                    let rows = terminal.size()?.height as usize;
                    let screen = self.screen(rows);
                    terminal.draw(|f| view::draw(f, &screen))?;
                    redraw = false;
                }
                if QUIT.load(Ordering::Relaxed) {
                    return Ok(());
                }
                // Short waits: a quit signal is noticed within a tenth of a second.
                let wait = next_refresh
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100));
                if event::poll(wait)? {
                    match event::read()? {
                        Event::Key(k) if k.kind != KeyEventKind::Release => {
                            let ctrl_c = k.modifiers.contains(KeyModifiers::CONTROL)
                                && matches!(k.code, KeyCode::Char('c') | KeyCode::Char('C'));
                            if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Char('Q')) {
                                return Ok(());
                            }
                        }
                        Event::Resize(..) => redraw = true,
                        _ => {}
                    }
                }
            }
        })();
        drop(terminal);
        let restored = ratatui::try_restore();
        result.and(restored)
    }

    /// Builds and caches the creation site of an object, as a short place in the program.
    fn site(&mut self, id: u64) -> String {
        if let Some(s) = self.sites.get(&id) {
            return s.clone();
        }
        let chain = self
            .state
            .object(id)
            .and_then(|o| o.create.as_ref())
            .map_or(0, |c| c.chain_id);
        if chain == 0 {
            return String::new();
        }
        let version = self.state.model.modules_read;
        if self.sym.as_ref().map(|(v, _)| *v) != Some(version) {
            self.sym = Some((version, Symbolizer::new(&self.state.model, self.symbols)));
        }
        let Some((_, sym)) = self.sym.as_mut() else {
            return String::new();
        };
        match sym.site(&self.state.model, chain) {
            Some(f) => {
                let s = f.site();
                // An address outside every module known so far may be in one logged later.
                if f.module.is_some() {
                    self.sites.insert(id, s.clone());
                }
                s
            }
            None => String::new(),
        }
    }

    /// `mutex#3 "queue"`.
    fn object_name(&self, id: u64) -> String {
        match self.state.object(id) {
            Some(o) => match o.name() {
                Some(n) => format!("{}#{id} {}", o.kind_name(), crate::plain::quoted(n)),
                None => format!("{}#{id}", o.kind_name()),
            },
            None => format!("object#{id}"),
        }
    }

    /// `mutex#3 "queue" (created at convoy.c:12 (main))`, or `(first used in ...)` for an
    /// object the shim never saw initialised, as the report says.
    fn object_label(&mut self, id: u64) -> String {
        let name = self.object_name(id);
        let words = match self.state.object(id) {
            Some(o) if o.first_use() => "first used in",
            _ => "created at",
        };
        match self.site(id) {
            s if s.is_empty() => name,
            s => format!("{name} ({words} {s})"),
        }
    }

    fn thread_label(&self, tid: u32) -> String {
        self.state.thread_label(tid)
    }

    fn rel(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.state.run().map_or(0, |r| r.mono_ns))
    }

    fn status(&self) -> Status {
        if let Some(e) = self.state.run_end() {
            return Status::Exited(if e.reason == end_reason::SIGNAL {
                format!("killed by {}", crate::ending::signal_name(e.exit_status))
            } else if e.reason == end_reason::CONFINED {
                "tracing stopped (the program confined itself with seccomp)".to_string()
            } else if e.exit_status < 0 {
                "exited (status not recorded)".to_string()
            } else if e.reason == end_reason::UNDERSCORE_EXIT {
                format!("exited (status {}, by _exit)", e.exit_status)
            } else {
                format!("exited (status {})", e.exit_status)
            });
        }
        match self.alive {
            _ if self.ended => Status::Exited(
                "exited (no exit record: a raw exit_group, or killed by SIGKILL)".to_string(),
            ),
            Some(true) => Status::Running,
            _ => Status::Unknown,
        }
    }

    /// How long the program has run (or ran), and whether that is only a lower bound.
    fn run_time(&self) -> Option<(u64, bool)> {
        let run = self.state.run()?;
        if let Some(e) = self.state.run_end() {
            return Some((e.ns.saturating_sub(run.mono_ns), false));
        }
        if self.ended {
            return Some((self.state.model.last_ns.saturating_sub(run.mono_ns), true));
        }
        Some((monotonic_now_ns().saturating_sub(run.mono_ns), false))
    }

    /// What the screen shows now, with at most `max_rows` objects.
    pub fn screen(&mut self, max_rows: usize) -> Screen {
        let ended = self.ended;
        let mut ids: Vec<(u64, Totals, Option<Totals>)> = self
            .state
            .model
            .objects
            .values()
            .map(|o| {
                let id = o.object_id;
                (id, Totals::of(o), self.delta.get(&id).copied())
            })
            .filter(|(_, t, d)| {
                t.wait_ns > 0 || t.contended > 0 || d.is_some_and(|d| d.contended > 0)
            })
            .collect();
        let waited = ids.len();
        let key = |t: &Totals| (t.wait_ns, t.contended);
        ids.sort_by(|a, b| {
            let interval = |x: &(u64, Totals, Option<Totals>)| {
                if ended {
                    (0, 0)
                } else {
                    x.2.as_ref().map_or((0, 0), key)
                }
            };
            interval(b)
                .cmp(&interval(a))
                .then(key(&b.1).cmp(&key(&a.1)))
                .then(a.0.cmp(&b.0))
        });
        ids.truncate(max_rows);
        let rows = ids
            .into_iter()
            .map(|(id, t, d)| {
                let d = d.unwrap_or_default();
                ObjectRow {
                    object: self.object_name(id),
                    site: self.site(id),
                    interval_wait_ns: d.wait_ns,
                    interval_contended: d.contended,
                    wait_ns: t.wait_ns,
                    contended: t.contended,
                    acquisitions: t.acquisitions,
                    max_waiters: t.max_waiters,
                }
            })
            .collect();

        let deadlocks = self.deadlock_lines();
        let (hwm, hwm_object) = self.state.hwm();
        let hwm = match hwm_object {
            Some(id) if hwm > 0 => {
                let on = self.object_label(id);
                let waiters = if hwm == 1 { "waiter" } else { "waiters" };
                format!("{hwm} {waiters} on {on}")
            }
            _ => format!("{hwm} (no thread has waited)"),
        };
        let s = &self.state;
        let run = s.run();
        let m = &s.model;
        let program = run.map_or_else(
            || "? (no run start record)".to_string(),
            |r| {
                crate::plain::escaped(&if r.cmdline.is_empty() {
                    r.exe.clone()
                } else {
                    r.cmdline.join(" ")
                })
            },
        );
        let threads = if ended {
            format!("{} seen", m.threads_seen().max(m.threads_started))
        } else {
            format!("{} alive, {} started", s.threads_alive(), m.threads_started)
        };
        let read = self.follower.summary();
        let damage = (read.damage_count > 0).then(|| {
            format!(
                "{} damaged {} skipped, {} bytes lost",
                read.damage_count,
                if read.damage_count == 1 {
                    "stretch"
                } else {
                    "stretches"
                },
                read.damage_bytes
            )
        });
        let mut notes = Vec::new();
        if let Some(e) = &self.io_error {
            notes.push(e.clone());
        }
        if let Some(at) = read.next_log {
            notes.push(crate::report::next_log_text(at));
        }
        if !self.caught_up {
            notes.push(format!(
                "reading the log: {} MiB so far",
                self.follower.offset() >> 20
            ));
        }
        if m.overflow.objects > 0 {
            notes.push(format!(
                "{} objects beyond the {} kept are not shown",
                m.overflow.objects,
                state::MAX_OBJECTS
            ));
        }
        if let Some(e) = &m.run_end {
            if e.dropped > 0 {
                notes.push(format!(
                    "the shim could not write {} records: counts are lower bounds",
                    e.dropped
                ));
            }
        }
        Screen {
            path: crate::plain::escaped(&self.follower.path().display().to_string()),
            program,
            pid: run.map(|r| r.pid).or(self.pid.map(|p| p as u32)),
            status: self.status(),
            run_time: self.run_time(),
            threads,
            hwm,
            records: read.records,
            snapshots: m.policy.snapshots_total,
            damage,
            notes,
            deadlocks,
            deadlocks_total: m.real_deadlocks().count() as u64,
            interval: if ended {
                view::Interval::Ended
            } else if self.has_interval {
                view::Interval::Last(fmt_interval(self.configured))
            } else {
                view::Interval::SinceStart
            },
            rows,
            objects_waited: waited,
            objects_total: m.objects.len(),
        }
    }

    fn deadlock_lines(&mut self) -> Vec<String> {
        let deadlocks = self.state.deadlocks();
        let mut lines = Vec::new();
        for d in &deadlocks {
            lines.push(format!(
                "at {}, found by {}: {}",
                fmt_ns(self.rel(d.ns)),
                if crate::report::every_thread_waits(d) {
                    "the shim's thread".to_string()
                } else {
                    self.thread_label(d.detected_by)
                },
                crate::report::deadlock_words(d)
            ));
            for e in &d.cycle {
                lines.push(format!(
                    "  {} waits for {}, held by {}",
                    self.thread_label(e.tid),
                    self.object_label(e.object_id),
                    self.thread_label(e.holder_tid)
                ));
            }
        }
        lines
    }
}

/// `1s`, `0.5s`, `2.5s`: an interval as the table's column headings show it.
fn fmt_interval(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `CLOCK_MONOTONIC` now: the clock the shim stamps records with.
fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Set by SIGTERM, SIGHUP or SIGINT: the interactive loop leaves and restores the terminal.
static QUIT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_quit_signal(_: libc::c_int) {
    QUIT.store(true, Ordering::Relaxed);
}

fn install_quit_signals() {
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction structure is fully initialised before use.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_quit_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}
