//! The one loop of a tracked wait that sleeps in a real timed call: the wait is cut in slices
//! so that, between two of them, the waiting thread can look for a wait-for cycle (and let a
//! policy collect what is due), while the caller's own deadline, if it gave one, ends the wait
//! exactly when the real call would have ended it.
//!
//! Mutex and rwlock waits run through [`sliced`]; a wait that is one real call which cannot be
//! cut (a join, a robust or priority mutex, a mutex behind another interposer) confirms a
//! suspected cycle once before the call (`super::engage::confirm_before_call`); a spinlock
//! spins, and checks between slices of its spin with `super::engage::check_when_due`.
//!
//! The loop takes its clocks as a parameter ([`Clocks`]), so that its rules are tested here
//! without sleeping.

use libc::{c_int, clockid_t, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME, ETIMEDOUT};

/// The caller's deadline: an absolute time on a clock.
pub type Deadline = Option<(clockid_t, timespec)>;

/// Where a sliced wait reads the time.
pub trait Clocks {
    /// CLOCK_MONOTONIC, in ns.
    fn now_ns(&self) -> u64;
    /// The absolute time `ns` from now on `clock`.
    fn after(&self, clock: clockid_t, ns: u64) -> timespec;
}

/// The system's clocks.
pub struct SystemClocks;

impl Clocks for SystemClocks {
    fn now_ns(&self) -> u64 {
        crate::clock::now_ns()
    }
    fn after(&self, clock: clockid_t, ns: u64) -> timespec {
        crate::clock::deadline_after(clock, ns)
    }
}

fn not_after(a: &timespec, b: &timespec) -> bool {
    (a.tv_sec, a.tv_nsec) <= (b.tv_sec, b.tv_nsec)
}

/// Waits with `wait(clock, until)` (a real timed call on an absolute time) in slices of
/// `slice_ns` until it returns anything but the expiry of one of the shim's own slices; after
/// each such expiry, `between()` looks around and gives the next slice's length.
///
/// Without a caller's deadline, slices run on CLOCK_MONOTONIC when `monotonic` (the real call
/// takes a clock), counted from `start` (the wait's start on that clock, so the first slice
/// costs no clock read), else on CLOCK_REALTIME. With one, they run on the caller's clock, and
/// the last one ends at the caller's deadline: its ETIMEDOUT is the caller's answer.
pub fn sliced(
    clocks: &impl Clocks,
    deadline: Deadline,
    monotonic: bool,
    start: u64,
    mut slice_ns: u64,
    mut wait: impl FnMut(clockid_t, &timespec) -> c_int,
    mut between: impl FnMut() -> u64,
) -> c_int {
    let monotonic = monotonic && deadline.is_none();
    let mut since = start;
    loop {
        let (clock, slice_end) = if monotonic {
            (
                CLOCK_MONOTONIC,
                crate::clock::timespec_of(since.saturating_add(slice_ns)),
            )
        } else {
            let clock = deadline.map_or(CLOCK_REALTIME, |d| d.0);
            (clock, clocks.after(clock, slice_ns))
        };
        let (until, callers) = match deadline {
            Some((_, d)) if not_after(&d, &slice_end) => (d, true),
            _ => (slice_end, false),
        };
        let r = wait(clock, &until);
        if r != ETIMEDOUT || callers {
            return r;
        }
        slice_ns = between();
        if monotonic {
            since = clocks.now_ns();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    /// A clock the test moves: every wait that times out advances it to the wait's end.
    struct FakeClocks {
        now: Cell<u64>,
    }

    impl Clocks for FakeClocks {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
        fn after(&self, _: clockid_t, ns: u64) -> timespec {
            crate::clock::timespec_of(self.now.get() + ns)
        }
    }

    fn ns(ts: &timespec) -> u64 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    const MS: u64 = 1_000_000;

    /// Runs `sliced` where the real call answers from `answers` in turn (ETIMEDOUT moves the
    /// clock to the time it was given); returns the result, the (clock, until) of each call
    /// and how many times `between` ran.
    fn run(
        deadline: Deadline,
        monotonic: bool,
        answers: &[c_int],
        next_slice: u64,
    ) -> (c_int, Vec<(clockid_t, u64)>, u32) {
        let clocks = FakeClocks {
            now: Cell::new(1_000 * MS),
        };
        let calls = RefCell::new(Vec::new());
        let checks = Cell::new(0);
        let mut answers = answers.iter();
        let r = sliced(
            &clocks,
            deadline,
            monotonic,
            clocks.now_ns(),
            100 * MS,
            |clock, until| {
                calls.borrow_mut().push((clock, ns(until)));
                let r = *answers.next().expect("more calls than answers");
                if r == ETIMEDOUT {
                    clocks.now.set(ns(until));
                }
                r
            },
            || {
                checks.set(checks.get() + 1);
                next_slice
            },
        );
        (r, calls.into_inner(), checks.get())
    }

    #[test]
    fn a_wait_without_deadline_sleeps_in_slices_and_looks_around_between_them() {
        let (r, calls, checks) = run(None, true, &[ETIMEDOUT, ETIMEDOUT, 0], 100 * MS);
        assert_eq!(r, 0);
        assert_eq!(checks, 2);
        // Monotonic slices, the first one from the wait's start, each 100 ms.
        assert_eq!(
            calls,
            vec![
                (CLOCK_MONOTONIC, 1_100 * MS),
                (CLOCK_MONOTONIC, 1_200 * MS),
                (CLOCK_MONOTONIC, 1_300 * MS)
            ]
        );
    }

    #[test]
    fn without_a_clocked_call_the_slices_run_on_the_realtime_clock() {
        let (r, calls, _) = run(None, false, &[ETIMEDOUT, 0], 100 * MS);
        assert_eq!(r, 0);
        assert!(calls.iter().all(|c| c.0 == CLOCK_REALTIME), "{calls:?}");
    }

    #[test]
    fn a_callers_deadline_before_the_slice_ends_is_the_callers_answer_unchecked() {
        let d = crate::clock::timespec_of(1_030 * MS);
        let (r, calls, checks) = run(Some((CLOCK_REALTIME, d)), true, &[ETIMEDOUT], 100 * MS);
        assert_eq!(r, ETIMEDOUT);
        assert_eq!(checks, 0);
        assert_eq!(calls, vec![(CLOCK_REALTIME, 1_030 * MS)]);
    }

    #[test]
    fn a_far_deadline_is_reached_through_slices_on_the_callers_clock() {
        let d = crate::clock::timespec_of(1_250 * MS);
        let (r, calls, checks) = run(
            Some((CLOCK_MONOTONIC, d)),
            true,
            &[ETIMEDOUT, ETIMEDOUT, ETIMEDOUT],
            100 * MS,
        );
        assert_eq!(r, ETIMEDOUT);
        assert_eq!(checks, 2);
        assert_eq!(
            calls,
            vec![
                (CLOCK_MONOTONIC, 1_100 * MS),
                (CLOCK_MONOTONIC, 1_200 * MS),
                (CLOCK_MONOTONIC, 1_250 * MS)
            ]
        );
    }

    #[test]
    fn an_error_or_an_acquisition_ends_the_wait_at_once() {
        assert_eq!(run(None, true, &[libc::EINVAL], 100 * MS).0, libc::EINVAL);
        assert_eq!(
            run(None, true, &[libc::EOWNERDEAD], 100 * MS).0,
            libc::EOWNERDEAD
        );
        let d = crate::clock::timespec_of(5_000 * MS);
        let (r, calls, checks) = run(Some((CLOCK_REALTIME, d)), true, &[0], 100 * MS);
        assert_eq!((r, calls.len(), checks), (0, 1, 0));
    }

    #[test]
    fn a_check_that_suspects_a_cycle_shortens_the_next_slice() {
        let (_, calls, _) = run(None, true, &[ETIMEDOUT, ETIMEDOUT, 0], 10 * MS);
        assert_eq!(calls[1].1 - calls[0].1, 10 * MS);
        assert_eq!(calls[2].1 - calls[1].1, 10 * MS);
    }
}
