//! `sigaction`, `signal` and their relatives, `siginterrupt`, and the `longjmp` family: the
//! program's signal handlers run behind a trampoline that marks the thread as running a handler.
//! While it is, every interposed call goes straight to glibc, untracked.
//!
//! A handler may call the async-signal-safe functions the shim interposes (`sem_post`, `_exit`)
//! while the code it interrupted holds malloc's lock or one of the shim's: tracking them there
//! (registering an object, ending an episode, flushing at exit) would allocate or lock, and hang
//! the program. A handler that calls a function that is not async-signal-safe (a mutex) gets
//! glibc's behaviour, unobserved.
//!
//! The program sees its own handlers and flags in every `sigaction` answer; the kernel has the
//! trampoline, with the program's mask and flags plus `SA_SIGINFO` (x86-64 passes every handler
//! the same three arguments, so a one-argument handler is called just as the kernel would).
//! A handler left by `siglongjmp` never returns to the trampoline: the jump functions mark the
//! thread as out of the handler. (A C++ exception thrown out of a handler is not seen: the
//! thread then stays untracked.) `sigset` is built here on the wrapper as glibc builds it, so its
//! handlers run behind the trampoline too. `sigvec` is not: glibc keeps it only for old binaries
//! (not linkable since 2.21), and handlers installed through it, or by a library constructor
//! before the shim's, run unmarked, as without this file.
//!
//! Fatal signals: at start, each signal of [`FATAL`] whose disposition is the default (not
//! ignored, no handler) gets the trampoline with no program handler behind it, and is *watched*.
//! When one arrives the shim ends the log with a record saying which signal killed the process,
//! puts the default disposition back and raises the signal again, so the process dies of it as
//! it would have (same status, same core dump). Every `sigaction` answer still shows the
//! default disposition, and the program's first `sigaction` or `signal` on the signal ends the
//! watch. Dispositions are reset at `exec` by the kernel, so nothing outlives the program.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

use libc::{c_int, c_void, sighandler_t, siginfo_t, SIG_DFL, SIG_ERR, SIG_IGN};

use crate::real::RealFn;
use crate::track::threads;

use crate::real::signal as glibc;

/// Signal numbers are below this (glibc's `_NSIG`).
const NSIG: usize = 65;

/// The program's handler for each signal while the trampoline stands in for it (0: none), and
/// its flags as the program gave them.
static HANDLERS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
static FLAGS: [AtomicI32; NSIG] = [const { AtomicI32::new(0) }; NSIG];
/// Watched fatal signals (bit per signal number): see the module's documentation.
static WATCHED: AtomicU64 = AtomicU64::new(0);

/// Signals whose default action ends the process and that programs commonly die of. SIGTRAP
/// (debuggers) and the profiling and real-time signals are left alone.
const FATAL: [c_int; 16] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGILL,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGUSR1,
    libc::SIGSEGV,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGSYS,
];

/// Watches the signals of [`FATAL`] the program left at their default disposition (see the
/// module's documentation). Called once, when tracking starts.
pub fn watch_fatal_signals() {
    for sig in FATAL {
        let Some(i) = index(sig) else { continue };
        // SAFETY: plain data.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a question about the current disposition.
        if unsafe { glibc::sigaction(sig, std::ptr::null(), &mut old) } != 0
            || old.sa_sigaction != SIG_DFL
            || HANDLERS[i].load(Ordering::Acquire) != 0
        {
            continue;
        }
        // SAFETY: plain data.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = trampoline as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        // SAFETY: sigset operation on a local.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        WATCHED.fetch_or(1 << i, Ordering::AcqRel);
        // SAFETY: installing the trampoline; the program sees SIG_DFL (HANDLERS[i] is 0).
        if unsafe { glibc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
            WATCHED.fetch_and(!(1 << i), Ordering::AcqRel);
        }
    }
}

/// A watched fatal signal arrived: the log ends saying so, then the signal's default action
/// ends the process (raised again: it is delivered when the handler returns and unblocks it;
/// a fault raised by an instruction would come again anyway).
fn fatal(sig: c_int, i: usize) {
    let prev = threads::enter_handler();
    crate::track::finish_by_signal(sig);
    threads::leave_handler(prev);
    WATCHED.fetch_and(!(1 << i), Ordering::AcqRel);
    // SAFETY: plain data.
    let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    dfl.sa_sigaction = SIG_DFL;
    // SAFETY: the default disposition, then the signal again (both async-signal-safe).
    unsafe {
        libc::sigemptyset(&mut dfl.sa_mask);
        glibc::sigaction(sig, &dfl, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// Signals `siginterrupt` made interrupting: `signal` then installs them without `SA_RESTART`,
/// as glibc does.
static INTERRUPTING: AtomicU64 = AtomicU64::new(0);

type OneArg = extern "C" fn(c_int);
type ThreeArgs = extern "C" fn(c_int, *mut siginfo_t, *mut c_void);

extern "C" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let Some(i) = index(sig) else { return };
    // A write into the log's mapping after another process truncated the file: the shim's own
    // fault, not the program's. The write completes elsewhere when the handler returns.
    if sig == libc::SIGBUS
        && !info.is_null()
        // SAFETY: the kernel passes a valid siginfo to a SA_SIGINFO handler.
        && crate::track::log_fault(unsafe { (*info).si_addr() } as usize)
    {
        return;
    }
    let h = HANDLERS[i].load(Ordering::Acquire);
    if h == 0 && WATCHED.load(Ordering::Acquire) >> i & 1 != 0 {
        fatal(sig, i);
        return;
    }
    // The program is replacing its handler right now: there is none to call.
    if h == 0 || h == SIG_DFL || h == SIG_IGN {
        return;
    }
    let prev = threads::enter_handler();
    if FLAGS[i].load(Ordering::Relaxed) & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed `h` as a three-argument handler (SA_SIGINFO).
        let f: ThreeArgs = unsafe { std::mem::transmute::<usize, ThreeArgs>(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed `h` as a one-argument handler.
        let f: OneArg = unsafe { std::mem::transmute::<usize, OneArg>(h) };
        f(sig);
    }
    threads::leave_handler(prev);
}

fn index(sig: c_int) -> Option<usize> {
    usize::try_from(sig).ok().filter(|&i| i > 0 && i < NSIG)
}

/// Whether `h` is a handler function (not a disposition).
fn is_function(h: sighandler_t) -> bool {
    h != SIG_DFL && h != SIG_IGN && h != SIG_ERR
}

/// Makes an answer about signal `i` show the program's handler where the kernel has the
/// trampoline, with `handler` and `flags` as the program last gave them.
///
/// # Safety
/// `old` is null or points to a `sigaction` the real call just filled in.
unsafe fn as_program_sees(old: *mut libc::sigaction, handler: usize, flags: c_int) {
    // SAFETY: per the contract.
    if let Some(old) = unsafe { old.as_mut() } {
        if old.sa_sigaction == trampoline as *const () as usize {
            old.sa_sigaction = handler;
            old.sa_flags = flags;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(i) = index(sig) else {
        // SAFETY: forwarding (glibc answers EINVAL).
        return unsafe { glibc::sigaction(sig, act, old) };
    };
    // SAFETY: the caller's pointer, null or valid.
    let Some(new) = (unsafe { act.as_ref() }) else {
        // A question only.
        let (h, f) = (
            HANDLERS[i].load(Ordering::Acquire),
            FLAGS[i].load(Ordering::Relaxed),
        );
        // SAFETY: forwarding; then fixing up what the kernel said.
        let r = unsafe { glibc::sigaction(sig, act, old) };
        if r == 0 {
            // SAFETY: `old` was just filled in (or is null).
            unsafe { as_program_sees(old, h, f) };
        }
        return r;
    };
    // The handler first, so that a signal arriving as soon as the kernel has the trampoline
    // finds it.
    let (h, f) = if is_function(new.sa_sigaction) {
        (new.sa_sigaction, new.sa_flags)
    } else {
        (0, 0)
    };
    let prev_h = HANDLERS[i].swap(h, Ordering::AcqRel);
    let prev_f = FLAGS[i].swap(f, Ordering::Relaxed);
    let r = if h == 0 {
        // SAFETY: forwarding a disposition (SIG_DFL, SIG_IGN) as it is.
        unsafe { glibc::sigaction(sig, act, old) }
    } else {
        let mut mine = *new;
        mine.sa_sigaction = trampoline as *const () as usize;
        mine.sa_flags |= libc::SA_SIGINFO;
        // SAFETY: the program's action with the trampoline for its handler.
        unsafe { glibc::sigaction(sig, &mine, old) }
    };
    if r != 0 {
        // Refused (EINVAL for SIGKILL and SIGSTOP): nothing changed.
        HANDLERS[i].store(prev_h, Ordering::Release);
        FLAGS[i].store(prev_f, Ordering::Relaxed);
        return r;
    }
    // The program decided about this signal: the shim's watch ends (only now: until the kernel
    // had the new action, a signal arriving found the trampoline, and the watch if the program
    // gave no handler).
    WATCHED.fetch_and(!(1 << i), Ordering::AcqRel);
    // SAFETY: `old` was just filled in (or is null).
    unsafe { as_program_sees(old, prev_h, prev_f) };
    r
}

/// `signal` and its relatives, built on the wrapper above as glibc builds them on `sigaction`.
fn install(sig: c_int, handler: sighandler_t, flags: c_int, mask_self: bool) -> sighandler_t {
    if handler == SIG_ERR || index(sig).is_none() {
        // SAFETY: errno is the calling thread's.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return SIG_ERR;
    }
    // SAFETY: plain data, filled in below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    // SAFETY: sigset operations on a local.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        if mask_self {
            libc::sigaddset(&mut act.sa_mask, sig);
        }
    }
    // SAFETY: valid pointers to locals.
    if unsafe { sigaction(sig, &act, &mut old) } < 0 {
        return SIG_ERR;
    }
    old.sa_sigaction
}

/// Whether the program has a handler of its own for a signal that can arrive while every one of
/// its threads waits: one that no fault of a running thread raises. Such a handler may post a
/// semaphore (`sem_post` is async-signal-safe) and so end a wait nothing else would end.
/// Handlers installed through `sigvec`, or before the shim started, are not seen.
pub fn asynchronous_handlers() -> bool {
    const RAISED_BY_A_RUNNING_THREAD: [c_int; 8] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGSYS,
        libc::SIGABRT,
        libc::SIGPIPE,
    ];
    (1..NSIG).any(|i| {
        HANDLERS[i].load(Ordering::Relaxed) != 0
            && !RAISED_BY_A_RUNNING_THREAD.contains(&(i as c_int))
    })
}

/// BSD semantics (glibc's `signal`): restarting unless `siginterrupt` said otherwise, the signal
/// blocked while its handler runs.
fn bsd(sig: c_int, handler: sighandler_t) -> sighandler_t {
    let interrupting =
        index(sig).is_some_and(|i| INTERRUPTING.load(Ordering::Relaxed) >> i & 1 != 0);
    let flags = if interrupting { 0 } else { libc::SA_RESTART };
    install(sig, handler, flags, true)
}

#[no_mangle]
pub extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    bsd(sig, handler)
}

#[no_mangle]
pub extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    bsd(sig, handler)
}

/// System V semantics: the handler is reset to the default at delivery, the signal not blocked.
#[no_mangle]
pub extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    install(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER, false)
}

/// `SIG_HOLD` (glibc's value; the libc crate does not export it).
const SIG_HOLD: sighandler_t = 2;

/// System V's `sigset`, built on the wrapper above as glibc builds it on `sigaction` and
/// `sigprocmask` (glibc's own calls its internal `sigaction`, which this library cannot see):
/// `SIG_HOLD` blocks the signal; anything else installs the disposition with an empty mask and
/// no flags, then unblocks the signal. Returns `SIG_HOLD` when the signal was blocked before,
/// else the previous disposition as the program set it.
#[no_mangle]
pub extern "C" fn sigset(sig: c_int, disp: sighandler_t) -> sighandler_t {
    if disp == SIG_ERR || index(sig).is_none() {
        // SAFETY: errno is the calling thread's.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return SIG_ERR;
    }
    // SAFETY: plain data, filled in below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut one: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigset operations on locals.
    unsafe {
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, sig);
    }
    if disp == SIG_HOLD {
        // SAFETY: valid pointers to locals; the query goes through the wrapper, so the answer
        // is the program's own handler.
        unsafe {
            if libc::sigprocmask(libc::SIG_BLOCK, &one, &mut before) < 0 {
                return SIG_ERR;
            }
            if libc::sigismember(&before, sig) == 1 {
                return SIG_HOLD;
            }
            if sigaction(sig, std::ptr::null(), &mut old) < 0 {
                return SIG_ERR;
            }
        }
        return old.sa_sigaction;
    }
    act.sa_sigaction = disp;
    // SAFETY: a local set.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: valid pointers to locals.
    unsafe {
        if sigaction(sig, &act, &mut old) < 0
            || libc::sigprocmask(libc::SIG_UNBLOCK, &one, &mut before) < 0
        {
            return SIG_ERR;
        }
        if libc::sigismember(&before, sig) == 1 {
            return SIG_HOLD;
        }
    }
    old.sa_sigaction
}

/// What `signal` is in programs built for strict ISO C or XPG (glibc redirects it here).
#[no_mangle]
pub extern "C" fn __sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    sysv_signal(sig, handler)
}

#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    // glibc rewrites the kernel's action with SA_RESTART changed: the trampoline stays.
    // SAFETY: forwarding.
    let r = unsafe { glibc::siginterrupt(sig, flag) };
    if let (0, Some(i)) = (r, index(sig)) {
        if flag != 0 {
            INTERRUPTING.fetch_or(1 << i, Ordering::Relaxed);
            FLAGS[i].fetch_and(!libc::SA_RESTART, Ordering::Relaxed);
        } else {
            INTERRUPTING.fetch_and(!(1 << i), Ordering::Relaxed);
            FLAGS[i].fetch_or(libc::SA_RESTART, Ordering::Relaxed);
        }
    }
    r
}

use crate::real::signal::{LONGJMP, LONGJMP_CHK, SIGLONGJMP, UNDERSCORE_LONGJMP};

type JumpFn = unsafe extern "C" fn(*mut c_void, c_int) -> !;

/// Leaves through `f` (a jump: it does not return), out of any handler.
///
/// # Safety
/// `env` and `val` are the caller's arguments to the jump function `f` stands for.
unsafe fn jump(f: &RealFn, env: *mut c_void, val: c_int) -> ! {
    if threads::in_handler() {
        // A wait the handler interrupted never returns: it must not stay counted as waiting
        // (a false deadlock later, waiters that are not there).
        crate::track::engage::wait_abandoned();
    }
    threads::left_handler_by_jump();
    // SAFETY: `f` is glibc's jump function of this signature.
    let g: JumpFn = unsafe { std::mem::transmute::<usize, JumpFn>(f.get()) };
    // SAFETY: forwarding the caller's arguments.
    unsafe { g(env, val) }
}

#[no_mangle]
pub unsafe extern "C" fn longjmp(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarding.
    unsafe { jump(&LONGJMP, env, val) }
}

#[no_mangle]
pub unsafe extern "C" fn _longjmp(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarding.
    unsafe { jump(&UNDERSCORE_LONGJMP, env, val) }
}

#[no_mangle]
pub unsafe extern "C" fn siglongjmp(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarding.
    unsafe { jump(&SIGLONGJMP, env, val) }
}

/// What `longjmp` and `siglongjmp` are in programs built with `_FORTIFY_SOURCE`.
#[no_mangle]
pub unsafe extern "C" fn __longjmp_chk(env: *mut c_void, val: c_int) -> ! {
    // SAFETY: forwarding.
    unsafe { jump(&LONGJMP_CHK, env, val) }
}
