//! `pthread_barrier_*`. Every call returns exactly what glibc returns, including which thread
//! gets `PTHREAD_BARRIER_SERIAL_THREAD`.
//!
//! Each arrival but the last of a round is a tracked wait on the barrier until the round is
//! complete (ended as released). The last arriver is the one the others waited for: it ends an
//! open episode as its holder, before it lets them go. Arrivals are counted as the barrier's
//! acquisitions: arrival `i` (from 1, in the shim's order) completes a round when `i` is a
//! multiple of the barrier's count, as glibc's own arrival counter does.

use std::sync::atomic::Ordering;

use libc::{c_int, c_uint, pthread_barrier_t, pthread_barrierattr_t};
use waitshim_format::{counter, ObjectKind};

use crate::real::real_fns;
use crate::track::engage::{self, Outcome, Side};
use crate::track::objects::glibc_barrier;
use crate::track::threads::{current, Inside};
use crate::track::{tracker, CallSite};

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
    let arrival = obj.stats.acquisitions.fetch_add(1, Ordering::Relaxed) + 1;
    obj.touch();
    if arrival % count == 0 {
        obj.add(counter::ROUNDS, 1);
        engage::released(t, obj);
        // SAFETY: forwarding.
        return unsafe { real::pthread_barrier_wait(b) };
    }
    let w = engage::wait_begin(tr, t, obj, Side::Exclusive);
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_barrier_wait(b) };
    engage::wait_end(tr, t, w, Outcome::Released);
    r
}
