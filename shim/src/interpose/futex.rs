//! `syscall(SYS_futex, ...)`: the waits of programs whose locks never call a pthread function
//! (Rust's `std::sync`, parking_lot, libstdc++'s `std::atomic::wait` and
//! `std::counting_semaphore`, hand-written futexes). Every call returns exactly what glibc's
//! `syscall` returns, with the same `errno`.
//!
//! `syscall` is variadic. The exported trampoline below sends every other system call to glibc's
//! `syscall` with one jump (registers and stack untouched: nothing else runs), and the futex
//! calls to `c/syscall.c`, which reads the six arguments as glibc does and calls [`tracked`].
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
//!   is forwarded untracked ([`will_sleep`]); one whose word changed after that look is taken
//!   back when it returns (while the shim set it up, it counted among the word's waiters).
//! - Wakes. A `FUTEX_WAKE` or `FUTEX_WAKE_BITSET` on a word with an open high-contention episode
//!   ends it, before the wake, as a semaphore post does: the waker is who the waiters waited for.
//!   It also names the waking thread as the waker of the waits it ends (per-wait events: one
//!   relaxed store, and only on a word threads sleep on). A word no thread has slept on yet is no
//!   object, and its wakes record nothing. A wake that woke someone counts as a wake of the
//!   object. When the last waiter leaves an
//!   episode no wake of this process ended (a timeout, a waker in another process or in a signal
//!   handler), the episode ends then, with no holder.
//!
//! Forwarded untracked: the other operations (`FUTEX_REQUEUE`, `FUTEX_CMP_REQUEUE`,
//! `FUTEX_WAKE_OP`, the priority-inheritance ones, `FUTEX_WAIT_REQUEUE_PI`): the shim does not
//! follow waiters from one word to another nor priority-inheritance owners (a waiter a requeue
//! moved still counts as waiting on the word it began on); calls from the shim's own code (its
//! own locks), from signal handlers and from inside the shim.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libc::{c_int, c_long, EINTR, ETIMEDOUT};
use waitshim_format::{counter, ObjectKind};

use crate::real::RealFn;
use crate::track::engage::{self, Outcome, Side};
use crate::track::objects::ObjEntry;
use crate::track::threads::{current, Inside, ThreadRec};
use crate::track::{tracker, Tracker};

const KIND: ObjectKind = ObjectKind::Futex;
const SYS_FUTEX: c_long = libc::SYS_futex;

static SYSCALL: RealFn = RealFn::new(b"syscall\0");
/// glibc's `syscall` for the trampoline; 0 until resolved, which sends every call to
/// `c/syscall.c` (it forwards them itself before the hook is set).
static REAL: AtomicUsize = AtomicUsize::new(0);
/// Whether a futex object was ever registered: until then a wake has nothing to look up.
static REGISTERED: AtomicBool = AtomicBool::new(false);
/// Whether `process_vm_readv` answers: cleared the first time it is refused (a seccomp filter
/// returning an errno), after which waits are no longer looked at beforehand.
static PEEK: AtomicBool = AtomicBool::new(true);

/// [`tracked`]'s type: `hook_fn` in `c/syscall.c`.
type Hook = unsafe extern "C" fn(c_long, *const [c_long; 6], usize) -> c_long;

extern "C" {
    /// `c/syscall.c`'s variadic entry.
    fn waitshim_syscall();
    /// `c/syscall.c`'s pointer to [`tracked`], null until set (a pointer-sized word, loaded
    /// atomically there).
    static waitshim_syscall_hook: AtomicUsize;
}

/// Resolves glibc's `syscall`, then points the C side at [`tracked`] and the trampoline at
/// glibc's function: from then on no call reaches `dlsym`.
pub fn resolve() {
    if !SYSCALL.available() {
        return;
    }
    // SAFETY: the C side's hook, a pointer-sized and pointer-aligned word (the layout of an
    // AtomicUsize), only ever accessed atomically.
    unsafe { waitshim_syscall_hook.store(tracked as Hook as usize, Ordering::Release) };
    REAL.store(SYSCALL.resolved(), Ordering::Release);
}

/// `long syscall(long number, ...)`: see the module comment. Only r11 (free at a call boundary,
/// never an argument) and the flags change before the jump: every argument register, `al` (the
/// vector register count of a variadic call) and the stack arguments reach glibc or
/// `c/syscall.c` as the caller left them.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn syscall() {
    std::arch::naked_asm!(
        "mov r11, qword ptr [rip + {real}]",
        "test r11, r11",
        "jz 2f",
        "cmp rdi, {futex}",
        "je 2f",
        "jmp r11",
        "2:",
        "jmp {c}",
        real = sym REAL,
        futex = const SYS_FUTEX,
        c = sym waitshim_syscall,
    )
}

fn errno() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// glibc's `syscall` with the caller's arguments: its result and errno are the call's.
fn forward(number: c_long, a: &[c_long; 6]) -> c_long {
    // SAFETY: the slot holds glibc's `syscall`, whose C signature is this one.
    let f: unsafe extern "C" fn(c_long, ...) -> c_long =
        unsafe { std::mem::transmute::<usize, _>(SYSCALL.get()) };
    // SAFETY: forwarding the caller's arguments, as many as glibc's `syscall` reads.
    unsafe { f(number, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// The C side's hook: a call of `syscall` with its arguments, from the code at `caller`.
///
/// # Safety
/// `args` points to the six arguments read as glibc's `syscall` reads them.
unsafe extern "C" fn tracked(number: c_long, args: *const [c_long; 6], caller: usize) -> c_long {
    // SAFETY: per the contract.
    let a = unsafe { &*args };
    if number != SYS_FUTEX || crate::chain::own_code(caller) {
        return forward(number, a);
    }
    match a[1] as c_int & libc::FUTEX_CMD_MASK {
        libc::FUTEX_WAIT | libc::FUTEX_WAIT_BITSET => wait(a),
        libc::FUTEX_WAKE | libc::FUTEX_WAKE_BITSET => wake(a),
        _ => forward(number, a),
    }
}

/// The futex object at `addr`, registered on first use. Another kind of object there was left
/// behind by memory the program has since reused for a futex word without destroying it: it
/// ends, and the futex is a new object. Called inside the shim.
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

/// Whether the kernel will put the caller of this `FUTEX_WAIT` or `FUTEX_WAIT_BITSET` to sleep,
/// as far as can be told without calling it: a call it answers at once (EAGAIN: the word no
/// longer holds the expected value; EFAULT, EINVAL: a word or timeout that is not mapped or not
/// valid, a null bitset) is no wait, and counting its caller among the waiters while setting the
/// wait up would report a waiter, even a contention record, that never was. The word and the
/// timeout are read through the kernel (`process_vm_readv`): the program may pass memory that is
/// not mapped, which the futex call answers with EFAULT and a plain load would crash on. The
/// word can still change between this look and the kernel's: such a wait is set up and then
/// taken back. errno may change.
fn will_sleep(tr: &Tracker, a: &[c_long; 6]) -> bool {
    let (addr, op, timeout) = (a[0] as usize, a[1] as c_int, a[3] as usize);
    if addr == 0 || addr % 4 != 0 {
        return false;
    }
    if op & libc::FUTEX_CMD_MASK == libc::FUTEX_WAIT_BITSET && a[5] as u32 == 0 {
        return false;
    }
    if !PEEK.load(Ordering::Relaxed) {
        return true;
    }
    let mut word: u32 = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let local = [
        libc::iovec {
            iov_base: &mut word as *mut u32 as *mut libc::c_void,
            iov_len: 4,
        },
        libc::iovec {
            iov_base: &mut ts as *mut libc::timespec as *mut libc::c_void,
            iov_len: std::mem::size_of::<libc::timespec>(),
        },
    ];
    let remote = [
        libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: 4,
        },
        libc::iovec {
            iov_base: timeout as *mut libc::c_void,
            iov_len: std::mem::size_of::<libc::timespec>(),
        },
    ];
    let parts = if timeout == 0 { 1 } else { 2 };
    let want: usize = local[..parts].iter().map(|v| v.iov_len).sum();
    // SAFETY: reads this process's own memory, through the kernel, into the locals above.
    let n = unsafe {
        libc::process_vm_readv(
            tr.pid as libc::pid_t,
            local.as_ptr(),
            parts as libc::c_ulong,
            remote.as_ptr(),
            parts as libc::c_ulong,
            0,
        )
    };
    if n < 0 {
        if errno() == libc::EFAULT {
            return false;
        }
        // Refused: the wait is taken for one, as are all later ones.
        PEEK.store(false, Ordering::Relaxed);
        return true;
    }
    n as usize == want
        && word == a[2] as u32
        && (timeout == 0 || (ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec)))
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

/// `FUTEX_WAIT`, `FUTEX_WAIT_BITSET`.
fn wait(a: &[c_long; 6]) -> c_long {
    let caller_errno = errno();
    let waiter = match (current(), tracker()) {
        (Some(t), Some(tr)) if will_sleep(tr, a) => Some((t, tr)),
        _ => None,
    };
    let Some((t, tr)) = waiter else {
        set_errno(caller_errno);
        return forward(SYS_FUTEX, a);
    };
    // Dropped by hand, as in a semaphore wait: an asynchronous cancellation acting in the real
    // call leaves through these frames, which must have nothing to drop; the thread's exit hook
    // undoes the wait then.
    let inside = ManuallyDrop::new(Inside::enter());
    let obj = object(tr, t, a[0] as usize);
    // Its chain is always unwound: the call site, inside the language's lock, is the same for
    // every lock of the program, so the chain cache would mix up their waits.
    let w = ManuallyDrop::new(engage::wait_begin(tr, t, obj, Side::Exclusive));
    if a[3] == 0 {
        // No timeout.
        engage::untimed(t);
    }
    set_errno(caller_errno);
    let r = inside.cancellable(|| forward(SYS_FUTEX, a));
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

/// `FUTEX_WAKE`, `FUTEX_WAKE_BITSET`.
fn wake(a: &[c_long; 6]) -> c_long {
    let caller_errno = errno();
    let known = current().and_then(|t| Some((t, known(t, a[0] as usize)?)));
    if let Some((t, obj)) = known {
        // Before the wake: a waiter it wakes must find the episode already ended by its waker.
        engage::released(t, obj);
    }
    set_errno(caller_errno);
    let r = forward(SYS_FUTEX, a);
    if let (Some((_, obj)), true) = (known, r > 0) {
        let e = errno();
        {
            // Counting may allocate the object's counters.
            let _in = Inside::enter();
            obj.add(counter::WAKES, 1);
        }
        set_errno(e);
    }
    r
}
