//! Thread creation, joining, exit and naming.

use std::sync::atomic::Ordering;

use std::mem::ManuallyDrop;

use libc::{c_char, c_int, c_void, clockid_t, pthread_attr_t, pthread_t, timespec, EBUSY};
use waitshim_format::{ObjectKind, ThreadName};

use crate::clock::now_ns;
use crate::real;
use crate::track::engage::{self, Outcome, Side};
use crate::track::highwater;
use crate::track::objects::{ObjEntry, EPISODE};
use crate::track::threads::{current, Inside, ThreadRec};
use crate::track::{self, tracker, Birth, Tracker};

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;

/// What the new thread needs to register itself before running the program's start routine.
struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    parent: u32,
    chain: u32,
    created_ns: u64,
}

extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the Box leaked by pthread_create below, handed to exactly this thread.
    let s = unsafe { Box::from_raw(p as *mut Start) };
    if let Some(tr) = tracker() {
        let _in = Inside::enter();
        track::register_thread(
            tr,
            Some(Birth {
                parent: s.parent,
                routine: s.routine as usize as u64,
                chain: s.chain,
                created_ns: s.created_ns,
            }),
        );
    }
    (s.routine)(s.arg)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    th: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        // SAFETY: forwarding.
        return unsafe { real::pthread_create(th, attr, routine, arg) };
    };
    let (start, chain) = crate::stack::roomy(|| {
        let _in = Inside::enter();
        let chain = tr.chain(t);
        let start = Box::into_raw(Box::new(Start {
            routine,
            arg,
            parent: t.tid(),
            chain,
            created_ns: now_ns(),
        }));
        (start, chain)
    });
    // SAFETY: forwarding, with our trampoline and its argument in place of the caller's.
    let r = unsafe { real::pthread_create(th, attr, trampoline, start as *mut c_void) };
    let _in = Inside::enter();
    if r != 0 {
        // SAFETY: the thread was not created, so the Box is still ours.
        drop(unsafe { Box::from_raw(start) });
    } else {
        // The thread is alive from now on, though it may not have registered yet: a join right
        // away must still find it, and name it by the tid the kernel gave it.
        // SAFETY: glibc stored the new thread's id through the caller's pointer.
        let th = unsafe { *th };
        // A detached thread may already have ended and its descriptor been unmapped: not read.
        let mut detached = 0;
        // SAFETY: reading the caller's attributes, which pthread_create just accepted.
        let known = !attr.is_null()
            && unsafe { attr_getdetachstate(attr, &mut detached) } == 0
            && detached == libc::PTHREAD_CREATE_DETACHED;
        let tid = if known {
            0
        } else {
            crate::track::threads::tid_of(th)
        };
        match tid {
            // Replaces what a thread that had this descriptor before may have left.
            tid if tid != 0 => {
                tr.by_pthread.insert(th as usize, tid);
            }
            // The kernel wrote the tid before clone returned (CLONE_PARENT_SETTID) and clears
            // it when the thread exits: this one has run and ended already (a loaded machine).
            // Nothing of it may stay, or a join would wait for it to register.
            _ if !known && crate::track::threads::tid_known() => {
                tr.by_pthread.remove(&(th as usize));
            }
            _ => {
                tr.by_pthread.get_or_insert(th as usize, 0);
            }
        }
        // A joinable thread's object is created where the thread was (see `thread_object`).
        if !known && chain != 0 {
            tr.create_chains.insert(th as usize, chain);
        } else {
            tr.create_chains.remove(&(th as usize));
        }
        crate::service::ensure_started();
    }
    r
}

extern "C" {
    #[link_name = "pthread_attr_getdetachstate"]
    fn attr_getdetachstate(attr: *const pthread_attr_t, state: *mut c_int) -> c_int;
}

pub fn resolve() {
    real_join::slot::resolve();
}

mod real_join {
    use libc::{c_int, c_void, clockid_t, pthread_t, timespec};
    crate::real::real_fns! {
        pthread_tryjoin_np: fn(t: pthread_t, r: *mut *mut c_void) -> c_int;
        pthread_timedjoin_np: fn(t: pthread_t, r: *mut *mut c_void, ts: *const timespec) -> c_int;
        pthread_clockjoin_np: fn(t: pthread_t, r: *mut *mut c_void, c: clockid_t, ts: *const timespec) -> c_int;
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_join(th: pthread_t, ret: *mut *mut c_void) -> c_int {
    // SAFETY: forwarding.
    joining(th, true, || unsafe { real::pthread_join(th, ret) })
}

#[no_mangle]
pub unsafe extern "C" fn pthread_timedjoin_np(
    th: pthread_t,
    ret: *mut *mut c_void,
    ts: *const timespec,
) -> c_int {
    // SAFETY: forwarding.
    joining(th, false, || unsafe {
        real_join::pthread_timedjoin_np(th, ret, ts)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pthread_clockjoin_np(
    th: pthread_t,
    ret: *mut *mut c_void,
    clk: clockid_t,
    ts: *const timespec,
) -> c_int {
    if clk != libc::CLOCK_REALTIME && clk != libc::CLOCK_MONOTONIC {
        // glibc rejects other clocks with EINVAL before looking at the thread.
        // SAFETY: forwarding.
        return unsafe { real_join::pthread_clockjoin_np(th, ret, clk, ts) };
    }
    // SAFETY: forwarding.
    joining(th, false, || unsafe {
        real_join::pthread_clockjoin_np(th, ret, clk, ts)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pthread_tryjoin_np(th: pthread_t, ret: *mut *mut c_void) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real_join::pthread_tryjoin_np(th, ret) };
    if let (Some(t), Some(tr)) = (current(), tracker()) {
        let _in = Inside::enter();
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
    r
}

/// The thread object of the live thread `th`: address = the `pthread_t` value, holder (its
/// `last_owner`, and its subtype) = the thread's tid. None when the shim does not know the
/// thread alive (already exited: a join of it does not wait). glibc reuses a joined thread's
/// descriptor, so a `pthread_t` seen for another tid is a new object (generation).
fn thread_object(tr: &Tracker, t: &ThreadRec, th: pthread_t) -> Option<&'static ObjEntry> {
    let addr = th as usize;
    let mut tid = *tr.by_pthread.get(&addr)?.value();
    let mut obj = tr.object(t, addr, ObjectKind::Thread, tid);
    let owner = obj.owner.last.load(Ordering::Acquire);
    if owner != 0 && owner != tid {
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

/// `t` joined `th`: one acquisition of its thread object, which ends with the thread.
fn joined(tr: &Tracker, t: &ThreadRec, th: pthread_t) {
    let addr = th as usize;
    let joined_tid = tr
        .objects
        .get(addr)
        .filter(|o| o.kind == ObjectKind::Thread)
        .map_or(0, |o| o.owner.last.load(Ordering::Relaxed));
    // Normally gone with the thread's exit; not if it exited before its creator saw it created.
    if tr
        .by_pthread
        .get(&addr)
        .is_some_and(|e| *e.value() == 0 || *e.value() == joined_tid)
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

/// A join (plain, timed or clock): waiting for a thread is a tracked wait on its thread object.
/// The real join is one call (a wait-for cycle through it is confirmed by a second walk a few
/// milliseconds later), during which nothing of the shim's needs dropping: a join is a
/// cancellation point, and a cancellation unwinds through this frame.
fn joining(th: pthread_t, untimed: bool, call: impl Fn() -> c_int) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        return call();
    };
    // SAFETY: plain library call.
    if th == unsafe { libc::pthread_self() } {
        // Joining oneself: glibc answers EDEADLK at once.
        return call();
    }
    let begun = {
        let _in = Inside::enter();
        thread_object(tr, t, th).map(|obj| {
            await_tid(obj);
            let mut w = engage::wait_begin(tr, t, obj, Side::Exclusive);
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
            let _in = Inside::enter();
            joined(tr, t, th);
        }
        return r;
    };
    let r = call();
    let _in = Inside::enter();
    engage::wait_end(tr, t, ManuallyDrop::into_inner(w), Outcome::of(r));
    if r == 0 {
        joined(tr, t, th);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_exit(ret: *mut c_void) -> ! {
    track::thread_exited();
    // SAFETY: calling glibc's pthread_exit with the caller's value.
    unsafe { real::call_noreturn(&real::PTHREAD_EXIT, ret) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_setname_np(th: pthread_t, name: *const c_char) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_setname_np(th, name) };
    if r == 0 && !name.is_null() {
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let _in = Inside::enter();
            let target = if th as usize == t.pthread.load(Ordering::Relaxed) {
                Some(t)
            } else {
                tr.threads
                    .iter()
                    .find(|e| e.value().0.pthread.load(Ordering::Relaxed) == th as usize)
                    .map(|e| e.value().0)
            };
            if let Some(target) = target {
                let tid = target.tid();
                target.named.store(true, Ordering::Relaxed);
                // SAFETY: glibc accepted it, so it is a NUL-terminated string.
                let name = unsafe { std::ffi::CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned();
                target.policy.set_name(&name);
                tr.log.write(
                    &ThreadName {
                        tid,
                        ns: now_ns(),
                        name,
                    }
                    .into(),
                );
            }
        }
    }
    r
}
