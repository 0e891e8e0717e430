//! Progress points (`WAITSHIM_PROGRESS`, `WAITSHIM_BEGIN`, `WAITSHIM_END`): what the program
//! counts as work done, so that a server that never ends is judged by its throughput and its
//! transactions' latency instead of its run time.
//!
//! A point is found by the address of its name (a string literal: one compare per point until
//! it matches), then by the name's text; at most [`MAX_POINTS`] points. A visit costs an atomic
//! add and a clock read; a begin or an end also takes part in a writers' count that lets a
//! flush read a point's counts and time sums consistently (see `Point::read`).
//!
//! Latency without pairing: the sum of all begin times and the sum of all end times give the
//! time every transaction spent between its begin and its end, whichever end belongs to which
//! begin (ends may come on another thread, in another order): `ends_sum - begins_sum` for the
//! finished ones, plus `now` for each one still open. The sums wrap; the difference does not.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use waitshim_format::{ProgressCount, ProgressCounts, ProgressPoint};

use crate::log::Log;

pub const MAX_POINTS: usize = 64;
/// Name addresses remembered (a name reached through several addresses takes several).
const MAX_KEYS: usize = 256;

#[derive(Default)]
struct Point {
    visits: AtomicU64,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    first_begin_ns: AtomicU64,
    begins: AtomicU64,
    ends: AtomicU64,
    begins_sum: AtomicU64,
    ends_sum: AtomicU64,
    /// Begins and ends started, and finished: equal when none is half done.
    started: AtomicU64,
    finished: AtomicU64,
    /// `visits + begins + ends` when last written.
    written: AtomicU64,
}

/// What a call at a point does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Visit,
    Begin,
    End,
}

/// One point's counts, read consistently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Counts {
    visits: u64,
    first_ns: u64,
    last_ns: u64,
    first_begin_ns: u64,
    begins: u64,
    ends: u64,
    begins_sum: u64,
    ends_sum: u64,
}

/// Sets `cell` to `now` if it is still 0.
fn first(cell: &AtomicU64, now: u64) {
    if cell.load(Ordering::Relaxed) == 0 {
        let _ = cell.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl Point {
    /// A visit at `now`.
    fn seen(&self, now: u64) {
        first(&self.first_ns, now);
        self.last_ns.fetch_max(now, Ordering::Relaxed);
    }

    fn step(&self, step: Step, now: u64) {
        match step {
            Step::Visit => {
                self.visits.fetch_add(1, Ordering::Relaxed);
            }
            Step::Begin | Step::End => {
                self.started.fetch_add(1, Ordering::SeqCst);
                let (count, sum) = if step == Step::Begin {
                    first(&self.first_begin_ns, now);
                    (&self.begins, &self.begins_sum)
                } else {
                    self.visits.fetch_add(1, Ordering::Relaxed);
                    (&self.ends, &self.ends_sum)
                };
                count.fetch_add(1, Ordering::SeqCst);
                sum.fetch_add(now, Ordering::SeqCst);
                self.finished.fetch_add(1, Ordering::SeqCst);
            }
        }
        if step != Step::Begin {
            self.seen(now);
        }
    }

    /// The counts, with the begin and end figures from one moment when no begin or end was
    /// half done; None if that moment did not come within a few tries (the next flush reads
    /// again).
    fn read(&self) -> Option<Counts> {
        for _ in 0..1000 {
            let done = self.finished.load(Ordering::SeqCst);
            let started = self.started.load(Ordering::SeqCst);
            if done != started {
                std::hint::spin_loop();
                continue;
            }
            let begins = self.begins.load(Ordering::SeqCst);
            let ends = self.ends.load(Ordering::SeqCst);
            let begins_sum = self.begins_sum.load(Ordering::SeqCst);
            let ends_sum = self.ends_sum.load(Ordering::SeqCst);
            if self.started.load(Ordering::SeqCst) != started {
                std::hint::spin_loop();
                continue;
            }
            return Some(Counts {
                visits: self.visits.load(Ordering::Relaxed),
                first_ns: self.first_ns.load(Ordering::Relaxed),
                last_ns: self.last_ns.load(Ordering::Relaxed),
                first_begin_ns: self.first_begin_ns.load(Ordering::Relaxed),
                begins,
                ends,
                begins_sum,
                ends_sum,
            });
        }
        None
    }
}

/// The counters of every point, and the addresses their names were reached by: atomics only,
/// all zero at the start (made on the heap directly: about 9 KiB, too much for the stack of a
/// thread that forks).
struct Table {
    points: [Point; MAX_POINTS],
    /// Name addresses seen, each with its point's index + 1 (0: not filled yet); `keys` of them
    /// are filled.
    key_addr: [AtomicUsize; MAX_KEYS],
    key_point: [AtomicUsize; MAX_KEYS],
    keys: AtomicUsize,
}

/// The process's progress points.
pub struct Points {
    t: Box<Table>,
    /// Registered names (index: point), and whether the table was full once (said once).
    names: Mutex<(Vec<String>, bool)>,
}

impl Default for Points {
    fn default() -> Points {
        // SAFETY: `Table` is atomics only, for which all-zero bytes are the value 0.
        let t = unsafe { Box::<Table>::new_zeroed().assume_init() };
        Points {
            t,
            names: Mutex::new((Vec::new(), false)),
        }
    }
}

impl Points {
    /// The point named by `name` (NUL-terminated), registered the first time (a record in
    /// `log`) unless `known_only` (in a signal handler, which must not lock); None when the
    /// table is full.
    fn find(
        &self,
        name: *const libc::c_char,
        log: &Log,
        now: u64,
        known_only: bool,
    ) -> Option<&Point> {
        let addr = name as usize;
        let n = self.t.keys.load(Ordering::Acquire).min(MAX_KEYS);
        for i in 0..n {
            if self.t.key_addr[i].load(Ordering::Relaxed) == addr {
                let p = self.t.key_point[i].load(Ordering::Acquire);
                if p > 0 {
                    return Some(&self.t.points[p - 1]);
                }
            }
        }
        if known_only {
            return None;
        }
        self.register(name, log, now)
    }

    #[cold]
    fn register(&self, name: *const libc::c_char, log: &Log, now: u64) -> Option<&Point> {
        // SAFETY: the C API takes NUL-terminated names; null was refused by the caller.
        let text = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let mut g = self.names.lock().unwrap_or_else(|e| e.into_inner());
        let index = match g.0.iter().position(|n| *n == text) {
            Some(i) => i,
            None if g.0.len() < MAX_POINTS => {
                g.0.push(text.clone().into_owned());
                let id = g.0.len() as u32;
                log.write(
                    &ProgressPoint {
                        id,
                        ns: now,
                        name: text.into_owned(),
                    }
                    .into(),
                );
                g.0.len() - 1
            }
            None => {
                if !std::mem::replace(&mut g.1, true) {
                    crate::diag::line(&format!(
                        "more than {MAX_POINTS} progress points: {text:?} and later ones are \
                         not counted"
                    ));
                }
                return None;
            }
        };
        // Remember this address (other threads scan only filled keys: the point is stored
        // before the count moves past it).
        let k = self.t.keys.load(Ordering::Relaxed);
        if k < MAX_KEYS {
            self.t.key_addr[k].store(name as usize, Ordering::Relaxed);
            self.t.key_point[k].store(index + 1, Ordering::Release);
            self.t.keys.store(k + 1, Ordering::Release);
        }
        Some(&self.t.points[index])
    }

    /// A call at the point named `name`; in a signal handler (`known_only`), only at a point
    /// already reached through the same name address.
    pub fn step(
        &self,
        name: *const libc::c_char,
        step: Step,
        log: &Log,
        now: u64,
        known_only: bool,
    ) {
        if let Some(p) = self.find(name, log, now, known_only) {
            p.step(step, now);
        }
    }

    /// The totals of the points that changed since they were last written (all of them with
    /// `all`), as one record; None when there is nothing to write.
    pub fn counts(&self, now: u64, all: bool) -> Option<ProgressCounts> {
        let registered = self.names.lock().unwrap_or_else(|e| e.into_inner()).0.len();
        let mut points = Vec::new();
        for (i, p) in self.t.points[..registered].iter().enumerate() {
            let Some(c) = p.read() else { continue };
            let total = c.visits + c.begins + c.ends;
            if !all && p.written.load(Ordering::Relaxed) == total {
                continue;
            }
            p.written.store(total, Ordering::Relaxed);
            points.push(ProgressCount {
                id: i as u32 + 1,
                visits: c.visits,
                first_ns: c.first_ns,
                last_ns: c.last_ns,
                first_begin_ns: c.first_begin_ns,
                begins: c.begins,
                ends: c.ends,
                begins_sum: c.begins_sum,
                ends_sum: c.ends_sum,
            });
        }
        (!points.is_empty()).then_some(ProgressCounts { ns: now, points })
    }

    /// Whether any point was reached.
    pub fn any(&self) -> bool {
        self.t.keys.load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_between_begins_and_ends_adds_up_whichever_end_closes_which_begin() {
        let p = Point::default();
        p.step(Step::Begin, 100);
        p.step(Step::Begin, 150);
        p.step(Step::End, 400); // closes either begin
        p.step(Step::End, 200);
        let c = p.read().unwrap();
        assert_eq!((c.begins, c.ends, c.visits), (2, 2, 2));
        // (400 - 100) + (200 - 150) = (400 - 150) + (200 - 100) = 350.
        assert_eq!(c.ends_sum.wrapping_sub(c.begins_sum), 350);
        assert_eq!((c.first_begin_ns, c.first_ns, c.last_ns), (100, 400, 400));
    }

    #[test]
    fn wrapped_sums_still_give_the_difference() {
        let p = Point::default();
        let t = u64::MAX / 2;
        for i in 0..4 {
            p.step(Step::Begin, t + i * 10);
            p.step(Step::End, t + i * 10 + 7);
        }
        let c = p.read().unwrap();
        assert!(c.begins_sum < t, "the sums wrapped");
        assert_eq!(c.ends_sum.wrapping_sub(c.begins_sum), 28);
    }

    #[test]
    fn a_half_done_begin_is_not_read() {
        let p = Point::default();
        p.started.fetch_add(1, Ordering::SeqCst);
        p.begins.fetch_add(1, Ordering::SeqCst);
        assert_eq!(p.read(), None);
        p.begins_sum.fetch_add(5, Ordering::SeqCst);
        p.finished.fetch_add(1, Ordering::SeqCst);
        assert_eq!(p.read().map(|c| (c.begins, c.begins_sum)), Some((1, 5)));
    }
}
