//! Live holder stacks: what the thread holding an object is doing right now. The waiter asks the
//! holder through a signal (`stack_signal` in the policy, default `SIGRTMAX-4`); the holder's
//! handler unwinds its own stack with libunwind (async-signal-safe) into a buffer of its thread
//! record and says it is done; the waiter interns the frames as a chain.
//!
//! The signal is taken only if the program has no handler of its own for it. A holder blocked in
//! a system call that the kernel does not restart after a handler sees it end early with EINTR:
//! the sleeps are resumed by `interpose::sleep`; `poll`, `epoll_wait` and `select` return EINTR,
//! as with any signal the program did not send. That is why this action is opt-in.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::chain::{self, MAX_DEPTH};
use crate::track::threads::{inside_now, own_record, Inside};
use crate::track::Tracker;

/// The signal in use, 0 when live stacks are unavailable.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Whether live stacks are in use (the sleep wrappers then resume sleeps the signal cut short).
#[inline]
pub fn in_use() -> bool {
    SIGNAL.load(Ordering::Relaxed) != 0
}

/// How many times the calling thread's handler ran (0 for threads the shim does not know).
pub fn signals_taken() -> u32 {
    let p = own_record();
    if p.is_null() {
        return 0;
    }
    // SAFETY: thread records are leaked and never freed.
    unsafe { &(*p).stack }.taken.load(Ordering::Acquire)
}

const IDLE: u32 = 0;
const ASKED: u32 = 1;
const UNWINDING: u32 = 2;
const DONE: u32 = 3;

/// How long a waiter waits for the holder's answer.
const ANSWER_NS: u64 = 50_000_000;

/// A thread's mailbox for stack requests.
pub struct StackBox {
    state: AtomicU32,
    /// Times this thread's handler ran.
    taken: AtomicU32,
    len: AtomicU32,
    frames: [AtomicU64; MAX_DEPTH],
}

impl Default for StackBox {
    fn default() -> Self {
        StackBox {
            state: AtomicU32::new(IDLE),
            taken: AtomicU32::new(0),
            len: AtomicU32::new(0),
            frames: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl StackBox {
    /// For a new thread reusing the record of one that ended.
    pub fn reset(&self) {
        self.state.store(IDLE, Ordering::Release);
        self.taken.store(0, Ordering::Relaxed);
        self.len.store(0, Ordering::Relaxed);
    }
}

/// A policy asks for live stacks: take the signal (once).
pub fn setup(tr: &Tracker, spec: &str) {
    if SIGNAL.load(Ordering::Relaxed) != 0 {
        return;
    }
    if !chain::signal_safe() {
        crate::service::say(
            tr,
            "holder_live_stack needs libunwind (libunwind8) for a signal-safe unwind; live stacks are off",
        );
        return;
    }
    let (rtmin, rtmax) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    let sig = match waitshim_policy::signal::parse(spec, rtmin, rtmax) {
        Ok(waitshim_policy::signal::SignalSpec::Number(n)) => n,
        Ok(waitshim_policy::signal::SignalSpec::None) => return,
        Err(e) => {
            crate::service::say(tr, &format!("stack_signal: {e}; live stacks are off"));
            return;
        }
    };
    match crate::signals::install(sig, on_signal) {
        Ok(()) => SIGNAL.store(sig, Ordering::Relaxed),
        Err(why) => crate::service::say(
            tr,
            &format!(
                "stack_signal {}: {why}; live stacks are off",
                waitshim_policy::signal::name(sig, rtmin, rtmax)
            ),
        ),
    }
}

/// The holder's side: unwind into the mailbox. Only atomics and libunwind's `unw_backtrace`.
extern "C" fn on_signal(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let p = own_record();
    if p.is_null() {
        return;
    }
    // SAFETY: thread records are leaked and never freed; this is the thread's own.
    let b = unsafe { &(*p).stack };
    b.taken.fetch_add(1, Ordering::AcqRel);
    if b.state
        .compare_exchange(ASKED, UNWINDING, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Interrupted inside the shim, the thread may be in libunwind already, holding its lock:
    // unwinding again would deadlock. Answer with no stack.
    if inside_now() {
        b.len.store(0, Ordering::Relaxed);
        b.state.store(DONE, Ordering::Release);
        return;
    }
    // SAFETY: errno is thread-local; kept for the interrupted code.
    let errno = unsafe { *libc::__errno_location() };
    // libunwind locks with pthread_mutex_lock: those calls must go straight to glibc. Entering
    // and leaving only writes this thread's TLS words.
    let inside = Inside::enter();
    let mut frames = [0u64; MAX_DEPTH];
    let n = chain::capture(MAX_DEPTH, &mut frames);
    drop(inside);
    for (slot, &f) in b.frames.iter().zip(&frames[..n]) {
        slot.store(f, Ordering::Relaxed);
    }
    b.len.store(n as u32, Ordering::Relaxed);
    b.state.store(DONE, Ordering::Release);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The waiter's side: the chain of what thread `holder` is doing now, if it answers in time.
pub fn ask(tr: &Tracker, holder: u32) -> Option<u32> {
    let sig = SIGNAL.load(Ordering::Relaxed);
    if sig == 0 || !crate::signals::still_ours(sig, on_signal) {
        return None;
    }
    let rec = tr.thread(holder)?;
    let b = &rec.stack;
    // One question at a time per holder. An answer nobody collected (the asker gave up) is
    // discarded.
    if b.state
        .compare_exchange(IDLE, ASKED, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
        && b.state
            .compare_exchange(DONE, ASKED, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return None;
    }
    // SAFETY: tgkill to a thread of this process.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            tr.pid as libc::c_long,
            holder as libc::c_long,
            sig as libc::c_long,
        )
    } == 0;
    let start = crate::clock::now_ns();
    while sent && b.state.load(Ordering::Acquire) != DONE {
        if crate::clock::now_ns().saturating_sub(start) > ANSWER_NS {
            // No answer (the holder blocks signals, has exited, or is stuck): withdraw the
            // question, or leave an unwinding handler to finish on its own.
            let _ = b
                .state
                .compare_exchange(ASKED, IDLE, Ordering::AcqRel, Ordering::Relaxed);
            return None;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 20_000,
        };
        // SAFETY: plain system call with a valid timespec.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
    if !sent {
        b.state.store(IDLE, Ordering::Release);
        return None;
    }
    let n = (b.len.load(Ordering::Relaxed) as usize).min(MAX_DEPTH);
    let frames: Vec<u64> = b.frames[..n]
        .iter()
        .map(|f| f.load(Ordering::Relaxed))
        .collect();
    b.state.store(IDLE, Ordering::Release);
    Some(tr.chains.intern(&frames, &tr.log))
}
