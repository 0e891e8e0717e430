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
//! The path's time adds up to the time from its first moment to its end. The walk reads the log
//! once more, for the per-wait events and the sampler's records together. Memory: each thread's
//! waits packed in blocks of 256 (about 12 bytes a wait), up to 32 MiB of them in memory and the
//! rest in an unnamed temporary file, read backwards; the sampled states of every thread (one
//! entry per change of state).

/// The walk's maps: hashed once or more per wait event, with foldhash (seeded per process).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use waitshim_format::{counter, ObjectKind, Record};

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
    object_id: u64,
    waker: u32,
    reason: u16,
    /// The wait took its object (a lock's acquisition, as opposed to a signal or a post).
    acquired: bool,
}

/// Waits per block.
const PER_BLOCK: usize = 256;
/// A block's header: its count (u32), the offset of the thread's previous block (u64,
/// `NO_BLOCK` for the first), the length of its waits in bytes (u32).
const HEADER_BYTES: usize = 16;
/// The most bytes one wait takes packed ([`encode`]): five numbers of at most 10 bytes.
const MAX_STEP_BYTES: usize = 50;
const NO_BLOCK: u64 = u64::MAX;
/// Holders kept per lock: what-if spreads a lock's unseen holds over the first ones seen.
const MAX_HOLDERS: usize = 64;

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Writes `v` as a varint at `out[*at..]` (room for 10 bytes).
#[inline(always)]
fn put(out: &mut [u8; MAX_STEP_BYTES], at: &mut usize, mut v: u64) {
    while v >= 0x80 {
        out[*at] = (v as u8) | 0x80;
        *at += 1;
        v >>= 7;
    }
    out[*at] = v as u8;
    *at += 1;
}

fn get(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Packs `s` after `prev` (the wait before it in its block, or None for the first): its begin
/// less the previous begin, its length, its object less the previous object, its waker, its
/// reason and whether it took its object. About 12 bytes a wait, against 31 unpacked: a
/// million waits stay in memory.
fn encode(s: &Step, prev: Option<&Step>, out: &mut Vec<u8>) {
    let (begin, object) = prev.map_or((0, 0), |p| (p.begin, p.object_id));
    let mut b = [0u8; MAX_STEP_BYTES];
    let mut at = 0;
    put(&mut b, &mut at, zigzag(s.begin.wrapping_sub(begin) as i64));
    put(&mut b, &mut at, s.end.wrapping_sub(s.begin));
    put(
        &mut b,
        &mut at,
        zigzag(s.object_id.wrapping_sub(object) as i64),
    );
    put(&mut b, &mut at, u64::from(s.waker));
    put(
        &mut b,
        &mut at,
        u64::from(s.reason) << 1 | u64::from(s.acquired),
    );
    out.extend_from_slice(&b[..at]);
}

/// The waits of a block's bytes, in order ([`encode`]); None when they do not decode (a
/// temporary file that changed under the analyzer).
#[cfg(test)]
fn decode(b: &[u8], count: usize) -> Option<Vec<Step>> {
    let mut out: Vec<Step> = Vec::with_capacity(count);
    decode_into(b, count, &mut out)?;
    Some(out)
}

/// [`decode`] into `out` (emptied first), keeping its allocation.
fn decode_into(b: &[u8], count: usize, out: &mut Vec<Step>) -> Option<()> {
    out.clear();
    let mut at = 0;
    for _ in 0..count {
        let (begin, object) = out.last().map_or((0, 0), |p| (p.begin, p.object_id));
        let begin = begin.wrapping_add(unzigzag(get(b, &mut at)?) as u64);
        let end = begin.wrapping_add(get(b, &mut at)?);
        let object_id = object.wrapping_add(unzigzag(get(b, &mut at)?) as u64);
        let waker = u32::try_from(get(b, &mut at)?).ok()?;
        let last = get(b, &mut at)?;
        out.push(Step {
            begin,
            end,
            object_id,
            waker,
            reason: u16::try_from(last >> 1).ok()?,
            acquired: last & 1 != 0,
        });
    }
    Some(())
}

/// Blocks kept in memory before they go to an unnamed temporary file: 32 MiB, about a million
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
}

#[derive(Default)]
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
            len: 0,
            threads: Vec::new(),
            index: FastMap::default(),
            last: usize::MAX,
            scratch: Vec::with_capacity(HEADER_BYTES + PER_BLOCK * MAX_STEP_BYTES),
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
        if t.tail.len() < PER_BLOCK {
            return Ok(());
        }
        let bytes = &mut self.scratch;
        bytes.clear();
        bytes.extend_from_slice(&(t.tail.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&t.last_block.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        let mut prev = None;
        for s in &t.tail {
            encode(s, prev, bytes);
            prev = Some(s);
        }
        t.tail.clear();
        let len = (bytes.len() - HEADER_BYTES) as u32;
        bytes[12..16].copy_from_slice(&len.to_le_bytes());
        self.store.write_at(bytes, self.len, self.limit)?;
        t.last_block = self.len;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// The store, and each thread's latest waits and latest block in it.
    fn into_parts(self) -> (Store, FastMap<u32, ThreadSteps>) {
        (self.store, self.threads.into_iter().collect())
    }
}

/// A cursor over one thread's waits, latest first.
struct Backwards<'a> {
    file: &'a Store,
    /// The waits of the block being read, in order (the next is the last).
    current: Vec<Step>,
    next_block: u64,
}

impl<'a> Backwards<'a> {
    /// Thread `t`'s waits, latest first, from its tail and its blocks in `file`.
    fn of(file: &'a Store, t: Option<ThreadSteps>) -> Backwards<'a> {
        let t = t.unwrap_or(ThreadSteps {
            tail: Vec::new(),
            last_block: NO_BLOCK,
        });
        Backwards {
            file,
            current: t.tail,
            next_block: t.last_block,
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
                .min(PER_BLOCK * MAX_STEP_BYTES);
            let at = self.next_block + HEADER_BYTES as u64;
            self.next_block = u64::from_le_bytes(h[4..12].try_into().ok()?);
            match self.file {
                Store::Memory(m) => {
                    let from = usize::try_from(at).ok()?;
                    let b = m.get(from..from.checked_add(len)?)?;
                    decode_into(b, n, &mut self.current)?;
                }
                Store::File(_) => {
                    let mut b = vec![0u8; len];
                    self.file.read_at(&mut b, at).ok()?;
                    decode_into(&b, n, &mut self.current)?;
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

/// The run's critical path, or None when the log has no per-wait events to follow (then only
/// the sampled states would say anything, and not who ended whose wait).
///
/// `lock_words`: the futex words whose code says they are locks (`findings::runtime_group`).
pub fn critical_path(
    model: &Model,
    first: &ReadSummary,
    lock_words: &std::collections::HashSet<u64>,
) -> io::Result<Option<Path>> {
    if !model.events.any() {
        return Ok(None);
    }
    let mut steps = Steps::new();
    let mut failed = Ok(());
    // Each object's kind, whether it is a futex lock word (looked up once), and its holders
    // (None until a wait took it).
    type Seen = (Option<ObjectKind>, bool, Option<Vec<(u32, u64)>>);
    // In the order first waited on, found through `index`; the last one without a lookup.
    let mut objects: Vec<(u64, Seen)> = Vec::new();
    let mut index: FastMap<u64, usize> = FastMap::default();
    let mut last = usize::MAX;
    let mut on_wait = |tid: u32, w: Wait| {
        if w.unended || w.end <= w.start {
            return Ok::<(), io::Error>(());
        }
        let i = match objects.get(last) {
            Some((o, _)) if *o == w.object_id => last,
            _ => {
                let n = objects.len();
                let i = *index.entry(w.object_id).or_insert(n);
                if i == n {
                    objects.push((
                        w.object_id,
                        (
                            model.objects.get(&w.object_id).and_then(|o| o.kind()),
                            lock_words.contains(&w.object_id),
                            None,
                        ),
                    ));
                }
                last = i;
                i
            }
        };
        let (kind, lock_word, holders) = &mut objects[i].1;
        let step = Step {
            begin: w.start,
            end: w.end,
            object_id: w.object_id,
            waker: w.waker_tid,
            reason: w.reason,
            acquired: took_it(*kind, w.reason, *lock_word),
        };
        if step.acquired {
            let seen = holders.get_or_insert_with(Vec::new);
            for (t, released) in [(tid, 0), (w.waker_tid, 1)] {
                if let Some(h) = seen.iter_mut().find(|h| h.0 == t) {
                    h.1 += released;
                } else if t != 0 && seen.len() < MAX_HOLDERS {
                    seen.push((t, released));
                }
            }
        }
        if failed.is_ok() {
            failed = steps.add(tid, step);
        }
        Ok(())
    };
    let mut pieces: FastMap<u32, Pieces> = FastMap::default();
    let mut idle = Idle::new();
    let mut on_state = |e: Event| {
        on_sampled(&mut pieces, &mut idle, e);
        Ok::<(), io::Error>(())
    };
    // One more read of the log for both: the per-wait events and the sampler's records. A
    // read that found less leaves what it found: the path is split as far as it goes (the
    // rest counts as work).
    let mut waits = timeline::EventFold::new(model);
    let mut states = slices::any(model).then(|| slices::Fold::new(model));
    let _note = crate::export::read_again(first, "the critical path", |bytes, path| {
        let mut result = Ok(());
        let summary = crate::source::read_from(bytes, path, |rec| {
            if result.is_err() {
                return;
            }
            result = match (&rec, &mut states) {
                (Record::WaitEvents(_), _) => waits.record(&rec, &mut on_wait),
                (_, Some(s)) => s.record(rec, &mut on_state),
                (_, None) => Ok(()),
            };
        });
        let summary = summary.map_err(|e| e.why)?;
        Ok(result.map(|()| summary))
    })?;
    waits.finish(model, &mut on_wait)?;
    if let Some(s) = states {
        s.finish(&mut on_state)?;
    }
    failed?;
    for p in pieces.values_mut() {
        p.v.sort_by_key(|x| x.0);
    }
    idle.sort_by_key(|a| a.0);
    let holders: FastMap<u64, Vec<(u32, u64)>> = objects
        .into_iter()
        .filter_map(|(o, (_, _, h))| Some((o, h?)))
        .collect();
    let (file, heads) = steps.into_parts();
    Ok(walk(model, &file, heads, &pieces, &idle).map(|p| Path {
        phase_cpu: p
            .phase
            .map_or_else(FastMap::default, |w| phase_cpu(&pieces, w)),
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
    pieces: &FastMap<u32, Pieces>,
    idle: &Idle,
) {
    let (a, b) = acc.clip(a, b);
    if b <= a {
        return;
    }
    let total = b - a;
    let mut seen = 0u64;
    if let Some(p) = pieces.get(&tid) {
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

/// Where thread `tid`'s span [a, t) ends a blocked call (not a sleep) no later than `by`: the
/// latest such end, if any. The walk came to `tid` from a thread whose wait began at `by`: that
/// thread was still running when the call ended, and most likely ended it (it connected, wrote,
/// closed), which the shim does not see.
fn woken_before(pieces: &FastMap<u32, Pieces>, tid: u32, a: u64, t: u64, by: u64) -> Option<u64> {
    let p = pieces.get(&tid)?;
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

fn walk(
    model: &Model,
    file: &Store,
    mut heads: FastMap<u32, ThreadSteps>,
    pieces: &FastMap<u32, Pieces>,
    idle: &Idle,
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
    let mut cursors: FastMap<u32, Backwards<'_>> = FastMap::default();
    // Each thread's start and creator, and each lock's longest hold, looked up once.
    let threads: FastMap<u32, (Option<u64>, u32)> = model
        .threads
        .values()
        .map(|th| (th.tid, (th.start_ns, th.parent_tid)))
        .collect();
    let mut holds: FastMap<u64, Option<u64>> = FastMap::default();
    // Every step lowers `t`, or moves to the thread that ended a wait at that wait's end, which
    // is before the span just accounted ended: the walk ends.
    loop {
        if t <= window.0 {
            // The rest of the walk lies before the phase.
            return Some(done(acc, window.0, hops));
        }
        let cursor = cursors
            .entry(tid)
            .or_insert_with(|| Backwards::of(file, heads.remove(&tid)));
        // Waits that ended after `t` are not this thread's past from here.
        while let Some(s) = cursor.peek() {
            if s.end <= t {
                break;
            }
            cursor.pop();
        }
        let thread_start = threads
            .get(&tid)
            .and_then(|th| th.0)
            .unwrap_or(run_start)
            .min(t);
        let prev_end = cursor
            .peek()
            .map_or(thread_start, |s| s.end.max(thread_start));
        // A blocked call of this thread that ended before the thread the walk came from began
        // its wait: that thread, still running then, most likely ended it (an estimate).
        if let Some((from, began)) = came_from.take() {
            // The sampled end of a call is known to within one interval.
            let slack = model.states.interval_ns.max(1);
            if let Some(c) = woken_before(pieces, tid, prev_end, t, began.saturating_add(slack)) {
                let c = c.min(began);
                own_time(&mut acc, tid, c, t, None, 0, pieces, idle);
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
            own_time(&mut acc, tid, thread_start, t, None, 0, pieces, idle);
            let parent = threads.get(&tid).map_or(0, |th| th.1);
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
        // The span since that wait; inside the lock it took if the walk came here through this
        // thread's release of it.
        let held = (s.acquired && released == Some(s.object_id)).then_some(s.object_id);
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
        own_time(
            &mut acc,
            tid,
            s.end,
            t - inside,
            None,
            s.object_id,
            pieces,
            idle,
        );
        own_time(
            &mut acc,
            tid,
            t - inside,
            t,
            held,
            s.object_id,
            pieces,
            idle,
        );
        if s.waker != 0 && s.waker != tid && threads.contains_key(&s.waker) {
            // Not on the path: the thread that ended the wait is, up to the moment it did.
            hops += 1;
            released = Some(s.object_id);
            came_from = Some((tid, s.begin));
            tid = s.waker;
            t = s.end;
        } else {
            let (a, b) = acc.clip(s.begin, s.end);
            acc.add(Cause::Waited(s.object_id), b.saturating_sub(a));
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
            end: i * 10 + 5,
            object_id: i,
            waker: (i % 7) as u32,
            reason: counter::ENDED_ACQUIRED,
            acquired: i.is_multiple_of(2),
        }
    }

    #[test]
    fn a_threads_waits_come_back_latest_first_across_blocks_in_memory_and_in_the_file() {
        // All in memory; the first two blocks (about 1.5 kB each) in memory, the rest in the file.
        for (limit, in_file) in [(IN_MEMORY, false), (3000, true)] {
            let mut steps = Steps::with_limit(limit);
            let n = PER_BLOCK as u64 * 2 + 17;
            for i in 0..n {
                steps.add(1, step(i)).unwrap();
                steps.add(2, step(1000 + i)).unwrap();
            }
            let (file, mut heads) = steps.into_parts();
            assert_eq!(matches!(file, Store::File(_)), in_file);
            for (tid, base) in [(1u32, 0u64), (2, 1000)] {
                let mut back = Backwards::of(&file, heads.remove(&tid));
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
                object_id: u64::MAX,
                waker: u32::MAX,
                reason: u16::MAX,
                acquired: true,
            },
            // Earlier than the one before it, on a smaller object.
            Step {
                begin: 5,
                end: 6,
                object_id: 0,
                waker: 0,
                reason: 0,
                acquired: false,
            },
            step(3),
        ];
        let mut bytes = Vec::new();
        let mut prev = None;
        for s in &steps {
            encode(s, prev, &mut bytes);
            prev = Some(s);
        }
        assert!(bytes.len() <= steps.len() * MAX_STEP_BYTES);
        assert_eq!(decode(&bytes, steps.len()).unwrap(), steps);
        assert_eq!(decode(&bytes[..bytes.len() - 1], steps.len()), None);
        assert_eq!(decode(&[0xff; 11], 1), None);
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
        assert_eq!(woken_before(&pieces, 5, 0, 400, 110), Some(100));
        // One that began waiting at 90 had not yet: the accept was not its doing.
        assert_eq!(woken_before(&pieces, 5, 0, 400, 90), None);
        // A sleep ends by itself, whoever waited after it.
        assert_eq!(woken_before(&pieces, 5, 110, 400, 400), None);
    }
}
