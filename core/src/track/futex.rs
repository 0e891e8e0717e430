//! Futex words (`syscall(SYS_futex, ...)` waits and wakes): what they mean for the tracker. The
//! wrapper in `interpose/futex.rs` hands these the real call; every function here returns what
//! the real call returned, with its errno (the bookkeeping may change errno, which is put back).
//!
//! A futex word is a sync object of kind futex, registered when a thread first sleeps on it, its
//! creation site being that wait's chain. The shim cannot see who "holds" a word, if anyone: a
//! futex has no holder, takes part in no wait-for cycle and no lock-order edge, and counts no
//! acquisitions. What it has:
//! - Waits. `FUTEX_WAIT` and `FUTEX_WAIT_BITSET` (private or shared, either clock) are a tracked
//!   wait on the word at `uaddr`, forwarded as one call with the caller's own timeout: nothing is
//!   sliced, so a deadline, relative or absolute, is exactly the caller's. Woken (0), the wait
//!   ended signalled: the thread was woken, which for a lock built on the word does not mean it
//!   has the lock (it tries again, and may sleep again). `ETIMEDOUT`: timed out; `EINTR`:
//!   interrupted. A call the kernel answers at once (`EAGAIN`, the word no longer held the value
//!   the caller expected; `EINVAL`, `EFAULT`, ...) is no wait: one it can be told of beforehand
//!   is forwarded untracked (`will_sleep`); one whose word changed after that look is taken
//!   back when it returns (while the shim set it up, it counted among the word's waiters).
//! - Wakes. A `FUTEX_WAKE` or `FUTEX_WAKE_BITSET` on a word with an open high-contention episode
//!   ends it, before the wake, as a semaphore post does: the waker is who the waiters waited for.
//!   It also names the waking thread as the waker of the waits it ends (per-wait events: one
//!   relaxed store, and only on a word threads sleep on). A word no thread has slept on yet is no
//!   object, and its wakes record nothing. A wake that woke someone counts as a wake of the
//!   object. When the last waiter leaves an episode no wake of this process ended (a timeout, a
//!   waker in another process or in a signal handler), the episode ends then, with no holder.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, c_long, timespec, EINTR, ETIMEDOUT};
use waitshim_format::{counter, ObjectKind};

use super::engage::{self, Outcome, Side};
use super::objects::ObjEntry;
use super::threads::{current, InShim, ThreadRec};
use super::{tracker, Tracker};

const KIND: ObjectKind = ObjectKind::Futex;

/// Whether a futex object was ever registered: until then a wake has nothing to look up.
static REGISTERED: AtomicBool = AtomicBool::new(false);
/// Whether `process_vm_readv` answers: cleared the first time it is refused (a seccomp filter
/// returning an errno), after which waits are no longer looked at beforehand.
static PEEK: AtomicBool = AtomicBool::new(true);

fn errno() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// A `FUTEX_WAIT` or `FUTEX_WAIT_BITSET` as the caller made it: nothing here has been read yet.
#[derive(Clone, Copy, Debug)]
pub struct WaitCall {
    /// The word's address (`uaddr`).
    pub addr: usize,
    /// The value the caller expects the word to hold (`val`).
    pub expected: u32,
    /// The timeout's address (`timeout`, relative or absolute by the operation), 0 for none.
    pub timeout: usize,
    /// The bitset (`val3`) of a `FUTEX_WAIT_BITSET`; None for a `FUTEX_WAIT`, which has none.
    pub bitset: Option<u32>,
}

impl WaitCall {
    /// Whether the call could sleep at all, judged from its arguments alone: the kernel answers
    /// a null or misaligned word (EFAULT, EINVAL) and an empty bitset (EINVAL) without reading
    /// anything.
    fn plausible(&self) -> bool {
        self.addr != 0 && self.addr.is_multiple_of(4) && self.bitset != Some(0)
    }

    /// Whether the kernel puts the caller to sleep given what the word and the timeout held
    /// just before (`timeout` is None when the call has none): only if the word still holds
    /// the expected value (else EAGAIN) and the timeout is a valid time (else EINVAL).
    fn sleeps_on(&self, word: u32, timeout: Option<&timespec>) -> bool {
        word == self.expected
            && timeout.is_none_or(|ts| ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec))
    }
}

/// What a look at a wait's word and timeout through the kernel found.
#[derive(Debug)]
enum Look {
    /// Both read: the word, and the timeout if the call has one.
    Read(u32, Option<timespec>),
    /// Part of it is not mapped: the futex call answers EFAULT at once.
    Unmapped,
    /// The kernel refuses to read (a seccomp filter returning an errno).
    Refused,
}

/// Reads the word and the timeout of `call` in process `pid` (this one) through the kernel
/// (`process_vm_readv`): the program may pass memory that is not mapped, which the futex call
/// answers with EFAULT and a plain load would crash on. errno may change.
fn look(pid: u32, call: &WaitCall) -> Look {
    let mut word: u32 = 0;
    let mut ts = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let local = [
        libc::iovec {
            iov_base: &mut word as *mut u32 as *mut libc::c_void,
            iov_len: 4,
        },
        libc::iovec {
            iov_base: &mut ts as *mut timespec as *mut libc::c_void,
            iov_len: std::mem::size_of::<timespec>(),
        },
    ];
    let remote = [
        libc::iovec {
            iov_base: call.addr as *mut libc::c_void,
            iov_len: 4,
        },
        libc::iovec {
            iov_base: call.timeout as *mut libc::c_void,
            iov_len: std::mem::size_of::<timespec>(),
        },
    ];
    let parts = if call.timeout == 0 { 1 } else { 2 };
    let want: usize = local[..parts].iter().map(|v| v.iov_len).sum();
    // SAFETY: reads this process's own memory, through the kernel, into the locals above.
    let n = unsafe {
        libc::process_vm_readv(
            pid as libc::pid_t,
            local.as_ptr(),
            parts as libc::c_ulong,
            remote.as_ptr(),
            parts as libc::c_ulong,
            0,
        )
    };
    if n < 0 {
        return if errno() == libc::EFAULT {
            Look::Unmapped
        } else {
            Look::Refused
        };
    }
    if n as usize != want {
        // Read up to the first unmapped byte.
        return Look::Unmapped;
    }
    Look::Read(word, (call.timeout != 0).then_some(ts))
}

/// Whether the kernel will put the caller of `call` to sleep, as far as can be told without
/// calling it: a call it answers at once (EAGAIN: the word no longer holds the expected value;
/// EFAULT, EINVAL: a word or timeout that is not mapped or not valid, a null bitset) is no wait,
/// and counting its caller among the waiters while setting the wait up would report a waiter,
/// even a contention record, that never was. The word can still change between this look and
/// the kernel's: such a wait is set up and then taken back. errno may change.
fn will_sleep(tr: &Tracker, call: &WaitCall) -> bool {
    if !call.plausible() {
        return false;
    }
    if !PEEK.load(Ordering::Relaxed) {
        return true;
    }
    match look(tr.pid, call) {
        Look::Read(word, ts) => call.sleeps_on(word, ts.as_ref()),
        Look::Unmapped => false,
        Look::Refused => {
            // The wait is taken for one, as are all later ones.
            PEEK.store(false, Ordering::Relaxed);
            true
        }
    }
}

/// How a wait that may have slept ended, from the call's result and errno; None if it never
/// slept.
fn outcome(r: c_long, e: c_int) -> Option<Outcome> {
    match (r, e) {
        (0, _) => Some(Outcome::Signalled),
        (_, ETIMEDOUT) => Some(Outcome::TimedOut),
        (_, EINTR) => Some(Outcome::Interrupted),
        _ => None,
    }
}

/// The futex object at `addr`, registered on first use. Another kind of object there was left
/// behind by memory the program has since reused for a futex word without destroying it: it
/// ends, and the futex is a new object. Called inside the shim (a full guard: it may register).
fn object(tr: &Tracker, t: &ThreadRec, addr: usize) -> &'static ObjEntry {
    let mut obj = tr.object(t, addr, KIND, 0);
    if obj.kind != KIND {
        tr.object_destroyed(t, addr);
        obj = tr.object(t, addr, KIND, 0);
    }
    if !REGISTERED.load(Ordering::Relaxed) {
        REGISTERED.store(true, Ordering::Relaxed);
    }
    obj
}

/// A `FUTEX_WAIT` or `FUTEX_WAIT_BITSET` described by `call`; `real` makes it. Returns what
/// `real` returned, with its errno; `real` starts from the caller's errno.
pub fn wait(call: WaitCall, real: impl FnOnce() -> c_long) -> c_long {
    let caller_errno = errno();
    let waiter = match (current(), tracker()) {
        (Some(t), Some(tr)) if will_sleep(tr, &call) => Some((t, tr)),
        _ => None,
    };
    let Some((t, tr)) = waiter else {
        set_errno(caller_errno);
        return real();
    };
    // Dropped by hand, as in a semaphore wait: an asynchronous cancellation acting in the real
    // call leaves through these frames, which must have nothing to drop; the thread's exit hook
    // undoes the wait then.
    let inside = ManuallyDrop::new(InShim::enter());
    let obj = object(tr, t, call.addr);
    // Its chain is always unwound: the call site, inside the language's lock, is the same for
    // every lock of the program, so the chain cache would mix up their waits.
    // SAFETY: a futex has no holder: nothing of the wait reads at the word's address (which the
    // program may even have unmapped since the look).
    let w = ManuallyDrop::new(unsafe { engage::wait_begin(tr, t, obj, Side::Exclusive) });
    if call.timeout == 0 {
        engage::untimed(t);
    }
    set_errno(caller_errno);
    let r = inside.cancellable(real);
    let e = errno();
    let w = ManuallyDrop::into_inner(w);
    match outcome(r, e) {
        Some(how) => engage::wait_end(tr, t, w, how),
        None => engage::wait_cancel(tr, t, w),
    }
    engage::left_unreleased(tr, obj);
    drop(ManuallyDrop::into_inner(inside));
    set_errno(e);
    r
}

/// The futex object at `addr` if the shim has one, cached for the thread.
#[inline(always)]
fn known(t: &ThreadRec, addr: usize) -> Option<&'static ObjEntry> {
    let obj = match t.cached(addr) {
        Some((_, obj)) => obj,
        None => known_uncached(t, addr)?,
    };
    (obj.kind == KIND).then_some(obj)
}

/// Not marked inside the shim: the registry's shard lock is the shim's own futex (forwarded, as
/// own code) and the lookup reaches no other interposed function and no cancellation point.
#[cold]
#[inline(never)]
fn known_uncached(t: &ThreadRec, addr: usize) -> Option<&'static ObjEntry> {
    if !REGISTERED.load(Ordering::Relaxed) {
        return None;
    }
    let obj = tracker()?.objects.get(addr)?;
    t.install(obj);
    Some(obj)
}

/// A `FUTEX_WAKE` or `FUTEX_WAKE_BITSET` of the word at `addr`; `real` makes it. Returns what
/// `real` returned (the number of threads woken, or -1), with its errno; `real` starts from the
/// caller's errno.
pub fn wake(addr: usize, real: impl FnOnce() -> c_long) -> c_long {
    let caller_errno = errno();
    let known = current().and_then(|t| Some((t, known(t, addr)?)));
    if let Some((t, obj)) = known {
        // Before the wake: a waiter it wakes must find the episode already ended by its waker.
        engage::released(t, obj);
    }
    set_errno(caller_errno);
    let r = real();
    if let (Some((_, obj)), true) = (known, r > 0) {
        let e = errno();
        {
            // Counting may allocate the object's counters.
            let _in = InShim::enter();
            obj.add(counter::WAKES, 1);
        }
        set_errno(e);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use libc::{EAGAIN, EFAULT, EINVAL};

    fn call(addr: usize, expected: u32) -> WaitCall {
        WaitCall {
            addr,
            expected,
            timeout: 0,
            bitset: None,
        }
    }

    fn ts(tv_sec: i64, tv_nsec: i64) -> timespec {
        timespec { tv_sec, tv_nsec }
    }

    #[test]
    fn a_wait_the_kernel_answers_from_its_arguments_alone_is_no_wait() {
        assert!(call(0x1000, 0).plausible());
        assert!(!call(0, 0).plausible(), "a null word: EFAULT");
        assert!(!call(0x1002, 0).plausible(), "a misaligned word: EINVAL");
        let bitset = |b| WaitCall {
            bitset: Some(b),
            ..call(0x1000, 0)
        };
        assert!(bitset(u32::MAX).plausible());
        assert!(!bitset(0).plausible(), "an empty bitset: EINVAL");
    }

    #[test]
    fn a_wait_sleeps_only_while_its_word_holds_the_value_the_caller_expects() {
        let c = call(0x1000, 2);
        assert!(c.sleeps_on(2, None), "a lock word still held with waiters");
        assert!(
            !c.sleeps_on(0, None),
            "released meanwhile: EAGAIN, the caller tries its lock again"
        );
    }

    #[test]
    fn a_wait_with_an_invalid_timeout_is_no_wait() {
        let c = WaitCall {
            timeout: 0x2000,
            ..call(0x1000, 1)
        };
        assert!(c.sleeps_on(1, Some(&ts(0, 0))));
        assert!(c.sleeps_on(1, Some(&ts(5, 999_999_999))));
        assert!(!c.sleeps_on(1, Some(&ts(-1, 0))), "EINVAL");
        assert!(!c.sleeps_on(1, Some(&ts(0, 1_000_000_000))), "EINVAL");
        assert!(!c.sleeps_on(1, Some(&ts(0, -1))), "EINVAL");
    }

    #[test]
    fn a_woken_wait_ends_signalled_and_one_that_never_slept_is_taken_back() {
        assert_eq!(outcome(0, 0), Some(Outcome::Signalled));
        // errno is left as it was by an earlier call when the wait succeeds.
        assert_eq!(outcome(0, ETIMEDOUT), Some(Outcome::Signalled));
        assert_eq!(outcome(-1, ETIMEDOUT), Some(Outcome::TimedOut));
        assert_eq!(outcome(-1, EINTR), Some(Outcome::Interrupted));
        for e in [EAGAIN, EFAULT, EINVAL] {
            assert_eq!(outcome(-1, e), None, "answered at once: errno {e}");
        }
    }

    #[test]
    fn the_look_before_a_wait_reads_the_word_and_the_timeout_the_kernel_will_read() {
        let word: u32 = 7;
        let timeout = ts(1, 500);
        let c = WaitCall {
            addr: &word as *const u32 as usize,
            expected: 7,
            timeout: &timeout as *const timespec as usize,
            bitset: None,
        };
        match look(std::process::id(), &c) {
            Look::Read(w, Some(t)) => {
                assert_eq!(w, 7);
                assert_eq!((t.tv_sec, t.tv_nsec), (1, 500));
            }
            // A sandbox that forbids the call: the shim then takes every wait for one.
            Look::Refused => {}
            other => panic!("mapped memory read as {other:?}"),
        }
    }

    #[test]
    fn a_word_at_an_unmapped_address_is_seen_unmapped_without_a_fault() {
        // The first page is never mapped in a Linux process.
        let c = call(0x10, 0);
        assert!(matches!(
            look(std::process::id(), &c),
            Look::Unmapped | Look::Refused
        ));
    }

    #[test]
    fn a_wake_of_a_word_the_shim_keeps_as_another_kind_of_object_is_no_futex_wake() {
        let t = ThreadRec::new();
        let mutex: &'static ObjEntry =
            Box::leak(Box::new(ObjEntry::new(0x8000, ObjectKind::Mutex)));
        t.install(mutex);
        assert!(known(&t, 0x8000).is_none());
        let word: &'static ObjEntry = Box::leak(Box::new(ObjEntry::new(0x9000, KIND)));
        t.install(word);
        assert!(known(&t, 0x9000).is_some_and(|o| std::ptr::eq(o, word)));
    }
}
