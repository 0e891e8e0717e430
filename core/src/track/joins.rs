//! Threads as objects a join waits for: which threads are alive by `pthread_t` (noted when
//! they are created), the thread object a join waits on, and the join itself. The wrappers in
//! `interpose/thread.rs` call these with the real functions.
//!
//! A thread object's address is the `pthread_t` value and its holder (its `last_owner`, and its
//! subtype) the thread's tid. glibc reuses a joined thread's descriptor, so a `pthread_t` seen
//! for another tid is a new object (generation).

use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;

use libc::{c_int, pthread_t, EBUSY};
use waitshim_format::ObjectKind;

use super::engage::{self, Outcome, Side};
use super::highwater;
use super::objects::{ObjEntry, EPISODE};
use super::threads::{self, current, InShim, ThreadRec};
use super::{tracker, Tracker};
use crate::clock::now_ns;

/// What the shim knows of a thread `pthread_create` has just returned.
#[derive(Debug, PartialEq, Eq)]
enum Known {
    /// Alive, with this tid.
    Tid(u32),
    /// It has run and ended already (the kernel clears the tid at exit).
    Gone,
    /// Not known yet: it fills in its tid when it registers.
    Pending,
}

/// From the tid read in the new thread's descriptor (0: none, or not read) whether that tid can
/// be read at all (`readable`: the layout was checked at start) and whether the thread is
/// detached (its descriptor is never read: it may be gone and unmapped already).
fn known(tid: u32, detached: bool, readable: bool) -> Known {
    match tid {
        tid if tid != 0 => Known::Tid(tid),
        // The kernel wrote the tid before clone returned (CLONE_PARENT_SETTID) and clears it
        // when the thread exits: this one has run and ended already (a loaded machine).
        _ if !detached && readable => Known::Gone,
        _ => Known::Pending,
    }
}

/// `pthread_create` created thread `th`, detached from the start if `detached` (as its
/// attributes said), where the creating thread's chain is `chain` (0: not collected). The
/// thread is alive from now on, though it may not have registered yet: a join right away must
/// still find it, and name it by the tid the kernel gave it.
///
/// # Safety
/// Unless `detached`, `th` is the descriptor `pthread_create` has just returned (not joined
/// yet: the creating thread has not returned from `pthread_create`).
pub unsafe fn created(th: pthread_t, detached: bool, chain: u32) {
    let Some(tr) = tracker() else { return };
    let _in = InShim::enter();
    let tid = if detached {
        0
    } else {
        // SAFETY: as the caller promises.
        unsafe { threads::tid_of(th) }
    };
    let addr = th as usize;
    match known(tid, detached, threads::tid_known()) {
        // Replaces what a thread that had this descriptor before may have left.
        Known::Tid(tid) => {
            tr.by_pthread.insert(addr, tid);
        }
        // Nothing of it may stay, or a join would wait for it to register.
        Known::Gone => {
            tr.by_pthread.remove(&addr);
        }
        Known::Pending => {
            tr.by_pthread.get_or_insert(addr, 0);
        }
    }
    // A joinable thread's object is created where the thread was (see `thread_object`).
    if !detached && chain != 0 {
        tr.create_chains.insert(addr, chain);
    } else {
        tr.create_chains.remove(&addr);
    }
}

/// Whether a thread object last held by `owner` serves a join of the thread `tid` no longer: a
/// `pthread_t` seen for another tid is a reused descriptor, a new object.
fn reused(owner: u32, tid: u32) -> bool {
    owner != 0 && owner != tid
}

/// The thread object of the live thread `th`. None when the shim does not know the thread alive
/// (already exited: a join of it does not wait). Called inside the shim.
fn thread_object(tr: &Tracker, t: &ThreadRec, th: pthread_t) -> Option<&'static ObjEntry> {
    let addr = th as usize;
    let mut tid = *tr.by_pthread.get(&addr)?.value();
    let mut obj = tr.object(t, addr, ObjectKind::Thread, tid);
    if reused(obj.owner.last.load(Ordering::Acquire), tid) {
        tr.object_destroyed(t, addr);
        obj = tr.object(t, addr, ObjectKind::Thread, tid);
    }
    // Made by this join, so not in the log yet: its creation is the thread's `pthread_create`
    // (the code to look at), not the join.
    if obj.id.load(Ordering::Acquire) == 0 {
        if let Some(chain) = tr.create_chains.get(&addr).map(|e| *e.value()) {
            obj.create_chain.store(chain, Ordering::Relaxed);
            obj.origin
                .store(waitshim_format::origin::INIT, Ordering::Relaxed);
        }
    }
    if tid == 0 {
        // Not registered yet: it fills in its tid when it does, unless it did meanwhile.
        std::sync::atomic::fence(Ordering::SeqCst);
        tid = tr.by_pthread.get(&addr).map_or(0, |e| *e.value());
    }
    if tid != 0 {
        obj.owner.last.store(tid, Ordering::Release);
    }
    Some(obj)
}

/// A join that began before its thread ran: give the thread a moment to register, so that the
/// wait has its holder (for the episode and the wait-for graph). The join would block at least
/// that long anyway; a thread that never registers (tracking off) costs at most 50 ms once.
fn await_tid(obj: &ObjEntry) {
    for _ in 0..500 {
        if obj.owner.last.load(Ordering::Acquire) != 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

/// Whether the `by_pthread` entry `entry` of a joined descriptor is the joined thread's (tid
/// `joined`, 0 if its object is not known) and goes with it: normally gone with the thread's
/// exit, but not if it exited before its creator saw it created. A newer thread's entry, on
/// the descriptor glibc handed on, stays.
fn entry_of_joined(entry: u32, joined: u32) -> bool {
    entry == 0 || entry == joined
}

/// `t` joined `th`: one acquisition of its thread object, which ends with the thread. Called
/// inside the shim.
fn joined(tr: &Tracker, t: &ThreadRec, th: pthread_t) {
    let addr = th as usize;
    let joined_tid = tr
        .objects
        .get(addr)
        .filter(|o| o.kind == ObjectKind::Thread)
        .map_or(0, |o| o.owner.last.load(Ordering::Relaxed));
    if tr
        .by_pthread
        .get(&addr)
        .is_some_and(|e| entry_of_joined(*e.value(), joined_tid))
    {
        tr.by_pthread.remove(&addr);
        tr.create_chains.remove(&addr);
    }
    let Some(obj) = tr.objects.get(addr) else {
        return;
    };
    if obj.kind != ObjectKind::Thread {
        return;
    }
    obj.acquisitions.fetch_add(1, Ordering::Relaxed);
    obj.touch();
    // An episode the thread's exit did not end (it exited between the lookup and the wait).
    if obj.flags() & EPISODE != 0 {
        let target = obj.owner.last.load(Ordering::Relaxed);
        highwater::on_release(tr, target, obj, now_ns(), 0);
    }
    tr.object_destroyed(t, addr);
}

/// `pthread_tryjoin_np` of `th` returned `r`: joined, or busy (the thread runs on).
pub fn tried(th: pthread_t, r: c_int) {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        return;
    };
    let _in = InShim::enter();
    match r {
        0 => joined(tr, t, th),
        EBUSY => {
            if let Some(obj) = thread_object(tr, t, th) {
                obj.busy().stats.busy.fetch_add(1, Ordering::Relaxed);
                obj.touch();
            }
        }
        _ => {}
    }
}

/// A join (plain, timed or clock) of `th` by `call`, the real join; `untimed`: no deadline.
/// Waiting for a thread is a tracked wait on its thread object. The real join is one call (a
/// wait-for cycle through it is confirmed by a second walk a few milliseconds later), during
/// which nothing of the shim's needs dropping: a join is a cancellation point, and a
/// cancellation unwinds through this frame.
pub fn join(th: pthread_t, untimed: bool, call: impl Fn() -> c_int) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        return call();
    };
    // SAFETY: plain library call.
    if th == unsafe { libc::pthread_self() } {
        // Joining oneself: glibc answers EDEADLK at once.
        return call();
    }
    let begun = {
        let _in = InShim::enter();
        thread_object(tr, t, th).map(|obj| {
            await_tid(obj);
            // SAFETY: a thread object's holder is the thread joined, kept in its entry: nothing
            // is read at its address.
            let mut w = unsafe { engage::wait_begin(tr, t, obj, Side::Exclusive) };
            if untimed {
                engage::untimed(t);
            }
            engage::confirm_before_call(tr, t, &mut w);
            ManuallyDrop::new(w)
        })
    };
    let Some(w) = begun else {
        // A thread not known alive (exited, or never seen): the join does not wait, or waits
        // for a thread the shim cannot name; it is not ready to run meanwhile all the same.
        tr.blocked.fetch_add(1, Ordering::Relaxed);
        let r = call();
        tr.blocked.fetch_sub(1, Ordering::Relaxed);
        if r == 0 {
            let _in = InShim::enter();
            joined(tr, t, th);
        }
        return r;
    };
    let r = call();
    let _in = InShim::enter();
    engage::wait_end(tr, t, ManuallyDrop::into_inner(w), Outcome::of(r));
    if r == 0 {
        joined(tr, t, th);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joinable_thread_is_known_by_its_tid_as_soon_as_pthread_create_returns() {
        assert_eq!(known(4242, false, true), Known::Tid(4242));
    }

    #[test]
    fn a_joinable_thread_that_already_ended_leaves_nothing_for_a_join_to_wait_for() {
        assert_eq!(known(0, false, true), Known::Gone);
    }

    #[test]
    fn a_thread_whose_tid_cannot_be_read_is_named_when_it_registers() {
        assert_eq!(known(0, true, true), Known::Pending, "detached: never read");
        assert_eq!(known(0, false, false), Known::Pending, "layout not checked");
    }

    #[test]
    fn a_descriptor_glibc_reused_for_another_thread_is_a_new_thread_object() {
        assert!(reused(100, 200));
        assert!(!reused(100, 100), "the same thread");
        assert!(!reused(0, 200), "an object no thread held yet");
    }

    #[test]
    fn joining_a_thread_removes_its_own_entry_but_not_a_newer_threads_on_the_same_descriptor() {
        assert!(entry_of_joined(100, 100));
        assert!(
            entry_of_joined(0, 100),
            "created, ended and joined before it registered"
        );
        assert!(!entry_of_joined(300, 100));
    }
}
