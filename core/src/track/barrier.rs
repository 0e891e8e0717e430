//! Barriers (`pthread_barrier_*`): what an arrival means for the tracker. The wrapper in
//! `interpose/barrier.rs` calls [`wait`] with the real function.
//!
//! Each arrival but the last of a round is a wait on the barrier until the round is complete
//! (ended as released), and the last arriver is the one the others waited for: it ends an open
//! episode as its holder. Which arrival is the last is glibc's to decide, by its own arrival
//! counter, and it tells: the thread whose arrival completed the round, and only that one, gets
//! `PTHREAD_BARRIER_SERIAL_THREAD`. The shim knows it only once the call returns, so:
//!
//! - Before the call, the shim predicts (`predicted_last`). Arrivals are counted as the
//!   barrier's acquisitions, and arrival `i` (from 1, in the shim's order) is taken for a
//!   round's last when `i` is a multiple of the barrier's count. The others begin a tracked
//!   wait; the predicted last begins none, so the waiter count, `max_waiters` and the highwater
//!   mark do not count the thread that completes the round (a barrier of 4 has at most 3
//!   waiters).
//! - After the call, glibc's answer decides (`settle`). The serial thread counts the round and
//!   ends the open episode as its holder; had it begun a tracked wait (two threads arriving
//!   within the same instant, counted in one order by the shim and in the other by glibc), that
//!   wait is cancelled first: it counts as no wait and leaves the episode's waiters. A thread
//!   that returns 0 without a tracked wait (the other side of such a race) did wait, unseen: its
//!   wait, timed around the call, is counted afterwards as a contended wait ended released (it
//!   takes no part in waiter counts or the highwater mark). Either way, each round counts one
//!   contended wait per arrival but one.
//!
//! The arrival taken for a round's last is named, before its call, as the waker of the waits
//! the round ends; when glibc's answer shows the prediction wrong, the serial thread names
//! itself on return, for the waits that have not ended by then.
//!
//! The episode therefore ends just after the last arriver returns from glibc (which has let
//! the others go by then), not as it arrives. A round's waiter that returns and arrives again
//! before that (a barrier reused at once) can join the ending episode. In a round the shim
//! predicted wrongly, the record names the right holder but not the thread that waited unseen
//! (it lists no waiter for a barrier of 2), and the record's opening still names the cancelled
//! wait, of the holder, as the one that opened it.

use std::sync::atomic::Ordering;

use libc::{c_int, PTHREAD_BARRIER_SERIAL_THREAD};
use waitshim_format::{counter, ObjectKind};

use super::engage::{self, Outcome, Side};
use super::threads::{current, InShim};
use super::{tracker, CallSite};
use crate::clock::now_ns;
use crate::layout::barrier as glibc_barrier;

const KIND: ObjectKind = ObjectKind::Barrier;

/// Whether arrival number `arrival` (from 1, in the shim's order) at a barrier of `count`
/// threads per round is taken for its round's last: the one that waits for nobody.
fn predicted_last(arrival: u64, count: u64) -> bool {
    arrival.is_multiple_of(count)
}

/// What an arrival amounts to once glibc has answered.
#[derive(Debug, PartialEq, Eq)]
enum Settled {
    /// It completed the round: the others waited for it. `cancel`: the tracked wait it began
    /// (taken for a waiter) was no wait.
    Completed {
        cancel: bool,
    },
    /// It waited for the round, tracked: the wait ends, released.
    Released,
    /// It waited although taken for the round's last: counted afterwards.
    Unforeseen,
    /// No round it took part in (glibc's barrier wait has no error of its own): a tracked wait
    /// it began was no wait.
    Cancelled,
    Nothing,
}

/// How an arrival that began a tracked wait (`waited`) or not settles, given glibc's answer `r`.
fn settle(r: c_int, waited: bool) -> Settled {
    match (r, waited) {
        (PTHREAD_BARRIER_SERIAL_THREAD, cancel) => Settled::Completed { cancel },
        (0, true) => Settled::Released,
        (0, false) => Settled::Unforeseen,
        (_, true) => Settled::Cancelled,
        (_, false) => Settled::Nothing,
    }
}

/// `pthread_barrier_init` returned `r` for a barrier of `count` threads per round.
pub fn initialised(r: c_int, addr: usize, count: u32) {
    // The subtype of a barrier is its count.
    engage::initialised(r, addr, KIND, count, CallSite::default());
}

/// An arrival at the barrier at `addr`: `call` is the real `pthread_barrier_wait`, whose answer
/// is returned.
///
/// # Safety
/// `addr` is the caller's barrier: live.
pub unsafe fn wait(addr: usize, call: impl FnOnce() -> c_int) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        return call();
    };
    let _in = InShim::enter();
    // glibc keeps the count the barrier was initialised with; it is the object's subtype too.
    // SAFETY: as the caller promises.
    let count = u64::from(unsafe { glibc_barrier::count(addr) }.max(1));
    let obj = tr.object(t, addr, KIND, count as u32);
    let arrival = obj.acquisitions.fetch_add(1, Ordering::Relaxed) + 1;
    obj.touch();
    let w = (!predicted_last(arrival, count)).then(|| {
        // SAFETY: a barrier has no holder: nothing is read at its address.
        let w = unsafe { engage::wait_begin(tr, t, obj, Side::Exclusive) };
        engage::untimed(t);
        w
    });
    let start = if w.is_none() {
        // Before the call: glibc lets the others go inside it, and their waits must find
        // their waker (the serial thread names itself again once known).
        engage::woke(t, obj);
        now_ns()
    } else {
        0
    };
    let r = call();
    match (settle(r, w.is_some()), w) {
        (Settled::Completed { .. }, w) => {
            if let Some(w) = w {
                engage::wait_cancel(tr, t, w);
            }
            obj.add(counter::ROUNDS, 1);
            engage::released(t, obj);
        }
        (Settled::Released, Some(w)) => engage::wait_end(tr, t, w, Outcome::Released),
        (Settled::Unforeseen, _) => {
            let waited = now_ns().saturating_sub(start);
            engage::waited_unforeseen(tr, t, obj, CallSite::default(), waited, Outcome::Released);
        }
        (Settled::Cancelled, Some(w)) => engage::wait_cancel(tr, t, w),
        _ => {}
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_threads_at_a_barrier_of_four_three_wait_per_round_and_the_fourth_completes_it() {
        let waiting: Vec<u64> = (1..=8).filter(|&i| !predicted_last(i, 4)).collect();
        assert_eq!(waiting, [1, 2, 3, 5, 6, 7]);
        assert!(predicted_last(4, 4) && predicted_last(8, 4));
    }

    #[test]
    fn a_barrier_of_one_never_waits() {
        assert!((1..=5).all(|i| predicted_last(i, 1)));
    }

    #[test]
    fn glibcs_serial_thread_completes_the_round_even_when_the_shim_took_it_for_a_waiter() {
        assert_eq!(
            settle(PTHREAD_BARRIER_SERIAL_THREAD, false),
            Settled::Completed { cancel: false }
        );
        assert_eq!(
            settle(PTHREAD_BARRIER_SERIAL_THREAD, true),
            Settled::Completed { cancel: true },
            "two arrivals in one instant, counted in the other order by glibc"
        );
    }

    #[test]
    fn the_other_side_of_a_mispredicted_round_counts_the_wait_it_did_unseen() {
        assert_eq!(settle(0, true), Settled::Released);
        assert_eq!(settle(0, false), Settled::Unforeseen);
    }

    #[test]
    fn an_error_answer_is_no_wait() {
        assert_eq!(settle(libc::EINVAL, true), Settled::Cancelled);
        assert_eq!(settle(libc::EINVAL, false), Settled::Nothing);
    }
}
