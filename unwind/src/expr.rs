//! DWARF expressions as CFI uses them: PLT entries compute their CFA from rsp and rip, and
//! glibc's signal trampoline (`__restore_rt`) describes the CFA and every register by
//! addresses in the `ucontext_t` on the stack. A fixed stack of [`DEPTH`] values and at most
//! [`STEPS`] operations; anything else ends the unwind.

use crate::cfi::{Cursor, Expr};
use crate::mem::Window;
use crate::regs::{dwarf_slot, Frame};

const DEPTH: usize = 8;
const STEPS: usize = 64;

/// The value of expression `e` in the frame `f`, with `push` on the stack first.
pub(crate) fn eval(e: Expr, f: &Frame, push: Option<u64>, mem: &Window) -> Option<u64> {
    let mut st = [0u64; DEPTH];
    let mut n = 0usize;
    macro_rules! push {
        ($v:expr) => {{
            let v = $v;
            *st.get_mut(n)? = v;
            n += 1;
        }};
    }
    macro_rules! pop {
        () => {{
            n = n.checked_sub(1)?;
            st[n]
        }};
    }
    if let Some(v) = push {
        push!(v);
    }
    let start = e.at;
    let mut c = Cursor::new(e.at, e.at + u64::from(e.len));
    let mut steps = 0;
    while !c.at_end() {
        steps += 1;
        if steps > STEPS {
            return None;
        }
        let op = c.u8()?;
        match op {
            0x03 => push!(c.u64()?),
            0x06 => {
                let a = pop!();
                push!(mem.read(a)?);
            }
            0x08 => push!(u64::from(c.u8()?)),
            0x09 => push!(c.i8()? as u64),
            0x0a => push!(u64::from(c.u16()?)),
            0x0b => push!(c.i16()? as u64),
            0x0c => push!(u64::from(c.u32()?)),
            0x0d => push!(c.i32()? as u64),
            0x0e => push!(c.u64()?),
            0x0f => push!(c.i64()? as u64),
            0x10 => push!(c.uleb()?),
            0x11 => push!(c.sleb()? as u64),
            0x12 => {
                let a = *st.get(n.checked_sub(1)?)?;
                push!(a);
            }
            0x13 => {
                pop!();
            }
            0x14 => {
                let a = *st.get(n.checked_sub(2)?)?;
                push!(a);
            }
            0x15 => {
                let i = usize::from(c.u8()?);
                let a = *st.get(n.checked_sub(i + 1)?)?;
                push!(a);
            }
            0x16 => {
                let (b, a) = (pop!(), pop!());
                push!(b);
                push!(a);
            }
            0x17 => {
                let (c1, b, a) = (pop!(), pop!(), pop!());
                push!(c1);
                push!(a);
                push!(b);
            }
            0x19 => {
                let a = pop!() as i64;
                push!(a.unsigned_abs());
            }
            0x1f => {
                let a = pop!();
                push!(a.wrapping_neg());
            }
            0x20 => {
                let a = pop!();
                push!(!a);
            }
            0x23 => {
                let a = pop!();
                push!(a.wrapping_add(c.uleb()?));
            }
            0x1a..=0x1e | 0x21 | 0x22 | 0x24..=0x27 | 0x29..=0x2e => {
                let b = pop!();
                let a = pop!();
                let (sa, sb) = (a as i64, b as i64);
                push!(match op {
                    0x1a => a & b,
                    0x1b => sa.checked_div(sb)? as u64,
                    0x1c => a.wrapping_sub(b),
                    0x1d => a.checked_rem(b)?,
                    0x1e => a.wrapping_mul(b),
                    0x21 => a | b,
                    0x22 => a.wrapping_add(b),
                    0x24 => a.checked_shl(u32::try_from(b).ok()?).unwrap_or(0),
                    0x25 => a.checked_shr(u32::try_from(b).ok()?).unwrap_or(0),
                    0x26 => sa.checked_shr(u32::try_from(b).ok()?.min(63))? as u64,
                    0x27 => a ^ b,
                    0x29 => u64::from(sa == sb),
                    0x2a => u64::from(sa >= sb),
                    0x2b => u64::from(sa > sb),
                    0x2c => u64::from(sa <= sb),
                    0x2d => u64::from(sa < sb),
                    _ => u64::from(sa != sb),
                });
            }
            0x28 | 0x2f => {
                let off = c.i16()?;
                if op == 0x2f || pop!() != 0 {
                    let to = c.pos().checked_add_signed(i64::from(off))?;
                    c.seek(to, start)?;
                }
            }
            0x30..=0x4f => push!(u64::from(op - 0x30)),
            0x70..=0x8f | 0x92 => {
                let reg = if op == 0x92 {
                    c.uleb()?
                } else {
                    u64::from(op - 0x70)
                };
                let off = c.sleb()?;
                push!(f.get(dwarf_slot(reg)?)?.wrapping_add(off as u64));
            }
            0x94 => {
                let size = c.u8()?;
                let a = pop!();
                let v = mem.read(a)?;
                push!(match size {
                    1..=7 => v & ((1u64 << (size * 8)) - 1),
                    8 => v,
                    _ => return None,
                });
            }
            0x96 => {}
            _ => return None,
        }
    }
    Some(pop!())
}
