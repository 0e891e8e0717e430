//! Per-wait events: each contended wait that blocked, with its begin, end, object, chain, how it
//! ended and the thread that ended it, packed per thread ([`waitshim_format::events`]) and
//! written as [`WaitEvents`] records.
//!
//! Each thread packs its own waits into chunks of its record ([`Buf`]), with no lock and no
//! shared write: a chunk reaches the log when it fills, when it is older than a second (`all`),
//! at the thread's exit, or when a flush takes it. A flush from another thread takes a thread's
//! chunks only while the thread is not adding to them (a try-lock both sides use, so neither
//! ever waits for the other: the owner that finds a flush at its buffer drops that one event,
//! counted). In the flight-recorder mode (`ring:N`) chunks are written only at the end (exit,
//! data requests, the thread's exit): those that ended within the last N seconds; older chunks
//! reused for newer waits, and chunks older than N seconds at the end, are counted as dropped.
//! Nothing here runs in a signal handler (waits are ended by the thread that waited).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use waitshim_format::events::{encode, Prev, WaitSpan, MAX_EVENT};
use waitshim_format::WaitEvents;

use super::Tracker;
use crate::config::EventsMode as Mode;

/// The mode in force ([`mode`]): 0 off, 1 all, else the flight recorder's window in ns (at
/// least 1 ms). Process-wide, so that a forked child keeps its parent's.
static MODE: AtomicU64 = AtomicU64::new(1);

/// What is written of per-wait events: set at start, from `WAITSHIM_EVENTS` or else the
/// policy file, and not changed after (a log whose events covered only part of the run would
/// read as a run without those waits).
#[inline]
pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        0 => Mode::Off,
        1 => Mode::All,
        keep_ns => Mode::Ring { keep_ns },
    }
}

/// Puts `m` in force (at start, before the program's threads wait, unless another library's
/// constructor made them wait first: a thread whose buffer was made for `all` then keeps one
/// chunk of flight recorder).
pub fn set_mode(m: Mode) {
    let v = match m {
        Mode::Off => 0,
        Mode::All => 1,
        Mode::Ring { keep_ns } => keep_ns.max(2),
    };
    MODE.store(v, Ordering::Relaxed);
}

/// Bytes of one chunk: a record of about 40 to 110 waits.
const CHUNK: usize = 1024;
/// Chunks per thread in the flight recorder (64 KB for each thread that ever blocked); `all`
/// uses the first only.
const RING: usize = 64;
/// `all`: a chunk older than this is written at the thread's next wait even if not full, so a
/// killed run keeps nearly all of its events.
const AGE_NS: u64 = 1_000_000_000;

struct Chunk {
    len: AtomicU32,
    count: AtomicU32,
    base_ns: AtomicU64,
    last_ns: AtomicU64,
    prev_end: AtomicU64,
    prev_object: AtomicU64,
    prev_chain: AtomicU32,
    /// Atomics, so that a flush may read them while the owner is away: plain moves.
    bytes: [AtomicU8; CHUNK],
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            len: AtomicU32::new(0),
            count: AtomicU32::new(0),
            base_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            prev_end: AtomicU64::new(0),
            prev_object: AtomicU64::new(0),
            prev_chain: AtomicU32::new(0),
            bytes: std::array::from_fn(|_| AtomicU8::new(0)),
        }
    }

    fn clear(&self) {
        self.len.store(0, Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
    }

    fn record(&self, tid: u32, dropped: u64, keep_ns: u64) -> WaitEvents {
        let len = self.len.load(Ordering::Relaxed) as usize;
        WaitEvents {
            tid,
            base_ns: self.base_ns.load(Ordering::Relaxed),
            dropped,
            keep_ns,
            count: self.count.load(Ordering::Relaxed),
            events: self.bytes[..len]
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// One thread's events not yet written (in its `ThreadRec`).
#[derive(Default)]
pub struct Buf {
    /// Even: free; odd: the owner adds an event, or a flush takes the chunks.
    lock: AtomicU32,
    /// Made at the thread's first event; kept when the record serves another thread.
    chunks: OnceLock<Box<[Chunk]>>,
    /// The chunk being filled.
    cur: AtomicU32,
    /// Events this thread's waits left out of the log (cumulative).
    dropped: AtomicU64,
    /// Of those, events not yet said in a written record.
    unsaid: AtomicU64,
}

impl Buf {
    fn try_lock(&self) -> Option<u32> {
        let s = self.lock.load(Ordering::Relaxed);
        (s & 1 == 0
            && self
                .lock
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok())
        .then_some(s + 2)
    }

    fn unlock(&self, next: u32) {
        self.lock.store(next, Ordering::Release);
    }

    fn drop_events(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
        self.unsaid.fetch_add(n, Ordering::Relaxed);
    }

    /// Forgets everything (a forked child's thread: what it holds is its parent's).
    pub fn reset(&self) {
        if let Some(c) = self.chunks.get() {
            c.iter().for_each(Chunk::clear);
        }
        self.cur.store(0, Ordering::Relaxed);
        self.dropped.store(0, Ordering::Relaxed);
        self.unsaid.store(0, Ordering::Relaxed);
    }

    /// Adds a wait of thread `tid` that has just ended (owner thread only, inside the shim).
    pub fn add(&self, tr: &Tracker, tid: u32, span: &WaitSpan) {
        let mode = mode();
        if mode == Mode::Off {
            return;
        }
        let Some(next) = self.try_lock() else {
            self.drop_events(1);
            return;
        };
        let chunks = self.chunks.get_or_init(|| {
            let n = if matches!(mode, Mode::Ring { .. }) {
                RING
            } else {
                1
            };
            (0..n).map(|_| Chunk::new()).collect()
        });
        let mut c = &chunks[self.cur.load(Ordering::Relaxed) as usize % chunks.len()];
        let mut buf = [0u8; MAX_EVENT];
        let mut n = self.pack(c, tid, span, &mut buf);
        if c.len.load(Ordering::Relaxed) as usize + n > CHUNK {
            match mode {
                Mode::Ring { .. } => {
                    let i = (self.cur.load(Ordering::Relaxed) + 1) % chunks.len() as u32;
                    self.cur.store(i, Ordering::Relaxed);
                    c = &chunks[i as usize];
                    self.drop_events(u64::from(c.count.load(Ordering::Relaxed)));
                }
                _ => self.write(tr, tid, c),
            }
            c.clear();
            n = self.pack(c, tid, span, &mut buf);
        }
        let at = c.len.load(Ordering::Relaxed) as usize;
        for (dst, &b) in c.bytes[at..at + n].iter().zip(&buf[..n]) {
            dst.store(b, Ordering::Relaxed);
        }
        c.len.store((at + n) as u32, Ordering::Relaxed);
        c.count.fetch_add(1, Ordering::Relaxed);
        c.last_ns.store(span.end_ns, Ordering::Relaxed);
        let (end, obj, chain) = (
            span.begin_ns.max(span.end_ns),
            span.object_id,
            span.chain_id,
        );
        c.prev_end.store(end, Ordering::Relaxed);
        c.prev_object.store(obj, Ordering::Relaxed);
        c.prev_chain.store(chain, Ordering::Relaxed);
        if mode == Mode::All
            && span
                .end_ns
                .saturating_sub(c.base_ns.load(Ordering::Relaxed))
                > AGE_NS
        {
            self.write(tr, tid, c);
            c.clear();
        }
        self.unlock(next);
    }

    /// Packs `span` after what `c` holds (starting it, if empty).
    fn pack(&self, c: &Chunk, tid: u32, span: &WaitSpan, buf: &mut [u8; MAX_EVENT]) -> usize {
        let mut prev = if c.count.load(Ordering::Relaxed) == 0 {
            c.base_ns.store(span.begin_ns, Ordering::Relaxed);
            Prev::at(span.begin_ns)
        } else {
            Prev {
                end_ns: c.prev_end.load(Ordering::Relaxed),
                object_id: c.prev_object.load(Ordering::Relaxed),
                chain_id: c.prev_chain.load(Ordering::Relaxed),
            }
        };
        encode(span, tid, &mut prev, buf)
    }

    fn write(&self, tr: &Tracker, tid: u32, c: &Chunk) {
        if c.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let keep_ns = match mode() {
            Mode::Ring { keep_ns } => keep_ns,
            _ => 0,
        };
        let rec = c.record(tid, self.dropped.load(Ordering::Relaxed), keep_ns);
        self.unsaid.store(0, Ordering::Relaxed);
        tr.log.write(&rec.into());
    }

    /// Writes what the buffer holds of thread `tid` and empties it, unless its owner is adding
    /// to it at this moment (then `false`): in the flight recorder, the chunks that ended within
    /// the window before `now`, oldest first, the others counted as dropped.
    pub fn take(&self, tr: &Tracker, tid: u32, now: u64) -> bool {
        let Some(chunks) = self.chunks.get() else {
            return true;
        };
        let Some(next) = self.try_lock() else {
            return false;
        };
        let cur = self.cur.load(Ordering::Relaxed) as usize;
        for k in 1..=chunks.len() {
            let c = &chunks[(cur + k) % chunks.len()];
            let n = c.count.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            match mode() {
                Mode::Ring { keep_ns }
                    if now.saturating_sub(c.last_ns.load(Ordering::Relaxed)) > keep_ns =>
                {
                    self.drop_events(u64::from(n))
                }
                _ => self.write(tr, tid, c),
            }
            c.clear();
        }
        if self.unsaid.load(Ordering::Relaxed) > 0 {
            // Dropped events with no chunk left to say so: an empty record carries the count.
            tr.log.write(
                &WaitEvents {
                    tid,
                    base_ns: now,
                    dropped: self.dropped.load(Ordering::Relaxed),
                    keep_ns: 0,
                    count: 0,
                    events: Vec::new(),
                }
                .into(),
            );
            self.unsaid.store(0, Ordering::Relaxed);
        }
        self.cur.store(0, Ordering::Relaxed);
        self.unlock(next);
        true
    }
}

/// Writes the events every thread holds: all of them at an exit or data request (`complete`,
/// waiting a moment for a thread adding one); else, with every event kept (`all`), what is not
/// being added to. The flight recorder keeps its chunks until the end.
pub fn take_all(tr: &Tracker, now: u64, complete: bool) {
    let mode = mode();
    if mode == Mode::Off || (!complete && mode != Mode::All) {
        return;
    }
    for e in tr.threads.iter() {
        let t = e.value().0;
        let mut tries = 0;
        while !t.events.take(tr, t.tid(), now) && complete && tries < 100 {
            tries += 1;
            std::thread::yield_now();
        }
    }
}
