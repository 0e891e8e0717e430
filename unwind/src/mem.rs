//! Reading stack memory without ever faulting.
//!
//! A read inside the window — the part of the calling thread's stack known to be mapped — is a
//! plain load. Any other read (an altstack, a coroutine's stack, an address a corrupt frame
//! made up) goes through `process_vm_readv` on the own pid, which fails with EFAULT instead of
//! faulting and involves no file descriptor.
//!
//! The window runs from the unwind's own stack pointer up to the high end of the calling
//! thread's stack, when that stack pointer lies within the thread's stack bounds: everything
//! between a stack pointer the thread runs on and the top of its stack is mapped (a guard page
//! a program put at the bottom of a stack it handed over lies below). The bounds are worked
//! out once per thread outside signal handlers and kept in initial-exec TLS (one `%fs` load, no
//! `__tls_get_addr`, which may allocate):
//! - a thread glibc created: the stack block in its descriptor (`struct pthread`'s
//!   `stackblock`, `stackblock_size` and `guardsize`), trusted only when it holds the thread's
//!   stack pointer. Not `pthread_getattr_np`, which allocates from the program's heap: this runs
//!   on a program thread, perhaps inside the program's own allocator;
//! - the main thread: up to `__libc_stack_end` (all frames lie below it), down to
//!   `RLIMIT_STACK` (at most 1 GiB) below it, where the kernel places no other mapping; the
//!   stack mapping only grows, so it covers everything from any stack pointer the thread has
//!   used up to its top. (`pthread_getattr_np` would open `/proc/self/maps` for the main
//!   thread.)
//!
//! An unwind whose own stack pointer is elsewhere (a handler on an altstack, a coroutine) has an
//! empty window: every read goes through the kernel.

use std::arch::{asm, global_asm};

global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl waitshim_unwind_stack",
    ".hidden waitshim_unwind_stack",
    ".type waitshim_unwind_stack, @object",
    ".size waitshim_unwind_stack, 24",
    "waitshim_unwind_stack:",
    ".zero 24",
    ".popsection",
);

/// TLS words: the bounds' low and high ends and their state.
const LO: usize = 0;
const HI: usize = 8;
const STATE: usize = 16;

const UNKNOWN_YET: u64 = 0;
/// Bounds known: mapped from any stack pointer inside them up to their high end.
const KNOWN: u64 = 1;
/// No bounds to be had: every read goes through the kernel.
const NONE: u64 = 2;

#[inline(always)]
fn tls_offset() -> u64 {
    let off: u64;
    // SAFETY: loads the link-time constant thread-pointer offset of our TLS block from the GOT.
    unsafe {
        asm!("mov {}, qword ptr [rip + waitshim_unwind_stack@GOTTPOFF]", out(reg) off,
             options(pure, readonly, nostack, preserves_flags));
    }
    off
}

#[inline(always)]
fn tls_get(word: usize) -> u64 {
    let v: u64;
    // SAFETY: reads a word of this thread's own TLS block.
    unsafe {
        asm!("mov {v}, qword ptr fs:[{o}]", v = out(reg) v, o = in(reg) tls_offset() + word as u64,
             options(readonly, nostack, preserves_flags));
    }
    v
}

#[inline(always)]
fn tls_set(word: usize, v: u64) {
    // SAFETY: writes a word of this thread's own TLS block.
    unsafe {
        asm!("mov qword ptr fs:[{o}], {v}", v = in(reg) v, o = in(reg) tls_offset() + word as u64,
             options(nostack, preserves_flags));
    }
}

extern "C" {
    /// Set by the dynamic loader to the stack pointer at program entry.
    static __libc_stack_end: *const libc::c_void;
}

/// The calling thread's stack bounds `(lo, hi)`: every address from a stack pointer of the
/// thread up to `hi` is mapped, and the thread's stack pointer stays above `lo` (below its guard
/// pages). None when they cannot be known. Learnt once per thread; not for signal handlers.
pub fn thread_stack(sp: u64) -> Option<(u64, u64)> {
    learn_bounds(sp);
    (tls_get(STATE) == KNOWN).then(|| (tls_get(LO), tls_get(HI)))
}

/// Where glibc's `struct pthread` keeps `stackblock`, `stackblock_size` and `guardsize`
/// (x86-64, glibc 2.26 to 2.41).
const STACK_BLOCK_OFFSET: u64 = 0x690;

/// Works the calling thread's stack bounds out once. Not for signal handlers.
pub(crate) fn learn_bounds(sp: u64) {
    if tls_get(STATE) != UNKNOWN_YET {
        return;
    }
    let (lo, hi, state) = bounds(sp);
    tls_set(LO, lo);
    tls_set(HI, hi);
    // A signal handler interrupting this thread reads the state last: the bounds first.
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    tls_set(STATE, state);
}

fn bounds(sp: u64) -> (u64, u64, u64) {
    // SAFETY: plain system calls.
    let main = unsafe { libc::gettid() == libc::getpid() };
    if main {
        // SAFETY: an object of the dynamic loader, written once before any program code ran.
        let end = unsafe { __libc_stack_end } as u64;
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: writes into `lim`.
        let cap = if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut lim) } == 0 {
            lim.rlim_cur.min(1 << 30)
        } else {
            0
        };
        let lo = end.saturating_sub(cap);
        return if sp > lo && sp < end {
            (lo, end, KNOWN)
        } else {
            // A coroutine stack of the main thread, or a child forked from another thread.
            (0, 0, NONE)
        };
    }
    // SAFETY: pthread_self is the calling thread's own descriptor, larger than the three words
    // read, whose stack fields no other thread writes while it runs.
    let (block, size, guard) = unsafe {
        let th = libc::pthread_self() as u64 + STACK_BLOCK_OFFSET;
        let word = |i: u64| std::ptr::read_volatile((th + 8 * i) as *const u64);
        (word(0), word(1), word(2))
    };
    match block.checked_add(size) {
        Some(hi) if size > 0 && guard < size && sp > block + guard && sp < hi => {
            (block + guard, hi, KNOWN)
        }
        _ => (0, 0, NONE),
    }
}

/// Memory an unwind reads: plain loads in `[lo, hi)`, the kernel elsewhere.
pub(crate) struct Window {
    lo: u64,
    hi: u64,
}

impl Window {
    /// The window of the calling thread for an unwind whose own stack pointer is `own_sp`,
    /// from the bounds learnt before (none yet: an empty window). Async-signal-safe.
    pub fn here(own_sp: u64) -> Window {
        let (lo, hi) = (tls_get(LO), tls_get(HI));
        match tls_get(STATE) {
            KNOWN if own_sp > lo && own_sp < hi => Window { lo: own_sp, hi },
            _ => Window::EMPTY,
        }
    }

    pub const EMPTY: Window = Window { lo: 0, hi: 0 };

    /// The 8 bytes at `addr`, if they can be read.
    #[inline]
    pub fn read(&self, addr: u64) -> Option<u64> {
        if addr >= self.lo && addr < self.hi && self.hi - addr >= 8 {
            // SAFETY: inside the window: mapped, readable stack memory of this thread.
            Some(unsafe { std::ptr::read_unaligned(addr as *const u64) })
        } else {
            read_slow(addr)
        }
    }
}

/// Reads 8 bytes through the kernel: a bad address fails with EFAULT instead of faulting.
#[cold]
fn read_slow(addr: u64) -> Option<u64> {
    let mut v = 0u64;
    let local = libc::iovec {
        iov_base: &mut v as *mut u64 as *mut libc::c_void,
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: the kernel writes at most 8 bytes into `v` and checks the source range itself.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 8).then_some(v)
}
