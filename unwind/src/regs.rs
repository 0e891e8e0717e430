//! The registers the unwinder tracks: those a caller's frame can be found with (the stack and
//! frame pointers, the callee-saved registers a CFA or a later save may use, and the program
//! counter). Other registers are caller-saved: nothing in a caller depends on them at a call.

/// Slot numbers, in this order: rbx, rbp, rsp, r12, r13, r14, r15, rip.
pub(crate) const RBX: usize = 0;
pub(crate) const RBP: usize = 1;
pub(crate) const RSP: usize = 2;
pub(crate) const RIP: usize = 7;
pub(crate) const NREG: usize = 8;

/// The slot of DWARF register `n` (x86_64 numbering; 16 is the return address column, which
/// is the caller's rip).
#[inline]
pub(crate) fn dwarf_slot(n: u64) -> Option<usize> {
    Some(match n {
        3 => RBX,
        6 => RBP,
        7 => RSP,
        12..=15 => n as usize - 9,
        16 => RIP,
        _ => return None,
    })
}

/// Register values of one frame, with which of them are known (a whole word: frames are
/// copied as words, and a byte written just before its word is read stalls the copy).
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    pub v: [u64; NREG],
    pub known: u64,
}

impl Frame {
    #[inline]
    pub fn get(&self, slot: usize) -> Option<u64> {
        (self.known & (1 << slot) != 0).then(|| self.v[slot])
    }

    #[inline]
    pub fn set(&mut self, slot: usize, v: u64) {
        self.v[slot] = v;
        self.known |= 1 << slot;
    }
}

/// The registers an unwind starts from (the innermost frame's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    pub rip: u64,
    pub rsp: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
}

impl From<&Regs> for Frame {
    fn from(r: &Regs) -> Frame {
        Frame {
            v: [r.rbx, r.rbp, r.rsp, r.r12, r.r13, r.r14, r.r15, r.rip],
            known: (1 << NREG) - 1,
        }
    }
}
