//! An in-process unwinder for x86_64 Linux: the call chain of the calling thread, or of the
//! context a signal interrupted, from the DWARF call frame information (`.eh_frame`) of the
//! loaded objects.
//!
//! Made to run inside someone else's process, at any moment:
//! - no allocation, no lock, no file descriptor, no `dlsym` while unwinding: callable from a
//!   signal handler ([`backtrace_from_ucontext`], [`backtrace_from`]); `errno` is kept;
//! - it never faults: object memory is read only within the readable segments of the objects
//!   of the published module table, stack memory directly only within the part of the
//!   thread's stack known to be mapped, and through `process_vm_readv` anywhere else;
//! - small, bounded stack use (under 2 KiB for a whole unwind, the caller's 64-frame buffer
//!   included: 1968 bytes measured by the test `an_unwind_uses_less_than_2_kib_of_stack_with_
//!   its_64_frame_buffer` on a painted stack) and bounded work (at most `out.len()` + 64 steps);
//! - it stops cleanly at an undefined return address (`_start`, `clone3`), at the first frame
//!   whose program counter is in no loaded object or whose rules cannot be followed, and at
//!   any inconsistency (a caller's stack pointer not above its callee's).
//!
//! The module table is built with [`refresh`] outside signal handlers (at start; after each
//! `dlopen` [`refresh_if_loaded`] does it if the loader added objects; [`backtrace`], which is
//! for ordinary code, also does it when it finds code the loader added since), and unloads must
//! go through [`around_unload`].

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod cache;
mod cfi;
mod expr;
mod mem;
mod modules;
mod regs;

use std::ops::Range;

use cache::Packed;
use cfi::{Cfa, Row, Rule};
pub use mem::thread_stack;
use mem::Window;
pub use modules::{around_unload, refresh, refresh_if_loaded};
use modules::{Module, Table};
pub use regs::Regs;
use regs::{Frame, NREG, RIP, RSP};

/// Steps allowed beyond the frames asked for (frames skipped at the start of the chain).
const EXTRA_STEPS: usize = 64;

/// Keeps the caller's `errno` across an unwind (`process_vm_readv` may set it).
struct KeepErrno(libc::c_int);

impl KeepErrno {
    #[inline]
    fn new() -> KeepErrno {
        // SAFETY: errno is thread-local and always addressable.
        KeepErrno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for KeepErrno {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// The program counters of the calling thread's frames, innermost first, into `out`; the
/// count written. The first is inside this function; frames whose program counter lies in
/// `skip` are left out until the first one outside it (a library leaving out its own frames).
///
/// Not for signal handlers: the first call of a thread learns its stack bounds, and the first
/// call of the process builds the module table.
#[inline(never)]
pub fn backtrace(out: &mut [u64], skip: Range<u64>) -> usize {
    backtrace_slots(out, None, skip)
}

/// As [`backtrace`], also writing into `slots` (as long as `out`) the stack address each return
/// address was read from (0 for the first frame, and after a signal frame): enough to tell
/// later, with [`read_slots`], whether the same frames are on the stack again.
#[inline(never)]
pub fn backtrace_slots(out: &mut [u64], slots: Option<&mut [u64]>, skip: Range<u64>) -> usize {
    let _errno = KeepErrno::new();
    let (rip, rsp, rbp, rbx, r12, r13, r14, r15): (u64, u64, u64, u64, u64, u64, u64, u64);
    // SAFETY: only copies registers. Whatever registers the operands get, the values are
    // those of one instant of this function, which its CFI row at `rip` describes: a
    // callee-saved register the compiler lets this block overwrite was saved by the prologue,
    // and the row says where.
    unsafe {
        std::arch::asm!(
            "lea {0}, [rip]",
            "mov {1}, rsp",
            "mov {2}, rbp",
            "mov {3}, rbx",
            "mov {4}, r12",
            "mov {5}, r13",
            "mov {6}, r14",
            "mov {7}, r15",
            out(reg) rip, out(reg) rsp, out(reg) rbp, out(reg) rbx,
            out(reg) r12, out(reg) r13, out(reg) r14, out(reg) r15,
            options(nomem, nostack, preserves_flags),
        );
    }
    mem::learn_bounds(rsp);
    if !modules::published() {
        refresh();
    }
    let regs = Regs {
        rip,
        rsp,
        rbp,
        rbx,
        r12,
        r13,
        r14,
        r15,
    };
    let win = Window::here(rsp);
    let mut slots = slots;
    let (n, lost) = walk(
        Frame::from(&regs),
        &win,
        out,
        slots.as_deref_mut(),
        skip.clone(),
    );
    // Code loaded since the table was built (by glibc itself, or by a constructor that a
    // dlopen runs before it returns): build it again and start over.
    if lost && modules::refresh_if_loaded() {
        return walk(Frame::from(&regs), &win, out, slots, skip).0;
    }
    n
}

/// Reads the words at `slots` of the calling thread's stack (addresses [`backtrace_slots`]
/// gave) into `out`, without faulting; false if one cannot be read. Call chains that have the
/// same return addresses at the same places on the stack are the same chain: reading them back
/// tells whether the stack holds a chain captured before, at a fraction of an unwind's cost.
#[inline(never)]
pub fn read_slots(slots: &[u64], out: &mut [u64]) -> bool {
    let _errno = KeepErrno::new();
    let own_sp = &_errno as *const KeepErrno as u64;
    let win = Window::here(own_sp);
    for (o, &at) in out.iter_mut().zip(slots) {
        match win.read(at) {
            Some(v) => *o = v,
            None => return false,
        }
    }
    true
}

/// The frames of the context a signal interrupted (`ucontext` as passed to an `SA_SIGINFO`
/// handler), innermost first: its program counter, then the return addresses; frames in `skip`
/// left out at the start, as in [`backtrace`]. The count written. Async-signal-safe.
///
/// # Safety
/// `ucontext` must point to a valid `ucontext_t`.
pub unsafe fn backtrace_from_ucontext(
    ucontext: *const libc::c_void,
    out: &mut [u64],
    skip: Range<u64>,
) -> usize {
    // SAFETY: the caller passes a valid ucontext_t.
    let g = unsafe { &(*(ucontext as *const libc::ucontext_t)).uc_mcontext.gregs };
    let r = |i: libc::c_int| g[i as usize] as u64;
    let regs = Regs {
        rip: r(libc::REG_RIP),
        rsp: r(libc::REG_RSP),
        rbp: r(libc::REG_RBP),
        rbx: r(libc::REG_RBX),
        r12: r(libc::REG_R12),
        r13: r(libc::REG_R13),
        r14: r(libc::REG_R14),
        r15: r(libc::REG_R15),
    };
    backtrace_from(&regs, out, skip)
}

/// The frames of a context given by its registers (the innermost program counter exact, as
/// an interrupted one), innermost first, `skip` as in [`backtrace`]; the count written.
/// Async-signal-safe. Registers that make no sense give a short chain.
#[inline(never)]
pub fn backtrace_from(regs: &Regs, out: &mut [u64], skip: Range<u64>) -> usize {
    let _errno = KeepErrno::new();
    let own_sp = &_errno as *const KeepErrno as u64;
    walk(Frame::from(regs), &Window::here(own_sp), out, None, skip).0
}

/// Unwinds from `f` into `out` (and where each return address was read into `slots`, if
/// given): the count written, and whether the chain ended at a program counter in no object of
/// the table.
fn walk(
    mut f: Frame,
    win: &Window,
    out: &mut [u64],
    mut slots: Option<&mut [u64]>,
    skip: Range<u64>,
) -> (usize, bool) {
    let Some(reader) = modules::read() else {
        return (0, false);
    };
    let table = reader.table();
    let mut n = 0;
    let mut skipping = true;
    // The innermost program counter is where the thread is; the others are return addresses,
    // looked up one byte back (inside the call), except after a signal frame.
    let mut exact = true;
    // Where the current frame's program counter was read: the caller's stack pointer, less the
    // return address (x86-64: the caller's stack pointer is the callee's CFA).
    let mut read_at = 0u64;
    for _ in 0..out.len() + EXTRA_STEPS {
        let pc = f.v[RIP];
        if !(skipping && skip.contains(&pc)) {
            skipping = false;
            out[n] = pc;
            if let Some(s) = slots.as_deref_mut() {
                s[n] = if n == 0 { 0 } else { read_at };
            }
            n += 1;
            if n == out.len() {
                break;
            }
        }
        let look = if exact { pc } else { pc.wrapping_sub(1) };
        match step(table, &f, look, win) {
            Some((next, signal)) => {
                f = next;
                exact = signal;
                read_at = if signal { 0 } else { f.v[RSP].wrapping_sub(8) };
            }
            None => return (n, table.find(look).is_none()),
        }
    }
    (n, false)
}

/// The caller's frame of `f`, whose code is at `look`, and whether `f` is a signal frame.
#[inline]
fn step(t: &Table, f: &Frame, look: u64, win: &Window) -> Option<(Frame, bool)> {
    match cache::get(look, t.gen) {
        Some(p) => Some((apply_packed(p, f, win)?, false)),
        None => step_decoding(t, f, look, win),
    }
}

#[inline(never)]
fn step_decoding(t: &Table, f: &Frame, look: u64, win: &Window) -> Option<(Frame, bool)> {
    let m = t.find(look)?;
    let (row, signal) = cfi::row_at(m, look)?;
    if !signal {
        if let Some(p) = Packed::pack(&row) {
            cache::put(look, t.gen, p);
        }
    }
    let next = apply(&row, m, f, win)?;
    // A signal frame's caller may be on another stack (the handler ran on an altstack).
    if !signal && next.v[RSP] <= f.v[RSP] {
        return None;
    }
    Some((next, signal))
}

#[inline]
fn apply_packed(p: Packed, f: &Frame, win: &Window) -> Option<Frame> {
    if p.end() {
        return None;
    }
    let (reg, off) = p.cfa();
    let cfa = f.get(reg)?.wrapping_add(off);
    if cfa <= f.v[RSP] {
        return None;
    }
    let mut next = *f;
    for slot in 0..NREG {
        if let Some(o) = p.saved(slot) {
            match win.read(cfa.wrapping_add(o as u64)) {
                Some(v) => next.set(slot, v),
                None => next.known &= !(1 << slot),
            }
        }
    }
    let ra = win.read(cfa - 8)?;
    if ra == 0 {
        return None;
    }
    next.set(RIP, ra);
    next.set(RSP, cfa);
    Some(next)
}

fn apply(row: &Row, m: &Module, f: &Frame, win: &Window) -> Option<Frame> {
    let cfa = match row.cfa {
        Cfa::Reg(s, off) => f.get(s as usize)?.wrapping_add(off as i64 as u64),
        Cfa::Expr { off, len } => expr::eval(cfi::expr(m, off, len), f, None, win)?,
        Cfa::Unknown => return None,
    };
    let mut next = Frame {
        v: [0; NREG],
        known: 0,
    };
    for (slot, rule) in row.regs.iter().enumerate() {
        let v = match *rule {
            Rule::Same => f.get(slot),
            Rule::Undefined => None,
            Rule::At(o) => win.read(cfa.wrapping_add(o as i64 as u64)),
            Rule::Val(o) => Some(cfa.wrapping_add(o as i64 as u64)),
            Rule::Reg(s) => f.get(s as usize),
            Rule::AtExpr { off, len } => {
                expr::eval(cfi::expr(m, off, len), f, Some(cfa), win).and_then(|a| win.read(a))
            }
            Rule::ValExpr { off, len } => expr::eval(cfi::expr(m, off, len), f, Some(cfa), win),
        };
        if let Some(v) = v {
            next.set(slot, v);
        }
    }
    next.get(RIP).filter(|&ra| ra != 0)?;
    next.get(RSP)?;
    Some(next)
}
