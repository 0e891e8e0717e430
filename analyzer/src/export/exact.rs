//! Exact tracked waits on the thread-state timelines. The sampler knows a thread was in a
//! tracked wait only at its samples, and places the wait inside the interval between two
//! samples by proportion (an estimate, off by up to an interval: 10 ms by default, far more
//! with a thousand threads); the per-wait events give each blocked wait's begin and end
//! exactly. Where a thread's events are complete, its state slices are redrawn from both
//! ([`Merge`]): the tracked-wait slices are the events' waits, begin to end, and the sampled
//! states fill the rest of the thread's time:
//!
//! - a sampled `Running` or `Runnable` piece that lies under an exact wait is cut away there,
//!   and its time is owed to the thread ([`Merge`] keeps the debt);
//! - a sampled tracked-wait piece that no exact wait covers (the estimate put the wait there,
//!   the events say it was elsewhere) is given the owed running time first, then the owed
//!   runnable time, and what is left of it is `Wait: between samples` (neither running nor
//!   ready, in no state a sample saw); all of those pieces are estimates and say so;
//! - every other piece (blocked in a system call, stopped) stays as the sampler has it.
//!
//! Where the events are not complete (the flight recorder kept only the last seconds of a
//! thread's waits, or the shim dropped some of them), the sampler's states are kept as they
//! are before the thread's first kept wait.
//!
//! The waits come from the pass over the per-wait events ([`super::timeline::for_each_wait`]),
//! the slices from a later pass over the samples. A thread's waits arrive in time order, and
//! so do its slices, but the threads' are interleaved, so each thread's waits are kept in
//! blocks of [`PER_BLOCK`] in an unnamed temporary file, each block holding the place of the
//! thread's next ([`Store`]); reading them back needs one block per thread. Memory: two blocks
//! per thread, whatever the number of waits.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::slices::{Slice, State};
use super::timeline::Wait;
use crate::model::Model;

/// One exact wait of a thread: begin, end, and the kind of its object (`ObjectKind as u8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    pub kind: Option<u8>,
}

/// Waits per block in the file.
pub const PER_BLOCK: usize = 128;
const SPAN_BYTES: usize = 17;
/// A block: its count (u32), the offset of the thread's next block (u64, `u64::MAX` for the
/// last), and the spans.
const BLOCK_BYTES: usize = 12 + PER_BLOCK * SPAN_BYTES;
const NO_BLOCK: u64 = u64::MAX;

fn encode_span(s: &Span, out: &mut Vec<u8>) {
    out.extend_from_slice(&s.start.to_le_bytes());
    out.extend_from_slice(&s.end.to_le_bytes());
    out.push(s.kind.map_or(0, |k| k.saturating_add(1)));
}

fn decode_span(b: &[u8]) -> Span {
    let u = |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
    Span {
        start: u(0..8),
        end: u(8..16),
        kind: b[16].checked_sub(1),
    }
}

#[derive(Default)]
struct Writing {
    buf: Vec<Span>,
    /// Where the thread's current block goes (reserved when the previous one was written).
    slot: Option<u64>,
    first: Option<u64>,
    first_start: Option<u64>,
}

/// Each thread's exact waits, written as they come ([`Store::add`]), read back per thread in
/// time order ([`Waits::peek`], [`Waits::advance`]).
pub struct Store {
    failed: bool,
    file: Option<File>,
    len: u64,
    threads: HashMap<u32, Writing>,
}

impl Store {
    pub fn new() -> Self {
        Store {
            failed: false,
            file: None,
            len: 0,
            threads: HashMap::new(),
        }
    }

    /// Keeps `w`, a wait of `tid` (each thread's in time order). A temporary file that cannot
    /// be written leaves the states as sampled ([`Store::finish`] gives nothing).
    pub fn add(&mut self, model: &Model, tid: u32, w: &Wait) {
        if self.failed {
            return;
        }
        if self.keep(model, tid, w).is_err() {
            self.failed = true;
        }
    }

    fn keep(&mut self, model: &Model, tid: u32, w: &Wait) -> io::Result<()> {
        let kind = model
            .objects
            .get(&w.object_id)
            .and_then(|o| o.kind())
            .map(|k| k as u8);
        self.push(
            tid,
            Span {
                start: w.start,
                end: w.end,
                kind,
            },
        )
    }

    fn push(&mut self, tid: u32, s: Span) -> io::Result<()> {
        let t = self.threads.entry(tid).or_default();
        t.first_start.get_or_insert(s.start);
        t.buf.push(s);
        if t.buf.len() == PER_BLOCK {
            self.flush(tid, false)?;
        }
        Ok(())
    }

    fn reserve(&mut self) -> u64 {
        let at = self.len;
        self.len += BLOCK_BYTES as u64;
        at
    }

    /// Writes the thread's buffered spans as a block, reserving the place of its next block
    /// unless `last`.
    fn flush(&mut self, tid: u32, last: bool) -> io::Result<()> {
        if self.file.is_none() {
            self.file = Some(super::waiters::temporary()?);
        }
        let slot = match self.threads.get(&tid).and_then(|t| t.slot) {
            Some(s) => s,
            None => self.reserve(),
        };
        let next = if last { NO_BLOCK } else { self.reserve() };
        let t = self.threads.get_mut(&tid).expect("a thread being written");
        let mut bytes = Vec::with_capacity(BLOCK_BYTES);
        bytes.extend_from_slice(&(t.buf.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&next.to_le_bytes());
        for s in &t.buf {
            encode_span(s, &mut bytes);
        }
        bytes.resize(BLOCK_BYTES, 0);
        // Its memory too: a thread that ended keeps none.
        t.buf = Vec::new();
        t.first.get_or_insert(slot);
        t.slot = Some(next);
        self.file
            .as_ref()
            .expect("a file")
            .write_all_at(&bytes, slot)
    }

    /// Done writing: each thread's waits, for reading back; `None` when the temporary file
    /// failed.
    pub fn finish(self) -> Option<Waits> {
        if self.failed {
            return None;
        }
        self.close().ok()
    }

    fn close(mut self) -> io::Result<Waits> {
        let tids: Vec<u32> = self.threads.keys().copied().collect();
        let mut threads = HashMap::new();
        for tid in tids {
            let t = &self.threads[&tid];
            let first_start = t.first_start;
            if t.first.is_none() {
                // Fewer than a block: kept in memory as it is.
                let buf = std::mem::take(&mut self.threads.get_mut(&tid).expect("thread").buf);
                threads.insert(
                    tid,
                    Reading {
                        buf,
                        at: 0,
                        next: NO_BLOCK,
                        first_start,
                    },
                );
                continue;
            }
            self.flush(tid, true)?;
            let first = self.threads[&tid].first.expect("written");
            threads.insert(
                tid,
                Reading {
                    buf: Vec::new(),
                    at: 0,
                    next: first,
                    first_start,
                },
            );
        }
        Ok(Waits {
            file: self.file,
            threads,
        })
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

struct Reading {
    buf: Vec<Span>,
    at: usize,
    next: u64,
    first_start: Option<u64>,
}

/// The exact waits of each thread, read back in time order.
pub struct Waits {
    file: Option<File>,
    threads: HashMap<u32, Reading>,
}

impl Waits {
    /// The thread's next wait not yet consumed, without consuming it; `None` when no more (or
    /// when the file cannot be read: the rest of the thread's states stay sampled).
    pub fn peek(&mut self, tid: u32) -> Option<Span> {
        let t = self.threads.get_mut(&tid)?;
        while t.at == t.buf.len() {
            if t.next == NO_BLOCK {
                return None;
            }
            let mut bytes = vec![0u8; BLOCK_BYTES];
            let read = self
                .file
                .as_ref()
                .map(|f| f.read_exact_at(&mut bytes, t.next));
            if !matches!(read, Some(Ok(()))) {
                t.next = NO_BLOCK;
                return None;
            }
            let n = (u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize)
                .min(PER_BLOCK);
            t.next = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
            t.buf = (0..n)
                .map(|i| decode_span(&bytes[12 + i * SPAN_BYTES..12 + (i + 1) * SPAN_BYTES]))
                .collect();
            t.at = 0;
        }
        t.buf.get(t.at).copied()
    }

    /// Consumes the thread's next wait.
    pub fn advance(&mut self, tid: u32) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.at += 1;
        }
    }

    /// The begin of the thread's first exact wait.
    pub fn first_start(&self, tid: u32) -> Option<u64> {
        self.threads.get(&tid).and_then(|t| t.first_start)
    }
}

/// Where the exact waits of a thread come from, in time order (the file, or a list in tests).
pub trait Source {
    fn peek(&mut self, tid: u32) -> Option<Span>;
    fn advance(&mut self, tid: u32);
}

impl Source for Waits {
    fn peek(&mut self, tid: u32) -> Option<Span> {
        Waits::peek(self, tid)
    }
    fn advance(&mut self, tid: u32) {
        Waits::advance(self, tid)
    }
}

/// One thread's merge of its sampled slices with its exact waits.
#[derive(Debug, Default)]
struct Thread {
    /// From here on the thread's exact waits are complete (`u64::MAX`: never).
    from: u64,
    /// Running and runnable ns the exact waits displaced, owed to later gaps.
    debt: (u64, u64),
    /// The piece being extended, and whether it is one exact wait (never joined to another).
    pending: Option<(Slice, bool)>,
}

/// From when a thread's exact waits are complete, given its tid and its waits.
type CompleteFrom<S> = dyn Fn(u32, &mut S) -> u64;

/// The merge of every thread's sampled slices with its exact waits: [`Merge::slice`] takes
/// each sampled slice (each thread's in time order) and hands out the pieces that replace it;
/// [`Merge::finish`] the pieces still held.
pub struct Merge<S: Source> {
    waits: S,
    threads: HashMap<u32, Thread>,
    /// Where each thread's exact waits begin to be complete.
    from: Box<CompleteFrom<S>>,
}

/// From when the exact waits of each thread of `model`'s log are complete: from the start
/// when every event was written and the shim dropped none of the thread's; under a flight
/// recorder, from the thread's first kept wait (the window); never (`u64::MAX`: its sampled
/// states throughout) for a thread whose events the shim dropped without one, as a drop (a
/// flush meeting the thread's own write) can fall anywhere in its life.
pub fn complete_from(model: &Model) -> impl Fn(u32, &mut Waits) -> u64 + 'static {
    let windowed = model.events.keep_ns != 0;
    let dropped: std::collections::HashSet<u32> = model
        .events
        .dropped_by_shim
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(&t, _)| t)
        .collect();
    move |tid, waits: &mut Waits| {
        if windowed {
            waits.first_start(tid).unwrap_or(u64::MAX)
        } else if dropped.contains(&tid) {
            u64::MAX
        } else {
            0
        }
    }
}

impl<S: Source> Merge<S> {
    pub fn new(waits: S, from: impl Fn(u32, &mut S) -> u64 + 'static) -> Self {
        Merge {
            waits,
            threads: HashMap::new(),
            from: Box::new(from),
        }
    }

    /// The pieces that replace the sampled slice `s`, handed to `f` (the pieces before them
    /// first); one is held back, to be joined with the next if it continues it.
    pub fn slice<E>(
        &mut self,
        s: Slice,
        f: &mut impl FnMut(Slice) -> Result<(), E>,
    ) -> Result<(), E> {
        let tid = s.tid;
        if !self.threads.contains_key(&tid) {
            let from = (self.from)(tid, &mut self.waits);
            self.threads.insert(
                tid,
                Thread {
                    from,
                    ..Thread::default()
                },
            );
        }
        let mut pieces: Vec<(Slice, bool)> = Vec::new();
        let from = self.threads[&tid].from;
        // Before the thread's waits are complete: as sampled.
        if s.start < from {
            let cut = s.end.min(from);
            pieces.push((
                Slice {
                    end: cut,
                    ..s.clone()
                },
                false,
            ));
        }
        let start = s.start.max(from);
        if start < s.end {
            self.cover(&s, start, &mut pieces);
        }
        let t = self.threads.get_mut(&tid).expect("thread");
        for (p, exact) in pieces {
            if p.end <= p.start {
                continue;
            }
            match &mut t.pending {
                Some((q, false)) if !exact && q.state == p.state && q.end == p.start => {
                    q.end = p.end;
                    q.estimated |= p.estimated;
                }
                // One exact wait cut in two by a sample: joined again.
                Some((q, true))
                    if exact && q.end == p.start && q.state == p.state && p.estimated =>
                {
                    q.end = p.end;
                }
                _ => {
                    if let Some((done, _)) = t.pending.replace((
                        Slice {
                            estimated: if exact { false } else { p.estimated },
                            ..p
                        },
                        exact,
                    )) {
                        f(done)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The pieces of `s` from `start` on, where the thread's exact waits are complete. An
    /// exact piece that continues a wait begun in an earlier slice is marked `estimated` (only
    /// here, as the sign for [`Merge::slice`] to join it to that wait's first piece).
    fn cover(&mut self, s: &Slice, start: u64, out: &mut Vec<(Slice, bool)>) {
        let tid = s.tid;
        let mut at = start;
        let piece = |a: u64, b: u64, state: State, estimated: bool| Slice {
            tid,
            start: a,
            end: b,
            state,
            estimated,
            exact: true,
        };
        while at < s.end {
            // Waits that ended before here are past.
            let next = loop {
                match self.waits.peek(tid) {
                    Some(w) if w.end <= at => self.waits.advance(tid),
                    other => break other,
                }
            };
            let (gap_end, wait) = match next {
                Some(w) if w.start < s.end => (w.start.max(at), Some(w)),
                _ => (s.end, None),
            };
            if gap_end > at {
                self.gap(s, at, gap_end, out);
            }
            let Some(w) = wait else { break };
            let b = w.start.max(at);
            let e = w.end.min(s.end);
            // Sampled running or ready time under the wait is owed to a later gap.
            let t = self.threads.get_mut(&tid).expect("thread");
            match s.state {
                State::Running => t.debt.0 += e - b,
                State::Runnable => t.debt.1 += e - b,
                _ => {}
            }
            out.push((piece(b, e, State::Tracked(w.kind), w.start < b), true));
            if w.end <= s.end {
                self.waits.advance(tid);
            }
            at = e;
        }
    }

    /// `[a, b)` of `s`, which no exact wait covers.
    fn gap(&mut self, s: &Slice, a: u64, b: u64, out: &mut Vec<(Slice, bool)>) {
        let tid = s.tid;
        if !matches!(s.state, State::Tracked(_)) {
            out.push((
                Slice {
                    start: a,
                    end: b,
                    ..s.clone()
                },
                false,
            ));
            return;
        }
        // The sampler put a tracked wait here; the events say there was none: the time the
        // exact waits displaced goes here, running first.
        let t = self.threads.get_mut(&tid).expect("thread");
        let mut at = a;
        let run = t.debt.0.min(b - at);
        t.debt.0 -= run;
        let ready = t.debt.1.min(b - at - run);
        t.debt.1 -= ready;
        for (ns, state) in [
            (run, State::Running),
            (ready, State::Runnable),
            (b - at - run - ready, State::Unseen),
        ] {
            if ns > 0 {
                out.push((
                    Slice {
                        tid,
                        start: at,
                        end: at + ns,
                        state,
                        estimated: true,
                        exact: false,
                    },
                    false,
                ));
                at += ns;
            }
        }
    }

    /// The pieces still held back, by thread.
    pub fn finish<E>(mut self, f: &mut impl FnMut(Slice) -> Result<(), E>) -> Result<(), E> {
        let mut tids: Vec<u32> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            if let Some((p, _)) = self.threads.get_mut(&tid).and_then(|t| t.pending.take()) {
                f(p)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact waits from a list, per thread.
    struct List(HashMap<u32, Vec<Span>>);

    impl Source for List {
        fn peek(&mut self, tid: u32) -> Option<Span> {
            self.0.get(&tid).and_then(|v| v.first().copied())
        }
        fn advance(&mut self, tid: u32) {
            if let Some(v) = self.0.get_mut(&tid) {
                if !v.is_empty() {
                    v.remove(0);
                }
            }
        }
    }

    const LOCK: Option<u8> = Some(waitshim_format::ObjectKind::Mutex as u8);

    fn sl(start: u64, end: u64, state: State, estimated: bool) -> Slice {
        Slice {
            tid: 7,
            start,
            end,
            state,
            estimated,
            exact: false,
        }
    }

    fn span(start: u64, end: u64) -> Span {
        Span {
            start,
            end,
            kind: LOCK,
        }
    }

    fn merge(sampled: &[Slice], exact: &[Span], from: u64) -> Vec<(u64, u64, String, bool)> {
        let mut m = Merge::new(List([(7, exact.to_vec())].into()), move |_, _| from);
        let mut out = Vec::new();
        let mut f = |s: Slice| -> Result<(), ()> {
            assert_eq!(
                s.exact,
                matches!(s.state, State::Tracked(_)) && !s.estimated
            );
            out.push((s.start, s.end, s.state.name(), s.estimated));
            Ok(())
        };
        for s in sampled {
            m.slice(s.clone(), &mut f).unwrap();
        }
        m.finish(&mut f).unwrap();
        out
    }

    #[test]
    fn the_red_slices_are_the_exact_waits_and_the_samples_fill_the_rest() {
        // Sampled: ran 0..60, then (estimated) waited for the lock 60..100; the events say the
        // wait was 10..50. The running time under the wait moves into the sampler's wait.
        let sampled = [
            sl(0, 60, State::Running, true),
            sl(60, 100, State::Tracked(LOCK), true),
            sl(100, 200, State::Running, false),
        ];
        let got = merge(&sampled, &[span(10, 50)], 0);
        let s = |a, b, n: &str, e| (a, b, n.to_string(), e);
        assert_eq!(
            got,
            vec![
                s(0, 10, "Running", true),
                s(10, 50, "Wait: lock", false),
                s(50, 200, "Running", true),
            ]
        );
        // No gaps, no overlaps.
        assert!(got.windows(2).all(|w| w[0].1 == w[1].0));
    }

    #[test]
    fn a_wait_across_samples_is_one_slice_and_what_no_wait_covers_is_between_samples() {
        let read = State::Blocked {
            syscall: 0,
            what: String::new(),
            chain: 0,
        };
        let sampled = [
            sl(0, 40, State::Tracked(LOCK), true),
            sl(40, 80, State::Tracked(LOCK), false),
            sl(80, 120, read.clone(), false),
        ];
        // One exact wait 30..70 spans the two sampled slices; 0..30 and 70..80 no wait covers
        // and no running time is owed: neither running nor ready.
        let got = merge(&sampled, &[span(30, 70)], 0);
        let s = |a, b, n: &str, e| (a, b, n.to_string(), e);
        assert_eq!(
            got,
            vec![
                s(0, 30, "Wait: between samples", true),
                s(30, 70, "Wait: lock", false),
                s(70, 80, "Wait: between samples", true),
                s(80, 120, "Wait: I/O", false),
            ]
        );
    }

    #[test]
    fn before_the_events_are_complete_the_samples_stay() {
        // A flight recorder's window from 100: the sampler's wait at 20..60 stays, the one at
        // 120..160 becomes the exact 130..150, running owed none: between samples.
        let sampled = [
            sl(0, 20, State::Running, true),
            sl(20, 60, State::Tracked(LOCK), true),
            sl(60, 120, State::Running, true),
            sl(120, 160, State::Tracked(LOCK), true),
        ];
        let got = merge(&sampled, &[span(130, 150)], 100);
        let s = |a, b, n: &str, e| (a, b, n.to_string(), e);
        assert_eq!(
            got,
            vec![
                s(0, 20, "Running", true),
                s(20, 60, "Wait: lock", true),
                s(60, 120, "Running", true),
                s(120, 130, "Wait: between samples", true),
                s(130, 150, "Wait: lock", false),
                s(150, 160, "Wait: between samples", true),
            ]
        );
        // Never complete (no kept wait): all as sampled.
        let got = merge(&sampled, &[], u64::MAX);
        assert_eq!(got.len(), 4);
        assert_eq!(got[1], s(20, 60, "Wait: lock", true));
    }

    #[test]
    fn the_store_gives_each_threads_waits_back_in_order_across_blocks() {
        let mut st = Store::new();
        let n = PER_BLOCK as u64 * 2 + 5;
        for i in 0..n {
            for tid in [1u32, 2] {
                st.push(tid, span(i * 10 + u64::from(tid), i * 10 + 5))
                    .unwrap();
            }
        }
        st.push(3, span(1, 2)).unwrap();
        let mut w = st.finish().unwrap();
        for tid in [1u32, 2] {
            assert_eq!(w.first_start(tid), Some(u64::from(tid)));
            for i in 0..n {
                assert_eq!(w.peek(tid), Some(span(i * 10 + u64::from(tid), i * 10 + 5)));
                w.advance(tid);
            }
            assert_eq!(w.peek(tid), None);
        }
        assert_eq!(w.peek(3), Some(span(1, 2)));
        assert_eq!(w.peek(4), None);
    }
}
