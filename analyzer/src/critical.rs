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
//! The path's time adds up to the time from its first moment to its end. Memory: one
//! block of waits per thread in memory, the rest in an unnamed temporary file, read backwards;
//! the sampled states of every thread (one entry per change of state).

/// The walk's maps: hashed once or more per wait event, with foldhash (seeded per process).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use waitshim_format::{counter, ObjectKind};

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

/// One wait, as the walk needs it: [`STEP_BYTES`] in the file.
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

const STEP_BYTES: usize = 8 + 8 + 8 + 4 + 2 + 1;
/// Waits per block in the file.
const PER_BLOCK: usize = 256;
/// A block: its count (u32), the offset of the thread's previous block (u64, `NO_BLOCK` for
/// the first), the waits.
const BLOCK_BYTES: usize = 12 + PER_BLOCK * STEP_BYTES;
const NO_BLOCK: u64 = u64::MAX;
/// Holders kept per lock: what-if spreads a lock's unseen holds over the first ones seen.
const MAX_HOLDERS: usize = 64;

fn encode(s: &Step, out: &mut Vec<u8>) {
    out.extend_from_slice(&s.begin.to_le_bytes());
    out.extend_from_slice(&s.end.to_le_bytes());
    out.extend_from_slice(&s.object_id.to_le_bytes());
    out.extend_from_slice(&s.waker.to_le_bytes());
    out.extend_from_slice(&s.reason.to_le_bytes());
    out.push(u8::from(s.acquired));
}

fn decode(b: &[u8]) -> Step {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    Step {
        begin: u64_at(0),
        end: u64_at(8),
        object_id: u64_at(16),
        waker: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
        reason: u16::from_le_bytes(b[28..30].try_into().expect("2 bytes")),
        acquired: b[30] != 0,
    }
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
    threads: FastMap<u32, ThreadSteps>,
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
            threads: FastMap::default(),
        }
    }

    fn add(&mut self, tid: u32, s: Step) -> io::Result<()> {
        let t = self.threads.entry(tid).or_insert_with(|| ThreadSteps {
            tail: Vec::new(),
            last_block: NO_BLOCK,
        });
        t.tail.push(s);
        if t.tail.len() < PER_BLOCK {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(BLOCK_BYTES);
        bytes.extend_from_slice(&(t.tail.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&t.last_block.to_le_bytes());
        for s in t.tail.drain(..) {
            encode(&s, &mut bytes);
        }
        bytes.resize(BLOCK_BYTES, 0);
        self.store.write_at(&bytes, self.len, self.limit)?;
        t.last_block = self.len;
        self.len += BLOCK_BYTES as u64;
        Ok(())
    }

    /// The store, and each thread's latest waits and latest block in it.
    fn into_parts(self) -> (Store, FastMap<u32, ThreadSteps>) {
        (self.store, self.threads)
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
            let mut b = vec![0u8; BLOCK_BYTES];
            self.file.read_at(&mut b, self.next_block).ok()?;
            let n = (u32::from_le_bytes(b[0..4].try_into().ok()?) as usize).min(PER_BLOCK);
            self.next_block = u64::from_le_bytes(b[4..12].try_into().ok()?);
            self.current = (0..n)
                .map(|i| decode(&b[12 + i * STEP_BYTES..12 + (i + 1) * STEP_BYTES]))
                .collect();
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

/// A thread's sampled pieces, kept in time order.
type Pieces = Vec<(u64, u64, Own, bool)>;

/// Idle CPUs over time, from the sampler: (start, end, idle CPUs on average).
type Idle = Vec<(u64, u64, f64)>;

/// The walk's account of the path.
struct Account {
    by: FastMap<Cause, u64>,
    held_running: FastMap<u64, u64>,
    estimated: bool,
    /// Only what lies in this span is counted (the phase, or the whole run).
    window: (u64, u64),
}

impl Account {
    fn new(window: (u64, u64)) -> Account {
        Account {
            by: FastMap::default(),
            held_running: FastMap::default(),
            estimated: false,
            window,
        }
    }

    fn add(&mut self, cause: Cause, ns: u64) {
        if ns > 0 {
            *self.by.entry(cause).or_default() += ns;
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
    let mut holders: FastMap<u64, Vec<(u32, u64)>> = FastMap::default();
    let mut failed = Ok(());
    let note = timeline::for_each_wait(model, first, |tid, w: Wait| {
        if w.unended || w.end <= w.start {
            return Ok::<(), io::Error>(());
        }
        let kind = model.objects.get(&w.object_id).and_then(|o| o.kind());
        let step = Step {
            begin: w.start,
            end: w.end,
            object_id: w.object_id,
            waker: w.waker_tid,
            reason: w.reason,
            acquired: took_it(kind, w.reason, lock_words.contains(&w.object_id)),
        };
        if step.acquired {
            let seen = holders.entry(w.object_id).or_default();
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
    });
    failed?;
    note?;
    let (pieces, idle) = sampled(model, first)?;
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
            for (s, e, own, _) in p {
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

/// The sampler's pieces of each thread, and the idle CPUs.
fn sampled(model: &Model, first: &ReadSummary) -> io::Result<(FastMap<u32, Pieces>, Idle)> {
    let mut pieces: FastMap<u32, Pieces> = FastMap::default();
    let mut idle = Idle::new();
    if !slices::any(model) {
        return Ok((pieces, idle));
    }
    // A second read that found less leaves the states it found: the path is split as far as
    // they go (the rest counts as work).
    let _note = slices::for_each_in(model, first, |e| {
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
        Ok::<(), io::Error>(())
    })?;
    for p in pieces.values_mut() {
        p.sort_by_key(|x| x.0);
    }
    idle.sort_by_key(|a| a.0);
    Ok((pieces, idle))
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
    let mut by_state: Vec<(Cause, u64)> = Vec::new();
    if let Some(p) = pieces.get(&tid) {
        let i = p.partition_point(|x| x.1 <= a);
        for (s, e, own, estimated) in &p[i..] {
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
            by_state.push((cause, ov));
        }
    }
    for (c, ns) in by_state {
        acc.add(c, ns);
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
    let i = p.partition_point(|x| x.1 <= a);
    p[i..]
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
        let thread_start = model
            .threads
            .get(&tid)
            .and_then(|th| th.start_ns)
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
            let parent = model.threads.get(&tid).map_or(0, |th| th.parent_tid);
            if parent == 0
                || parent == tid
                || thread_start <= run_start
                || !model.threads.contains_key(&parent)
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
            Some(o) => (t - s.end).min(longest_hold(model, o).unwrap_or(u64::MAX)),
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
        if s.waker != 0 && s.waker != tid && model.threads.contains_key(&s.waker) {
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
    let mut by: Vec<(Cause, u64)> = acc.by.into_iter().collect();
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
        // All in memory; the first three blocks in memory, the rest in the file.
        for (limit, in_file) in [(IN_MEMORY, false), (3 * BLOCK_BYTES, true)] {
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
            ],
        );
        // The walk came from a thread that began waiting at 110: the accept ended before it.
        assert_eq!(woken_before(&pieces, 5, 0, 400, 110), Some(100));
        // One that began waiting at 90 had not yet: the accept was not its doing.
        assert_eq!(woken_before(&pieces, 5, 0, 400, 90), None);
        // A sleep ends by itself, whoever waited after it.
        assert_eq!(woken_before(&pieces, 5, 110, 400, 400), None);
    }
}
