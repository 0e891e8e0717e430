//! The packed events of a [`WaitEvents`] record: one per contended wait, begin and end together,
//! each field a LEB128 varint (7 bits a byte, low bits first), as deltas from the event before
//! it in the same record (the first from `base_ns` and zero):
//!
//! ```text
//! zigzag(begin - previous end)      signed: a wait may begin inside the one before it
//! end - begin                       the wait's length
//! zigzag(object - previous object)  the object's id ([`ObjectCreate`](crate::ObjectCreate))
//! zigzag(chain - previous chain)    the waiter's chain id, 0 if none
//! reason << 1 | shared              how it ended ([`counter`](crate::counter) `ENDED_*` key);
//!                                   shared: a read wait on an rwlock
//! waker                             0: unknown; else zigzag(waker tid - own tid) + 1
//! ```
//!
//! A typical wait takes 8 to 13 bytes. Fields may only be added at an event's end behind a
//! record-level change, since events carry no length of their own.

use crate::{DecodeError, WaitEvents};

/// One contended wait, as the shim saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitSpan {
    pub begin_ns: u64,
    pub end_ns: u64,
    pub object_id: u64,
    pub chain_id: u32,
    /// [`crate::counter`] `ENDED_*` key.
    pub reason: u16,
    /// A read (shared) wait on an rwlock.
    pub shared: bool,
    /// The thread whose release, signal, broadcast or post ended the wait; 0 when unknown.
    pub waker: u32,
}

/// Where the deltas of the next event start from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prev {
    pub end_ns: u64,
    pub object_id: u64,
    pub chain_id: u32,
}

impl Prev {
    pub fn at(base_ns: u64) -> Prev {
        Prev {
            end_ns: base_ns,
            ..Prev::default()
        }
    }
}

/// The most bytes one event takes.
pub const MAX_EVENT: usize = 10 + 10 + 10 + 5 + 3 + 5;

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put(out: &mut [u8], n: &mut usize, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[*n] = b;
            *n += 1;
            return;
        }
        out[*n] = b | 0x80;
        *n += 1;
    }
}

/// Packs `e`, a wait of thread `tid`, into `out` after `prev` (which it then advances); returns
/// the bytes written. No allocation: the shim calls it on the thread that waited.
pub fn encode(e: &WaitSpan, tid: u32, prev: &mut Prev, out: &mut [u8; MAX_EVENT]) -> usize {
    let mut n = 0;
    put(
        out,
        &mut n,
        zigzag(e.begin_ns.wrapping_sub(prev.end_ns) as i64),
    );
    put(out, &mut n, e.end_ns.saturating_sub(e.begin_ns));
    put(
        out,
        &mut n,
        zigzag(e.object_id.wrapping_sub(prev.object_id) as i64),
    );
    put(
        out,
        &mut n,
        zigzag(i64::from(e.chain_id) - i64::from(prev.chain_id)),
    );
    put(out, &mut n, u64::from(e.reason) << 1 | u64::from(e.shared));
    let waker = if e.waker == 0 {
        0
    } else {
        zigzag(i64::from(e.waker) - i64::from(tid)) + 1
    };
    put(out, &mut n, waker);
    *prev = Prev {
        end_ns: e.begin_ns.max(e.end_ns),
        object_id: e.object_id,
        chain_id: e.chain_id,
    };
    n
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    #[inline]
    fn get(&mut self) -> Result<u64, DecodeError> {
        // Most fields take one byte (an object, a chain, a reason, a nearby waker).
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => self.get_long(),
        }
    }

    fn get_long(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or(DecodeError::ShortBody)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::BadLength)
    }
}

impl WaitEvents {
    /// The waits this record holds, in the order the thread ended them.
    pub fn waits(&self) -> Result<Vec<WaitSpan>, DecodeError> {
        let mut r = Reader {
            buf: &self.events,
            pos: 0,
        };
        let mut prev = Prev::at(self.base_ns);
        // Each event takes at least six bytes: a damaged count cannot ask for more.
        let mut out = Vec::with_capacity((self.count as usize).min(self.events.len() / 6));
        for _ in 0..self.count {
            let begin_ns = prev.end_ns.wrapping_add(unzigzag(r.get()?) as u64);
            let end_ns = begin_ns.saturating_add(r.get()?);
            let object_id = prev.object_id.wrapping_add(unzigzag(r.get()?) as u64);
            let chain_id = (i64::from(prev.chain_id) + unzigzag(r.get()?)) as u32;
            let reason = r.get()?;
            let waker = match r.get()? {
                0 => 0,
                w => (i64::from(self.tid) + unzigzag(w - 1)) as u32,
            };
            let e = WaitSpan {
                begin_ns,
                end_ns,
                object_id,
                chain_id,
                reason: (reason >> 1) as u16,
                shared: reason & 1 != 0,
                waker,
            };
            prev = Prev {
                end_ns: begin_ns.max(end_ns),
                object_id,
                chain_id,
            };
            out.push(e);
        }
        Ok(out)
    }

    /// A record of `spans` (thread `tid`, in order), packed: for tests and tools.
    pub fn pack(
        tid: u32,
        base_ns: u64,
        dropped: u64,
        keep_ns: u64,
        spans: &[WaitSpan],
    ) -> WaitEvents {
        let mut prev = Prev::at(base_ns);
        let mut events = Vec::new();
        let mut buf = [0u8; MAX_EVENT];
        for s in spans {
            let n = encode(s, tid, &mut prev, &mut buf);
            events.extend_from_slice(&buf[..n]);
        }
        WaitEvents {
            tid,
            base_ns,
            dropped,
            keep_ns,
            count: spans.len() as u32,
            events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_come_back_as_packed_including_odd_values() {
        let spans = [
            WaitSpan {
                begin_ns: 1_000_500,
                end_ns: 1_250_000,
                object_id: 3,
                chain_id: 7,
                reason: 1,
                shared: false,
                waker: 4242,
            },
            // Begins inside the one before; shared; waker below own tid; unknown chain.
            WaitSpan {
                begin_ns: 1_100_000,
                end_ns: 1_300_000,
                object_id: 2,
                chain_id: 0,
                reason: 1004,
                shared: true,
                waker: 1,
            },
            WaitSpan {
                begin_ns: u64::MAX - 10,
                end_ns: u64::MAX,
                object_id: u64::MAX,
                chain_id: u32::MAX,
                reason: u16::MAX,
                shared: false,
                waker: 0,
            },
        ];
        let r = WaitEvents::pack(4243, 1_000_000, 5, 0, &spans);
        assert_eq!(r.waits().unwrap(), spans);
    }

    #[test]
    fn a_typical_wait_is_small_and_a_cut_one_is_an_error() {
        let s = WaitSpan {
            begin_ns: 10_000_000,
            end_ns: 10_040_000,
            object_id: 12,
            chain_id: 40,
            reason: 1,
            shared: false,
            waker: 1001,
        };
        let r = WaitEvents::pack(1000, 9_000_000, 0, 0, &[s]);
        assert!(r.events.len() <= 12, "{}", r.events.len());
        let mut cut = r.clone();
        cut.events.pop();
        assert_eq!(cut.waits(), Err(DecodeError::ShortBody));
    }
}
