//! A small global cache of decoded CFI rows, so that a call site unwound before costs a few
//! loads instead of a search, a parse and a CFA program.
//!
//! Direct-mapped by program counter; only rows of the common shape are kept: the CFA is rsp or
//! rbp plus a multiple of 8, the return address at CFA − 8, the stack pointer = CFA, and each
//! other tracked register either unchanged or saved at CFA − 8k (k ≤ 128). Such a row packs
//! into one word, and so does the row of a chain's last frame (the return address undefined),
//! so that the end of a chain costs no decoding either. Each entry is a seqlock: a reader that sees the sequence odd or changed takes
//! it as a miss, a writer that finds it odd (another writer, or the code a signal handler
//! interrupted) leaves it alone, so nobody ever waits. Entries carry the generation of the
//! module table they were decoded with: code unloaded and replaced at the same address is
//! never taken for the old.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crate::cfi::{Cfa, Row, Rule};
use crate::regs::{NREG, RBP, RIP, RSP};

const BITS: u32 = 9;

struct Entry {
    seq: AtomicU32,
    gen: AtomicU32,
    pc: AtomicU64,
    row: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    seq: AtomicU32::new(0),
    gen: AtomicU32::new(0),
    pc: AtomicU64::new(0),
    row: AtomicU64::new(0),
};

static CACHE: [Entry; 1 << BITS] = [EMPTY; 1 << BITS];

#[inline]
fn entry(pc: u64) -> &'static Entry {
    &CACHE[(pc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BITS)) as usize]
}

/// A row of the common shape, packed: bits 0–12 the CFA offset / 8, bit 13 set when the CFA
/// is rbp-based, bit 14 marks a valid word, bit 15 the end of a chain (nothing else set), then
/// from bit 16 one byte per register slot other than rsp and rip: 0 unchanged, else the
/// (negative) offset / 8 of its save slot from the CFA.
#[derive(Clone, Copy)]
pub(crate) struct Packed(u64);

const VALID: u64 = 1 << 14;
const CFA_RBP: u64 = 1 << 13;
const END: u64 = 1 << 15;

/// Byte position of each register slot (rsp and rip have none).
#[inline]
fn byte_of(slot: usize) -> Option<u32> {
    match slot {
        RSP | RIP => None,
        s if s < RSP => Some(s as u32),
        s => Some(s as u32 - 1),
    }
}

impl Packed {
    pub fn pack(row: &Row) -> Option<Packed> {
        if matches!(row.regs[RIP], Rule::Undefined) {
            return Some(Packed(VALID | END));
        }
        let mut w = VALID;
        match row.cfa {
            Cfa::Reg(s, off) if (s as usize == RSP || s as usize == RBP) && off >= 0 => {
                if off % 8 != 0 || off / 8 >= 1 << 13 {
                    return None;
                }
                w |= off as u64 / 8;
                if s as usize == RBP {
                    w |= CFA_RBP;
                }
            }
            _ => return None,
        }
        if !matches!(row.regs[RIP], Rule::At(-8)) || !matches!(row.regs[RSP], Rule::Val(0)) {
            return None;
        }
        for (slot, rule) in row.regs.iter().enumerate() {
            let Some(b) = byte_of(slot) else { continue };
            let k = match *rule {
                Rule::Same => 0,
                Rule::At(off) if off < 0 && off % 8 == 0 && off >= -8 * 128 => off / 8,
                _ => return None,
            };
            w |= u64::from(k as i8 as u8) << (16 + 8 * b);
        }
        Some(Packed(w))
    }

    /// The frame is the last of its chain.
    #[inline]
    pub fn end(self) -> bool {
        self.0 & END != 0
    }

    /// CFA register slot and offset.
    #[inline]
    pub fn cfa(self) -> (usize, u64) {
        let reg = if self.0 & CFA_RBP != 0 { RBP } else { RSP };
        (reg, (self.0 & 0x1fff) * 8)
    }

    /// For each register slot but rsp and rip: `Some(offset from the CFA)` when saved.
    #[inline]
    pub fn saved(self, slot: usize) -> Option<i64> {
        let b = byte_of(slot)?;
        let k = (self.0 >> (16 + 8 * b)) as u8 as i8;
        (k != 0).then(|| i64::from(k) * 8)
    }
}

const _: () = assert!(NREG == 8);

/// The cached row for `pc` decoded with table generation `gen`.
#[inline]
pub(crate) fn get(pc: u64, gen: u32) -> Option<Packed> {
    let e = entry(pc);
    let s1 = e.seq.load(Ordering::Acquire);
    if s1 & 1 != 0 {
        return None;
    }
    let (g, p, r) = (
        e.gen.load(Ordering::Relaxed),
        e.pc.load(Ordering::Relaxed),
        e.row.load(Ordering::Relaxed),
    );
    fence(Ordering::Acquire);
    if e.seq.load(Ordering::Relaxed) != s1 || g != gen || p != pc || r & VALID == 0 {
        return None;
    }
    Some(Packed(r))
}

pub(crate) fn put(pc: u64, gen: u32, row: Packed) {
    let e = entry(pc);
    let s = e.seq.load(Ordering::Relaxed);
    if s & 1 != 0
        || e.seq
            .compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    fence(Ordering::Release);
    e.gen.store(gen, Ordering::Relaxed);
    e.pc.store(pc, Ordering::Relaxed);
    e.row.store(row.0, Ordering::Relaxed);
    e.seq.store(s.wrapping_add(2), Ordering::Release);
}
