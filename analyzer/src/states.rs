//! What the shim's sampler saw of each thread (`ThreadSamples`, `CpuSample` records): time on a
//! CPU and time ready for one (the kernel's exact figures), and spans of the sampled states:
//! in a wait the shim tracks, or blocked in a system call, with what it waited on.
//!
//! A sample lists a thread when it ran or changed state; an unlisted thread stayed as it was.
//! A state seen at one sample and changed at the next is counted until the next: each span is
//! exact to within one interval at each end.

use std::collections::BTreeMap;

use waitshim_format::{
    thread_state, BlockedChain, CpuSample, ThreadSamples, ThreadSwitches, ThreadTotals,
};

/// Threads followed at most (more are counted in [`States::threads_cut`]).
pub const MAX_THREADS: usize = 100_000;
/// Distinct (system call, what) kept per thread; further ones are summed under "other".
pub const MAX_BLOCKED_KINDS: usize = 16;
/// CPUs whose idle time is kept one by one ([`States::per_cpu`]); all are in the sums.
pub const MAX_CPUS: usize = 4096;
/// Distinct resources kept over the run ([`States::resources`]); further ones are summed under
/// system call -2.
pub const MAX_RESOURCES: usize = 1000;
const MAX_WHAT: usize = 200;
/// Distinct chains kept per resource ([`ResourceWaits::chains`]); further ones are counted in
/// `other_chains`.
pub const MAX_CHAINS_PER_RESOURCE: usize = 8;
/// How far before the end of the run the sampler's last record may be and its figures still
/// cover the run (at least; two intervals when the sampler looked less often). A sampler that
/// works looks once more as the program exits, and writes its CPU figures every 100 ms.
pub const SAMPLED_TO_END_SLACK_NS: u64 = 250_000_000;
/// The shortest time without any look of the sampler that is taken for the whole process
/// stopped (SIGSTOP and the other job-control stops stop the sampler's thread too): the sampler
/// writes its CPU figures every 100 ms, so it is far longer than any pause between its records.
pub const STOP_GAP_NS: u64 = 1_000_000_000;
/// Stops listed one by one; more are only counted and summed.
pub const MAX_STOPS: usize = 10_000;
/// x86-64's `restart_syscall`: what a thread stopped (or interrupted by a handler) in a call
/// with a deadline runs when it resumes, to go on with that call.
pub const SYS_RESTART_SYSCALL: i32 = 219;

/// Time one thread spent blocked in one system call on one thing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockedIn {
    /// The system call's number (-1: blocked outside one; -2: several, summed).
    pub syscall: i32,
    /// What its descriptor was (`pipe:[123]`, `socket:[456]`, a path), or empty.
    pub what: String,
    pub ns: u64,
}

/// The sampler's view of one thread.
#[derive(Debug, Clone, Default)]
pub struct ThreadStates {
    pub on_cpu_ns: u64,
    pub run_delay_ns: u64,
    pub timeslices: u64,
    /// Sampled: in waits the shim tracks.
    pub tracked_ns: u64,
    /// Sampled: blocked elsewhere, most first once finished.
    pub blocked: Vec<BlockedIn>,
    /// The state at the latest look: (state, syscall, what, since ns, tracked object id,
    /// tracked object kind as u8 plus 1).
    current: Option<(u8, i32, String, u64, u64, u8)>,
    /// While `current` is stopped: the wait it was in before (state, syscall, what), which a
    /// `restart_syscall` after the stop goes on with.
    before_stop: Option<(u8, i32, String)>,
    /// When the thread ended, if it did: a sample written after its exit record (the sampler
    /// looked just before the thread ended) does not stretch its states past its end.
    exited: Option<u64>,
    /// Whether any sample listed it.
    pub sampled: bool,
    /// Context switches (voluntary: it blocked; involuntary: it was preempted) and the
    /// longest timeslice seen, estimated (the largest mean slice of an interval between two
    /// looks); `switches_known` when the log had them.
    pub voluntary: u64,
    pub involuntary: u64,
    pub longest_slice_ns: u64,
    pub switches_known: bool,
    /// Its totals from its own end (`ThreadTotals`): samples after that add nothing past them.
    totals: Option<(u64, u64, u64)>,
    /// Its state when the log ends ([`States::finish`]): ended, or as the sampler's last look
    /// that listed it saw it.
    pub end_state: Option<EndState>,
    /// The state it was in when it ended, until the next sample has counted the interval it
    /// ended in for lost parallelism.
    before_exit: Option<(u8, i32, String, u64, u64, u8)>,
}

/// A thread's state at the end of the log: what the sampler's last look that listed it saw
/// (an unlisted thread stayed as it was), or that it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndState {
    /// Not blocked: on a CPU or ready for one (the kernel's state `R`, which does not tell
    /// which), since the look at `since`.
    Running { since: u64 },
    /// In a wait the shim tracks, on object `object_id` (0: not in the log) of kind `kind`
    /// ([`waitshim_format::ObjectKind`] as u8 plus 1, 0 unknown).
    Tracked {
        since: u64,
        object_id: u64,
        kind: u8,
    },
    /// Blocked elsewhere: in system call `syscall` (-1: outside one) on `what`.
    Blocked {
        since: u64,
        syscall: i32,
        what: String,
    },
    /// Stopped (job control or a tracer).
    Stopped { since: u64 },
    /// The thread ended at `at`.
    Ended { at: u64 },
}

impl EndState {
    /// `running`, `tracked_wait`, `blocked`, `stopped`, `ended` (JSON `state_at_end`).
    pub fn name(&self) -> &'static str {
        match self {
            EndState::Running { .. } => "running",
            EndState::Tracked { .. } => "tracked_wait",
            EndState::Blocked { .. } => "blocked",
            EndState::Stopped { .. } => "stopped",
            EndState::Ended { .. } => "ended",
        }
    }

    /// Since when it was in it (the look that first saw it), or when it ended.
    pub fn since(&self) -> u64 {
        match self {
            EndState::Running { since }
            | EndState::Tracked { since, .. }
            | EndState::Blocked { since, .. }
            | EndState::Stopped { since } => *since,
            EndState::Ended { at } => *at,
        }
    }

    fn of(current: &(u8, i32, String, u64, u64, u8)) -> Option<EndState> {
        let (state, syscall, what, since, object_id, kind) = current;
        let since = *since;
        Some(match *state {
            thread_state::RUNNING => EndState::Running { since },
            thread_state::TRACKED_WAIT => EndState::Tracked {
                since,
                object_id: *object_id,
                kind: *kind,
            },
            thread_state::BLOCKED => EndState::Blocked {
                since,
                syscall: *syscall,
                what: what.clone(),
            },
            thread_state::STOPPED => EndState::Stopped { since },
            _ => return None,
        })
    }
}

impl ThreadStates {
    /// Time blocked outside tracked waits, sampled.
    pub fn other_ns(&self) -> u64 {
        self.blocked
            .iter()
            .map(|b| b.ns)
            .fold(0, u64::saturating_add)
    }

    /// The state seen last ends at `until`: its span is counted (a blocked one also in
    /// `resources`), less the time the process was stopped in it.
    fn close(&mut self, until: u64, resources: &mut Resources, stops: &Stops) {
        let Some((state, syscall, what, since, _, _)) = self.current.take() else {
            return;
        };
        let until = self.exited.map_or(until, |e| e.min(until));
        let ns = until
            .saturating_sub(since)
            .saturating_sub(stops.within(since, until));
        match state {
            thread_state::TRACKED_WAIT => self.tracked_ns = self.tracked_ns.saturating_add(ns),
            thread_state::BLOCKED => {
                resources.add(syscall, &what, since, ns);
                if let Some(b) = self
                    .blocked
                    .iter_mut()
                    .find(|b| b.syscall == syscall && b.what == what)
                {
                    b.ns = b.ns.saturating_add(ns);
                } else if self.blocked.len() < MAX_BLOCKED_KINDS {
                    self.blocked.push(BlockedIn { syscall, what, ns });
                } else if let Some(b) = self.blocked.iter_mut().find(|b| b.syscall == -2) {
                    b.ns = b.ns.saturating_add(ns);
                } else {
                    // The last kind makes room for the sum of the rest.
                    let last = self.blocked.last_mut().expect("full");
                    *last = BlockedIn {
                        syscall: -2,
                        what: String::new(),
                        ns: last.ns.saturating_add(ns),
                    };
                }
            }
            _ => {}
        }
    }
}

/// The waits outside tracked objects of the whole run, by resource (system call and what it
/// waited on), as the sampler saw them: a span blocked in one call on one thing is one wait, so
/// a thread that woke and blocked again in the same call between two looks counts once (`waits`
/// is a lower bound, `max_ns` an upper one, within an interval).
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub by: BTreeMap<(i32, String), ResourceWaits>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceWaits {
    pub ns: u64,
    pub max_ns: u64,
    pub waits: u64,
    /// Where in their code the threads waited (`BlockedChain` records: chains scanned from the
    /// blocked threads' stacks, as the policy asked), with how many waits each, most first
    /// once the log is read.
    pub chains: Vec<(u32, u64)>,
    /// Waits whose chain was past the [`MAX_CHAINS_PER_RESOURCE`] kept.
    pub other_chains: u64,
    /// When the first wait on it began (the look that saw it).
    pub first_ns: Option<u64>,
    /// Threads that waited on it and were taken out of [`States::threads`] since (ended, put
    /// aside by the model).
    pub threads_taken_out: u32,
}

impl Resources {
    /// The entry of one resource, or of the sum of the others once [`MAX_RESOURCES`] are kept.
    fn entry(&mut self, syscall: i32, what: &str) -> &mut ResourceWaits {
        let key = if self.by.len() < MAX_RESOURCES || self.by.contains_key(&(syscall, what.into()))
        {
            (syscall, what.to_string())
        } else {
            (-2, String::new())
        };
        self.by.entry(key).or_default()
    }

    /// A chain of a wait on one resource.
    fn chain(&mut self, syscall: i32, what: &str, chain_id: u32) {
        let r = self.entry(syscall, what);
        if let Some(c) = r.chains.iter_mut().find(|c| c.0 == chain_id) {
            c.1 += 1;
        } else if r.chains.len() < MAX_CHAINS_PER_RESOURCE {
            r.chains.push((chain_id, 1));
        } else {
            r.other_chains += 1;
        }
    }

    fn add(&mut self, syscall: i32, what: &str, since: u64, ns: u64) {
        let key = if self.by.len() < MAX_RESOURCES || self.by.contains_key(&(syscall, what.into()))
        {
            (syscall, what.to_string())
        } else {
            (-2, String::new())
        };
        let r = self.by.entry(key).or_default();
        r.first_ns = Some(r.first_ns.map_or(since, |f| f.min(since)));
        r.ns = r.ns.saturating_add(ns);
        r.max_ns = r.max_ns.max(ns);
        r.waits += 1;
    }
}

/// One resource's row: its waits, and how many threads it kept waiting.
#[derive(Debug, Clone)]
pub struct ResourceRow<'m> {
    pub syscall: i32,
    pub what: &'m str,
    pub w: &'m ResourceWaits,
    pub threads: u32,
}

/// The resources threads waited on, most waited first. A thread counts for a resource when its
/// own kinds list it (past its 16 kinds, it counts for the sum).
pub fn resource_rows(st: &States) -> Vec<ResourceRow<'_>> {
    let mut rows: Vec<ResourceRow<'_>> = st
        .resources
        .by
        .iter()
        .map(|((syscall, what), w)| ResourceRow {
            syscall: *syscall,
            what,
            w,
            threads: (st
                .threads
                .values()
                .filter(|t| {
                    t.blocked
                        .iter()
                        .any(|b| b.syscall == *syscall && b.what == *what)
                })
                .count() as u32)
                .saturating_add(w.threads_taken_out),
        })
        .collect();
    rows.sort_by(|a, b| {
        b.w.ns
            .cmp(&a.w.ns)
            .then(a.syscall.cmp(&b.syscall))
            .then(a.what.cmp(b.what))
    });
    rows
}

/// What threads waited for, for lost parallelism.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Waited {
    /// A tracked object, by its id in the log (0: not in the log).
    Object(u64),
    /// A system call, and what it waited on.
    Blocked(i32, String),
    /// Ready to run, waiting for a CPU (the machine's other work had them).
    Cpu,
    /// Beyond [`MAX_LOST_KEYS`] distinct ones.
    Other,
}

/// Distinct things lost parallelism is attributed to.
pub const MAX_LOST_KEYS: usize = 1000;

/// Lost parallelism (seed 000): CPU time the program left unused while its threads waited.
/// Per interval between two samples: the program's capacity (its CPUs × the interval) less the
/// CPU time its threads used is what it left unused; of that, up to the time its threads spent
/// waiting is lost to waiting, shared among what they waited for in proportion to their
/// waiting time. A thread's waiting time in an interval is exact, from the kernel's figures:
/// the interval less its time on a CPU is time ready for one (its run delay: lost to a CPU) and
/// time asleep, lost to what the thread was seen waiting on at the start of the interval or, if
/// it was running then, at its end (asleep with no wait seen at either end: not counted). Joins
/// are left out: a thread joining another has nothing else to do.
#[derive(Debug, Clone, Default)]
pub struct Lost {
    /// CPUs × time covered by the samples.
    pub capacity_ns: u64,
    /// CPU time the program's threads used in it.
    pub used_ns: u64,
    pub lost_ns: u64,
    pub by: BTreeMap<Waited, u64>,
}

impl Lost {
    /// What it was lost to, most first.
    pub fn ranked(&self) -> Vec<(&Waited, u64)> {
        let mut v: Vec<(&Waited, u64)> = self.by.iter().map(|(k, &n)| (k, n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }
}

/// The spans in which the whole process was stopped (SIGSTOP, a terminal's job control, a
/// debugger, a cgroup freezer), as the samples show them: a stop stops the sampler's thread
/// too, so it is a stretch of at least [`STOP_GAP_NS`] without any look in which the threads
/// did not run. Each span runs from the sampler's last record before it to its first after:
/// the stop itself began up to one CPU period (100 ms, or the sampling interval) later, so its
/// length is an estimate to within that.
#[derive(Debug, Clone, Default)]
pub struct Stops {
    /// `(from, to)`, in order, the first [`MAX_STOPS`].
    pub spans: Vec<(u64, u64)>,
    pub count: u64,
    pub total_ns: u64,
    /// Per tracked object: time of the stops during which a thread was seen in a wait on it
    /// (its state at the look before the stop), at most [`MAX_LOST_KEYS`] objects.
    pub in_waits: BTreeMap<u64, u64>,
}

impl Stops {
    /// How much of `[a, b)` the listed stops cover.
    pub fn within(&self, a: u64, b: u64) -> u64 {
        if b <= a {
            return 0;
        }
        let first = self.spans.partition_point(|s| s.1 <= a);
        self.spans[first..]
            .iter()
            .take_while(|s| s.0 < b)
            .map(|s| s.1.min(b).saturating_sub(s.0.max(a)))
            .fold(0, u64::saturating_add)
    }
}

/// Everything the sampler wrote in one log.
#[derive(Debug, Clone, Default)]
pub struct States {
    pub lost: Lost,
    last_sample_ns: Option<u64>,
    /// The longest interval the samples were taken at (the sampler stretches its interval when
    /// looks would cost more than its budget): what a sampled wait's ends are known to within.
    pub interval_ns: u64,
    pub samples: u64,
    pub threads: BTreeMap<u32, ThreadStates>,
    /// The waits outside tracked objects, by resource, over all threads.
    pub resources: Resources,
    pub threads_cut: u64,
    /// Most threads the sampler could not follow at once (descriptor budget).
    pub unsampled: u32,
    /// Chains of blocked threads counted for a resource ([`States::blocked_chain`]).
    pub blocked_chains: u64,
    /// CPUs: their number, idle and iowait time summed over them, and the time covered (per
    /// CPU) by the samples.
    pub cpus: usize,
    pub idle_ns: u64,
    pub iowait_ns: u64,
    /// Each CPU's idle and iowait time, by CPU number (the first [`MAX_CPUS`]).
    pub per_cpu: Vec<(u64, u64)>,
    pub cpu_sampled_ns: u64,
    last_cpu_ns: Option<u64>,
    /// CPU time of threads that ended since the last sample, run after the sampler's last look
    /// at them: used in the next interval.
    pending_used_ns: u64,
    /// Untracked futex words that lie inside an object of the log ([`States::name_futex_words`]):
    /// word → (object id, the word's offset in it).
    pub futex_objects: BTreeMap<u64, (u64, u64)>,
    /// Whether a thread that ended keeps its last state for the interval it ended in.
    exits_pending: bool,
    /// Threads that ended since the last sample: their last state is counted to their end
    /// when a later sample shows the sampler still looked then ([`States::finish`] otherwise).
    exits_to_close: Vec<u32>,
    /// The first sample of the threads.
    first_sample_ns: Option<u64>,
    /// The span the sampled figures hold over, set by [`States::finish`]: from the first sample
    /// to the end of the log, or to the sampler's last record when its records stop well before
    /// the run's end (it could no longer read `/proc`: a sandbox, a chroot, descriptors closed
    /// under it, a privilege change made the files unreadable).
    pub sampled_from_ns: u64,
    pub sampled_until_ns: u64,
    /// Whether that span reaches the end of the run (or of the log, for a run without an end
    /// record): false when the figures cover only its beginning.
    pub sampled_to_end: bool,
    /// When the whole process was stopped: not counted as waiting.
    pub stops: Stops,
    /// The latest look's thread sample, with the records of the same look after it, held
    /// until it is known whether the look also wrote the CPUs' figures: only then can a long
    /// pause before it be told to be the sampler's own (a stop of the process) rather than a
    /// stretch in which no thread changed.
    pending: Option<Pending>,
}

/// A look's records held back ([`States::pending`]).
#[derive(Debug, Clone)]
struct Pending {
    s: ThreadSamples,
    ncpus: u32,
    after: Vec<AfterSample>,
}

/// A record of a look written after its thread sample.
#[derive(Debug, Clone)]
enum AfterSample {
    Chain(BlockedChain),
    Switches(ThreadSwitches),
}

/// Records held after a pending thread sample at most (a look writes a few chains).
const MAX_HELD: usize = 1024;

impl States {
    pub fn any(&self) -> bool {
        self.samples > 0
    }

    /// Adds a sample of the threads of a program with `ncpus` CPUs (held until the next record
    /// says whether its look also wrote the CPUs' figures).
    pub fn add_threads(&mut self, s: ThreadSamples, ncpus: u32) {
        self.flush();
        self.pending = Some(Pending {
            s,
            ncpus,
            after: Vec::new(),
        });
    }

    /// Folds in the held look, if any: `cpu_look` when the look wrote the CPUs' figures too.
    fn flush_with(&mut self, cpu_look: bool) {
        let Some(p) = self.pending.take() else {
            return;
        };
        self.apply_threads(p.s, p.ncpus, cpu_look);
        for a in p.after {
            match a {
                AfterSample::Chain(c) => self.apply_chain(&c),
                AfterSample::Switches(x) => self.apply_switches(x),
            }
        }
    }

    /// When the sampler last looked at the threads (0: never).
    pub fn last_look(&self) -> u64 {
        self.last_sample_ns.unwrap_or(0)
    }

    /// Takes out what was seen of thread `tid`, which ended (or is put aside) by `at`: its last
    /// state is counted to its end; a later thread with its tid starts afresh. Resources keep
    /// the count of the threads taken out that waited on them.
    pub fn take_thread(&mut self, tid: u32, at: u64) -> Option<ThreadStates> {
        self.flush();
        let mut t = self.threads.remove(&tid)?;
        self.exits_to_close.retain(|&x| x != tid);
        if t.exited.is_none() {
            t.end_state = t.current.as_ref().and_then(EndState::of);
        }
        t.close(at, &mut self.resources, &self.stops);
        t.before_exit = None;
        t.blocked.sort_by_key(|b| std::cmp::Reverse(b.ns));
        for b in &t.blocked {
            if let Some(r) = self.resources.by.get_mut(&(b.syscall, b.what.clone())) {
                r.threads_taken_out = r.threads_taken_out.saturating_add(1);
            }
        }
        Some(t)
    }

    /// Folds in what is held: every record read so far counts.
    pub fn flush(&mut self) {
        self.flush_with(false);
    }

    /// Whether a record of time `ns` belongs to the held look (and there is room to hold it).
    fn holds(&self, ns: u64) -> bool {
        self.pending
            .as_ref()
            .is_some_and(|p| p.s.ns == ns && p.after.len() < MAX_HELD)
    }

    fn apply_threads(&mut self, mut s: ThreadSamples, ncpus: u32, cpu_look: bool) {
        self.samples += 1;
        // A thread that wrote its totals as it ended: a look just before its end adds nothing
        // past them (its totals already counted it).
        for e in &mut s.threads {
            if let Some(t) = self.threads.get(&e.tid) {
                if let Some((cpu, delay, slices)) = t.totals {
                    e.on_cpu_ns = e.on_cpu_ns.min(cpu.saturating_sub(t.on_cpu_ns));
                    e.run_delay_ns = e.run_delay_ns.min(delay.saturating_sub(t.run_delay_ns));
                    let left = slices.saturating_sub(t.timeslices);
                    e.timeslices = u64::from(e.timeslices).min(left) as u32;
                }
            }
        }
        // A thread in `restart_syscall` goes on with the call it was seen in before (a stop
        // or a handler interrupted a call with a deadline): the same wait.
        for e in &mut s.threads {
            if e.syscall != SYS_RESTART_SYSCALL {
                continue;
            }
            // A look that saw the thread stopped in between: the wait before the stop.
            let before = self.threads.get(&e.tid).and_then(|t| match &t.current {
                Some(c) if c.0 == thread_state::STOPPED => {
                    t.before_stop.as_ref().map(|b| (&b.0, &b.1, &b.2))
                }
                c => c.as_ref().map(|c| (&c.0, &c.1, &c.2)),
            });
            if let Some((state, syscall, what)) = before {
                if *state == e.state
                    && matches!(*state, thread_state::BLOCKED | thread_state::TRACKED_WAIT)
                {
                    e.syscall = *syscall;
                    e.what.clone_from(what);
                }
            }
        }
        let activity = s
            .threads
            .iter()
            .map(|e| e.on_cpu_ns.saturating_add(e.run_delay_ns))
            .fold(0, u64::saturating_add);
        if cpu_look {
            self.note_stop(s.ns, activity);
        }
        self.first_sample_ns.get_or_insert(s.ns);
        self.account_lost(&s, ncpus);
        // The sampler looked after these threads ended: their last states lasted to their end.
        for tid in std::mem::take(&mut self.exits_to_close) {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.close(s.ns, &mut self.resources, &self.stops);
            }
        }
        if self.exits_pending {
            self.exits_pending = false;
            for t in self.threads.values_mut() {
                if t.before_exit.is_some() {
                    if t.exited.is_some_and(|x| x <= s.ns) {
                        t.before_exit = None;
                    } else {
                        self.exits_pending = true;
                    }
                }
            }
        }
        self.interval_ns = self.interval_ns.max(s.interval_ns);
        self.unsampled = self.unsampled.max(s.unsampled);
        for e in s.threads {
            if !self.threads.contains_key(&e.tid) && self.threads.len() >= MAX_THREADS {
                self.threads_cut += 1;
                continue;
            }
            let t = self.threads.entry(e.tid).or_default();
            t.sampled = true;
            t.on_cpu_ns = t.on_cpu_ns.saturating_add(e.on_cpu_ns);
            t.run_delay_ns = t.run_delay_ns.saturating_add(e.run_delay_ns);
            t.timeslices = t.timeslices.saturating_add(u64::from(e.timeslices));
            let mut what = e.what;
            if what.len() > MAX_WHAT {
                let mut end = MAX_WHAT;
                while !what.is_char_boundary(end) {
                    end -= 1;
                }
                what.truncate(end);
            }
            // The shim names what a blocked thread waits on only when the wait begins: a new
            // name in the same call is a new wait (another pipe, another path).
            let same = t.current.as_ref().is_some_and(|(st, sys, was, _, obj, _)| {
                *st == e.state
                    && (e.state != thread_state::BLOCKED
                        || (*sys == e.syscall && (what.is_empty() || *was == what)))
                    && *obj == e.object_id
            });
            if !same {
                if e.state == thread_state::STOPPED {
                    t.before_stop = t
                        .current
                        .as_ref()
                        .filter(|c| {
                            matches!(c.0, thread_state::BLOCKED | thread_state::TRACKED_WAIT)
                        })
                        .map(|c| (c.0, c.1, c.2.clone()));
                }
                t.close(s.ns, &mut self.resources, &self.stops);
                t.current = Some((e.state, e.syscall, what, s.ns, e.object_id, e.waiting_kind));
            }
        }
    }

    fn account_lost(&mut self, s: &ThreadSamples, ncpus: u32) {
        let Some(last) = self.last_sample_ns.replace(s.ns) else {
            return;
        };
        // Time the process was stopped is neither capacity nor waiting.
        let dt =
            s.ns.saturating_sub(last)
                .saturating_sub(self.stops.within(last, s.ns));
        if dt == 0 {
            return;
        }
        let used = s.threads.iter().map(|e| e.on_cpu_ns).fold(
            std::mem::take(&mut self.pending_used_ns),
            u64::saturating_add,
        );
        let capacity = dt.saturating_mul(u64::from(ncpus.max(1)));
        let unused = capacity.saturating_sub(used);
        let l = &mut self.lost;
        l.capacity_ns = l.capacity_ns.saturating_add(capacity);
        l.used_ns = l.used_ns.saturating_add(used);
        // What a state waits on (None: not a wait that counts).
        let waited = |state: u8, sys: i32, what: &str, obj: u64, kind: u8| -> Option<Waited> {
            match state {
                // A join waits for work to end, not for a CPU's worth of work to be handed
                // over: the joiner has nothing to do.
                thread_state::TRACKED_WAIT
                    if kind == waitshim_format::ObjectKind::Thread as u8 + 1 =>
                {
                    None
                }
                thread_state::TRACKED_WAIT => Some(Waited::Object(obj)),
                thread_state::BLOCKED => Some(Waited::Blocked(sys, what.to_string())),
                _ => None,
            }
        };
        let mut waiting: BTreeMap<Waited, u64> = BTreeMap::new();
        let mut add = |w: Waited, ns: u64| {
            if ns > 0 {
                let n = waiting.entry(w).or_default();
                *n = n.saturating_add(ns);
            }
        };
        let listed: BTreeMap<u32, &waitshim_format::ThreadState> =
            s.threads.iter().map(|e| (e.tid, e)).collect();
        for (tid, t) in &self.threads {
            let e = listed.get(tid);
            let (cpu, delay) = e.map_or((0, 0), |e| (e.on_cpu_ns, e.run_delay_ns));
            add(Waited::Cpu, delay);
            // Its part of the interval: to its end, if it ended in it.
            let until = t.exited.map_or(s.ns, |x| x.min(s.ns));
            let span = until
                .saturating_sub(last)
                .saturating_sub(self.stops.within(last, until));
            let asleep = span.saturating_sub(cpu).saturating_sub(delay);
            // A thread that ended in the interval: the state it ended in.
            let current = t.current.as_ref().or(t.before_exit.as_ref());
            let before = current
                .and_then(|(st, sys, what, _, obj, kind)| waited(*st, *sys, what, *obj, *kind));
            let was_running = current.is_some_and(|c| c.0 == thread_state::RUNNING);
            let after = e.and_then(|e| {
                let what = t
                    .current
                    .as_ref()
                    .filter(|c| c.1 == e.syscall && e.what.is_empty())
                    .map_or(e.what.as_str(), |c| c.2.as_str());
                waited(e.state, e.syscall, what, e.object_id, e.waiting_kind)
            });
            match (before, after) {
                (Some(w), _) => add(w, asleep),
                (None, Some(w)) if was_running => add(w, asleep),
                _ => {}
            }
        }
        // Threads first seen in this sample: their wait for a CPU.
        for e in &s.threads {
            if !self.threads.contains_key(&e.tid) {
                add(Waited::Cpu, e.run_delay_ns);
            }
        }
        let total = waiting.values().fold(0u64, |a, &v| a.saturating_add(v));
        if total == 0 || unused == 0 {
            return;
        }
        let lost = unused.min(total);
        l.lost_ns = l.lost_ns.saturating_add(lost);
        for (w, ns) in waiting {
            let share = (u128::from(lost) * u128::from(ns) / u128::from(total)) as u64;
            let key = if l.by.contains_key(&w) || l.by.len() < MAX_LOST_KEYS {
                w
            } else {
                Waited::Other
            };
            let n = l.by.entry(key).or_default();
            *n = n.saturating_add(share);
        }
    }

    pub fn add_cpus(&mut self, c: CpuSample) {
        if self.pending.as_ref().is_some_and(|p| p.s.ns == c.ns) {
            self.flush_with(true);
        } else {
            // A look with no thread record: nothing of the program changed.
            self.flush();
            self.note_stop(c.ns, 0);
        }
        self.cpus = self.cpus.max(c.idle_ns.len());
        // The first record's figures cover a span that began at a read the log does not date
        // (the shim writes a record from its second read of /proc/stat on; since 2026-11 its
        // first is all zeros): counted, it made idle exceed the span it is divided by (111 %).
        let Some(last) = self.last_cpu_ns.replace(c.ns) else {
            return;
        };
        let n = c.idle_ns.len().min(MAX_CPUS);
        if self.per_cpu.len() < n {
            self.per_cpu.resize(n, (0, 0));
        }
        for (i, slot) in self.per_cpu.iter_mut().enumerate().take(n) {
            slot.0 = slot.0.saturating_add(c.idle_ns[i]);
            slot.1 = slot
                .1
                .saturating_add(c.iowait_ns.get(i).copied().unwrap_or(0));
        }
        self.idle_ns = c
            .idle_ns
            .iter()
            .fold(self.idle_ns, |a, &v| a.saturating_add(v));
        self.iowait_ns = c
            .iowait_ns
            .iter()
            .fold(self.iowait_ns, |a, &v| a.saturating_add(v));
        self.cpu_sampled_ns = self
            .cpu_sampled_ns
            .saturating_add(c.ns.saturating_sub(last));
    }

    /// A look at `now` that wrote the CPUs' figures (which the sampler does at least every
    /// 100 ms, so a pause between two of its records is its own), the program's threads having
    /// run or waited for a CPU `activity` since its previous record: after a long stretch
    /// without any look in which they did not run, the whole process was stopped ([`Stops`]).
    fn note_stop(&mut self, now: u64, activity: u64) {
        // Before its first CPU record, the sampler read the CPUs' baseline at its first look.
        let Some(from) = self
            .last_sample_ns
            .max(self.last_cpu_ns.or(self.first_sample_ns))
        else {
            return;
        };
        let quiet = now.saturating_sub(from);
        if quiet <= STOP_GAP_NS.max(self.interval_ns.saturating_mul(4))
            || activity.saturating_mul(4) >= quiet
        {
            return;
        }
        let st = &mut self.stops;
        st.count += 1;
        st.total_ns = st.total_ns.saturating_add(quiet);
        if st.spans.len() < MAX_STOPS && st.spans.last().is_none_or(|l| l.1 <= from) {
            st.spans.push((from, now));
        }
        // The waits the threads were seen in at the last look went on through the stop (a
        // thread that ended since ended after it).
        for t in self.threads.values() {
            if t.exited.is_some_and(|x| x <= from) {
                continue;
            }
            if let Some((thread_state::TRACKED_WAIT, _, _, _, object_id, _)) = &t.current {
                if st.in_waits.len() < MAX_LOST_KEYS || st.in_waits.contains_key(object_id) {
                    let n = st.in_waits.entry(*object_id).or_default();
                    *n = n.saturating_add(quiet);
                }
            }
        }
    }

    /// A thread's totals at its end: what it did after the sampler's last look is added (to
    /// it, and to the CPU time used in the next interval).
    pub fn thread_totals(&mut self, x: ThreadTotals) {
        self.flush();
        if !self.threads.contains_key(&x.tid) && self.threads.len() >= MAX_THREADS {
            self.threads_cut += 1;
            return;
        }
        let t = self.threads.entry(x.tid).or_default();
        let cpu = x.on_cpu_ns.saturating_sub(t.on_cpu_ns);
        let slices = x.timeslices.saturating_sub(t.timeslices);
        t.on_cpu_ns = t.on_cpu_ns.max(x.on_cpu_ns);
        t.run_delay_ns = t.run_delay_ns.max(x.run_delay_ns);
        t.timeslices = t.timeslices.max(x.timeslices);
        if let Some(mean) = cpu.checked_div(slices) {
            t.longest_slice_ns = t.longest_slice_ns.max(mean);
        }
        t.voluntary = t.voluntary.max(x.voluntary);
        t.involuntary = t.involuntary.max(x.involuntary);
        t.switches_known = true;
        t.sampled = true;
        t.totals = Some((x.on_cpu_ns, x.run_delay_ns, x.timeslices));
        self.pending_used_ns = self.pending_used_ns.saturating_add(cpu);
    }

    /// Threads' context switches so far and longest timeslices (totals: the latest holds).
    pub fn thread_switches(&mut self, x: ThreadSwitches) {
        if self.holds(x.ns) {
            if let Some(p) = &mut self.pending {
                p.after.push(AfterSample::Switches(x));
            }
            return;
        }
        self.flush();
        self.apply_switches(x);
    }

    fn apply_switches(&mut self, x: ThreadSwitches) {
        for c in x.threads {
            if !self.threads.contains_key(&c.tid) && self.threads.len() >= MAX_THREADS {
                self.threads_cut += 1;
                continue;
            }
            let t = self.threads.entry(c.tid).or_default();
            t.voluntary = t.voluntary.max(c.voluntary);
            t.involuntary = t.involuntary.max(c.involuntary);
            t.longest_slice_ns = t.longest_slice_ns.max(c.longest_slice_ns);
            t.switches_known = true;
        }
    }

    /// Where a blocked thread was in its code (the policy asked for its chain): counted for the
    /// resource of the wait its latest entry began, when that is the call the chain was taken
    /// in (a chain written after the thread's state changed is left out).
    pub fn blocked_chain(&mut self, c: &BlockedChain) {
        if self.holds(c.ns) {
            if let Some(p) = &mut self.pending {
                p.after.push(AfterSample::Chain(c.clone()));
            }
            return;
        }
        self.flush();
        self.apply_chain(c);
    }

    fn apply_chain(&mut self, c: &BlockedChain) {
        let Some(t) = self.threads.get(&c.tid) else {
            return;
        };
        if let Some((thread_state::BLOCKED, syscall, what, since, _, _)) = &t.current {
            if *syscall == c.syscall && *since <= c.ns {
                let what = what.clone();
                self.resources.chain(c.syscall, &what, c.chain_id);
                self.blocked_chains += 1;
            }
        }
    }

    /// A thread ended at `ns`: its last state lasted until then, as far as the samples reach
    /// (it is counted at the next sample, or at the end of the sampled span).
    pub fn thread_exit(&mut self, tid: u32, ns: u64) {
        self.flush();
        if !self.threads.contains_key(&tid) && self.threads.len() >= MAX_THREADS {
            return;
        }
        let t = self.threads.entry(tid).or_default();
        t.before_exit = t.current.clone();
        self.exits_pending |= t.before_exit.is_some();
        if t.current.is_some() && !self.exits_to_close.contains(&tid) {
            self.exits_to_close.push(tid);
        }
        t.exited = Some(ns);
        t.end_state = Some(EndState::Ended { at: ns });
    }

    /// The log ends at `end`, with the run's end record (`ended`) or without: every state still
    /// open lasted until then, or until the sampler's last record if those stopped well before
    /// (then the figures hold over the beginning of the run only, and say so); kinds most first.
    pub fn finish(&mut self, end: u64, ended: bool) {
        self.flush();
        // With an end record, the sampler's last look was at the exit; without one, its CPU
        // figures show it still looked while no thread changed.
        let last = if ended {
            self.last_sample_ns
        } else {
            self.last_sample_ns.max(self.last_cpu_ns)
        };
        let slack = SAMPLED_TO_END_SLACK_NS.max(self.interval_ns.saturating_mul(2));
        let until = match last {
            Some(l) if end.saturating_sub(l) > slack => l,
            _ => end,
        };
        self.sampled_from_ns = self.first_sample_ns.unwrap_or(until).min(until);
        self.sampled_until_ns = until;
        self.sampled_to_end = until == end;
        self.exits_to_close.clear();
        for t in self.threads.values_mut() {
            if t.exited.is_none() {
                t.end_state = t.current.as_ref().and_then(EndState::of);
            }
            t.close(until, &mut self.resources, &self.stops);
            t.blocked.sort_by_key(|b| std::cmp::Reverse(b.ns));
        }
        for r in self.resources.by.values_mut() {
            r.chains.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        }
    }
}

/// One thread's row in the report: its life and how it spent it.
#[derive(Debug, Clone)]
pub struct Row<'m> {
    pub tid: u32,
    /// Which of the threads with that tid it is ([`crate::model::Thread::nth`]; 0: not known).
    pub nth: u32,
    /// The thread's `1234 (2nd)`: its tid, and which of the threads with that tid it is.
    pub tid_text: String,
    pub name: Option<&'m str>,
    pub life_ns: u64,
    pub s: &'m ThreadStates,
}

impl Row<'_> {
    /// Time not spent running: ready for a CPU, or waiting.
    pub fn not_running_ns(&self) -> u64 {
        self.s
            .run_delay_ns
            .saturating_add(self.s.tracked_ns)
            .saturating_add(self.s.other_ns())
    }
}

/// Every sampled thread with its life (from its start, or the run's, to its exit, or the
/// log's end), the ones that spent most time not running first: those the model has now and
/// the ended ones it put aside with a row (the others are in [`crate::model::Model::ended_sum`]).
pub fn rows(m: &crate::model::Model) -> Vec<Row<'_>> {
    let start = m.start_ns();
    let end = m.run_end.as_ref().map_or(m.last_ns, |e| e.ns);
    fn row<'m>(
        tid: u32,
        t: Option<&'m crate::model::Thread>,
        s: &'m ThreadStates,
        (start, end): (u64, u64),
    ) -> Row<'m> {
        let from = t.and_then(|t| t.start_ns).unwrap_or(start).max(start);
        let to = t.and_then(|t| t.exit_ns).unwrap_or(end).min(end);
        Row {
            tid,
            nth: t.map_or(0, |t| t.nth),
            tid_text: t.map_or_else(|| tid.to_string(), |t| t.tid_text()),
            name: t.and_then(|t| t.name.as_deref()),
            life_ns: to.saturating_sub(from),
            s,
        }
    }
    let ended = m
        .ended_threads
        .iter()
        .filter_map(|e| Some((e, e.states.as_ref().filter(|s| s.sampled)?)))
        .map(|(e, s)| row(e.thread.tid, Some(&e.thread), s, (start, end)));
    let mut rows: Vec<Row<'_>> = m
        .states
        .threads
        .iter()
        .filter(|(_, s)| s.sampled)
        .map(|(&tid, s)| row(tid, m.threads.get(&tid), s, (start, end)))
        .chain(ended)
        .collect();
    rows.sort_by(|a, b| {
        b.not_running_ns()
            .cmp(&a.not_running_ns())
            .then((a.tid, a.nth).cmp(&(b.tid, b.nth)))
    });
    rows
}

/// The name of a system call by its x86-64 number, for the calls threads block in; -1 and -2
/// are the states' own (asleep outside a call; several calls summed).
pub fn syscall_name(nr: i32) -> Option<&'static str> {
    match nr {
        -1 => Some("(asleep outside a system call)"),
        -2 => Some("(other calls)"),
        SYS_RESTART_SYSCALL => Some("restart_syscall"),
        _ => waitshim_format::syscalls::name(nr),
    }
}

/// x86-64's `futex` system call (the numbers the sampler writes).
pub const SYS_FUTEX: i32 = 202;
/// Distinct untracked futex words matched against the log's objects at most.
pub const MAX_FUTEX_WORDS: usize = 100_000;

/// The address of the futex word a thread blocked on outside the shim's calls, when the sampler
/// named it so (`untracked futex word 0x...`).
pub fn futex_word(syscall: i32, what: &str) -> Option<u64> {
    if syscall != SYS_FUTEX {
        return None;
    }
    let hex = what.strip_prefix("untracked futex word 0x")?;
    let end = hex
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(hex.len());
    u64::from_str_radix(hex.get(..end)?, 16).ok()
}

/// An object of the log a futex word may lie in: `(object id, address, size, created, destroyed)`.
pub type FutexCandidate = (u64, u64, u64, u64, Option<u64>);

impl States {
    /// The untracked futex words threads blocked on, each with when the first wait on it was
    /// seen (None: not known, a word past the resources kept).
    fn futex_words(&self) -> BTreeMap<u64, Option<u64>> {
        let mut words: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        let mut note = |syscall: i32, what: &str, when: Option<u64>| {
            let Some(w) = futex_word(syscall, what) else {
                return;
            };
            if words.len() >= MAX_FUTEX_WORDS && !words.contains_key(&w) {
                return;
            }
            let e = words.entry(w).or_insert(when);
            *e = match (*e, when) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        };
        for ((syscall, what), r) in &self.resources.by {
            note(*syscall, what, r.first_ns);
        }
        for k in self.lost.by.keys() {
            if let Waited::Blocked(syscall, what) = k {
                note(*syscall, what, None);
            }
        }
        for t in self.threads.values() {
            for b in &t.blocked {
                note(b.syscall, &b.what, None);
            }
            if let Some(EndState::Blocked {
                syscall,
                what,
                since,
            }) = &t.end_state
            {
                note(*syscall, what, Some(*since));
            }
        }
        words
    }

    /// Names the untracked futex words that lie inside an object of the log
    /// ([`States::futex_objects`]): a thread that waited on a mutex's word with a raw `futex`
    /// call, outside the pthread functions the shim sees, waited on that mutex. Of the objects
    /// whose bytes hold the word and that were not destroyed before its first wait was seen, the
    /// one created last before it (an address reused by a later object is not the same object),
    /// else the one created first after it (first seen in a lock call after the wait began).
    pub fn name_futex_words(&mut self, objects: impl Iterator<Item = FutexCandidate>) {
        let words = self.futex_words();
        if words.is_empty() {
            return;
        }
        // word → (better is greater, object id, offset)
        let mut best: BTreeMap<u64, ((bool, u64), u64, u64)> = BTreeMap::new();
        for (id, addr, size, created, destroyed) in objects {
            if size == 0 {
                continue;
            }
            for (&word, &when) in words.range(addr..addr.saturating_add(size)) {
                if let (Some(d), Some(w)) = (destroyed, when) {
                    if d < w {
                        continue;
                    }
                }
                let before = when.is_none_or(|w| created <= w);
                let rank = (before, if before { created } else { u64::MAX - created });
                let e = best.entry(word).or_insert((rank, id, word - addr));
                if rank > e.0 || (rank == e.0 && id < e.1) {
                    *e = (rank, id, word - addr);
                }
            }
        }
        self.futex_objects = best
            .into_iter()
            .map(|(w, (_, id, off))| (w, (id, off)))
            .collect();
    }

    /// The object whose word a wait outside the shim's calls was on: (object id, offset).
    pub fn futex_object(&self, syscall: i32, what: &str) -> Option<(u64, u64)> {
        self.futex_objects.get(&futex_word(syscall, what)?).copied()
    }

    /// The time threads were seen blocked on futex words outside the shim's calls and outside
    /// every object of the log (Go's runtime, futexes called by inline system calls): waits the
    /// wrappers could not attribute.
    pub fn unattributed_futex_ns(&self) -> u64 {
        self.resources
            .by
            .iter()
            .filter(|((syscall, what), _)| {
                futex_word(*syscall, what).is_some() && self.futex_object(*syscall, what).is_none()
            })
            .fold(0u64, |a, (_, w)| a.saturating_add(w.ns))
    }
}

/// `read on pipe:[123]`, `futex`, `syscall 999`.
pub fn blocked_text(b: &BlockedIn) -> String {
    if b.syscall == SYS_RESTART_SYSCALL {
        // Seen first in it: the call it resumes is not known.
        return "restart_syscall (resuming, after a stop or a signal handler, a call with a \
                deadline it was in before the sampler saw it)"
            .into();
    }
    let call =
        syscall_name(b.syscall).map_or_else(|| format!("syscall {}", b.syscall), str::to_string);
    if b.what.is_empty() {
        call
    } else {
        format!("{call} on {}", crate::plain::escaped(&b.what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitshim_format::ThreadState;

    fn entry(tid: u32, state: u8, syscall: i32, on_cpu: u64, what: &str) -> ThreadState {
        ThreadState {
            tid,
            state,
            waiting_kind: 0,
            on_cpu_ns: on_cpu,
            run_delay_ns: 1,
            timeslices: 1,
            syscall,
            arg0: 3,
            what: what.into(),
            object_id: 0,
        }
    }

    fn add(s: &mut States, x: ThreadSamples) {
        s.add_threads(x, 2);
        s.flush();
    }

    /// A look at `ns` that wrote the threads' sample `x` and the CPUs' figures.
    fn look(s: &mut States, x: ThreadSamples) {
        let ns = x.ns;
        s.add_threads(x, 2);
        s.add_cpus(CpuSample {
            ns,
            idle_ns: vec![0, 0],
            iowait_ns: vec![0, 0],
        });
    }

    fn sample(ns: u64, threads: Vec<ThreadState>) -> ThreadSamples {
        ThreadSamples {
            ns,
            interval_ns: 10,
            threads,
            unsampled: 0,
        }
    }

    #[test]
    fn a_state_lasts_from_the_sample_that_saw_it_to_the_one_that_saw_it_change() {
        let mut s = States::default();
        add(
            &mut s,
            sample(100, vec![entry(7, thread_state::RUNNING, -1, 50, "")]),
        );
        add(
            &mut s,
            sample(110, vec![entry(7, thread_state::BLOCKED, 0, 5, "pipe:[9]")]),
        );
        // Unlisted at 120 and 130: still blocked in read.
        add(
            &mut s,
            sample(140, vec![entry(7, thread_state::TRACKED_WAIT, 202, 2, "")]),
        );
        s.thread_exit(7, 175);
        s.finish(200, true);
        let t = &s.threads[&7];
        assert_eq!((t.on_cpu_ns, t.run_delay_ns, t.timeslices), (57, 3, 3));
        assert_eq!(
            t.blocked,
            vec![BlockedIn {
                syscall: 0,
                what: "pipe:[9]".into(),
                ns: 30
            }]
        );
        assert_eq!(t.tracked_ns, 35);
        assert_eq!(blocked_text(&t.blocked[0]), "read on pipe:[9]");
    }

    #[test]
    fn samples_that_stop_early_hold_over_their_span_not_over_the_run() {
        const MS: u64 = 1_000_000;
        let mut s = States::default();
        add(
            &mut s,
            sample(100 * MS, vec![entry(7, thread_state::RUNNING, -1, 50, "")]),
        );
        add(
            &mut s,
            sample(
                110 * MS,
                vec![
                    entry(7, thread_state::BLOCKED, 0, 5, "pipe:[9]"),
                    entry(8, thread_state::BLOCKED, 0, 5, "pipe:[9]"),
                ],
            ),
        );
        // The sampler's last record: at 120 ms. Thread 8 ends at 900 ms, the run at 2 s.
        add(
            &mut s,
            sample(120 * MS, vec![entry(9, thread_state::RUNNING, -1, 1, "")]),
        );
        s.thread_exit(8, 900 * MS);
        s.finish(2_000 * MS, true);
        assert!(!s.sampled_to_end);
        assert_eq!(
            (s.sampled_from_ns, s.sampled_until_ns),
            (100 * MS, 120 * MS)
        );
        // Blocked from 110 ms to the last look, not to the thread's end nor the run's.
        assert_eq!(s.threads[&7].other_ns(), 10 * MS);
        assert_eq!(s.threads[&8].other_ns(), 10 * MS);
        assert_eq!(
            s.threads[&8].end_state,
            Some(EndState::Ended { at: 900 * MS })
        );

        // Without an end record, CPU figures written later (every 100 ms) show the sampler
        // still looked.
        let mut s = States::default();
        add(
            &mut s,
            sample(
                100 * MS,
                vec![entry(7, thread_state::BLOCKED, 0, 5, "pipe:[9]")],
            ),
        );
        for ns in (2..20).map(|n| n * 100 * MS) {
            s.add_cpus(CpuSample {
                ns,
                idle_ns: vec![1],
                iowait_ns: vec![0],
            });
        }
        s.finish(2_000 * MS, false);
        assert!(s.sampled_to_end);
        assert_eq!(s.threads[&7].other_ns(), 1_900 * MS);
    }

    #[test]
    fn a_pause_of_the_sampler_with_no_thread_running_is_a_stop_not_a_wait() {
        const MS: u64 = 1_000_000;
        let mut s = States::default();
        let mut waiter = entry(3, thread_state::TRACKED_WAIT, 202, 0, "");
        waiter.object_id = 9;
        waiter.waiting_kind = 1;
        look(
            &mut s,
            sample(
                100 * MS,
                vec![
                    entry(7, thread_state::BLOCKED, 7, 1, "fd 3"),
                    waiter.clone(),
                ],
            ),
        );
        look(&mut s, sample(200 * MS, vec![]));
        // Nothing from the sampler for 1.5 s: then main goes on with its poll through
        // restart_syscall, and the waiter is still in its wait.
        let mut resumed = entry(7, thread_state::BLOCKED, SYS_RESTART_SYSCALL, 1, "");
        resumed.run_delay_ns = 0;
        look(&mut s, sample(1_700 * MS, vec![resumed]));
        look(&mut s, sample(1_800 * MS, vec![]));
        s.finish(1_800 * MS, true);
        assert_eq!(s.stops.count, 1);
        assert_eq!(s.stops.spans, vec![(200 * MS, 1_700 * MS)]);
        assert_eq!(s.stops.in_waits.get(&9), Some(&(1_500 * MS)));
        // 1.7 s of life, 1.5 s of it stopped: 200 ms of waits each, main's all in poll.
        let main = &s.threads[&7];
        assert_eq!(main.blocked.len(), 1, "{:?}", main.blocked);
        assert_eq!((main.blocked[0].syscall, main.other_ns()), (7, 200 * MS));
        assert_eq!(s.threads[&3].tracked_ns, 200 * MS);
        // Lost parallelism counts the 300 ms the process was not stopped.
        assert_eq!(s.lost.capacity_ns, 2 * 200 * MS);

        // A look that saw main stopped, then restart_syscall: still the poll going on (a
        // clean-clone CI run listed restart_syscall apart, 176 µs).
        let mut s = States::default();
        look(
            &mut s,
            sample(
                100 * MS,
                vec![entry(7, thread_state::BLOCKED, 7, 1, "fd 3")],
            ),
        );
        look(
            &mut s,
            sample(
                200 * MS,
                vec![entry(7, thread_state::STOPPED, 7, 1, "fd 3")],
            ),
        );
        look(
            &mut s,
            sample(
                300 * MS,
                vec![entry(7, thread_state::BLOCKED, SYS_RESTART_SYSCALL, 1, "")],
            ),
        );
        s.finish(400 * MS, true);
        let main = &s.threads[&7];
        assert!(
            main.blocked.iter().all(|b| b.syscall == 7),
            "{:?}",
            main.blocked
        );

        // A sampler that wrote no CPU figures cannot tell a stop from a stretch without change.
        let mut s = States::default();
        add(
            &mut s,
            sample(
                100 * MS,
                vec![entry(7, thread_state::BLOCKED, 7, 1, "fd 3")],
            ),
        );
        add(
            &mut s,
            sample(1_700 * MS, vec![entry(7, thread_state::RUNNING, -1, 1, "")]),
        );
        s.finish(1_800 * MS, true);
        assert_eq!(s.stops.count, 0);
    }

    #[test]
    fn a_new_name_in_the_same_call_is_a_new_wait_and_a_bare_entry_the_same_one() {
        let mut s = States::default();
        add(
            &mut s,
            sample(100, vec![entry(7, thread_state::BLOCKED, 257, 0, "/run/a")]),
        );
        // Listed again in the same call without a name (it ran, and is where it was).
        add(
            &mut s,
            sample(110, vec![entry(7, thread_state::BLOCKED, 257, 1, "")]),
        );
        // Between two looks it opened /run/a and blocked opening /run/b.
        add(
            &mut s,
            sample(130, vec![entry(7, thread_state::BLOCKED, 257, 1, "/run/b")]),
        );
        s.finish(150, true);
        let t = &s.threads[&7];
        let spans: Vec<(&str, u64)> = t.blocked.iter().map(|b| (b.what.as_str(), b.ns)).collect();
        assert_eq!(spans, vec![("/run/a", 30), ("/run/b", 20)]);
    }

    #[test]
    fn the_state_at_the_end_is_the_last_look_or_the_threads_end() {
        let mut s = States::default();
        let mut waiter = entry(3, thread_state::TRACKED_WAIT, 202, 0, "");
        waiter.object_id = 9;
        waiter.waiting_kind = 1;
        add(
            &mut s,
            sample(
                100,
                vec![
                    entry(1, thread_state::RUNNING, -1, 5, ""),
                    entry(2, thread_state::BLOCKED, 0, 5, "pipe:[4]"),
                    waiter,
                    entry(4, thread_state::RUNNING, -1, 5, ""),
                ],
            ),
        );
        // Thread 1 is seen again, still running; 2 and 3 are not listed: unchanged.
        add(
            &mut s,
            sample(110, vec![entry(1, thread_state::RUNNING, -1, 5, "")]),
        );
        s.thread_exit(4, 115);
        s.finish(200, true);
        let end = |tid: u32| s.threads[&tid].end_state.clone();
        assert_eq!(end(1), Some(EndState::Running { since: 100 }));
        assert_eq!(
            end(2),
            Some(EndState::Blocked {
                since: 100,
                syscall: 0,
                what: "pipe:[4]".into()
            })
        );
        assert_eq!(
            end(3),
            Some(EndState::Tracked {
                since: 100,
                object_id: 9,
                kind: 1
            })
        );
        assert_eq!(end(4), Some(EndState::Ended { at: 115 }));
        assert_eq!(end(4).unwrap().name(), "ended");
    }

    #[test]
    fn a_sample_written_after_the_threads_exit_does_not_outlive_it() {
        let mut s = States::default();
        s.thread_exit(7, 150);
        add(
            &mut s,
            sample(100, vec![entry(7, thread_state::BLOCKED, 0, 5, "")]),
        );
        s.finish(1000, true);
        assert_eq!(s.threads[&7].other_ns(), 50);
    }

    #[test]
    fn kinds_past_the_limit_are_summed_as_other_calls() {
        let mut s = States::default();
        for i in 0..(MAX_BLOCKED_KINDS as i32 + 5) {
            add(
                &mut s,
                sample(
                    u64::from(i as u32) * 10,
                    vec![entry(1, thread_state::BLOCKED, 1000 + i, 0, "")],
                ),
            );
        }
        s.finish(1000, true);
        let t = &s.threads[&1];
        assert_eq!(t.blocked.len(), MAX_BLOCKED_KINDS);
        assert!(t.blocked.iter().any(|b| b.syscall == -2));
        assert_eq!(t.other_ns(), 1000);
    }

    fn run(tid: u32, on_cpu: u64, delay: u64) -> ThreadState {
        let mut e = entry(tid, thread_state::RUNNING, -1, on_cpu, "");
        e.run_delay_ns = delay;
        e
    }

    #[test]
    fn cpu_left_unused_while_threads_waited_is_lost_to_what_they_waited_for() {
        let mut s = States::default();
        let mut waiter = entry(2, thread_state::TRACKED_WAIT, 202, 0, "");
        waiter.object_id = 9;
        waiter.run_delay_ns = 0;
        // Two CPUs. 0..100: one thread runs all along, the other sleeps on object 9: one CPU
        // unused, lost to object 9.
        add(&mut s, sample(0, vec![run(1, 0, 0), waiter]));
        add(&mut s, sample(100, vec![run(1, 100, 0)]));
        assert_eq!(
            (s.lost.capacity_ns, s.lost.used_ns, s.lost.lost_ns),
            (200, 100, 100)
        );
        assert_eq!(s.lost.ranked(), vec![(&Waited::Object(9), 100)]);
        // 100..200: both run (the waiter got it): nothing lost.
        add(&mut s, sample(200, vec![run(1, 100, 0), run(2, 100, 0)]));
        assert_eq!(s.lost.lost_ns, 100, "a CPU-bound phase loses nothing");
        // 200..300: thread 1 runs 40 and is ready without a CPU for 60 (the machine's other
        // work had it); thread 2 runs 40, then sleeps in read, seen there at the end: the 120
        // unused are lost half to the CPU, half to the read.
        let mut reader = entry(2, thread_state::BLOCKED, 0, 40, "pipe:[1]");
        reader.run_delay_ns = 0;
        add(&mut s, sample(300, vec![run(1, 40, 60), reader]));
        assert_eq!(s.lost.lost_ns, 100 + 120);
        // 300..400: thread 1, running when last seen, is not listed (it slept, on nothing
        // seen: not counted); thread 2 stays in read: 100 more lost to it.
        add(&mut s, sample(400, vec![]));
        assert_eq!(s.lost.lost_ns, 100 + 120 + 100);
        assert_eq!(
            s.lost.ranked(),
            vec![
                (&Waited::Blocked(0, "pipe:[1]".into()), 160),
                (&Waited::Object(9), 100),
                (&Waited::Cpu, 60),
            ]
        );
    }

    #[test]
    fn a_thread_that_ended_between_two_looks_lost_its_interval_to_what_it_waited_on() {
        let mut s = States::default();
        let mut futexer = entry(
            2,
            thread_state::BLOCKED,
            202,
            0,
            "untracked futex word 0x10",
        );
        futexer.run_delay_ns = 0;
        let mut main = entry(1, thread_state::BLOCKED, 257, 0, "");
        main.run_delay_ns = 0;
        // Two CPUs, both threads asleep from 0; the futexer ends at 100, main at 110, and the
        // last look, at 120, is written after both exits and lists main running.
        add(&mut s, sample(0, vec![main, futexer]));
        s.thread_exit(2, 100);
        s.thread_exit(1, 110);
        add(&mut s, sample(120, vec![run(1, 0, 0)]));
        assert_eq!(s.lost.capacity_ns, 240);
        assert_eq!(
            s.lost.ranked(),
            vec![
                (&Waited::Blocked(257, String::new()), 110),
                (
                    &Waited::Blocked(202, "untracked futex word 0x10".into()),
                    100
                ),
            ]
        );
        // Counted once: a later interval adds nothing for them.
        add(&mut s, sample(220, vec![]));
        assert_eq!(s.lost.lost_ns, 210);
        assert!(s.threads.values().all(|t| t.before_exit.is_none()));
    }

    #[test]
    fn a_threads_totals_at_its_end_add_what_it_ran_after_the_last_look_once() {
        let mut s = States::default();
        add(&mut s, sample(0, vec![run(7, 0, 0)]));
        add(&mut s, sample(100, vec![run(7, 50, 10)]));
        s.thread_totals(ThreadTotals {
            tid: 7,
            ns: 130,
            on_cpu_ns: 80,
            run_delay_ns: 15,
            timeslices: 3,
            voluntary: 4,
            involuntary: 2,
        });
        // A look just before its end, written after its totals: nothing past them.
        add(&mut s, sample(140, vec![run(7, 25, 5)]));
        s.thread_exit(7, 135);
        s.finish(200, true);
        let t = &s.threads[&7];
        assert_eq!((t.on_cpu_ns, t.run_delay_ns, t.timeslices), (80, 15, 3));
        assert_eq!((t.voluntary, t.involuntary, t.switches_known), (4, 2, true));
        // Its last 30 ns on a CPU, in one slice after the look at 100.
        assert_eq!(t.longest_slice_ns, 30);
        // The tail counts as used in the interval after the look that missed it.
        assert_eq!(s.lost.used_ns, 80);
    }

    #[test]
    fn switch_counts_are_totals_and_the_latest_holds() {
        let mut s = States::default();
        for (v, i, l) in [(3, 1, 50), (10, 4, 20)] {
            s.thread_switches(ThreadSwitches {
                ns: 0,
                threads: vec![waitshim_format::SwitchCount {
                    tid: 5,
                    voluntary: v,
                    involuntary: i,
                    longest_slice_ns: l,
                }],
            });
        }
        let t = &s.threads[&5];
        assert_eq!(
            (t.voluntary, t.involuntary, t.longest_slice_ns),
            (10, 4, 50)
        );
    }

    #[test]
    fn idle_cpu_time_adds_up_over_cpus_and_the_span_the_samples_date() {
        let mut s = States::default();
        // The first record's idle covers a span that began before the log says: left out.
        for (ns, idle) in [(0, [95, 95]), (100, [50, 100]), (200, [0, 100])] {
            s.add_cpus(CpuSample {
                ns,
                idle_ns: idle.to_vec(),
                iowait_ns: vec![0, 1],
            });
        }
        assert_eq!(
            (s.cpus, s.idle_ns, s.iowait_ns, s.cpu_sampled_ns),
            (2, 250, 2, 200)
        );
        assert_eq!(s.per_cpu, vec![(50, 0), (200, 2)]);
        assert!(s.idle_ns <= s.cpu_sampled_ns * s.cpus as u64);
    }
}
