//! The run's critical path: the chain of work and waiting that the run's end waited for, walked
//! back from the end through the per-wait events (who ended each wait) and the sampler's thread
//! states. What lies on it held the program back; waiting that is not on it cost nothing (an idle
//! pool, a logger, a listener), however long it was.
//!
//! The walk starts at the thread that ended last (the main thread, at the end of the run) and
//! goes back in time on one thread at a time:
//! - a span between two waits is the thread's own: on a CPU (its work), ready for one (a CPU was
//!   busy, or the thread was being woken), or blocked in a system call, split as the sampler's
//!   states say (estimates where a sample interval held several states). Right after a wait that
//!   took a lock, the span up to the release that woke the next waiter is inside the lock's
//!   critical section, all of it the lock's cost (its holder computing, preempted, or blocked
//!   in a call while it held it), up to the lock's longest measured hold (the thread may have
//!   let it go and taken it again unseen in between);
//! - a wait that another thread ended (a release, signal, post, a thread's exit for a join) is
//!   not on the path: the path goes on at that thread, at the moment it ended the wait;
//! - a wait nobody is known to have ended (a timeout, a wake the shim did not see) is on the
//!   path itself;
//! - the start of a thread goes on at the thread that created it;
//! - a blocked system call (not a sleep) of the thread the walk went to, which ended before the
//!   thread the walk came from began its wait, goes on at that thread, when the call ended: it
//!   most likely ended the call (connected, wrote, closed), which the shim does not see (an
//!   estimate, said as such).
//!
//! When the program has progress points, the path is that of its phase: from the first point's
//! first visit to the last visit of any (a server's work, not its start-up, nor the idle time
//! before it was stopped); the walk is the same, and only what lies in the phase is counted.
//!
//! The path's time adds up to the time from its first moment to its end. What the walk needs of
//! the log ([`Input`]) is gathered in the model's own read of it ([`crate::pass`]). Memory: each
//! thread's waits in blocks of 256 (20 bytes a wait), up to 32 MiB of them in memory and the rest
//! in an unnamed temporary file, read backwards; the sampled states of every thread (one entry
//! per change of state).
//!
//! What-if runs the recorded threads again from the same input ([`replay`]).

pub mod replay;

/// The walk's maps: hashed once or more per wait event, with foldhash (seeded per process).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use waitshim_format::events::WaitSpan;
use waitshim_format::{counter, ObjectKind, Record, WaitEvents};

use crate::export::slices::{self, Event, State};
use crate::export::timeline::{self, Wait};
use crate::model::Model;
use crate::source::ReadSummary;

/// What a piece of the critical path was.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// Inside the critical sections of this object (its id): its holder was on the path.
    Held(u64),
    /// Waiting on this object with nobody known to end the wait (a timeout, or a wake the shim
    /// did not see).
    Waited(u64),
    /// This thread's own work (on a CPU, or between samples in no state seen).
    Work(u32),
    /// This thread ready to run while every CPU was busy (more runnable threads than CPUs, or
    /// other processes).
    CpusBusy(u32),
    /// This thread ready to run while a CPU was idle: the latency of being woken, after a wait on
    /// the object (its id, 0 when none), the cost of its hand-off.
    WakeLatency(u64),
    /// This thread blocked in a system call (-1: asleep outside one) on what it waited for.
    Blocked(i32, String),
    /// This thread stopped (a signal, a debugger).
    Stopped,
}

/// The critical path of a run, by what it was made of.
#[derive(Debug, Clone, Default)]
pub struct Path {
    /// From its first moment to the end of the run (or of the phase).
    pub start_ns: u64,
    pub end_ns: u64,
    /// The phase the path covers, between progress points (None: the whole run).
    pub phase: Option<(u64, u64)>,
    /// With a phase: each thread's time on a CPU and ready for one within it, from the
    /// sampler's states (intervals that straddle the phase's ends are split by the state's
    /// share, an estimate).
    pub phase_cpu: FastMap<u32, (u64, u64)>,
    /// What the time went to, most first.
    pub by: Vec<(Cause, u64)>,
    /// Waits the walk went through, ended by another thread (not on the path themselves).
    pub hops: u64,
    /// Part of the path's time was split by the sampler's states, which are estimates.
    pub estimated: bool,
    /// The threads seen holding each lock, each with how many times it released the lock to a
    /// waiter: those that took it after waiting, and those that released it to a waiter
    /// (what-if spreads the holds nobody waited for over them).
    pub holders: FastMap<u64, Vec<(u32, u64)>>,
    /// Of each lock's critical sections on the path, the time its holder was on a CPU or ready
    /// for one (or not seen otherwise): what shorter sections would save (less work inside is
    /// less time preempted too; a holder blocked in a call or stopped while holding is not made
    /// faster by it).
    pub held_running: FastMap<u64, u64>,
}

impl Path {
    pub fn length_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The path's time in `cause`.
    pub fn ns(&self, cause: &Cause) -> u64 {
        self.by
            .iter()
            .find(|(c, _)| c == cause)
            .map_or(0, |&(_, ns)| ns)
    }
}

/// One wait, as the walk needs it; packed in blocks by [`encode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    begin: u64,
    end: u64,
    /// The object's place in [`Input`]'s objects (below [`MAX_OBJECTS`]).
    object: u32,
    waker: u32,
    /// By which rule the wait may have taken its object: which applies is decided at the walk,
    /// when every object's kind is known ([`took_it`]).
    takes: Takes,
}

/// Whether a wait's way of ending means it took its object, by the object's kind: a pthread
/// lock's (ended acquired, brief or open) or a runtime lock word's (ended by a wake).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Takes {
    No = 0,
    IfLock = 1,
    IfLockWord = 2,
}

impl Takes {
    fn of(reason: u16) -> Takes {
        if took_it(Some(ObjectKind::Mutex), reason, false) {
            Takes::IfLock
        } else if took_it(Some(ObjectKind::Futex), reason, true) {
            Takes::IfLockWord
        } else {
            Takes::No
        }
    }

    fn from_bits(b: u32) -> Takes {
        match b {
            1 => Takes::IfLock,
            2 => Takes::IfLockWord,
            _ => Takes::No,
        }
    }

    /// Whether a wait under this rule took object `o`, now that its kind is known.
    fn took(self, model: &Model, o: u64, lock_words: &std::collections::HashSet<u64>) -> bool {
        let kind = model.objects.get(&o).and_then(|x| x.kind());
        match self {
            Takes::IfLock => took_it(kind, counter::ENDED_ACQUIRED, false),
            Takes::IfLockWord => took_it(kind, counter::ENDED_SIGNALLED, lock_words.contains(&o)),
            Takes::No => false,
        }
    }
}

/// Objects a walk can tell apart: a step keeps its object's place in 30 bits.
const MAX_OBJECTS: usize = 1 << 30;

/// Waits per block.
const PER_BLOCK: usize = 256;
/// A block's header: its count (u32), the offset of the thread's previous block (u64,
/// `NO_BLOCK` for the first), the length of its waits in bytes (u32).
const HEADER_BYTES: usize = 16;
/// The bytes of one wait in a block ([`encode`]).
const STEP_BYTES: usize = 20;
/// A wait's length in a block that says the wait was longer: its end is in [`Steps::long`].
const LONG: u32 = u32::MAX;
const NO_BLOCK: u64 = u64::MAX;
/// Holders kept per lock: what-if spreads a lock's unseen holds over the first ones seen.
const MAX_HOLDERS: usize = 64;

/// Writes `s` at the end of `out`, little-endian: its begin (8 bytes), its length (4; [`LONG`]
/// for a wait of 4.3 s or more, whose end `long` then keeps by thread `tid` and begin), its
/// object's place
/// with its [`Takes`] in the top two bits (4), its waker (4). Fixed-size rather than packed in
/// varints: unpacking took a quarter of the path's time, and memory is bounded either way
/// ([`IN_MEMORY`]).
fn encode(s: &Step, tid: u32, out: &mut Vec<u8>, long: &mut FastMap<(u32, u64), u64>) {
    let len = match u32::try_from(s.end - s.begin) {
        Ok(n) if n != LONG => n,
        _ => {
            long.insert((tid, s.begin), s.end);
            LONG
        }
    };
    let mut b = [0u8; STEP_BYTES];
    b[0..8].copy_from_slice(&s.begin.to_le_bytes());
    b[8..12].copy_from_slice(&len.to_le_bytes());
    b[12..16].copy_from_slice(&(s.object | (s.takes as u32) << 30).to_le_bytes());
    b[16..20].copy_from_slice(&s.waker.to_le_bytes());
    out.extend_from_slice(&b);
}

/// The waits of a block's bytes, in order ([`encode`]); None when they do not decode (a
/// temporary file that changed under the analyzer).
#[cfg(test)]
fn decode(b: &[u8], count: usize, tid: u32, long: &FastMap<(u32, u64), u64>) -> Option<Vec<Step>> {
    let mut out: Vec<Step> = Vec::with_capacity(count);
    decode_into(b, count, tid, long, &mut out)?;
    Some(out)
}

/// [`decode`] into `out` (emptied first), keeping its allocation.
fn decode_into(
    b: &[u8],
    count: usize,
    tid: u32,
    long: &FastMap<(u32, u64), u64>,
    out: &mut Vec<Step>,
) -> Option<()> {
    out.clear();
    let b = b.get(..count.checked_mul(STEP_BYTES)?)?;
    for c in b.chunks_exact(STEP_BYTES) {
        let u32_at = |i: usize| u32::from_le_bytes(c[i..i + 4].try_into().unwrap_or_default());
        let begin = u64::from_le_bytes(c[0..8].try_into().ok()?);
        let end = match u32_at(8) {
            LONG => *long.get(&(tid, begin))?,
            n => begin.checked_add(u64::from(n))?,
        };
        let object = u32_at(12);
        out.push(Step {
            begin,
            end,
            object: object & (MAX_OBJECTS as u32 - 1),
            waker: u32_at(16),
            takes: Takes::from_bits(object >> 30),
        });
    }
    Some(())
}

/// Blocks kept in memory before they go to an unnamed temporary file: 32 MiB, about 1.1 million
/// waits (a system call per block read and written costs more than the walk itself).
const IN_MEMORY: usize = 32 << 20;

/// Where the blocks are: in memory, then, past [`IN_MEMORY`], in an unnamed temporary file.
enum Store {
    Memory(Vec<u8>),
    File(File),
}

impl Store {
    /// Writes `bytes` at `at` (the end), moving to a file once memory would hold more than
    /// `limit` bytes.
    fn write_at(&mut self, bytes: &[u8], at: u64, limit: usize) -> io::Result<()> {
        if let Store::Memory(m) = self {
            if m.len() + bytes.len() <= limit {
                if m.capacity() == 0 {
                    // All of it at once: pages are taken only as they are written, and growing
                    // by doubling copied each wait about once more (7 % of the path's time).
                    m.reserve_exact(limit);
                }
                m.extend_from_slice(bytes);
                return Ok(());
            }
            let file = crate::export::waiters::temporary()?;
            file.write_all_at(m, 0)?;
            *self = Store::File(file);
        }
        match self {
            Store::File(f) => f.write_all_at(bytes, at),
            Store::Memory(_) => unreachable!("moved to a file above"),
        }
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        match self {
            Store::File(f) => f.read_exact_at(buf, at),
            Store::Memory(m) => {
                let at = usize::try_from(at).unwrap_or(usize::MAX);
                let src = m
                    .get(at..at.saturating_add(buf.len()))
                    .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// Each thread's waits in time order: the latest block in memory, the earlier ones in the
/// store, each block pointing to the one before it, so that the walk reads them backwards.
struct Steps {
    store: Store,
    /// How many waits it holds.
    count: u64,
    /// [`IN_MEMORY`], smaller in tests.
    limit: usize,
    len: u64,
    /// Each thread's steps, in the order the threads first waited, found through `index`; the
    /// last thread's is found without a lookup (waits come in batches of one thread's).
    threads: Vec<(u32, ThreadSteps)>,
    index: FastMap<u32, usize>,
    last: usize,
    /// The block being packed (one buffer for all of them).
    scratch: Vec<u8>,
    /// The ends of waits too long for a block, by thread and begin ([`encode`]).
    long: FastMap<(u32, u64), u64>,
}

#[derive(Default, Clone)]
struct ThreadSteps {
    /// The thread's waits not yet in the file (the latest), in order.
    tail: Vec<Step>,
    /// The offset of its latest block in the file.
    last_block: u64,
}

impl Steps {
    fn new() -> Steps {
        Steps::with_limit(IN_MEMORY)
    }

    fn with_limit(limit: usize) -> Steps {
        Steps {
            limit,
            store: Store::Memory(Vec::new()),
            count: 0,
            len: 0,
            threads: Vec::new(),
            index: FastMap::default(),
            last: usize::MAX,
            scratch: Vec::with_capacity(HEADER_BYTES + PER_BLOCK * STEP_BYTES),
            long: FastMap::default(),
        }
    }

    fn add(&mut self, tid: u32, s: Step) -> io::Result<()> {
        let i = match self.threads.get(self.last) {
            Some((t, _)) if *t == tid => self.last,
            _ => {
                let n = self.threads.len();
                let i = *self.index.entry(tid).or_insert(n);
                if i == n {
                    self.threads.push((
                        tid,
                        ThreadSteps {
                            tail: Vec::new(),
                            last_block: NO_BLOCK,
                        },
                    ));
                }
                self.last = i;
                i
            }
        };
        let t = &mut self.threads[i].1;
        t.tail.push(s);
        self.count += 1;
        if t.tail.len() < PER_BLOCK {
            return Ok(());
        }
        let bytes = &mut self.scratch;
        bytes.clear();
        bytes.extend_from_slice(&(t.tail.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&t.last_block.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        for s in &t.tail {
            encode(s, tid, bytes, &mut self.long);
        }
        t.tail.clear();
        let len = (bytes.len() - HEADER_BYTES) as u32;
        bytes[12..16].copy_from_slice(&len.to_le_bytes());
        self.store.write_at(bytes, self.len, self.limit)?;
        t.last_block = self.len;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Thread `tid`'s latest waits and latest block in the store, for a cursor to start from.
    fn of(&self, tid: u32) -> Option<ThreadSteps> {
        self.index.get(&tid).map(|&i| self.threads[i].1.clone())
    }
}

/// A cursor over one thread's waits, latest first.
struct Backwards<'a> {
    file: &'a Store,
    long: &'a FastMap<(u32, u64), u64>,
    tid: u32,
    /// The waits of the block being read, in order (the next is the last).
    current: Vec<Step>,
    next_block: u64,
    /// A block read from the file (one buffer for all of them).
    read: Vec<u8>,
}

impl<'a> Backwards<'a> {
    /// Thread `tid`'s waits, latest first, from its tail and its blocks in the store.
    fn of(steps: &'a Steps, tid: u32) -> Backwards<'a> {
        let t = steps.of(tid).unwrap_or(ThreadSteps {
            tail: Vec::new(),
            last_block: NO_BLOCK,
        });
        Backwards {
            file: &steps.store,
            long: &steps.long,
            tid,
            current: t.tail,
            next_block: t.last_block,
            read: Vec::new(),
        }
    }

    fn peek(&mut self) -> Option<Step> {
        while self.current.is_empty() {
            if self.next_block == NO_BLOCK {
                return None;
            }
            let mut h = [0u8; HEADER_BYTES];
            self.file.read_at(&mut h, self.next_block).ok()?;
            let n = (u32::from_le_bytes(h[0..4].try_into().ok()?) as usize).min(PER_BLOCK);
            let len = (u32::from_le_bytes(h[12..16].try_into().ok()?) as usize)
                .min(PER_BLOCK * STEP_BYTES);
            let at = self.next_block + HEADER_BYTES as u64;
            self.next_block = u64::from_le_bytes(h[4..12].try_into().ok()?);
            match self.file {
                Store::Memory(m) => {
                    let from = usize::try_from(at).ok()?;
                    let b = m.get(from..from.checked_add(len)?)?;
                    decode_into(b, n, self.tid, self.long, &mut self.current)?;
                }
                Store::File(_) => {
                    let b = &mut self.read;
                    b.resize(len, 0);
                    self.file.read_at(b, at).ok()?;
                    decode_into(b, n, self.tid, self.long, &mut self.current)?;
                }
            }
        }
        self.current.last().copied()
    }

    fn pop(&mut self) {
        self.current.pop();
    }
}

/// What a thread did between its waits, from the sampler: time-ordered pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Own {
    Running,
    Runnable,
    Blocked(i32, String),
    Stopped,
}

/// A sampled piece of a thread's time: start, end, what it did, whether estimated.
type Piece = (u64, u64, Own, bool);

/// A thread's sampled pieces, kept in time order, and where the last search for one ended.
#[derive(Default)]
struct Pieces {
    v: Vec<Piece>,
    hint: std::cell::Cell<usize>,
}

impl From<Vec<Piece>> for Pieces {
    fn from(v: Vec<Piece>) -> Pieces {
        Pieces {
            v,
            hint: Default::default(),
        }
    }
}

impl Pieces {
    /// The pieces from the first that ends after `a` on. The walk asks of each thread at times
    /// going back, a few pieces apart: the search steps from where the last one ended, and
    /// bisects only when that is far (a binary search of each call missed the cache: 60 % of
    /// the path's time on a 14 MB log).
    fn after(&self, a: u64) -> &[Piece] {
        let v = &self.v;
        let mut i = self.hint.get().min(v.len());
        let mut steps = 0;
        while i > 0 && v[i - 1].1 > a {
            i -= 1;
            steps += 1;
            if steps > 16 {
                i = v[..i].partition_point(|x| x.1 <= a);
                break;
            }
        }
        while i < v.len() && v[i].1 <= a {
            i += 1;
            steps += 1;
            if steps > 16 {
                i += v[i..].partition_point(|x| x.1 <= a);
                break;
            }
        }
        self.hint.set(i);
        &v[i..]
    }
}

/// Idle CPUs over time, from the sampler: (start, end, idle CPUs on average).
type Idle = Vec<(u64, u64, f64)>;

/// The walk's account of the path.
struct Account {
    /// Each cause's time, in the order first met, found through `index`; the two causes met
    /// last without a lookup (a walk alternates between a few).
    by: Vec<(Cause, u64)>,
    index: FastMap<Cause, usize>,
    recent: [usize; 2],
    held_running: FastMap<u64, u64>,
    estimated: bool,
    /// Only what lies in this span is counted (the phase, or the whole run).
    window: (u64, u64),
}

impl Account {
    fn new(window: (u64, u64)) -> Account {
        Account {
            by: Vec::new(),
            index: FastMap::default(),
            recent: [usize::MAX; 2],
            held_running: FastMap::default(),
            estimated: false,
            window,
        }
    }

    fn add(&mut self, cause: Cause, ns: u64) {
        if ns > 0 {
            let hit = self
                .recent
                .into_iter()
                .find(|&i| self.by.get(i).is_some_and(|b| b.0 == cause));
            let i = match hit {
                Some(i) => i,
                None => {
                    let n = self.by.len();
                    let i = *self.index.entry(cause.clone()).or_insert(n);
                    if i == n {
                        self.by.push((cause, 0));
                    }
                    i
                }
            };
            self.by[i].1 += ns;
            if self.recent[0] != i {
                self.recent = [i, self.recent[0]];
            }
        }
    }

    /// [a, b) cut to the window.
    fn clip(&self, a: u64, b: u64) -> (u64, u64) {
        (a.max(self.window.0), b.min(self.window.1))
    }
}

/// Whether the wait's reason means it took its object: the waiter now holds it. A futex word a
/// runtime's lock sleeps on (`lock_word`: Rust's `Mutex`, as its code says) is taken by the
/// waiter its unlock woke: the waiter takes it on waking, or sleeps again (a later wait).
fn took_it(kind: Option<ObjectKind>, reason: u16, lock_word: bool) -> bool {
    if lock_word && kind == Some(ObjectKind::Futex) {
        return reason == counter::ENDED_SIGNALLED;
    }
    matches!(
        kind,
        Some(ObjectKind::Mutex | ObjectKind::RwLock | ObjectKind::Spin)
    ) && matches!(reason, counter::ENDED_ACQUIRED | counter::ENDED_BRIEF | 0)
}

/// Candidate holders of one object, under each rule by which a wait takes it ([`took_it`]),
/// each holder with how many times it released the object to a waiter; which rule applies is
/// known once every object's kind is. None until a wait took it under that rule.
#[derive(Default)]
struct Candidates {
    /// Waits that ended acquired, brief or open: a pthread lock's.
    lock: Option<Vec<(u32, u64)>>,
    /// Waits ended by a wake: a runtime's lock word's.
    word: Option<Vec<(u32, u64)>>,
    /// Where the last waiter and waker were found ([`add_holders`]).
    hint: [usize; 2],
}

/// Counts `tid` as a holder of its own wait's object, and `waker` as one that released it.
/// `hint`: where the last two were found (a thread's waits come in batches, and the same
/// waker often releases to it again).
fn add_holders(seen: &mut Option<Vec<(u32, u64)>>, hint: &mut [usize; 2], tid: u32, waker: u32) {
    let seen = seen.get_or_insert_with(Vec::new);
    for (k, (t, released)) in [(tid, 0), (waker, 1)].into_iter().enumerate() {
        let at = match seen.get(hint[k]) {
            Some(h) if h.0 == t => Some(hint[k]),
            _ => seen.iter().position(|h| h.0 == t),
        };
        if let Some(i) = at {
            seen[i].1 += released;
            hint[k] = i;
        } else if t != 0 && seen.len() < MAX_HOLDERS {
            hint[k] = seen.len();
            seen.push((t, released));
        }
    }
}

/// What the walk needs of a log, gathered in the model's own read of it ([`crate::pass`]): each
/// thread's waits, packed; each lock's candidate holders; each thread's sampled states and the
/// idle CPUs. The one exception is a log with a flight recorder, whose kept waits are known
/// only at its end: for it, [`critical_path`] reads the waits again.
pub struct Input {
    steps: Steps,
    failed: Option<io::Error>,
    /// Each object waited on, in the order first waited on, found through `index`; the last
    /// one without a lookup; and its candidate holders.
    ids: Vec<u64>,
    candidates: Vec<Candidates>,
    index: FastMap<u64, usize>,
    last: usize,
    waits: timeline::EventFold,
    states: Option<slices::Fold>,
    pieces: FastMap<u32, Pieces>,
    idle: Idle,
    /// In the model's own read: thread ends are known at the end only.
    streaming: bool,
    /// A flight recorder's batch was left out ([`timeline::EventFold::streaming`]).
    windowed: bool,
}

impl Input {
    /// For the model's own read of the log.
    pub fn streaming() -> Input {
        Input::with(
            timeline::EventFold::streaming(),
            slices::Fold::streaming(),
            true,
        )
    }

    fn with(waits: timeline::EventFold, states: slices::Fold, streaming: bool) -> Input {
        Input {
            steps: Steps::new(),
            failed: None,
            ids: Vec::new(),
            candidates: Vec::new(),
            index: FastMap::default(),
            last: usize::MAX,
            waits,
            states: Some(states),
            pieces: FastMap::default(),
            idle: Idle::new(),
            streaming,
            windowed: false,
        }
    }

    /// Reads the log `first` summarises again, after its model was made (a log with a flight
    /// recorder). A read that finds less leaves what it found: the path is split as far as it
    /// goes (the rest counts as work).
    fn read_again(model: &Model, first: &ReadSummary) -> io::Result<Input> {
        let mut input = Input::with(
            timeline::EventFold::new(model),
            slices::Fold::new(model),
            false,
        );
        let _note = crate::export::read_again(first, "the critical path", |bytes, path| {
            let summary = crate::source::read_from(bytes, path, |rec| match &rec {
                Record::WaitEvents(batch) => {
                    if let Ok(w) = batch.waits() {
                        crate::pass::Sink::waits(&mut input, batch, &w, model);
                    }
                }
                rec => crate::pass::Sink::record(&mut input, rec, model),
            });
            let summary = summary.map_err(|e| e.why)?;
            Ok(Ok::<_, io::Error>(summary))
        })?;
        crate::pass::Sink::finish(&mut input, model);
        Ok(input)
    }

    /// The holders of each lock, under the rule its kind says.
    fn holders(
        &self,
        model: &Model,
        lock_words: &std::collections::HashSet<u64>,
    ) -> FastMap<u64, Vec<(u32, u64)>> {
        self.ids
            .iter()
            .zip(&self.candidates)
            .filter_map(|(o, c)| {
                let rule = if Takes::IfLockWord.took(model, *o, lock_words) {
                    &c.word
                } else if Takes::IfLock.took(model, *o, lock_words) {
                    &c.lock
                } else {
                    &None
                };
                Some((*o, rule.clone()?))
            })
            .collect()
    }
}

impl crate::pass::Sink for Input {
    fn record(&mut self, rec: &Record, model: &Model) {
        if !matches!(
            rec,
            Record::ThreadSamples(_) | Record::BlockedChain(_) | Record::CpuSample(_)
        ) {
            return;
        }
        let (pieces, idle) = (&mut self.pieces, &mut self.idle);
        if let Some(states) = &mut self.states {
            let _ = states.record(rec, model, &mut |e| {
                on_sampled(pieces, idle, e);
                Ok::<(), ()>(())
            });
        }
    }

    fn waits(&mut self, batch: &WaitEvents, waits: &[WaitSpan], model: &Model) {
        if self.streaming && batch.keep_ns > 0 {
            self.windowed = true;
            return;
        }
        let Input {
            steps,
            failed,
            ids,
            candidates,
            index,
            last,
            ..
        } = self;
        let mut on_wait = |tid: u32, w: Wait| {
            if w.end <= w.start {
                return Ok::<(), ()>(());
            }
            let i = match ids.get(*last) {
                Some(o) if *o == w.object_id => *last,
                _ => {
                    let n = ids.len();
                    if n == MAX_OBJECTS && !index.contains_key(&w.object_id) {
                        *failed = Some(io::Error::other("too many objects for the walk"));
                        return Ok(());
                    }
                    let i = *index.entry(w.object_id).or_insert(n);
                    if i == n {
                        ids.push(w.object_id);
                        candidates.push(Candidates::default());
                    }
                    *last = i;
                    i
                }
            };
            // Which rule applies is known once the object's kind is; until then, both are kept.
            let kind = model.objects.get(&w.object_id).and_then(|o| o.kind());
            let c = &mut candidates[i];
            let lockish = |k| {
                matches!(
                    k,
                    None | Some(ObjectKind::Mutex | ObjectKind::RwLock | ObjectKind::Spin)
                )
            };
            let takes = Takes::of(w.reason);
            match takes {
                Takes::IfLock if lockish(kind) => {
                    add_holders(&mut c.lock, &mut c.hint, tid, w.waker_tid)
                }
                Takes::IfLockWord if matches!(kind, None | Some(ObjectKind::Futex)) => {
                    add_holders(&mut c.word, &mut c.hint, tid, w.waker_tid)
                }
                _ => {}
            }
            if failed.is_none() {
                let step = Step {
                    begin: w.start,
                    end: w.end,
                    object: i as u32,
                    waker: w.waker_tid,
                    takes,
                };
                *failed = steps.add(tid, step).err();
            }
            Ok(())
        };
        let _ = self
            .waits
            .batch(batch.tid, batch.keep_ns, waits, &mut on_wait);
    }

    fn finish(&mut self, model: &Model) {
        let (pieces, idle) = (&mut self.pieces, &mut self.idle);
        if let Some(states) = self.states.take() {
            let _ = states.finish(model, &mut |e| {
                on_sampled(pieces, idle, e);
                Ok::<(), ()>(())
            });
        }
        let end = model.end_of_log();
        for (tid, p) in pieces.iter_mut() {
            p.v.sort_by_key(|x| x.0);
            if self.streaming {
                // Cut to the thread's life, known only now (a sample may come before the
                // thread's start record).
                let t = model.threads.get(tid);
                let from = t.and_then(|t| t.start_ns).unwrap_or(0);
                let until = t.and_then(|t| t.exit_ns).unwrap_or(end);
                p.v.retain_mut(|x| {
                    x.0 = x.0.max(from);
                    x.1 = x.1.min(until);
                    x.1 > x.0
                });
            }
        }
        idle.sort_by_key(|a| a.0);
    }
}

/// The run's critical path, or None when the log has no per-wait events to follow (then only
/// the sampled states would say anything, and not who ended whose wait). `input` is what the
/// model's read gathered for it ([`Input`]), None to read the log again.
///
/// `lock_words`: the futex words whose code says they are locks (`findings::runtime_group`).
pub fn critical_path(
    model: &Model,
    first: &ReadSummary,
    lock_words: &std::collections::HashSet<u64>,
    input: Option<&Input>,
) -> io::Result<Option<Path>> {
    if !model.events.any() {
        return Ok(None);
    }
    let again;
    let input = match input {
        Some(i) if !i.windowed => i,
        _ => {
            again = Input::read_again(model, first)?;
            &again
        }
    };
    if let Some(e) = &input.failed {
        return Err(io::Error::new(e.kind(), e.to_string()));
    }
    let holders = input.holders(model, lock_words);
    let took = |o: u64, takes: Takes| takes.took(model, o, lock_words);
    Ok(walk(
        model,
        &input.steps,
        &input.ids,
        &input.pieces,
        &input.idle,
        took,
    )
    .map(|p| Path {
        phase_cpu: p
            .phase
            .map_or_else(FastMap::default, |w| phase_cpu(&input.pieces, w)),
        holders,
        ..p
    }))
}

/// Each thread's time running and ready for a CPU within `w`, from its sampled pieces.
fn phase_cpu(pieces: &FastMap<u32, Pieces>, w: (u64, u64)) -> FastMap<u32, (u64, u64)> {
    pieces
        .iter()
        .map(|(&tid, p)| {
            let mut run = (0, 0);
            for (s, e, own, _) in &p.v {
                let ov = (*e).min(w.1).saturating_sub((*s).max(w.0));
                match own {
                    Own::Running => run.0 += ov,
                    Own::Runnable => run.1 += ov,
                    _ => {}
                }
            }
            (tid, run)
        })
        .filter(|(_, r)| r.0 > 0)
        .collect()
}

/// A sampler's state slice or idle-CPU figure, added to the thread's pieces or the idle CPUs.
fn on_sampled(pieces: &mut FastMap<u32, Pieces>, idle: &mut Idle, e: Event) {
    match e {
        Event::Slice(s) => {
            let own = match s.state {
                State::Running => Some(Own::Running),
                State::Runnable => Some(Own::Runnable),
                State::Blocked { syscall, what, .. } => Some(Own::Blocked(syscall, what)),
                State::Stopped => Some(Own::Stopped),
                State::Tracked(_) | State::Unseen => None,
            };
            if let Some(own) = own {
                pieces
                    .entry(s.tid)
                    .or_default()
                    .v
                    .push((s.start, s.end, own, s.estimated));
            }
        }
        Event::IdleCpus {
            start,
            end,
            idle: n,
            ..
        } => idle.push((start, end, n)),
    }
}

/// Idle CPUs on average over [a, b) (0 when the sampler said nothing of it).
fn idle_over(idle: &Idle, a: u64, b: u64) -> f64 {
    let i = idle.partition_point(|x| x.1 <= a);
    let (mut sum, mut covered) = (0.0, 0u64);
    for &(s, e, n) in &idle[i..] {
        if s >= b {
            break;
        }
        let ov = e.min(b).saturating_sub(s.max(a));
        sum += n * ov as f64;
        covered += ov;
    }
    if covered == 0 {
        0.0
    } else {
        sum / covered as f64
    }
}

/// Accounts thread `tid`'s own time over [a, b): inside `held`'s critical section if given (a
/// lock the thread took at the start of the span and released at its end), else by the
/// sampler's pieces; `after` is the object whose wait the thread left at `a` (its hand-off).
#[allow(clippy::too_many_arguments)]
fn own_time(
    acc: &mut Account,
    tid: u32,
    a: u64,
    b: u64,
    held: Option<u64>,
    after: u64,
    pieces: Option<&Pieces>,
    idle: &Idle,
) {
    let (a, b) = acc.clip(a, b);
    if b <= a {
        return;
    }
    let total = b - a;
    let mut seen = 0u64;
    if let Some(p) = pieces {
        for (s, e, own, estimated) in p.after(a) {
            if *s >= b {
                break;
            }
            let ov = (*e).min(b).saturating_sub((*s).max(a));
            if ov == 0 {
                continue;
            }
            acc.estimated |= *estimated;
            seen += ov;
            if let (Own::Running | Own::Runnable, Some(o)) = (own, held) {
                *acc.held_running.entry(o).or_default() += ov;
            }
            let cause = match (own, held) {
                // Inside a critical section, everything is the lock's cost: its holder
                // computing, preempted while it held it, or blocked in a call under it.
                (_, Some(o)) => Cause::Held(o),
                (Own::Running, None) => Cause::Work(tid),
                (Own::Runnable, None) => {
                    if idle_over(idle, (*s).max(a), (*e).min(b)) >= 0.5 {
                        Cause::WakeLatency(after)
                    } else {
                        Cause::CpusBusy(tid)
                    }
                }
                (Own::Blocked(sys, what), None) => Cause::Blocked(*sys, what.clone()),
                (Own::Stopped, None) => Cause::Stopped,
            };
            acc.add(cause, ov);
        }
    }
    // What no sample covered: work (the thread ran between its waits), inside the lock if held.
    let unseen = total.saturating_sub(seen);
    if let Some(o) = held {
        *acc.held_running.entry(o).or_default() += unseen;
    }
    acc.add(held.map_or(Cause::Work(tid), Cause::Held), unseen);
}

/// Whether a system call ends by itself, in time (a sleep), rather than by another thread or the
/// outside acting.
fn ends_by_time(syscall: i32) -> bool {
    matches!(
        waitshim_format::syscalls::name(syscall),
        Some("nanosleep" | "clock_nanosleep" | "pause")
    )
}

/// Where a thread's span [a, t) (its `pieces`) ends a blocked call (not a sleep) no later than `by`: the
/// latest such end, if any. The walk came to `tid` from a thread whose wait began at `by`: that
/// thread was still running when the call ended, and most likely ended it (it connected, wrote,
/// closed), which the shim does not see.
fn woken_before(pieces: Option<&Pieces>, a: u64, t: u64, by: u64) -> Option<u64> {
    let p = pieces?;
    p.after(a)
        .iter()
        .take_while(|x| x.0 < t)
        .filter(|x| matches!(&x.2, Own::Blocked(sys, _) if !ends_by_time(*sys)))
        .map(|x| x.1.min(t))
        .filter(|&c| c > a && c <= by)
        .last()
}

/// The longest hold of lock `o` the shim measured, if it measured any. None for a recursive
/// mutex: the shim times each level of it, so its longest measured hold is a nested level's
/// (SQLite's connection mutex: 60 µs, while one sqlite3_exec holds it for milliseconds).
fn longest_hold(model: &Model, o: u64) -> Option<u64> {
    let obj = model.objects.get(&o)?;
    let recursive = obj.create.as_ref().is_some_and(|c| {
        c.kind == ObjectKind::Mutex as u8
            && c.subtype & waitshim_format::mutex_kind::TYPE_MASK
                == waitshim_format::mutex_kind::RECURSIVE
    });
    if recursive {
        return None;
    }
    obj.counters
        .as_ref()
        .map(|c| c.hold_max_ns)
        .filter(|&ns| ns > 0)
}

/// The thread the run's end waited for, and when it ended: the one that ended last (a thread
/// alive at the end of the run ends with it), the main thread among those that ended together.
fn last_thread(model: &Model) -> Option<(u32, u64)> {
    let end = timeline::run_end(model);
    model
        .threads
        .values()
        .map(|t| (t.exit_ns.unwrap_or(end).min(end), t.is_main, t.tid))
        .max()
        .map(|(at, _, tid)| (tid, at))
}

/// The walk back from the run's end ([`critical_path`]) through `steps`, whose objects are
/// `ids`; `took(object, takes)`: whether a wait that may have taken its object did.
fn walk(
    model: &Model,
    steps: &Steps,
    ids: &[u64],
    pieces: &FastMap<u32, Pieces>,
    idle: &Idle,
    took: impl Fn(u64, Takes) -> bool,
) -> Option<Path> {
    let (mut tid, end) = last_thread(model)?;
    let run_start = model.start_ns();
    let phase = model
        .progress
        .phase()
        .filter(|&(a, b)| a < end && b > run_start);
    let window = phase.map_or((0, u64::MAX), |(a, b)| (a, b.min(end)));
    let mut t = end;
    // The object whose release by `tid` at `t` brought the walk here (it ended a wait on it).
    let mut released: Option<u64> = None;
    // The thread whose wait `tid` ended at `t`, and when that wait began.
    let mut came_from: Option<(u32, u64)> = None;
    let mut acc = Account::new(window);
    let mut hops = 0u64;
    let done = |acc: Account, start: u64, hops: u64| {
        let mut p = finish(acc, start.max(window.0), end.min(window.1), hops);
        p.phase = phase;
        p
    };
    // The threads the walk has been on, found through `on_index`; the current one without a
    // lookup (the walk stays on a thread for many waits).
    struct On<'a> {
        tid: u32,
        cursor: Backwards<'a>,
        start: Option<u64>,
        parent: u32,
        pieces: Option<&'a Pieces>,
    }
    let mut on: Vec<On<'_>> = Vec::new();
    let mut on_index: FastMap<u32, usize> = FastMap::default();
    let mut cur = usize::MAX;
    // Each thread's start and creator, and each lock's longest hold, looked up once.
    let threads: FastMap<u32, (Option<u64>, u32)> = model
        .threads
        .values()
        .map(|th| (th.tid, (th.start_ns, th.parent_tid)))
        .collect();
    let mut holds: FastMap<u64, Option<u64>> = FastMap::default();
    let mut takes: FastMap<(u64, Takes), bool> = FastMap::default();
    // Every step lowers `t`, or moves to the thread that ended a wait at that wait's end, which
    // is before the span just accounted ended: the walk ends.
    loop {
        if t <= window.0 {
            // The rest of the walk lies before the phase.
            return Some(done(acc, window.0, hops));
        }
        if on.get(cur).is_none_or(|o| o.tid != tid) {
            let n = on.len();
            cur = *on_index.entry(tid).or_insert(n);
            if cur == n {
                let th = threads.get(&tid).copied();
                on.push(On {
                    tid,
                    cursor: Backwards::of(steps, tid),
                    start: th.and_then(|th| th.0),
                    parent: th.map_or(0, |th| th.1),
                    pieces: pieces.get(&tid),
                });
            }
        }
        let o = &mut on[cur];
        let mine = o.pieces;
        let cursor = &mut o.cursor;
        // Waits that ended after `t` are not this thread's past from here.
        while let Some(s) = cursor.peek() {
            if s.end <= t {
                break;
            }
            cursor.pop();
        }
        let thread_start = o.start.unwrap_or(run_start).min(t);
        let parent = o.parent;
        let prev_end = cursor
            .peek()
            .map_or(thread_start, |s| s.end.max(thread_start));
        // A blocked call of this thread that ended before the thread the walk came from began
        // its wait: that thread, still running then, most likely ended it (an estimate).
        if let Some((from, began)) = came_from.take() {
            // The sampled end of a call is known to within one interval.
            let slack = model.states.interval_ns.max(1);
            if let Some(c) = woken_before(mine, prev_end, t, began.saturating_add(slack)) {
                let c = c.min(began);
                own_time(&mut acc, tid, c, t, None, 0, mine, idle);
                acc.estimated = true;
                hops += 1;
                tid = from;
                t = c;
                released = None;
                continue;
            }
        }
        let Some(s) = cursor.peek().filter(|s| s.end > thread_start) else {
            // Back to the thread's start: on at its creator, when it created it.
            own_time(&mut acc, tid, thread_start, t, None, 0, mine, idle);
            if parent == 0
                || parent == tid
                || thread_start <= run_start
                || !threads.contains_key(&parent)
            {
                return Some(done(acc, thread_start, hops));
            }
            tid = parent;
            t = thread_start;
            released = None;
            continue;
        };
        cursor.pop();
        let object = ids.get(s.object as usize).copied().unwrap_or(0);
        // The span since that wait; inside the lock it took if the walk came here through this
        // thread's release of it.
        let held = (released == Some(object)
            && *takes
                .entry((object, s.takes))
                .or_insert_with(|| took(object, s.takes)))
        .then_some(object);
        // The thread may have let the lock go and taken it again, uncontended, since that wait
        // (the log has no event for that): the critical section is at most the lock's longest
        // measured hold, at the end of the span; before it, the thread's own time.
        let inside = match held {
            Some(o) => (t - s.end).min(
                holds
                    .entry(o)
                    .or_insert_with(|| longest_hold(model, o))
                    .unwrap_or(u64::MAX),
            ),
            None => 0,
        };
        own_time(&mut acc, tid, s.end, t - inside, None, object, mine, idle);
        own_time(&mut acc, tid, t - inside, t, held, object, mine, idle);
        if s.waker != 0 && s.waker != tid && threads.contains_key(&s.waker) {
            // Not on the path: the thread that ended the wait is, up to the moment it did.
            hops += 1;
            released = Some(object);
            came_from = Some((tid, s.begin));
            tid = s.waker;
            t = s.end;
        } else {
            let (a, b) = acc.clip(s.begin, s.end);
            acc.add(Cause::Waited(object), b.saturating_sub(a));
            released = None;
            t = s.begin;
        }
    }
}

fn finish(acc: Account, start: u64, end: u64, hops: u64) -> Path {
    let mut by: Vec<(Cause, u64)> = acc.by;
    by.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Path {
        start_ns: start,
        end_ns: end,
        by,
        hops,
        estimated: acc.estimated,
        phase: None,
        phase_cpu: FastMap::default(),
        holders: FastMap::default(),
        held_running: acc.held_running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(i: u64) -> Step {
        Step {
            begin: i * 10,
            // Every 100th wait longer than a block's length field holds.
            end: i * 10 + if i.is_multiple_of(100) { 1 << 40 } else { 5 },
            object: i as u32,
            waker: (i % 7) as u32,
            takes: [Takes::No, Takes::IfLock, Takes::IfLockWord][i as usize % 3],
        }
    }

    #[test]
    fn a_threads_waits_come_back_latest_first_across_blocks_in_memory_and_in_the_file() {
        // All in memory; the first two blocks (5 kB each) in memory, the rest in the file.
        for (limit, in_file) in [(IN_MEMORY, false), (11_000, true)] {
            let mut steps = Steps::with_limit(limit);
            let n = PER_BLOCK as u64 * 2 + 17;
            for i in 0..n {
                steps.add(1, step(i)).unwrap();
                steps.add(2, step(1000 + i)).unwrap();
            }
            assert_eq!(matches!(steps.store, Store::File(_)), in_file);
            for (tid, base) in [(1u32, 0u64), (2, 1000)] {
                let mut back = Backwards::of(&steps, tid);
                let mut got = Vec::new();
                while let Some(s) = back.peek() {
                    got.push(s);
                    back.pop();
                }
                let want: Vec<Step> = (0..n).rev().map(|i| step(base + i)).collect();
                assert_eq!(got, want, "thread {tid}, limit {limit}");
            }
        }
    }

    #[test]
    fn waits_pack_and_unpack_whatever_their_figures_and_bad_bytes_are_refused() {
        let steps = [
            Step {
                begin: u64::MAX - 10,
                end: u64::MAX,
                object: MAX_OBJECTS as u32 - 1,
                waker: u32::MAX,
                takes: Takes::IfLockWord,
            },
            // Earlier than the one before it, on a smaller object, and as long as can be.
            Step {
                begin: 0,
                end: u64::MAX,
                object: 0,
                waker: 0,
                takes: Takes::No,
            },
            step(3),
        ];
        let mut bytes = Vec::new();
        let mut long = FastMap::default();
        for s in &steps {
            encode(s, 9, &mut bytes, &mut long);
        }
        assert_eq!(bytes.len(), steps.len() * STEP_BYTES);
        assert_eq!(long.len(), 1, "one wait did not fit a block");
        assert_eq!(decode(&bytes, steps.len(), 9, &long).unwrap(), steps);
        // Another thread's block does not find this thread's long waits.
        assert_eq!(decode(&bytes, steps.len(), 8, &long), None);
        assert_eq!(
            decode(&bytes[..bytes.len() - 1], steps.len(), 9, &long),
            None
        );
        assert_eq!(decode(&[0xff; 11], 1, 9, &long), None);
    }

    #[test]
    fn a_lock_taken_by_a_wait_is_held_a_signalled_cond_is_not() {
        assert!(took_it(
            Some(ObjectKind::Mutex),
            counter::ENDED_ACQUIRED,
            false
        ));
        assert!(took_it(
            Some(ObjectKind::RwLock),
            counter::ENDED_BRIEF,
            false
        ));
        assert!(!took_it(
            Some(ObjectKind::Mutex),
            counter::ENDED_TIMED_OUT,
            false
        ));
        assert!(!took_it(
            Some(ObjectKind::Cond),
            counter::ENDED_SIGNALLED,
            false
        ));
        assert!(!took_it(
            Some(ObjectKind::Semaphore),
            counter::ENDED_ACQUIRED,
            false
        ));
        assert!(!took_it(None, counter::ENDED_ACQUIRED, false));
        // A futex word: a lock's when its code says so, and then taken by the waiter woken.
        assert!(took_it(
            Some(ObjectKind::Futex),
            counter::ENDED_SIGNALLED,
            true
        ));
        assert!(!took_it(
            Some(ObjectKind::Futex),
            counter::ENDED_TIMED_OUT,
            true
        ));
        assert!(!took_it(
            Some(ObjectKind::Futex),
            counter::ENDED_SIGNALLED,
            false
        ));
    }

    #[test]
    fn idle_cpus_are_averaged_over_the_overlap_only() {
        let idle: Idle = vec![(0, 100, 2.0), (100, 200, 0.0), (300, 400, 1.0)];
        assert_eq!(idle_over(&idle, 0, 100), 2.0);
        assert_eq!(idle_over(&idle, 50, 150), 1.0);
        // 200..300 was not sampled: only what was counts.
        assert_eq!(
            idle_over(&idle, 150, 350),
            (50.0 * 0.0 + 50.0 * 1.0) / 100.0
        );
        assert_eq!(idle_over(&idle, 500, 600), 0.0);
    }

    #[test]
    fn the_pieces_after_a_time_are_found_from_the_last_search_wherever_it_goes() {
        let p: Pieces = (0..1000u64)
            .map(|i| (i * 10, i * 10 + 10, Own::Running, false))
            .collect::<Vec<_>>()
            .into();
        // Backwards a step at a time, far back, far forward, off both ends.
        let mut times: Vec<u64> = (0..300).rev().map(|i| 9000 + i * 7).collect();
        times.extend([5, 9995, 0, 10_000, 123_456, 3, 4321, 4320, 4319]);
        for a in times {
            let want = p.v.partition_point(|x| x.1 <= a);
            assert_eq!(p.after(a).len(), p.v.len() - want, "at {a}");
        }
    }

    #[test]
    fn a_blocked_call_is_taken_as_woken_by_the_thread_only_if_it_ended_before_that_thread_waited() {
        // x86-64's numbers, as the log carries them.
        let (accept, sleep) = (43, 35);
        assert_eq!(waitshim_format::syscalls::name(accept), Some("accept"));
        assert_eq!(waitshim_format::syscalls::name(sleep), Some("nanosleep"));
        let mut pieces: FastMap<u32, Pieces> = FastMap::default();
        pieces.insert(
            5,
            vec![
                (0, 100, Own::Blocked(accept, "socket".into()), true),
                (100, 120, Own::Running, true),
                (120, 300, Own::Blocked(sleep, String::new()), true),
            ]
            .into(),
        );
        // The walk came from a thread that began waiting at 110: the accept ended before it.
        assert_eq!(woken_before(pieces.get(&5), 0, 400, 110), Some(100));
        // One that began waiting at 90 had not yet: the accept was not its doing.
        assert_eq!(woken_before(pieces.get(&5), 0, 400, 90), None);
        // A sleep ends by itself, whoever waited after it.
        assert_eq!(woken_before(pieces.get(&5), 110, 400, 400), None);
    }
}
