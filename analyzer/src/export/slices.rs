//! Thread states in time, from the sampler's records (`ThreadSamples`, `CpuSample`): for each
//! thread, slices `Running`, `Runnable`, `Wait: lock` (or `Wait: condition`, ... by the kind
//! of object of a tracked wait), `Wait: I/O` or `Wait: <syscall>` for a thread blocked in a
//! system call; and the machine's idle CPUs over time.
//!
//! A sample lists a thread with its time on a CPU and its time ready for one since the thread's
//! previous listing (the kernel's schedstat: exact sums), and its state at the sample. The
//! order of those times inside the interval is not known: the interval is split in proportion
//! to them (a wait the thread was in at the start first, then ready, then running, then a wait
//! it was in at the end), an estimate that every slice says it is. Unlisted threads stayed as
//! they were.
//!
//! The log is read a second time, record by record, up to where the first read ended; what is
//! kept is one entry per thread (its last listing and the slice being extended), whatever the
//! number of samples. When that read does not find what the first found (the file was removed,
//! cut short or changed in between, or a read failed), the export says so on stderr.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use waitshim_format::{thread_state, ObjectKind, Record};

use super::Source;
use crate::model::Model;
use crate::source::ReadSummary;
use crate::states::syscall_name;

/// What a thread was doing during a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Running,
    Runnable,
    /// In a wait the shim tracks, on an object of this kind (`ObjectKind as u8`, or `None`).
    Tracked(Option<u8>),
    /// Blocked in a system call (-1: asleep outside one), on `what`; `chain`: where in its code
    /// (a `BlockedChain` the policy asked for, scanned from its stack), 0 when none.
    Blocked {
        syscall: i32,
        what: String,
        chain: u32,
    },
    Stopped,
    /// Neither on a CPU nor ready for one, in no state a sample saw (short sleeps between two
    /// samples that both found it running).
    Unseen,
}

/// The four colours of the HTML timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    Running = 0,
    Runnable = 1,
    Tracked = 2,
    Other = 3,
}

impl State {
    /// The fixed name of the slice.
    pub fn name(&self) -> String {
        match self {
            State::Running => "Running".into(),
            State::Runnable => "Runnable".into(),
            State::Tracked(k) => tracked_name(*k).into(),
            State::Blocked { syscall, .. } => blocked_name(*syscall),
            State::Stopped => "Stopped".into(),
            State::Unseen => "Wait: between samples".into(),
        }
    }

    pub fn colour(&self) -> Colour {
        match self {
            State::Running => Colour::Running,
            State::Runnable => Colour::Runnable,
            State::Tracked(_) => Colour::Tracked,
            _ => Colour::Other,
        }
    }

    fn is_wait(&self) -> bool {
        !matches!(self, State::Running | State::Runnable | State::Unseen)
    }
}

fn tracked_name(kind: Option<u8>) -> &'static str {
    let k = kind.and_then(ObjectKind::from_u8);
    match k {
        Some(ObjectKind::Cond) => "Wait: condition",
        Some(ObjectKind::Semaphore) => "Wait: semaphore",
        Some(ObjectKind::Barrier) => "Wait: barrier",
        Some(ObjectKind::Thread) => "Wait: join",
        _ => "Wait: lock",
    }
}

/// The system calls that wait for a descriptor: `Wait: I/O`.
fn is_io(syscall: i32) -> bool {
    waitshim_format::syscalls::is_io(syscall)
}

fn blocked_name(syscall: i32) -> String {
    if is_io(syscall) {
        return "Wait: I/O".into();
    }
    match syscall {
        -1 => "Wait: asleep".into(),
        -2 => "Wait: other calls".into(),
        n => match syscall_name(n) {
            Some(name) => format!("Wait: {name}"),
            None => format!("Wait: syscall {n}"),
        },
    }
}

/// The system call's name for the slice's arguments.
pub fn syscall_text(syscall: i32) -> String {
    syscall_name(syscall).map_or_else(|| format!("syscall {syscall}"), str::to_string)
}

/// One slice of a thread's states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub tid: u32,
    pub start: u64,
    pub end: u64,
    pub state: State,
    /// Part of an interval split in proportion to the kernel's figures (an estimate of where in
    /// the interval it lay), rather than a state seen at both ends.
    pub estimated: bool,
    /// A tracked wait from the per-wait events: its begin and end are exact ([`super::exact`]).
    pub exact: bool,
}

/// What the sampler's records give, in the order they are found.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Slice(Slice),
    /// From `start` to `end`, `idle` CPUs of `cpus` were idle on average.
    IdleCpus {
        start: u64,
        end: u64,
        idle: f64,
        cpus: usize,
    },
}

struct Thread {
    /// The last listing: when, and the state then.
    at: u64,
    state: Option<State>,
    /// The slice being extended (merged with the next one of the same state).
    pending: Option<Slice>,
    /// The thread's end, as the model knows it.
    end: u64,
    /// Running and ready time the kernel counted beyond the last interval's length (the
    /// sampler reads the counters a little after the time it stamps the sample with): given to
    /// the next interval, so that the slices add up to the kernel's totals.
    carry: (u64, u64),
}

/// Hands out `slice` merged with the thread's pending one when it continues it.
fn emit<E>(
    slice: Slice,
    threads: &mut HashMap<u32, Thread>,
    f: &mut dyn FnMut(Event) -> Result<(), E>,
) -> Result<(), E> {
    let Some(t) = threads.get_mut(&slice.tid) else {
        return Ok(());
    };
    let slice = Slice {
        end: slice.end.min(t.end),
        ..slice
    };
    if slice.end <= slice.start {
        return Ok(());
    }
    if let Some(p) = &mut t.pending {
        if p.state == slice.state && p.end == slice.start {
            p.end = slice.end;
            p.estimated |= slice.estimated;
            return Ok(());
        }
    }
    match t.pending.replace(slice) {
        Some(done) => f(Event::Slice(done)),
        None => Ok(()),
    }
}

/// Whether the log has sampler records at all.
pub fn any(model: &Model) -> bool {
    model.states.any()
}

/// Reads the log of `src` again, up to where its first read ended (a log the shim still writes
/// has grown since), and calls `f` with each state slice (each thread's in time order) and each
/// idle-CPU figure. Nothing when the log has no samples. A log that cannot be read again as it
/// was read first gives the slices of what was read, and a note (see [`super::read_again`]).
pub fn for_each<E>(src: &Source<'_>, f: impl FnMut(Event) -> Result<(), E>) -> Result<(), E> {
    if !any(src.ctx.model) {
        return Ok(());
    }
    let note = super::read_again(src.ctx.summary, "the thread states", |bytes, path| {
        fold(src.ctx.model, bytes, path, f)
    })?;
    src.note(note);
    Ok(())
}

/// [`for_each`] for a log `first` summarises, outside an export: `Ok(Some(note))` when the log
/// could not be read again as it was read first (the states are then those read).
pub fn for_each_in<E>(
    model: &Model,
    first: &ReadSummary,
    f: impl FnMut(Event) -> Result<(), E>,
) -> Result<Option<String>, E> {
    if !any(model) {
        return Ok(None);
    }
    super::read_again(first, "the thread states", |bytes, path| {
        fold(model, bytes, path, f)
    })
}

/// [`for_each`], with each thread's tracked waits taken from `waits` (the exact waits of the
/// per-wait events, kept by [`super::exact::Store`]) where they are complete, and the sampled
/// states filling the rest ([`super::exact::Merge`]); as sampled without them.
pub fn for_each_exact<E>(
    src: &Source<'_>,
    waits: Option<super::exact::Waits>,
    mut f: impl FnMut(Event) -> Result<(), E>,
) -> Result<(), E> {
    let Some(waits) = waits else {
        return for_each(src, f);
    };
    let mut merge = super::exact::Merge::new(waits, super::exact::complete_from(src.ctx.model));
    for_each(src, |ev| match ev {
        Event::Slice(s) => merge.slice(s, &mut |p| f(Event::Slice(p))),
        other => f(other),
    })?;
    merge.finish(&mut |p| f(Event::Slice(p)))
}

/// The slices of the log `bytes` (the log of `model`), each handed to `f`; what the read found,
/// `f`'s error, or why the bytes could not be read as a log.
fn fold<E>(
    model: &Model,
    bytes: impl Read,
    path: &Path,
    mut f: impl FnMut(Event) -> Result<(), E>,
) -> Result<Result<ReadSummary, E>, String> {
    let mut fold = Fold::new(model);
    let mut result: Result<(), E> = Ok(());
    let summary = crate::source::read_from(bytes, path, |rec| {
        if result.is_ok() {
            result = fold.record(&rec, model, &mut f);
        }
    });
    let summary = summary.map_err(|e| e.why)?;
    if let Err(e) = result.and_then(|()| fold.finish(model, &mut f)) {
        return Ok(Err(e));
    }
    Ok(Ok(summary))
}

/// The state slices of a log's sampler records, record by record, for a read of the log that
/// serves others too ([`crate::critical`]): [`Fold::record`] with each record, then
/// [`Fold::finish`].
pub struct Fold {
    /// Where the log ends, when the model handed to [`Fold::record`] is the whole log's (a
    /// read after the model's); None in the model's own read, where each thread's end is known
    /// only at [`Fold::finish`] (slices are then cut at the threads' ends by the caller).
    end_of_log: Option<u64>,
    threads: HashMap<u32, Thread>,
    last_cpu: Option<u64>,
    interval: u64,
}

impl Fold {
    /// For a read of the log after the model's: `model` is the whole log's.
    pub fn new(model: &Model) -> Fold {
        Fold {
            end_of_log: Some(model.end_of_log()),
            threads: HashMap::new(),
            last_cpu: None,
            interval: 0,
        }
    }

    /// For the model's own read ([`crate::pass`]): the model handed to each record is what the
    /// log said before it.
    pub fn streaming() -> Fold {
        Fold {
            end_of_log: None,
            threads: HashMap::new(),
            last_cpu: None,
            interval: 0,
        }
    }

    /// The slices and idle-CPU figures `rec` completes, each handed to `f`. A thread first
    /// listed starts where `model` says it started (the run's start if it does not know).
    pub fn record<E>(
        &mut self,
        rec: &Record,
        model: &Model,
        f: &mut dyn FnMut(Event) -> Result<(), E>,
    ) -> Result<(), E> {
        match rec {
            Record::ThreadSamples(s) => {
                self.interval = s.interval_ns;
                for e in &s.threads {
                    let end_of_log = self.end_of_log;
                    let t = self.threads.entry(e.tid).or_insert_with(|| {
                        let mt = model.threads.get(&e.tid);
                        Thread {
                            at: mt.and_then(|t| t.start_ns).unwrap_or(model.start_ns()),
                            state: None,
                            pending: None,
                            carry: (0, 0),
                            end: end_of_log
                                .map_or(u64::MAX, |end| mt.and_then(|t| t.exit_ns).unwrap_or(end)),
                        }
                    });
                    let now = s.ns.max(t.at);
                    let from = t.at;
                    let prev = t.state.take();
                    let state = match e.state {
                        thread_state::RUNNING => State::Running,
                        thread_state::TRACKED_WAIT => State::Tracked(e.waiting_kind.checked_sub(1)),
                        thread_state::STOPPED => State::Stopped,
                        _ => State::Blocked {
                            syscall: e.syscall,
                            what: e.what.chars().take(200).collect(),
                            chain: 0,
                        },
                    };
                    // The descriptor is named when the thread entered the state, and its
                    // chain taken then or later: keep both while the state lasts.
                    let state = match (&prev, state) {
                        (
                            Some(State::Blocked {
                                syscall: a,
                                what,
                                chain,
                            }),
                            State::Blocked {
                                syscall: b,
                                what: w,
                                ..
                            },
                        ) if *a == b && w.is_empty() => State::Blocked {
                            syscall: b,
                            what: what.clone(),
                            chain: *chain,
                        },
                        (_, s) => s,
                    };
                    t.at = now;
                    t.state = Some(state.clone());
                    let run = e.on_cpu_ns.saturating_add(t.carry.0);
                    let ready = e.run_delay_ns.saturating_add(t.carry.1);
                    let pieces = split(from, now, prev.as_ref(), &state, run, ready);
                    let (placed_run, placed_ready) =
                        pieces.iter().fold((0, 0), |(r, q), p| match p.2 {
                            State::Running => (r + (p.1 - p.0), q),
                            State::Runnable => (r, q + (p.1 - p.0)),
                            _ => (r, q),
                        });
                    // At most one interval's worth is carried.
                    let cap = now.saturating_sub(from).max(self.interval);
                    t.carry = (
                        run.saturating_sub(placed_run).min(cap),
                        ready.saturating_sub(placed_ready).min(cap),
                    );
                    for (start, end, st, est) in pieces {
                        emit(
                            Slice {
                                tid: e.tid,
                                start,
                                end,
                                state: st,
                                estimated: est,
                                exact: false,
                            },
                            &mut self.threads,
                            f,
                        )?;
                    }
                }
            }
            Record::BlockedChain(c) => {
                // The chain of the wait the thread's latest listing began: on its state, and
                // on the slice of it already cut, so that the whole wait carries it.
                let Some(t) = self.threads.get_mut(&c.tid) else {
                    return Ok(());
                };
                let set = |st: &mut State| {
                    if let State::Blocked { syscall, chain, .. } = st {
                        if *syscall == c.syscall && *chain == 0 {
                            *chain = c.chain_id;
                        }
                    }
                };
                if let Some(st) = &mut t.state {
                    set(st);
                }
                if let Some(p) = &mut t.pending {
                    if p.end == t.at {
                        set(&mut p.state);
                    }
                }
            }
            Record::CpuSample(c) => {
                let cpus = c.idle_ns.len();
                let span = match self.last_cpu {
                    Some(l) if c.ns > l => c.ns - l,
                    _ => self.interval.max(100_000_000),
                };
                self.last_cpu = Some(c.ns);
                if cpus == 0 {
                    return Ok(());
                }
                let idle: u64 = c.idle_ns.iter().fold(0, |a, &v| a.saturating_add(v));
                let idle = (idle as f64 / span as f64).clamp(0.0, cpus as f64);
                f(Event::IdleCpus {
                    start: c.ns.saturating_sub(span),
                    end: c.ns,
                    idle,
                    cpus,
                })?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Each thread's last state, up to its end (in `model`, the whole log's), and the slices
    /// still pending.
    pub fn finish<E>(
        mut self,
        model: &Model,
        f: &mut dyn FnMut(Event) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.end_of_log.is_none() {
            let end = model.end_of_log();
            for (tid, t) in &mut self.threads {
                t.end = model
                    .threads
                    .get(tid)
                    .and_then(|t| t.exit_ns)
                    .unwrap_or(end);
            }
        }
        last_slices(&mut self.threads, f)
    }
}

/// Each thread's last state, which lasts until its end; then the pending slices.
fn last_slices<E>(
    threads: &mut HashMap<u32, Thread>,
    f: &mut dyn FnMut(Event) -> Result<(), E>,
) -> Result<(), E> {
    let mut tids: Vec<u32> = threads.keys().copied().collect();
    tids.sort_unstable();
    for tid in tids {
        let (at, state, end) = {
            let t = &threads[&tid];
            (t.at, t.state.clone(), t.end)
        };
        if let Some(state) = state {
            emit(
                Slice {
                    tid,
                    start: at,
                    end,
                    state,
                    estimated: false,
                    exact: false,
                },
                threads,
                f,
            )?;
        }
        if let Some(p) = threads.get_mut(&tid).and_then(|t| t.pending.take()) {
            f(Event::Slice(p))?;
        }
    }
    Ok(())
}

/// The pieces of the interval `[from, to)` of a thread seen in `prev` at `from` and in `next`
/// at `to`, which ran `on_cpu` ns and was ready `delay` ns in it: a wait it was in at `from`,
/// ready, running, a wait it was in at `to` (the rest of the interval shared between the two
/// waits when there are two), each as long as the kernel's figures say, in proportion when
/// they add up to more than the interval.
pub fn split(
    from: u64,
    to: u64,
    prev: Option<&State>,
    next: &State,
    on_cpu: u64,
    delay: u64,
) -> Vec<(u64, u64, State, bool)> {
    let len = to.saturating_sub(from);
    if len == 0 {
        return Vec::new();
    }
    let (mut run, mut ready) = (on_cpu, delay);
    let busy = run.saturating_add(ready);
    if busy > len {
        run = (u128::from(run) * u128::from(len) / u128::from(busy)) as u64;
        ready = len - run;
    }
    let rest = len - run - ready;
    let lead = prev.filter(|s| s.is_wait());
    let trail = Some(next).filter(|s| s.is_wait());
    let (lead_ns, trail_ns, unseen) = match (lead, trail) {
        (Some(_), Some(_)) => (rest - rest / 2, rest / 2, 0),
        (Some(_), None) => (rest, 0, 0),
        (None, Some(_)) => (0, rest, 0),
        (None, None) => (0, 0, rest),
    };
    // Nothing ran and nothing was ready: one state seen at the start, the whole interval.
    if run == 0 && ready == 0 {
        let st = lead.or(trail).cloned().unwrap_or(State::Unseen);
        return vec![(from, to, st, false)];
    }
    let mut out = Vec::new();
    let mut at = from;
    let mut push = |ns: u64, st: State| {
        if ns > 0 {
            out.push((at, at + ns, st, true));
            at += ns;
        }
    };
    if let Some(l) = lead {
        push(lead_ns, l.clone());
        push(ready, State::Runnable);
        push(run, State::Running);
    } else {
        push(run, State::Running);
        push(ready, State::Runnable);
    }
    push(unseen, State::Unseen);
    if let Some(t) = trail {
        push(trail_ns, t.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_splits_in_proportion_to_the_kernels_figures() {
        let read = State::Blocked {
            syscall: 0,
            what: "pipe:[1]".into(),
            chain: 0,
        };
        // Blocked at the start, running at the end: waited, was ready, ran.
        let p = split(0, 100, Some(&read), &State::Running, 30, 20);
        assert_eq!(
            p,
            vec![
                (0, 50, read.clone(), true),
                (50, 70, State::Runnable, true),
                (70, 100, State::Running, true)
            ]
        );
        // Running throughout, more CPU than time (clock skew): scaled to the interval.
        let p = split(0, 100, Some(&State::Running), &State::Running, 150, 50);
        assert_eq!(
            p,
            vec![
                (0, 75, State::Running, true),
                (75, 100, State::Runnable, true)
            ]
        );
        // Nothing ran: the state seen at the start lasted.
        let p = split(0, 100, Some(&read), &State::Running, 0, 0);
        assert_eq!(p, vec![(0, 100, read.clone(), false)]);
        assert_eq!(read.name(), "Wait: I/O");
        assert_eq!(
            State::Blocked {
                syscall: 230,
                what: String::new(),
                chain: 0,
            }
            .name(),
            "Wait: clock_nanosleep"
        );
        assert_eq!(
            State::Tracked(Some(ObjectKind::Mutex as u8)).name(),
            "Wait: lock"
        );
    }
}
