//! `syscall(SYS_futex, ...)`: the waits of programs whose locks never call a pthread function
//! (Rust's `std::sync`, parking_lot, libstdc++'s `std::atomic::wait` and
//! `std::counting_semaphore`, hand-written futexes). Every call returns exactly what glibc's
//! `syscall` returns, with the same `errno`.
//!
//! `syscall` is variadic. The exported trampoline below sends every other system call to glibc's
//! `syscall` with one jump (registers and stack untouched: nothing else runs), and the futex
//! calls to `c/syscall.c`, which reads the six arguments as glibc does and calls [`tracked`].
//! So do `seccomp` calls: a program that confines itself ends tracing first
//! (`track::confining`).
//!
//! What a wait and a wake mean for the tracker (which calls are waits, how they end, what a
//! wake ends) is in `track::futex`: [`tracked`] picks the operation out of the arguments and
//! hands it the real call.
//!
//! Forwarded untracked: the other operations (`FUTEX_REQUEUE`, `FUTEX_CMP_REQUEUE`,
//! `FUTEX_WAKE_OP`, the priority-inheritance ones, `FUTEX_WAIT_REQUEUE_PI`): the shim does not
//! follow waiters from one word to another nor priority-inheritance owners (a waiter a requeue
//! moved still counts as waiting on the word it began on); calls from the shim's own code (its
//! own locks), from signal handlers and from inside the shim.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_long};

use crate::track::futex::{self, WaitCall};

const SYS_FUTEX: c_long = libc::SYS_futex;
const SYS_SECCOMP: c_long = libc::SYS_seccomp;

use crate::real::futex::SYSCALL;
/// glibc's `syscall` for the trampoline; 0 until resolved, which sends every call to
/// `c/syscall.c` (it forwards them itself before the hook is set).
static REAL: AtomicUsize = AtomicUsize::new(0);

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
        "cmp rdi, {seccomp}",
        "je 2f",
        "jmp r11",
        "2:",
        "jmp {c}",
        real = sym REAL,
        futex = const SYS_FUTEX,
        seccomp = const SYS_SECCOMP,
        c = sym waitshim_syscall,
    )
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
    if number == SYS_SECCOMP {
        // SECCOMP_SET_MODE_STRICT (0), or SECCOMP_SET_MODE_FILTER (1) with a filter that would
        // kill or trap one of the shim's own calls: tracing ends first (`track::confining`).
        if a[0] == 0 || (a[0] == 1 && !crate::seccomp::leaves_the_shim_be(a[2] as usize)) {
            crate::track::confining();
        }
        return forward(number, a);
    }
    if number != SYS_FUTEX || crate::chain::own_code(caller) {
        return forward(number, a);
    }
    match a[1] as c_int & libc::FUTEX_CMD_MASK {
        libc::FUTEX_WAIT | libc::FUTEX_WAIT_BITSET => {
            futex::wait(wait_call(a), || forward(SYS_FUTEX, a))
        }
        libc::FUTEX_WAKE | libc::FUTEX_WAKE_BITSET => {
            futex::wake(a[0] as usize, || forward(SYS_FUTEX, a))
        }
        _ => forward(number, a),
    }
}

/// The wait described by the arguments of a `FUTEX_WAIT` or `FUTEX_WAIT_BITSET`: `uaddr`, `op`,
/// `val`, `timeout`, `uaddr2` (unused), `val3` (the bitset).
fn wait_call(a: &[c_long; 6]) -> WaitCall {
    let bitset = a[1] as c_int & libc::FUTEX_CMD_MASK == libc::FUTEX_WAIT_BITSET;
    WaitCall {
        addr: a[0] as usize,
        expected: a[2] as u32,
        timeout: a[3] as usize,
        bitset: bitset.then_some(a[5] as u32),
    }
}
