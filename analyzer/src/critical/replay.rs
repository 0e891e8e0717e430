//! What-if by replay: the recorded threads run again, in a simulation on the CPUs the program
//! had, with some locks' critical sections scaled (`crate::whatif`).
//!
//! Each thread becomes a sequence of items, from its start to its end:
//! - **work**: time it was on a CPU, or between samples in no state seen; inside a lock's
//!   critical section, the section's (scaled by the lock's factor);
//! - **delay**: time that keeps its length whatever the CPUs do: blocked in a system call,
//!   stopped, or ready for a CPU while one was idle (the latency of being woken);
//! - **a lock held to one holder** (a mutex, a spin lock, a runtime's lock word): its known
//!   critical sections are taken and let go again in the simulation. A thread that comes to one
//!   waits in line while another holds the lock, and not at all when it is free: the recorded
//!   waits that took such a lock are not replayed but made anew;
//! - **wait**: any other recorded wait (a condition variable, a semaphore, a barrier, a join, a
//!   read-write lock, whose readers share it), tied to the point in the waker's sequence where
//!   it ended the wait (the waker's own time at the wait's end). A waiter that arrives after the
//!   waker passed that point does not wait at all; a wait nobody is known to have ended keeps
//!   its length.
//!
//! Time a thread was ready while every CPU was busy is left out: the simulation shares the CPUs
//! among the threads that have work (each gets min(1, CPUs / working threads) of one), so that
//! time comes back where the CPUs are still short. The CPUs are those the program had on
//! average: its own CPU time plus the CPUs the sampler saw idle, over the run, at most the
//! machine's.
//!
//! The critical sections known (`sections_of`): up to each release of a lock to a waiter,
//! from the thread's previous wait (or its start), at most the lock's longest measured hold; and
//! after each wait that took a lock held to one holder, when no such release ends a section
//! begun there, the lock's mean hold. The holds nobody waited for are not placed: the caller
//! spreads them over their holders' work outside the known sections ([`Replay::run`]'s
//! `outside`).
//!
//! A thread starts when its creator reaches the moment it created it. The run ends when the
//! thread the run's end waited for ends (the one the critical path starts from).
//!
//! Memory: about 24 bytes an item, a few items a wait; the caller refuses logs of more than
//! [`MAX_WAITS`] waits.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use waitshim_format::ObjectKind;

use super::{idle_over, last_thread, longest_hold, Backwards, FastMap, Input, Own, Step};
use crate::export::timeline;
use crate::model::Model;

/// The most waits a replay takes on: past it, what-if keeps to its bounds (memory and time
/// grow with the waits; the suite's 1.27 M-wait log stays within the analyzer's budget).
pub const MAX_WAITS: u64 = 400_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Item {
    /// `section`: the lock's place in [`Replay::objects`] plus one, 0 outside every section.
    Work {
        ns: u64,
        section: u32,
    },
    Delay {
        ns: u64,
    },
    /// `mark`: the point it waits for, in [`Replay::marks`]; [`NO_MARK`] for a wait nobody is
    /// known to have ended.
    Wait {
        ns: u64,
        mark: u32,
    },
    /// Takes the lock (its place plus one) if free, else waits in line for it.
    Acquire {
        lock: u32,
    },
    /// Lets the lock go, to the first in line if any.
    Release {
        lock: u32,
    },
    /// Takes the lock, works `ns` inside it (its section), lets it go: the three above in one
    /// item, where no other thread waits for a point in between.
    Held {
        ns: u64,
        lock: u32,
    },
}

const NO_MARK: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Track {
    tid: u32,
    /// Its recorded start, from the run's start (for a thread whose creator is not known).
    start: u64,
    /// The point its creator reaches when it creates it, or [`NO_MARK`].
    start_mark: u32,
    items: Vec<Item>,
    /// Its work outside every known critical section.
    outside_work: u64,
}

/// The recorded threads, ready to be run again ([`Replay::run`]).
#[derive(Debug, Clone)]
pub struct Replay {
    tracks: Vec<Track>,
    /// Each point a thread waits for: (track, how many of its items it has done).
    marks: Vec<(u32, u32)>,
    /// The locks whose sections are known, by place.
    objects: Vec<u64>,
    /// Of each, the time inside its known sections.
    seen: Vec<u64>,
    /// The CPUs the program had, on average.
    pub cpus: f64,
    /// The track whose end is the run's.
    last: u32,
    /// Where the phase between progress points begins and ends in each thread that was not
    /// waiting then (the one that reached the mark was running): (items done, which end: 0 the
    /// start, 1 the end), by track, in order.
    probes: Vec<Vec<(u32, u8)>>,
}

/// A replay's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// When the run ended, from its start.
    pub end: f64,
    /// Waits let go because nothing was left to end them (0 when the recorded order held).
    pub let_go: u64,
    /// The phase's length: from the earliest of the threads that were running at its start
    /// reaching it to the latest of those running at its end reaching that (None without a
    /// phase, or when none reached it).
    pub phase: Option<f64>,
}

/// A sampled piece of time as the replay takes it.
enum Kind {
    Work,
    Delay,
    Skip,
}

impl Replay {
    /// The replay of the run `input` gathered; None when the walk could not follow it (a flight
    /// recorder's window, a failed store), or past [`MAX_WAITS`].
    pub fn of(
        model: &Model,
        input: &Input,
        lock_words: &std::collections::HashSet<u64>,
    ) -> Option<Replay> {
        if input.windowed || input.failed.is_some() || input.steps.count > MAX_WAITS {
            return None;
        }
        let run_start = model.start_ns();
        let run_end = timeline::run_end(model).max(run_start);
        let (last_tid, _) = last_thread(model)?;
        // Each thread: its life and creator, its waits in order.
        let mut tids: Vec<u32> = model.threads.values().map(|t| t.tid).collect();
        for (tid, _) in &input.steps.threads {
            if !model.threads.contains_key(tid) {
                tids.push(*tid);
            }
        }
        tids.sort_unstable();
        tids.dedup();
        let place: FastMap<u32, u32> = tids
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, i as u32))
            .collect();
        struct Life {
            start: u64,
            end: u64,
            parent: Option<u32>,
            waits: Vec<Step>,
        }
        let mut lives: Vec<Life> = tids
            .iter()
            .map(|tid| {
                let th = model.threads.get(tid);
                let start = th
                    .and_then(|t| t.start_ns)
                    .unwrap_or(run_start)
                    .clamp(run_start, run_end);
                let end = th
                    .and_then(|t| t.exit_ns.or(t.ended_before_ns))
                    .unwrap_or(run_end)
                    .clamp(start, run_end);
                let parent = th
                    .map(|t| t.parent_tid)
                    .filter(|p| *p != 0 && p != tid && start > run_start)
                    .and_then(|p| place.get(&p).copied());
                let mut waits = Vec::new();
                let mut c = Backwards::of(&input.steps, *tid);
                while let Some(s) = c.peek() {
                    waits.push(s);
                    c.pop();
                }
                waits.reverse();
                // Apart and within the life.
                let mut at = start;
                waits.retain_mut(|s| {
                    s.begin = s.begin.max(at);
                    s.end = s.end.min(end);
                    if s.end <= s.begin {
                        return false;
                    }
                    at = s.end;
                    true
                });
                Life {
                    start,
                    end,
                    parent,
                    waits,
                }
            })
            .collect();
        // Each lock a wait took, by place, once: whether the replay holds it to one holder at
        // a time, its longest measured hold and its mean hold.
        let mut objects: Vec<u64> = Vec::new();
        let mut exclusive: Vec<bool> = Vec::new();
        let mut lengths: Vec<(u64, u64)> = Vec::new();
        let mut object_place: FastMap<u64, u32> = FastMap::default();
        let mut place_of = |o: u64| {
            let p = *object_place.entry(o).or_insert_with(|| {
                objects.push(o);
                exclusive.push(is_exclusive(model, o, lock_words));
                lengths.push(hold_lengths(model, o));
                objects.len() as u32
            });
            (p, exclusive[p as usize - 1])
        };
        // The points each thread reaches that another waits for: (time, mark, lock released
        // by its place). A wait that took a lock held to one holder has no mark: the replay
        // makes that wait anew.
        let mut marks_at: Vec<Vec<(u64, u32, u32)>> = vec![Vec::new(); tids.len()];
        let mut wait_marks: Vec<Vec<(u32, u32)>> = Vec::with_capacity(tids.len());
        let mut start_marks = vec![NO_MARK; tids.len()];
        let mut probe_marks: Vec<(u32, u8)> = Vec::new();
        let phase = model
            .progress
            .phase()
            .filter(|&(a, b)| a >= run_start && b <= run_end);
        let mut nmarks = 0u32;
        // Whether a wait took its object, by the object's place and the wait's rule.
        let mut takes: Vec<[Option<bool>; 3]> = vec![[None; 3]; input.ids.len()];
        for (i, life) in lives.iter().enumerate() {
            let mut mine = Vec::with_capacity(life.waits.len());
            for s in &life.waits {
                let object = input.ids.get(s.object as usize).copied().unwrap_or(0);
                let rule = s.takes as usize;
                let took = match takes.get_mut(s.object as usize).map(|t| &mut t[rule]) {
                    Some(Some(t)) => *t,
                    Some(t) => *t.insert(s.takes.took(model, object, lock_words)),
                    None => false,
                };
                let (lock, made_anew) = if took { place_of(object) } else { (0, false) };
                let waker = place.get(&s.waker).copied();
                let Some(w) = waker.filter(|&w| s.waker != 0 && w as usize != i) else {
                    mine.push((if made_anew { NO_WAIT } else { NO_MARK }, lock));
                    continue;
                };
                if made_anew {
                    marks_at[w as usize].push((s.end, NO_MARK, lock));
                    mine.push((NO_WAIT, lock));
                    continue;
                }
                marks_at[w as usize].push((s.end, nmarks, lock));
                mine.push((nmarks, lock));
                nmarks = nmarks.checked_add(1).filter(|&n| n < NO_WAIT)?;
            }
            wait_marks.push(mine);
            if let Some(p) = life.parent {
                marks_at[p as usize].push((life.start, nmarks, 0));
                start_marks[i] = nmarks;
                nmarks = nmarks.checked_add(1).filter(|&n| n < NO_WAIT)?;
            }
            // The phase's ends, on a thread alive and not waiting then.
            for (end, at) in phase.iter().flat_map(|&(a, b)| [(0u8, a), (1u8, b)]) {
                let j = life.waits.partition_point(|s| s.end <= at);
                let waiting = life.waits.get(j).is_some_and(|s| s.begin <= at);
                if at >= life.start && at <= life.end && !waiting {
                    marks_at[i].push((at, nmarks, 0));
                    probe_marks.push((nmarks, end));
                    nmarks = nmarks.checked_add(1).filter(|&n| n < NO_WAIT)?;
                }
            }
        }
        let mut marks = vec![(0u32, 0u32); nmarks as usize];
        let mut seen: Vec<u64> = vec![0; objects.len()];
        let mut tracks = Vec::with_capacity(tids.len());
        for (i, life) in lives.iter_mut().enumerate() {
            let mut at = std::mem::take(&mut marks_at[i]);
            // A run in time order from each waiter: the merge sort takes them as runs.
            at.sort_by_key(|m| m.0);
            let sections = sections_of(
                life.start,
                life.end,
                &life.waits,
                &wait_marks[i],
                &at,
                &lengths,
            );
            let pieces = input.pieces.get(&tids[i]).map_or(&[][..], |p| &p.v[..]);
            let mut b = Builder {
                items: Vec::new(),
                sealed: true,
                last_point: 0,
                marks: &mut marks,
                at: &at,
                next_mark: 0,
                track: i as u32,
                outside_work: 0,
            };
            let mut own = Own2 {
                pieces,
                pi: 0,
                sections: &sections,
                si: 0,
                exclusive: &exclusive,
                idle: &input.idle,
                seen: &mut seen,
            };
            let mut cursor = life.start;
            for (s, &(m, _)) in life.waits.iter().zip(&wait_marks[i]) {
                own.span(&mut b, cursor, s.begin);
                // Points reached before the wait's end are reached as it begins.
                b.resolve_before(s.end);
                if m != NO_WAIT {
                    b.items.push(Item::Wait {
                        ns: s.end - s.begin,
                        mark: m,
                    });
                    b.sealed = false;
                }
                cursor = s.end;
            }
            own.span(&mut b, cursor, life.end);
            b.resolve_before(u64::MAX);
            let outside_work = b.outside_work;
            tracks.push(Track {
                tid: tids[i],
                start: life.start - run_start,
                start_mark: start_marks[i],
                items: b.items,
                outside_work,
            });
            life.waits = Vec::new();
        }
        let ncpus = f64::from(model.run.as_ref().map_or(1, |r| r.ncpus.max(1)));
        let mut probes: Vec<Vec<(u32, u8)>> = vec![Vec::new(); tracks.len()];
        for (m, end) in probe_marks {
            let (track, k) = marks[m as usize];
            probes[track as usize].push((k, end));
        }
        for p in &mut probes {
            p.sort_unstable();
        }
        Some(Replay {
            probes,
            cpus: cpus_had(model, input, ncpus, run_start, run_end),
            last: *place.get(&last_tid)?,
            tracks,
            marks,
            objects,
            seen,
        })
    }

    /// The locks whose critical sections the replay knows, each with the time inside them.
    pub fn sections(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.objects.iter().copied().zip(self.seen.iter().copied())
    }

    /// Each thread and its work outside the known critical sections.
    pub fn outside_work(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.tracks.iter().map(|t| (t.tid, t.outside_work))
    }

    /// Whether the replay measures the phase between progress points ([`Outcome::phase`]).
    pub fn has_phase(&self) -> bool {
        let ends = |e| self.probes.iter().flatten().any(|p| p.1 == e);
        ends(0) && ends(1)
    }

    /// Runs the threads again: the known sections of lock `o` take `section(o)` times as long,
    /// each thread's work outside them `outside(tid)` times.
    pub fn run(&self, section: impl Fn(u64) -> f64, outside: impl Fn(u32) -> f64) -> Outcome {
        let factor: Vec<f64> = self.objects.iter().map(|&o| clean(section(o))).collect();
        let out: Vec<f64> = self.tracks.iter().map(|t| clean(outside(t.tid))).collect();
        Sim::new(self, factor, out).run()
    }
}

/// A wait the replay makes anew (one that took a lock held to one holder): no item of its own.
const NO_WAIT: u32 = u32::MAX - 1;

fn exclusive_at(exclusive: &[bool], lock: u32) -> bool {
    exclusive.get(lock as usize - 1).copied().unwrap_or(false)
}

/// Whether the replay holds lock `o` to one holder at a time: a mutex, a spin lock, or a futex
/// word its code says is a lock (not a read-write lock: its readers share it).
fn is_exclusive(model: &Model, o: u64, lock_words: &std::collections::HashSet<u64>) -> bool {
    match model.objects.get(&o).and_then(|x| x.kind()) {
        Some(ObjectKind::Mutex | ObjectKind::Spin) => true,
        Some(ObjectKind::Futex) => lock_words.contains(&o),
        _ => false,
    }
}

/// Lock `o`'s longest measured hold (unbounded when not known) and its mean hold (0 when not
/// known).
fn hold_lengths(model: &Model, o: u64) -> (u64, u64) {
    let longest = longest_hold(model, o).unwrap_or(u64::MAX);
    let obj = model.objects.get(&o);
    let acquisitions = obj
        .and_then(|x| x.counters.as_ref())
        .map_or(0, |c| c.acquisitions);
    let mean = obj
        .and_then(|x| x.hold_total_estimate())
        .map_or(0, |(total, _)| total / acquisitions.max(1));
    (longest, mean)
}

/// A thread's known critical sections, (start, end, lock's place), apart and in order:
/// - up to each release of a lock to a waiter (`at`, sorted by time): from the thread's
///   previous wait, at most the lock's longest measured hold; a release inside a wait was made
///   as the thread began it (a condition variable's wait lets its mutex go);
/// - after each wait that took a lock held to one holder, when no release to a waiter ends a
///   section begun there: the lock's mean hold, up to the thread's next wait (its release was
///   not waited for, so not seen).
fn sections_of(
    start: u64,
    end: u64,
    waits: &[Step],
    wait_marks: &[(u32, u32)],
    at: &[(u64, u32, u32)],
    lengths: &[(u64, u64)],
) -> Vec<(u64, u64, u32)> {
    let mut sections: Vec<(u64, u64, u32)> = Vec::new();
    for &(r, _, lock) in at {
        if lock == 0 {
            continue;
        }
        let r = r.clamp(start, end);
        let j = waits.partition_point(|s| s.end <= r);
        let r = match waits.get(j) {
            Some(s) if s.begin <= r => s.begin,
            _ => r,
        };
        let before = waits[..j]
            .iter()
            .rev()
            .map(|s| s.end)
            .find(|&e| e <= r)
            .unwrap_or(start);
        let a = before.max(r.saturating_sub(lengths[lock as usize - 1].0));
        if r > a {
            sections.push((a, r, lock));
        }
    }
    // Sections begun by the releases, by their starts (in order: the releases are).
    let mut released: Vec<u64> = sections.iter().map(|s| s.0).collect();
    released.sort();
    for (k, (s, &(m, lock))) in waits.iter().zip(wait_marks).enumerate() {
        if m != NO_WAIT || released.binary_search(&s.end).is_ok() {
            continue;
        }
        let next = waits.get(k + 1).map_or(end, |n| n.begin);
        let until = s.end.saturating_add(lengths[lock as usize - 1].1).min(next);
        if until > s.end {
            sections.push((s.end, until, lock));
        }
    }
    // Two runs in time order (the releases', the waits'), merged.
    sections.sort_by_key(|s| (s.0, s.1));
    // Overlapping sections: the later one (the inner lock) has the time they share.
    for k in 1..sections.len() {
        let next = sections[k].0;
        let prev = &mut sections[k - 1];
        prev.1 = prev.1.min(next).max(prev.0);
    }
    sections.retain(|s| s.1 > s.0);
    sections
}

fn clean(f: f64) -> f64 {
    if f.is_finite() && f >= 0.0 {
        f
    } else {
        1.0
    }
}

/// The CPUs the program had on average: its CPU time plus the idle CPUs the sampler saw, over
/// the part of the run the sampler covered; the machine's when it saw none.
fn cpus_had(model: &Model, input: &Input, ncpus: f64, start: u64, end: u64) -> f64 {
    let covered: u64 = input.idle.iter().map(|x| x.1.saturating_sub(x.0)).sum();
    if covered == 0 || end <= start {
        return ncpus;
    }
    let idle: f64 = input
        .idle
        .iter()
        .map(|x| x.2 * x.1.saturating_sub(x.0) as f64)
        .sum::<f64>()
        / covered as f64;
    let running: u64 = model.states.threads.values().map(|s| s.on_cpu_ns).sum();
    let had = running as f64 / (end - start) as f64 + idle;
    had.clamp(1.0_f64.min(ncpus), ncpus)
}

/// Builds one thread's items.
struct Builder<'a> {
    items: Vec<Item>,
    /// The last item is the end of a point another thread waits for: nothing merges into it.
    sealed: bool,
    /// How many items there were when the last point was placed.
    last_point: usize,
    marks: &'a mut Vec<(u32, u32)>,
    /// The thread's points, in time order, and the first not yet placed.
    at: &'a [(u64, u32, u32)],
    next_mark: usize,
    track: u32,
    outside_work: u64,
}

impl Builder<'_> {
    /// Places the points before `t`: they are reached once the items so far are done.
    fn resolve_before(&mut self, t: u64) {
        while let Some(&(m_at, id, _)) = self.at.get(self.next_mark) {
            if m_at >= t {
                break;
            }
            if let Some(m) = self.marks.get_mut(id as usize) {
                *m = (self.track, self.items.len() as u32);
                self.sealed = true;
                self.last_point = self.items.len();
            }
            self.next_mark += 1;
        }
    }

    /// The next point's time, if any.
    fn next_point(&self) -> Option<u64> {
        self.at.get(self.next_mark).map(|m| m.0)
    }

    /// Takes or lets go a lock held to one holder. A section of work alone, with no point
    /// inside it, becomes one [`Item::Held`].
    fn lock(&mut self, item: Item) {
        let n = self.items.len();
        if let (
            Item::Release { lock },
            [.., Item::Acquire { lock: a }, Item::Work { ns, section }],
        ) = (item, &self.items[..])
        {
            if *a == lock && *section == lock && self.last_point + 2 <= n {
                let ns = *ns;
                self.items.truncate(n - 2);
                self.items.push(Item::Held { ns, lock });
                self.sealed = false;
                return;
            }
        }
        self.items.push(item);
        self.sealed = false;
    }

    fn push(&mut self, kind: Kind, ns: u64, section: u32) {
        if ns == 0 {
            return;
        }
        let item = match kind {
            Kind::Work => {
                if section == 0 {
                    self.outside_work += ns;
                }
                Item::Work { ns, section }
            }
            Kind::Delay => Item::Delay { ns },
            Kind::Skip => return,
        };
        if !self.sealed {
            match (self.items.last_mut(), item) {
                (
                    Some(Item::Work { ns: n, section: s }),
                    Item::Work {
                        ns: add,
                        section: s2,
                    },
                ) if *s == s2 => {
                    *n += add;
                    return;
                }
                (Some(Item::Delay { ns: n }), Item::Delay { ns: add }) => {
                    *n += add;
                    return;
                }
                _ => {}
            }
        }
        self.items.push(item);
        self.sealed = false;
    }
}

/// A thread's own time between its waits, cut by its sampled pieces and its sections.
struct Own2<'a> {
    pieces: &'a [super::Piece],
    pi: usize,
    sections: &'a [(u64, u64, u32)],
    si: usize,
    exclusive: &'a [bool],
    idle: &'a super::Idle,
    seen: &'a mut Vec<u64>,
}

impl Own2<'_> {
    fn span(&mut self, b: &mut Builder<'_>, a: u64, end: u64) {
        let mut t = a;
        // The section the thread is in, if its lock is held to one holder.
        let mut held = 0u32;
        while t < end {
            while self.pieces.get(self.pi).is_some_and(|p| p.1 <= t) {
                self.pi += 1;
            }
            while self.sections.get(self.si).is_some_and(|s| s.1 <= t) {
                self.si += 1;
            }
            b.resolve_before(t + 1);
            let piece = self.pieces.get(self.pi);
            let section = self.sections.get(self.si);
            let mut next = end;
            if let Some(p) = piece {
                next = next.min(if p.0 > t { p.0 } else { p.1 });
            }
            if let Some(s) = section {
                next = next.min(if s.0 > t { s.0 } else { s.1 });
            }
            if let Some(m) = b.next_point().filter(|&m| m > t) {
                next = next.min(m);
            }
            let next = next.max(t + 1);
            let in_section = section.filter(|s| s.0 <= t).map_or(0, |s| s.2);
            let kind = match piece.filter(|p| p.0 <= t) {
                None | Some((_, _, Own::Running, _)) => Kind::Work,
                Some((_, _, Own::Runnable, _)) => {
                    if idle_over(self.idle, t, next) >= 0.5 {
                        Kind::Delay
                    } else {
                        Kind::Skip
                    }
                }
                Some((_, _, Own::Blocked(..) | Own::Stopped, _)) => Kind::Delay,
            };
            if in_section > 0 {
                self.seen[in_section as usize - 1] += next - t;
            }
            let lock = if in_section > 0 && exclusive_at(self.exclusive, in_section) {
                in_section
            } else {
                0
            };
            if lock != held {
                if held > 0 {
                    b.lock(Item::Release { lock: held });
                }
                if lock > 0 {
                    b.lock(Item::Acquire { lock });
                }
                held = lock;
            }
            b.push(kind, next - t, in_section);
            t = next;
        }
        if held > 0 {
            b.lock(Item::Release { lock: held });
        }
    }
}

/// Where a thread is in the simulation.
#[derive(Clone, Copy, PartialEq)]
enum At {
    /// Not started: waiting for its creator, or for its recorded start.
    Unstarted,
    Working,
    Delayed,
    Blocked,
    Done,
}

/// A non-negative time as a key that orders as the number does.
fn key(x: f64) -> u64 {
    x.max(0.0).to_bits()
}

struct Sim<'a> {
    r: &'a Replay,
    factor: Vec<f64>,
    outside: Vec<f64>,
    /// Items done by each thread, and where it is.
    done: Vec<u32>,
    at: Vec<At>,
    /// Each thread's waiters: (items it must have done, waiter).
    waiters: Vec<BinaryHeap<Reverse<(u32, u32)>>>,
    /// Working threads by the service at which their item ends (processor sharing: each gets
    /// the same share, so the order of ends does not change with the share).
    working: BinaryHeap<Reverse<(u64, u32)>>,
    delayed: BinaryHeap<Reverse<(u64, u32)>>,
    /// Each lock held to one holder: its holder, and those in line for it.
    locks: Vec<(Option<u32>, std::collections::VecDeque<u32>)>,
    /// Now, and the service each working thread has had since the start.
    t: f64,
    service: f64,
    released: u64,
    /// Each thread's next probe, and when the phase's ends were reached: the earliest start,
    /// the latest end.
    next_probe: Vec<usize>,
    phase: [Option<f64>; 2],
}

impl<'a> Sim<'a> {
    fn new(r: &'a Replay, factor: Vec<f64>, outside: Vec<f64>) -> Sim<'a> {
        let n = r.tracks.len();
        Sim {
            r,
            factor,
            outside,
            done: vec![0; n],
            at: vec![At::Unstarted; n],
            waiters: vec![BinaryHeap::new(); n],
            working: BinaryHeap::new(),
            delayed: BinaryHeap::new(),
            locks: vec![(None, Default::default()); r.objects.len()],
            t: 0.0,
            service: 0.0,
            released: 0,
            next_probe: vec![0; n],
            phase: [None; 2],
        }
    }

    fn rate(&self) -> f64 {
        let n = self.working.len() as f64;
        if n <= self.r.cpus {
            1.0
        } else {
            self.r.cpus / n
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome {
            end: self.t,
            let_go: self.released,
            phase: match self.phase {
                [Some(a), Some(b)] => Some((b - a).max(0.0)),
                _ => None,
            },
        }
    }

    /// Notes the phase's ends thread `i` has reached.
    fn probe(&mut self, i: usize) {
        let probes = self.r.probes.get(i).map_or(&[][..], |p| &p[..]);
        while let Some(&(k, end)) = probes.get(self.next_probe[i]) {
            if k > self.done[i] {
                break;
            }
            let t = self.t;
            let e = &mut self.phase[end as usize];
            *e = Some(match (*e, end) {
                (None, _) => t,
                (Some(x), 0) => x.min(t),
                (Some(x), _) => x.max(t),
            });
            self.next_probe[i] += 1;
        }
    }

    fn run(mut self) -> Outcome {
        let mut ready: Vec<u32> = Vec::new();
        for (i, tr) in self.r.tracks.iter().enumerate() {
            if tr.start_mark == NO_MARK {
                if tr.start == 0 {
                    ready.push(i as u32);
                } else {
                    self.delayed.push(Reverse((key(tr.start as f64), i as u32)));
                }
            } else {
                let (w, k) = self.r.marks[tr.start_mark as usize];
                self.waiters[w as usize].push(Reverse((k, i as u32)));
            }
        }
        // A thread that waits for one that has already done enough goes on at once.
        for w in 0..self.r.tracks.len() {
            self.wake(w as u32, &mut ready);
        }
        self.go(&mut ready);
        let last = self.r.last as usize;
        loop {
            if self.at[last] == At::Done {
                return self.outcome();
            }
            let rate = self.rate();
            let by_work = self
                .working
                .peek()
                .map(|Reverse((v, _))| self.t + (f64::from_bits(*v) - self.service) / rate);
            let by_delay = self
                .delayed
                .peek()
                .map(|Reverse((t, _))| f64::from_bits(*t));
            let next = match (by_work, by_delay) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => {
                    // Every thread left waits for another: the recorded order cannot hold
                    // (a damaged log). Let the first blocked one go.
                    let Some(i) = (0..self.at.len())
                        .find(|&i| matches!(self.at[i], At::Blocked | At::Unstarted))
                    else {
                        return self.outcome();
                    };
                    self.released += 1;
                    for h in &mut self.waiters {
                        h.retain(|Reverse((_, x))| *x as usize != i);
                    }
                    for l in &mut self.locks {
                        l.1.retain(|&x| x as usize != i);
                    }
                    if self.at[i] == At::Blocked {
                        self.done[i] += 1;
                    }
                    ready.push(i as u32);
                    self.go(&mut ready);
                    continue;
                }
            };
            let next = next.max(self.t);
            if !self.working.is_empty() {
                self.service += (next - self.t) * rate;
            }
            self.t = next;
            while let Some(&Reverse((v, i))) = self.working.peek() {
                let v = f64::from_bits(v);
                if v > self.service + 1e-6 * v.max(1.0) {
                    break;
                }
                self.service = self.service.max(v);
                self.working.pop();
                let item = self.r.tracks[i as usize]
                    .items
                    .get(self.done[i as usize] as usize);
                if let Some(&Item::Held { lock, .. }) = item {
                    self.release(lock, &mut ready);
                }
                self.done[i as usize] += 1;
                ready.push(i);
            }
            while let Some(&Reverse((t, i))) = self.delayed.peek() {
                if f64::from_bits(t) > self.t {
                    break;
                }
                self.delayed.pop();
                if self.at[i as usize] != At::Unstarted {
                    self.done[i as usize] += 1;
                }
                ready.push(i);
            }
            self.go(&mut ready);
        }
    }

    /// Moves each thread in `ready` on through its items until it has to work, wait or be
    /// delayed, waking those that waited for what it did.
    fn go(&mut self, ready: &mut Vec<u32>) {
        while let Some(i) = ready.pop() {
            let iu = i as usize;
            loop {
                self.wake(i, ready);
                self.probe(iu);
                let Some(&item) = self.r.tracks[iu].items.get(self.done[iu] as usize) else {
                    self.at[iu] = At::Done;
                    break;
                };
                match item {
                    Item::Work { ns, section } => {
                        let f = if section == 0 {
                            self.outside[iu]
                        } else {
                            self.factor[section as usize - 1]
                        };
                        let need = ns as f64 * f;
                        if need <= 0.0 {
                            self.done[iu] += 1;
                            continue;
                        }
                        self.at[iu] = At::Working;
                        self.working.push(Reverse((key(self.service + need), i)));
                        break;
                    }
                    Item::Delay { ns } | Item::Wait { ns, mark: NO_MARK } => {
                        self.at[iu] = At::Delayed;
                        self.delayed.push(Reverse((key(self.t + ns as f64), i)));
                        break;
                    }
                    Item::Acquire { lock } => {
                        if !self.take(lock, i) {
                            break;
                        }
                        self.done[iu] += 1;
                    }
                    Item::Held { ns, lock } => {
                        if !self.take(lock, i) {
                            break;
                        }
                        let need = ns as f64 * self.factor[lock as usize - 1];
                        if need <= 0.0 {
                            self.release(lock, ready);
                            self.done[iu] += 1;
                            continue;
                        }
                        self.at[iu] = At::Working;
                        self.working.push(Reverse((key(self.service + need), i)));
                        break;
                    }
                    Item::Release { lock } => {
                        self.release(lock, ready);
                        self.done[iu] += 1;
                    }
                    Item::Wait { mark, .. } => {
                        let (w, k) = self.r.marks[mark as usize];
                        if self.done[w as usize] >= k {
                            self.done[iu] += 1;
                            continue;
                        }
                        self.at[iu] = At::Blocked;
                        self.waiters[w as usize].push(Reverse((k, i)));
                        break;
                    }
                }
            }
        }
    }

    /// Thread `i` takes `lock` if it is free (or was handed to it); else it waits in line.
    fn take(&mut self, lock: u32, i: u32) -> bool {
        let Some(l) = self.locks.get_mut(lock as usize - 1) else {
            return true;
        };
        if l.0.is_none_or(|h| h == i) {
            l.0 = Some(i);
            return true;
        }
        l.1.push_back(i);
        self.at[i as usize] = At::Blocked;
        false
    }

    /// Lets `lock` go, to the first in line if any (it takes it when it moves on).
    fn release(&mut self, lock: u32, ready: &mut Vec<u32>) {
        if let Some(l) = self.locks.get_mut(lock as usize - 1) {
            l.0 = l.1.pop_front();
            if let Some(next) = l.0 {
                ready.push(next);
            }
        }
    }

    /// Lets go the threads that waited for thread `w` to have done what it now has.
    fn wake(&mut self, w: u32, ready: &mut Vec<u32>) {
        let done = self.done[w as usize];
        while let Some(&Reverse((k, x))) = self.waiters[w as usize].peek() {
            if k > done {
                break;
            }
            self.waiters[w as usize].pop();
            if self.at[x as usize] == At::Blocked {
                self.done[x as usize] += 1;
            }
            ready.push(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::critical::Takes;

    fn ran(o: Outcome) -> (f64, u64) {
        (o.end, o.let_go)
    }

    fn replay(tracks: Vec<Track>, marks: Vec<(u32, u32)>, cpus: f64) -> Replay {
        Replay {
            objects: vec![7],
            seen: vec![0],
            tracks,
            marks,
            cpus,
            last: 0,
            probes: Vec::new(),
        }
    }

    fn track(tid: u32, start_mark: u32, items: Vec<Item>) -> Track {
        Track {
            tid,
            start: 0,
            start_mark,
            items,
            outside_work: 0,
        }
    }

    const fn held(ns: u64) -> Item {
        Item::Work { ns, section: 1 }
    }
    const fn work(ns: u64) -> Item {
        Item::Work { ns, section: 0 }
    }

    /// Two workers take turns on one lock (each waits for the other's release), then main joins
    /// both: the sections are the run; halving them halves it.
    #[test]
    fn a_lock_that_serialises_the_run_scales_it() {
        // Marks: 0 = A's start (main at 0), 1 = B's start, 2 = B waits for A's first release
        // (A has done 1 item), 3 = A waits for B's release (B has done 2), 4/5 = main's joins.
        let main = track(
            1,
            NO_MARK,
            vec![Item::Wait { ns: 0, mark: 4 }, Item::Wait { ns: 0, mark: 5 }],
        );
        let a = track(
            2,
            0,
            vec![held(100), Item::Wait { ns: 100, mark: 3 }, held(100)],
        );
        let b = track(3, 1, vec![Item::Wait { ns: 100, mark: 2 }, held(100)]);
        let r = replay(
            vec![main, a, b],
            vec![(0, 0), (0, 0), (1, 1), (2, 2), (1, 3), (2, 2)],
            2.0,
        );
        let (base, let_go) = ran(r.run(|_| 1.0, |_| 1.0));
        assert_eq!(let_go, 0);
        assert!((base - 300.0).abs() < 1e-6, "{base}");
        let (half, _) = ran(r.run(|_| 0.5, |_| 1.0));
        assert!((half - 150.0).abs() < 1e-6, "{half}");
        // Only the work outside: no change.
        let (outside, _) = ran(r.run(|_| 1.0, |_| 0.5));
        assert!((outside - 300.0).abs() < 1e-6, "{outside}");
    }

    /// Two threads each take a lock held to one holder, then work outside it: the replay makes
    /// the second wait for the first's release, whichever came first; halved sections shorten
    /// the run by the half that was serialised.
    #[test]
    fn a_lock_held_to_one_holder_makes_its_waits_anew() {
        let taker = |tid| {
            track(
                tid,
                NO_MARK,
                vec![
                    Item::Acquire { lock: 1 },
                    held(100),
                    Item::Release { lock: 1 },
                    work(100),
                ],
            )
        };
        let r = replay(
            vec![joiner(), taker(2), taker(3)],
            vec![(1, 4), (2, 4)],
            2.0,
        );
        let (t, let_go) = ran(r.run(|_| 1.0, |_| 1.0));
        assert_eq!(let_go, 0);
        assert!((t - 300.0).abs() < 1e-6, "{t}");
        let (t, _) = ran(r.run(|_| 0.5, |_| 1.0));
        assert!((t - 200.0).abs() < 1e-6, "{t}");
        // The same sections as single items.
        let fused = |tid| {
            track(
                tid,
                NO_MARK,
                vec![Item::Held { ns: 100, lock: 1 }, work(100)],
            )
        };
        let r2 = replay(
            vec![joiner(), fused(2), fused(3)],
            vec![(1, 2), (2, 2)],
            2.0,
        );
        assert!((r2.run(|_| 1.0, |_| 1.0).end - 300.0).abs() < 1e-6);
        assert!((r2.run(|_| 0.5, |_| 1.0).end - 200.0).abs() < 1e-6);
        assert!((r2.run(|_| 0.0, |_| 1.0).end - 100.0).abs() < 1e-6);
        // A thread that comes to the lock when it is free does not wait.
        let late = track(
            3,
            NO_MARK,
            vec![
                work(250),
                Item::Acquire { lock: 1 },
                held(10),
                Item::Release { lock: 1 },
            ],
        );
        let r = replay(vec![joiner(), taker(2), late], vec![(1, 4), (2, 4)], 2.0);
        let (t, _) = ran(r.run(|_| 1.0, |_| 1.0));
        assert!((t - 260.0).abs() < 1e-6, "{t}");
    }

    /// Main, waiting for the ends of threads 2 and 3 (marks 0 and 1).
    fn joiner() -> Track {
        track(
            1,
            NO_MARK,
            vec![Item::Wait { ns: 0, mark: 0 }, Item::Wait { ns: 0, mark: 1 }],
        )
    }

    /// A section ends at each release to a waiter, from the thread's previous wait, at most the
    /// lock's longest hold; a wait that took a lock nobody waited for next gets the mean hold.
    #[test]
    fn sections_come_from_releases_and_from_waits_that_took_a_lock() {
        let step = |begin, end| Step {
            begin,
            end,
            object: 0,
            waker: 0,
            takes: Takes::IfLock,
        };
        let waits = [step(100, 200), step(500, 600), step(900, 950)];
        // The second wait took lock 1 (made anew); the others took nothing.
        let marks = [(NO_MARK, 0), (NO_WAIT, 1), (NO_MARK, 0)];
        // Releases of lock 1 to waiters at 450 and (inside the third wait) 920.
        let at = [(450, NO_MARK, 1), (920, NO_MARK, 1)];
        let lengths = [(150, 40)];
        let s = sections_of(0, 1000, &waits, &marks, &at, &lengths);
        // 450: from 300 (longest 150, after the wait that ended at 200); 920 → 900, from 750
        // (the wait that ended at 600, capped at 150); the wait that ended at 600: none
        // begun there, so its mean hold, 600..640.
        assert_eq!(s, vec![(300, 450, 1), (600, 640, 1), (750, 900, 1)]);
    }

    /// The phase between progress points runs from the earliest thread at its start to the
    /// latest at its end.
    #[test]
    fn the_phase_is_measured_between_its_ends_on_the_threads_that_ran_then() {
        let a = track(1, NO_MARK, vec![work(100), work(200), work(50)]);
        let b = track(2, NO_MARK, vec![work(150), work(100)]);
        let mut r = replay(vec![a, b], vec![], 2.0);
        // The start: after a's first item (100) and b's first (150); the end: after a's second
        // (300) and b's second (250).
        r.probes = vec![vec![(1, 0), (2, 1)], vec![(1, 0), (2, 1)]];
        let o = r.run(|_| 1.0, |_| 1.0);
        assert_eq!(o.phase, Some(200.0));
        assert!((o.end - 350.0).abs() < 1e-6);
        let o = r.run(|_| 1.0, |_| 0.5);
        assert_eq!(o.phase, Some(100.0));
        // No end reached: no phase.
        r.probes = vec![vec![(1, 0)], vec![]];
        assert_eq!(r.run(|_| 1.0, |_| 1.0).phase, None);
    }

    /// Three threads of work on two CPUs share them; a wait for a point already passed vanishes.
    #[test]
    fn the_cpus_are_shared_and_a_passed_point_is_not_waited_for() {
        let main = track(
            1,
            NO_MARK,
            vec![
                work(300),
                Item::Wait { ns: 0, mark: 0 },
                Item::Wait { ns: 0, mark: 1 },
            ],
        );
        let a = track(2, NO_MARK, vec![work(300)]);
        let b = track(3, NO_MARK, vec![work(300)]);
        let r = replay(vec![main, a, b], vec![(1, 1), (2, 1)], 2.0);
        let (t, _) = ran(r.run(|_| 1.0, |_| 1.0));
        // 900 of work on 2 CPUs.
        assert!((t - 450.0).abs() < 1e-6, "{t}");
        let r1 = Replay {
            cpus: 1.0,
            ..r.clone()
        };
        assert!((r1.run(|_| 1.0, |_| 1.0).end - 900.0).abs() < 1e-6);
        // Main's own work halved: it still waits for the others' 300 each, shared on 2 CPUs.
        let (t, _) = ran(r.run(|_| 1.0, |tid| if tid == 1 { 0.5 } else { 1.0 }));
        assert!((t - 375.0).abs() < 1e-6, "{t}");
    }

    /// A delay keeps its length; a wait nobody ended keeps its length; a cycle (a damaged log)
    /// ends, counted.
    #[test]
    fn delays_keep_their_length_and_a_cycle_is_let_go() {
        let main = track(
            1,
            NO_MARK,
            vec![
                Item::Delay { ns: 50 },
                Item::Wait {
                    ns: 20,
                    mark: NO_MARK,
                },
                work(10),
            ],
        );
        let r = replay(vec![main], vec![], 1.0);
        assert!((r.run(|_| 0.0, |_| 0.0).end - 70.0).abs() < 1e-6);
        let a = track(1, NO_MARK, vec![Item::Wait { ns: 5, mark: 0 }, work(10)]);
        let b = track(2, NO_MARK, vec![Item::Wait { ns: 5, mark: 1 }, work(10)]);
        let r = replay(vec![a, b], vec![(1, 1), (0, 1)], 2.0);
        let (t, let_go) = ran(r.run(|_| 1.0, |_| 1.0));
        assert!(let_go >= 1 && t.is_finite(), "{t} {let_go}");
    }
}
