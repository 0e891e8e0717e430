//! `pthread_barrier_*`. Every call returns exactly what glibc returns, including which thread
//! gets `PTHREAD_BARRIER_SERIAL_THREAD`.
//!
//! Each arrival but the last of a round is a wait on the barrier until the round is complete
//! (ended as released), and the last arriver is the one the others waited for: it ends an open
//! episode as its holder. Which arrival is the last is glibc's to decide, by its own arrival
//! counter, and it tells: the thread whose arrival completed the round, and only that one, gets
//! `PTHREAD_BARRIER_SERIAL_THREAD`. The shim knows it only once the call returns, so:
//!
//! - Before the call, the shim predicts. Arrivals are counted as the barrier's acquisitions, and
//!   arrival `i` (from 1, in the shim's order) is taken for a round's last when `i` is a
//!   multiple of the barrier's count. The others begin a tracked wait; the predicted last
//!   begins none, so the waiter count, `max_waiters` and the highwater mark do not count the
//!   thread that completes the round (a barrier of 4 has at most 3 waiters).
//! - After the call, glibc's answer decides. The serial thread counts the round and ends the
//!   open episode as its holder; had it begun a tracked wait (two threads arriving within the
//!   same instant, counted in one order by the shim and in the other by glibc), that wait is
//!   cancelled first: it counts as no wait and leaves the episode's waiters. A thread that returns 0
//!   without a tracked wait (the other side of such a race) did wait, unseen: its wait, timed
//!   around the call, is counted afterwards as a contended wait ended released (it takes no part
//!   in waiter counts or the highwater mark). Either way, each round counts one contended wait
//!   per arrival but one.
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

use libc::{c_int, c_uint, pthread_barrier_t, pthread_barrierattr_t};
use waitshim_format::{counter, ObjectKind};

use crate::clock::now_ns;
use crate::layout::barrier as glibc_barrier;
use crate::real::real_fns;
use crate::track::engage::{self, Outcome, Side};
use crate::track::threads::{current, Inside};
use crate::track::{tracker, CallSite};

pub fn resolve() {
    real::slot::resolve();
}

mod real {
    use libc::{c_int, c_uint, pthread_barrier_t, pthread_barrierattr_t};
    super::real_fns! {
        pthread_barrier_init: fn(b: *mut pthread_barrier_t, a: *const pthread_barrierattr_t, count: c_uint) -> c_int;
        pthread_barrier_destroy: fn(b: *mut pthread_barrier_t) -> c_int;
        pthread_barrier_wait: fn(b: *mut pthread_barrier_t) -> c_int;
    }
}

const KIND: ObjectKind = ObjectKind::Barrier;

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_init(
    b: *mut pthread_barrier_t,
    a: *const pthread_barrierattr_t,
    count: c_uint,
) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_barrier_init(b, a, count) };
    // The subtype of a barrier is its count: threads per round.
    engage::initialised(r, b as usize, KIND, count, CallSite::default());
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_destroy(b: *mut pthread_barrier_t) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_barrier_destroy(b) };
    engage::destroyed(r, b as usize);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_wait(b: *mut pthread_barrier_t) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        // SAFETY: forwarding.
        return unsafe { real::pthread_barrier_wait(b) };
    };
    let addr = b as usize;
    let _in = Inside::enter();
    // glibc keeps the count the barrier was initialised with; it is the object's subtype too.
    let count = u64::from(glibc_barrier::count(addr).max(1));
    let obj = tr.object(t, addr, KIND, count as u32);
    let arrival = obj.acquisitions.fetch_add(1, Ordering::Relaxed) + 1;
    obj.touch();
    // The prediction: an arrival taken for the round's last begins no tracked wait.
    let w = (arrival % count != 0).then(|| {
        let w = engage::wait_begin(tr, t, obj, Side::Exclusive);
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
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_barrier_wait(b) };
    match (r, w) {
        (libc::PTHREAD_BARRIER_SERIAL_THREAD, w) => {
            // This arrival completed the round: it waited for nobody.
            if let Some(w) = w {
                engage::wait_cancel(tr, t, w);
            }
            obj.add(counter::ROUNDS, 1);
            engage::released(t, obj);
        }
        (0, Some(w)) => engage::wait_end(tr, t, w, Outcome::Released),
        (0, None) => {
            let waited = now_ns().saturating_sub(start);
            engage::waited_unforeseen(tr, t, obj, CallSite::default(), waited, Outcome::Released);
        }
        // No round this thread took part in (glibc's barrier wait has no error of its own).
        (_, Some(w)) => engage::wait_cancel(tr, t, w),
        (_, None) => {}
    }
    r
}
