//! Live holder stacks: what the thread holding an object is doing right now.
//!
//! - A holder **blocked in a system call** (sleeping, reading, polling, waiting on a futex) is
//!   not disturbed: `/proc/self/task/TID/syscall` gives its stack pointer and program counter, and
//!   its stack is scanned for return addresses (words that point just after a call instruction
//!   in code). A signal would make many of those calls return early with EINTR.
//! - A **running** holder is asked through a signal (`stack_signal` in the policy, default
//!   `SIGRTMAX-4`): its handler unwinds the context the signal interrupted (the unwinder takes
//!   no lock and allocates nothing) into a mailbox of its thread record, and the waiter interns
//!   the frames as a chain.
//!
//! The signal is taken only if the program has no handler of its own for it (nor ignores it). A
//! holder that does not answer (it blocks the signal) is not asked again until it has answered.

use std::sync::atomic::{AtomicI32, Ordering};

use std::sync::atomic::AtomicUsize;

use crate::chain::{self, MAX_DEPTH};
use crate::log::Log;
use crate::policy_api::{StackBox, STACK_IDLE as IDLE};
use crate::procmaps;

/// The signal in use, 0 when live stacks by signal are unavailable.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// How the holder's stack was taken (the `live` field of `HolderStack` records).
pub use waitshim_format::contract::holder_stack::{BY_SIGNAL, SCANNED};

const ASKED: u32 = 1;
const UNWINDING: u32 = 2;
const DONE: u32 = 3;
/// The asker gave up: no new question until the handler has run (then IDLE again).
const ABANDONED: u32 = 4;

/// How long a waiter waits for the holder's answer.
const ANSWER_NS: u64 = 50_000_000;
/// Bytes of a blocked holder's stack scanned for return addresses.
const SCAN_BYTES: usize = 64 * 1024;

/// How the signal handler finds the mailbox of the thread it runs on (a `fn() -> *const
/// StackBox`, null when the thread has none), set at start by the layer that knows where
/// threads keep theirs: one atomic load in the handler.
static MAILBOX_OF_CALLER: AtomicUsize = AtomicUsize::new(0);

/// Tells the signal handler how to find the calling thread's mailbox (at start, before any
/// policy can ask for live stacks).
pub fn set_mailbox_of_caller(f: fn() -> *const StackBox) {
    MAILBOX_OF_CALLER.store(f as usize, Ordering::Release);
}

fn mailbox_of_caller() -> *const StackBox {
    let f = MAILBOX_OF_CALLER.load(Ordering::Acquire);
    if f == 0 {
        return std::ptr::null();
    }
    // SAFETY: a non-zero value was stored from a `fn() -> *const StackBox` in
    // `set_mailbox_of_caller`.
    let f: fn() -> *const StackBox = unsafe { std::mem::transmute(f) };
    f()
}

/// A policy asks for live stacks: take the signal (once).
pub fn setup(log: &Log, spec: &str) {
    if SIGNAL.load(Ordering::Relaxed) != 0 {
        return;
    }
    let (rtmin, rtmax) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    let sig = match waitshim_policy::signal::parse(spec, rtmin, rtmax) {
        Ok(waitshim_policy::signal::SignalSpec::Number(n)) => n,
        Ok(waitshim_policy::signal::SignalSpec::None) => return,
        Err(e) => {
            crate::diag::say(
                log,
                &format!("stack_signal: {e}; running holders get no live stack"),
            );
            return;
        }
    };
    match crate::signals::install(sig, on_signal) {
        Ok(()) => SIGNAL.store(sig, Ordering::Relaxed),
        Err(why) => crate::diag::say(
            log,
            &format!(
                "stack_signal {}: {why}; running holders get no live stack",
                waitshim_policy::signal::name(sig, rtmin, rtmax)
            ),
        ),
    }
}

/// The holder's side: unwind the interrupted context into the mailbox. Only atomics and the
/// unwinder, which is async-signal-safe and keeps errno.
extern "C" fn on_signal(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; kept for the interrupted code.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: `ctx` is the ucontext the kernel passed to this SA_SIGINFO handler.
    unsafe { undo_interruption(ctx) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    let p = mailbox_of_caller();
    if p.is_null() {
        return;
    }
    // SAFETY: mailboxes live in thread records, which are leaked and never freed; this is the
    // thread's own.
    let b = unsafe { &*p };
    if b.state
        .compare_exchange(ABANDONED, IDLE, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
        || b.state
            .compare_exchange(ASKED, UNWINDING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let mut frames = [0u64; MAX_DEPTH];
    // SAFETY: `ctx` is the ucontext the kernel passed to this SA_SIGINFO handler.
    let n = unsafe { chain::capture_interrupted(ctx, &mut frames) };
    for (slot, &f) in b.frames.iter().zip(&frames[..n]) {
        slot.store(f, Ordering::Relaxed);
    }
    b.len.store(n as u32, Ordering::Relaxed);
    b.state.store(DONE, Ordering::Release);
}

/// The kernel does not restart some system calls after a signal handler ran, `SA_RESTART` or
/// not: sleeps (`nanosleep`, `clock_nanosleep`), `poll`, `select`, `epoll_wait`, `pause`,
/// `sigsuspend`... They fail with EINTR, which the program would never have seen without the
/// shim's signal. When the handler finds the thread interrupted in such a call (its context
/// stands just after a `syscall` instruction with -EINTR as the result), it puts the thread back
/// on the instruction with the call's number, so that the call is made again when the handler
/// returns: the program sees it as one call that took a little longer (a relative timeout
/// starts again, so a sleep ends late, never early, as any sleep may). The number is read from
/// the `mov $number, %eax` that precedes the instruction in glibc's wrappers (463 of 529
/// `syscall` sites in Debian 12's libc.so.6); a call made another way keeps its EINTR.
///
/// # Safety
/// `ctx` is the `ucontext_t` the kernel passed to an `SA_SIGINFO` handler now running.
unsafe fn undo_interruption(ctx: *mut libc::c_void) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: per the contract, a valid ucontext the handler may change (it is restored on
    // return from the handler).
    let regs = unsafe { &mut (*(ctx as *mut libc::ucontext_t)).uc_mcontext.gregs };
    let (rax, rip) = (
        regs[libc::REG_RAX as usize],
        regs[libc::REG_RIP as usize] as u64,
    );
    if rax != -i64::from(libc::EINTR) || rip < 7 {
        return;
    }
    let mut code = [0u8; 7];
    if read_mem(rip - 7, &mut code) != code.len() {
        return;
    }
    // b8 imm32: mov $imm32, %eax; 0f 05: syscall.
    if code[0] != 0xb8 || code[5..7] != [0x0f, 0x05] {
        return;
    }
    let number = u32::from_le_bytes([code[1], code[2], code[3], code[4]]);
    regs[libc::REG_RAX as usize] = i64::from(number);
    regs[libc::REG_RIP as usize] = (rip - 2) as i64;
}

/// Where thread `tid` is: blocked in a system call (stack pointer, program counter), running,
/// or unknown.
enum Whereabouts {
    Blocked { sp: u64, pc: u64 },
    Running,
    Unknown,
}

fn whereabouts(tid: u32) -> Whereabouts {
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
        return Whereabouts::Unknown;
    };
    let f: Vec<&str> = text.split_ascii_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    match f.as_slice() {
        ["running"] => Whereabouts::Running,
        // "nr arg1 .. arg6 sp pc": blocked in system call nr.
        [nr, .., sp, pc] if f.len() == 9 && !nr.starts_with('-') => match (hex(sp), hex(pc)) {
            (Some(sp), Some(pc)) => Whereabouts::Blocked { sp, pc },
            _ => Whereabouts::Unknown,
        },
        _ => Whereabouts::Unknown,
    }
}

/// Reads `buf.len()` bytes of this process's memory at `addr` through the kernel (an unmapped
/// address fails cleanly); the count read.
fn read_mem(addr: u64, buf: &mut [u8]) -> usize {
    crate::layout::read_some(addr as usize, buf).unwrap_or(0)
}

/// Whether `ret` is a return address: code, right after a call instruction (a direct call whose
/// target is code, or an indirect `call` through a register or memory).
fn after_call(code: &procmaps::Code, ret: u64) -> bool {
    if ret < 7 || !code.contains(ret) {
        return false;
    }
    let mut b = [0u8; 7];
    if read_mem(ret - 7, &mut b) != 7 {
        return false;
    }
    if b[2] == 0xe8 {
        let rel = i32::from_le_bytes([b[3], b[4], b[5], b[6]]);
        return code.contains(ret.wrapping_add(rel as i64 as u64));
    }
    // ff /2 with a ModRM byte: 2 (register), 3 (disp8 or SIB), 6 or 7 (disp32) bytes long.
    let indirect = |at: usize| b[at] == 0xff && (b[at + 1] >> 3) & 7 == 2;
    indirect(5) || indirect(4) || indirect(1) || indirect(0)
}

/// The stack of a thread blocked in a system call, scanned: its program counter, then every
/// return address found on its stack above `sp`, innermost first, the shim's own left out.
fn scan(sp: u64, pc: u64, depth: usize) -> Vec<u64> {
    scan_in(&procmaps::read(), sp, pc, depth)
}

/// [`scan`] with the process's mappings already read (the sampler scans several threads in one
/// look). `sp` and `pc` are the thread's as `/proc/self/task/TID/syscall` shows them while it
/// is blocked; the thread is neither stopped nor signalled, so a thread that returns from its
/// call meanwhile gives stale frames: the first frames are then wrong, never unsafe to read
/// (every read goes through the kernel).
pub fn scan_in(maps: &[procmaps::Mapping], sp: u64, pc: u64, depth: usize) -> Vec<u64> {
    let own_code = crate::chain::own();
    let code = procmaps::Code::of(maps);
    let own = |a: u64| own_code.contains(&a);
    let mut frames = vec![pc];
    let mut buf = vec![0u8; 4096];
    let mut at = sp & !7;
    // Within the stack's own mapping: beyond it lies other memory (another thread's stack).
    let end = maps
        .iter()
        .find(|m| (m.start..m.end).contains(&sp))
        .map_or(sp, |m| m.end)
        .min(sp.saturating_add(SCAN_BYTES as u64));
    while frames.len() < depth && at < end {
        let want = buf.len().min((end - at) as usize);
        let n = read_mem(at, &mut buf[..want]);
        if n < 8 {
            break;
        }
        for w in buf[..n - n % 8].chunks_exact(8) {
            let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            if v > 4096 && !own(v) && after_call(&code, v) {
                frames.push(v);
                if frames.len() == depth {
                    break;
                }
            }
        }
        at += n as u64;
    }
    frames
}

/// The waiter's side: the frames of what thread `holder` of process `pid` is doing now (at most
/// `depth`, innermost first), and how they were taken. `mailbox` is the holder's.
pub fn ask(pid: u32, holder: u32, mailbox: &StackBox, depth: usize) -> Option<(Vec<u64>, u8)> {
    match whereabouts(holder) {
        Whereabouts::Blocked { sp, pc } => Some((scan(sp, pc, depth), SCANNED)),
        Whereabouts::Running => by_signal(pid, mailbox, holder).map(|f| (f, BY_SIGNAL)),
        Whereabouts::Unknown => None,
    }
}

fn by_signal(pid: u32, b: &StackBox, holder: u32) -> Option<Vec<u64>> {
    let sig = SIGNAL.load(Ordering::Relaxed);
    if sig == 0 || !crate::confinement::may_signal() {
        return None;
    }
    if !crate::signals::still_ours(sig, on_signal) {
        return None;
    }
    // One question at a time per holder; the asker that set ASKED is the one that collects.
    b.state
        .compare_exchange(IDLE, ASKED, Ordering::AcqRel, Ordering::Relaxed)
        .ok()?;
    // SAFETY: tgkill to a thread of this process.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            pid as libc::c_long,
            holder as libc::c_long,
            sig as libc::c_long,
        )
    } == 0;
    if !sent {
        b.state.store(IDLE, Ordering::Release);
        return None;
    }
    let start = crate::clock::now_ns();
    loop {
        let waited = crate::clock::now_ns().saturating_sub(start);
        match b.state.load(Ordering::Acquire) {
            DONE => break,
            // A handler that never finishes unwinding: give up; this holder is not asked again.
            UNWINDING if waited > 20 * ANSWER_NS => return None,
            // No answer (the holder blocks the signal, or has exited): leave it alone until its
            // handler runs.
            ASKED
                if waited > ANSWER_NS
                    && b.state
                        .compare_exchange(ASKED, ABANDONED, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok() =>
            {
                return None;
            }
            _ => {}
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 20_000,
        };
        // SAFETY: plain system call with a valid timespec.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
    let n = (b.len.load(Ordering::Relaxed) as usize).min(MAX_DEPTH);
    let frames: Vec<u64> = b.frames[..n]
        .iter()
        .map(|f| f.load(Ordering::Relaxed))
        .collect();
    b.state.store(IDLE, Ordering::Release);
    (n > 0).then_some(frames)
}
