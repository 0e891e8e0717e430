//! Call frame information: finding a program counter's FDE through the object's
//! `.eh_frame_hdr` search table, reading its CIE and FDE, and running their instructions up to
//! the program counter to get the row that says where the caller's registers are.
//!
//! Every byte read here lies in a readable segment of an object of the published table, which
//! stays mapped while the unwind holds its [`crate::modules::Reader`]; each read is checked
//! against the bounds of the entry it belongs to, and those against the object's segments.

use crate::modules::Module;
use crate::regs::{dwarf_slot, NREG, RIP, RSP};

/// A bounded reader of object memory.
pub(crate) struct Cursor {
    p: u64,
    end: u64,
}

macro_rules! fixed {
    ($name:ident, $t:ty) => {
        #[inline]
        pub fn $name(&mut self) -> Option<$t> {
            const N: u64 = std::mem::size_of::<$t>() as u64;
            if self.end.checked_sub(self.p)? < N {
                return None;
            }
            // SAFETY: `[p, p + N)` is inside the cursor's range, which its creator checked lies
            // in a readable segment of a published object.
            let v = unsafe { std::ptr::read_unaligned(self.p as *const $t) };
            self.p += N;
            Some(v)
        }
    };
}

impl Cursor {
    /// A cursor over `[p, end)`, which the caller has checked is readable object memory.
    #[inline]
    pub fn new(p: u64, end: u64) -> Cursor {
        Cursor { p, end }
    }

    #[inline]
    pub fn pos(&self) -> u64 {
        self.p
    }

    #[inline]
    pub fn at_end(&self) -> bool {
        self.p >= self.end
    }

    /// Moves to `to`, which must stay within `[start, end]` of the enclosing block.
    #[inline]
    pub fn seek(&mut self, to: u64, start: u64) -> Option<()> {
        (to >= start && to <= self.end).then(|| self.p = to)
    }

    fixed!(u8, u8);
    fixed!(u16, u16);
    fixed!(u32, u32);
    fixed!(u64, u64);
    fixed!(i8, i8);
    fixed!(i16, i16);
    fixed!(i32, i32);
    fixed!(i64, i64);

    pub fn uleb(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    pub fn sleb(&mut self) -> Option<i64> {
        let mut v = 0i64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= i64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Some(v);
            }
            if shift >= 70 {
                return None;
            }
        }
    }

    /// A value in the format of the low nibble of pointer encoding `enc`, without its base.
    fn encoded_value(&mut self, enc: u8) -> Option<u64> {
        Some(match enc & 0x0f {
            0x00 | 0x04 => self.u64()?,
            0x01 => self.uleb()?,
            0x02 => u64::from(self.u16()?),
            0x03 => u64::from(self.u32()?),
            0x09 => self.sleb()? as u64,
            0x0a => self.i16()? as u64,
            0x0b => self.i32()? as u64,
            0x0c => self.i64()? as u64,
            _ => return None,
        })
    }

    /// A pointer in encoding `enc` (absolute, pc-relative, or relative to `data_base`; the
    /// indirect bit is not followed: no pointer the unwinder needs is indirect).
    pub fn encoded(&mut self, enc: u8, data_base: u64) -> Option<u64> {
        if enc == 0xff || enc & 0x80 != 0 {
            return None;
        }
        let at = self.p;
        let v = self.encoded_value(enc)?;
        let base = match enc & 0x70 {
            0x00 => 0,
            0x10 => at,
            0x30 => data_base,
            _ => return None,
        };
        Some(base.wrapping_add(v))
    }

    /// A length-prefixed DWARF expression: its offset from `base` and its length.
    fn block(&mut self, base: u64) -> Option<(i32, u16)> {
        let len = self.uleb()?;
        let at = self.p;
        if self.end - self.p < len {
            return None;
        }
        self.p += len;
        let off = i32::try_from(at.wrapping_sub(base) as i64).ok()?;
        Some((off, u16::try_from(len).ok()?))
    }
}

/// A DWARF expression in object memory.
#[derive(Clone, Copy)]
pub(crate) struct Expr {
    pub at: u64,
    pub len: u32,
}

/// Rules are kept small (8 bytes) because the CFA program keeps four rows on the stack: offsets
/// are 32-bit, and an expression is named by its offset from the object's `.eh_frame_hdr` (see
/// [`expr`]) and its length.
///
/// Where a register of the caller is (DWARF register rules; registers are the tracked slots of
/// [`crate::regs`]).
#[derive(Clone, Copy)]
pub(crate) enum Rule {
    /// Unchanged by the callee.
    Same,
    /// Not recoverable (for the return address: the end of the chain).
    Undefined,
    /// Saved at CFA + n.
    At(i32),
    /// Is CFA + n.
    Val(i32),
    /// Held in another tracked register of the callee.
    Reg(u8),
    /// Saved at the address the expression computes (CFA pushed first).
    AtExpr { off: i32, len: u16 },
    /// Is the value the expression computes (CFA pushed first).
    ValExpr { off: i32, len: u16 },
}

#[derive(Clone, Copy)]
pub(crate) enum Cfa {
    /// Not defined yet, or defined on a register the unwinder does not track.
    Unknown,
    /// Tracked register slot + offset.
    Reg(u8, i32),
    Expr {
        off: i32,
        len: u16,
    },
}

/// One row of the CFI table: the CFA rule and the rules of the tracked registers.
#[derive(Clone, Copy)]
pub(crate) struct Row {
    pub cfa: Cfa,
    pub regs: [Rule; NREG],
}

/// The expression of a rule of object `m`.
#[inline]
pub(crate) fn expr(m: &Module, off: i32, len: u16) -> Expr {
    Expr {
        at: m.hdr.wrapping_add(off as i64 as u64),
        len: u32::from(len),
    }
}

impl Row {
    /// Before a CIE's instructions: callee-saved registers keep their values, the stack
    /// pointer is the CFA, the return address is unknown until the CIE says where it is.
    fn start() -> Row {
        let mut regs = [Rule::Same; NREG];
        regs[RSP] = Rule::Val(0);
        regs[RIP] = Rule::Undefined;
        Row {
            cfa: Cfa::Unknown,
            regs,
        }
    }
}

/// What the unwinder needs of a CIE.
struct Cie {
    code_align: u64,
    data_align: i64,
    fde_enc: u8,
    augmented: bool,
    signal: bool,
    insns: (u64, u64),
}

/// The entry (CIE or FDE) at `at`: a cursor over its contents after the length word.
fn entry(m: &Module, at: u64) -> Option<Cursor> {
    if !m.readable(at, 4) {
        return None;
    }
    let len = Cursor::new(at, at + 4).u32()?;
    // 0 ends the section; 0xffffffff (64-bit lengths) is never written for .eh_frame on x86_64.
    if len == 0 || len == 0xffff_ffff || !m.readable(at + 4, u64::from(len)) {
        return None;
    }
    Some(Cursor::new(at + 4, at + 4 + u64::from(len)))
}

fn parse_cie(m: &Module, at: u64) -> Option<Cie> {
    let mut c = entry(m, at)?;
    if c.u32()? != 0 {
        return None;
    }
    let version = c.u8()?;
    if version != 1 && version != 3 {
        return None;
    }
    // The augmentation string: at most a few letters.
    let aug_at = c.pos();
    let mut aug_len = 0u64;
    while c.u8()? != 0 {
        aug_len += 1;
        if aug_len > 8 {
            return None;
        }
    }
    let mut aug = Cursor::new(aug_at, aug_at + aug_len);
    let code_align = c.uleb()?;
    let data_align = c.sleb()?;
    let ra = if version == 1 {
        u64::from(c.u8()?)
    } else {
        c.uleb()?
    };
    if ra != 16 {
        return None;
    }
    let mut cie = Cie {
        code_align,
        data_align,
        fde_enc: 0,
        augmented: false,
        signal: false,
        insns: (0, 0),
    };
    if aug_len > 0 {
        if aug.u8()? != b'z' {
            return None;
        }
        cie.augmented = true;
        let data_len = c.uleb()?;
        let data_end = c.pos().checked_add(data_len)?;
        while !aug.at_end() {
            match aug.u8()? {
                b'R' => cie.fde_enc = c.u8()?,
                b'L' => {
                    c.u8()?;
                }
                b'P' => {
                    let enc = c.u8()?;
                    c.encoded_value(enc)?;
                }
                b'S' => cie.signal = true,
                // Anything else: its data is skipped below, thanks to the 'z' length.
                _ => break,
            }
        }
        c.seek(data_end, aug_at)?;
    }
    cie.insns = (c.pos(), c.end);
    Some(cie)
}

/// An offset as rules keep it (real ones are a few KiB at most).
#[inline]
fn small(v: i64) -> Option<i32> {
    i32::try_from(v).ok()
}

/// Maximum nesting of DW_CFA_remember_state (compilers nest one level).
const REMEMBER: usize = 2;

/// Runs CFA instructions: the CIE's from the start row, then the FDE's up to `target`.
struct Program<'a> {
    cie: &'a Cie,
    /// Where expression offsets count from: the object's `.eh_frame_hdr`.
    base: u64,
    row: Row,
    init: Row,
    saved: [Row; REMEMBER],
    depth: usize,
}

impl Program<'_> {
    fn set(&mut self, reg: u64, rule: Rule) {
        if let Some(s) = dwarf_slot(reg) {
            self.row.regs[s] = rule;
        }
    }

    /// Runs `[c, end)` from location `loc` until the location passes `target`.
    fn run(&mut self, mut c: Cursor, mut loc: u64, target: u64) -> Option<()> {
        let (ca, da) = (self.cie.code_align, self.cie.data_align);
        while !c.at_end() {
            let op = c.u8()?;
            let advance = match op >> 6 {
                1 => Some(u64::from(op & 0x3f) * ca),
                2 => {
                    let off = small((c.uleb()? as i64).wrapping_mul(da))?;
                    self.set(u64::from(op & 0x3f), Rule::At(off));
                    None
                }
                3 => {
                    let reg = u64::from(op & 0x3f);
                    if let Some(s) = dwarf_slot(reg) {
                        self.row.regs[s] = self.init.regs[s];
                    }
                    None
                }
                _ => match op {
                    0x00 | 0x2e => {
                        // nop; GNU_args_size (about outgoing arguments, not registers)
                        if op == 0x2e {
                            c.uleb()?;
                        }
                        None
                    }
                    0x01 => {
                        let to = c.encoded(self.cie.fde_enc, 0)?;
                        if to > target {
                            return Some(());
                        }
                        loc = to;
                        None
                    }
                    0x02 => Some(u64::from(c.u8()?) * ca),
                    0x03 => Some(u64::from(c.u16()?) * ca),
                    0x04 => Some(u64::from(c.u32()?) * ca),
                    0x05 | 0x11 | 0x14 | 0x15 | 0x2f => {
                        let reg = c.uleb()?;
                        let off = small(
                            match op {
                                0x11 | 0x15 => c.sleb()?,
                                _ => c.uleb()? as i64,
                            }
                            .wrapping_mul(da),
                        )?;
                        let rule = match op {
                            0x05 | 0x11 => Rule::At(off),
                            0x2f => Rule::At(off.wrapping_neg()),
                            _ => Rule::Val(off),
                        };
                        self.set(reg, rule);
                        None
                    }
                    0x06 => {
                        if let Some(s) = dwarf_slot(c.uleb()?) {
                            self.row.regs[s] = self.init.regs[s];
                        }
                        None
                    }
                    0x07 => {
                        self.set(c.uleb()?, Rule::Undefined);
                        None
                    }
                    0x08 => {
                        self.set(c.uleb()?, Rule::Same);
                        None
                    }
                    0x09 => {
                        let reg = c.uleb()?;
                        let rule = match dwarf_slot(c.uleb()?) {
                            Some(from) => Rule::Reg(from as u8),
                            None => Rule::Undefined,
                        };
                        self.set(reg, rule);
                        None
                    }
                    0x0a => {
                        if self.depth == REMEMBER {
                            return None;
                        }
                        self.saved[self.depth] = self.row;
                        self.depth += 1;
                        None
                    }
                    0x0b => {
                        self.depth = self.depth.checked_sub(1)?;
                        self.row = self.saved[self.depth];
                        None
                    }
                    0x0c | 0x12 => {
                        let reg = c.uleb()?;
                        let off = small(if op == 0x0c {
                            c.uleb()? as i64
                        } else {
                            c.sleb()?.wrapping_mul(da)
                        })?;
                        self.row.cfa = match dwarf_slot(reg) {
                            Some(s) => Cfa::Reg(s as u8, off),
                            None => Cfa::Unknown,
                        };
                        None
                    }
                    0x0d => {
                        let s = dwarf_slot(c.uleb()?);
                        self.row.cfa = match (self.row.cfa, s) {
                            (Cfa::Reg(_, off), Some(s)) => Cfa::Reg(s as u8, off),
                            _ => Cfa::Unknown,
                        };
                        None
                    }
                    0x0e | 0x13 => {
                        let off = small(if op == 0x0e {
                            c.uleb()? as i64
                        } else {
                            c.sleb()?.wrapping_mul(da)
                        })?;
                        self.row.cfa = match self.row.cfa {
                            Cfa::Reg(s, _) => Cfa::Reg(s, off),
                            _ => Cfa::Unknown,
                        };
                        None
                    }
                    0x0f => {
                        let (off, len) = c.block(self.base)?;
                        self.row.cfa = Cfa::Expr { off, len };
                        None
                    }
                    0x10 | 0x16 => {
                        let reg = c.uleb()?;
                        let (off, len) = c.block(self.base)?;
                        self.set(
                            reg,
                            if op == 0x10 {
                                Rule::AtExpr { off, len }
                            } else {
                                Rule::ValExpr { off, len }
                            },
                        );
                        None
                    }
                    _ => return None,
                },
            };
            if let Some(d) = advance {
                loc = loc.checked_add(d)?;
                if loc > target {
                    return Some(());
                }
            }
        }
        Some(())
    }
}

/// The search table's FDE for `pc`: the last entry starting at or before it.
fn find_fde(m: &Module, pc: u64) -> Option<u64> {
    let entry = |i: u64| -> (u64, u64) {
        // SAFETY: `i < count`, and the table's `count` 8-byte entries were checked to lie in a
        // readable segment when the module table was built.
        let (loc, fde) = unsafe {
            let p = (m.table + i * 8) as *const i32;
            (
                std::ptr::read_unaligned(p),
                std::ptr::read_unaligned(p.add(1)),
            )
        };
        (
            m.hdr.wrapping_add(loc as i64 as u64),
            m.hdr.wrapping_add(fde as i64 as u64),
        )
    };
    let (mut lo, mut hi) = (0u64, m.count);
    if hi == 0 || entry(0).0 > pc {
        return None;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if entry(mid).0 <= pc {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(entry(lo).1)
}

/// The CFI row in force at `pc` in object `m`, and whether its frame is a signal frame (then
/// the caller's program counter is exact: it was interrupted, not called).
pub(crate) fn row_at(m: &Module, pc: u64) -> Option<(Row, bool)> {
    let fde = find_fde(m, pc)?;
    let mut c = entry(m, fde)?;
    let field = c.pos();
    let back = u64::from(c.u32()?);
    if back == 0 {
        return None;
    }
    let cie = parse_cie(m, field.checked_sub(back)?)?;
    let begin = c.encoded(cie.fde_enc, 0)?;
    let range = c.encoded_value(cie.fde_enc & 0x0f)?;
    if pc < begin || pc - begin >= range {
        return None;
    }
    if cie.augmented {
        let skip = c.uleb()?;
        let to = c.pos().checked_add(skip)?;
        c.seek(to, field)?;
    }
    let mut prog = Program {
        cie: &cie,
        base: m.hdr,
        row: Row::start(),
        init: Row::start(),
        saved: [Row::start(); REMEMBER],
        depth: 0,
    };
    prog.run(Cursor::new(cie.insns.0, cie.insns.1), begin, u64::MAX)?;
    prog.init = prog.row;
    prog.depth = 0;
    prog.run(c, begin, pc)?;
    Some((prog.row, cie.signal))
}
