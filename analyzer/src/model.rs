//! Stage 2: fold the record stream of one log into a model of the run. Memory grows with the
//! number of objects, threads, chains and contention records, never with the number of events:
//! cumulative records (counters, wait sites, rule statistics, sums of short-lived objects)
//! replace their predecessors, the per-wait records of the policy (wait events, waiter chains,
//! holder stacks, snapshots) are counted and summed but listed only up to a cap, and every
//! collection is capped so that a damaged or hostile log cannot exhaust memory.

use std::collections::{BTreeMap, HashMap};

use crate::histogram::Histogram;
use crate::table::Table;

use waitshim_format::events::WaitSpan;
use waitshim_format::{
    contention_reason, counter, snapshot_source, ContentionClose, ContentionOpen, Counters,
    Deadlock, DeadlockBroken, DecodeError, Exec, Highwater, HolderStack, KindCounters, LockOrder,
    Module, ObjectCreate, ObjectKind, ObjectsChurned, ObjectsQuiet, OpenWaits, PolicyVersion,
    Record, RuleStats, RunEnd, RunStart, Snapshot, WaitEvent, WaitEventReason, WaitEvents,
    WaitSite, WaiterChains,
};

/// Most objects, threads and chains kept per log; beyond this they are counted, not stored.
pub const MAX_STORED: usize = 1_000_000;
/// Ended threads kept with a row of their own once put aside ([`Model::ended_threads`]): those
/// that spent most time not running; the others are summed ([`Model::ended_sum`]).
pub const MAX_ENDED_ROWS: usize = 1_000;
/// Ended threads kept in [`Model::threads`] before they are put aside, so that the model holds
/// the live threads and a bounded number of ended ones however many a program creates.
pub const ENDED_IN_TABLE: usize = 4_096;
/// Waits in progress listed at most (one per thread, so far more than a program has).
pub const MAX_OPEN_WAITS: usize = 10_000;
/// Kinds of work of the shim's thread kept from a [`waitshim_format::ShimCost`] (the shim has
/// four).
pub const MAX_SHIM_TASKS: usize = 16;
/// Contention records kept per log: the shim folds similar episodes into one record, so a run
/// has far fewer; beyond this they are counted, not stored.
pub const MAX_RECORDS: usize = 100_000;
/// Modules kept per log (a process maps a few hundred), and segments kept per module (an ELF
/// file has a handful).
pub const MAX_MODULES: usize = 10_000;
pub const MAX_SEGMENTS: usize = 64;
/// Frames kept per chain: deeper chains are cut (the shim records at most 64).
pub const MAX_CHAIN_FRAMES: usize = 64;
/// Highwater rises and notes kept per log.
const MAX_HISTORY: usize = 10_000;
/// Deadlocks kept per log (a program that deadlocks hangs), and threads kept per cycle.
pub const MAX_DEADLOCKS: usize = 1_000;
pub const MAX_CYCLE_EDGES: usize = 1_024;
/// Waiters kept per contention record (the shim lists 32).
pub const MAX_RECORD_WAITERS: usize = 64;
/// Bytes kept of a thread's or object's name, of a module's path and build-id, of a note.
pub const MAX_NAME: usize = 256;
pub const MAX_PATH: usize = 4096;
pub const MAX_BUILD_ID: usize = 64;
pub const MAX_NOTE: usize = 4096;
/// Kind-specific counter values kept per object (the shim writes about a dozen keys).
pub const MAX_KIND_VALUES: usize = 64;
/// Distinct lock-order edges kept per log.
pub const MAX_LOCK_ORDER_EDGES: usize = 200_000;
/// Distinct (thread, chain) witnesses kept per lock-order edge; more are only counted.
pub const MAX_WITNESSES: usize = 8;
/// Distinct (kind, creation chain) sums of short-lived objects kept. A program has a few creation
/// sites per kind; this many only comes from damage or a hostile log.
pub const MAX_CHURN_SITES: usize = 100_000;

/// Policy versions kept per log (a hot reload adds one; more than this is a runaway reloader).
pub const MAX_POLICY_VERSIONS: usize = 1_000;
/// Bytes of a policy version's normalised text kept; the rest is cut. With the caps below, a
/// version takes at most 48 KiB, so all the versions kept at most about 48 MB.
pub const MAX_POLICY_TEXT: usize = 16 * 1024;
/// Rule summaries kept per policy version, and bytes kept of each.
pub const MAX_POLICY_RULES: usize = 64;
pub const MAX_RULE_SUMMARY: usize = 512;
/// Distinct (version, rule) statistics kept.
pub const MAX_RULE_STATS: usize = 100_000;
/// Wait events listed one by one; all of them are counted and summed per (version, rule, object).
pub const MAX_WAIT_EVENTS_LISTED: usize = 10_000;
/// Distinct (version, rule, object) sums of wait events kept.
pub const MAX_WAIT_EVENT_GROUPS: usize = 100_000;
/// Distinct reason codes counted per (version, rule, object) (the shim has ten).
pub const MAX_GROUP_REASONS: usize = 16;
/// Waiter-chain records, holder stacks and snapshots listed one by one; all are counted.
pub const MAX_POLICY_LISTED: usize = 1_000;
/// Waiters kept per listed waiter-chain record.
pub const MAX_LISTED_WAITERS: usize = 1_024;

/// Reason codes (how waits ended), from the format's contract.
pub use waitshim_format::counter::ENDED;

/// Kind-specific counters: the [`counter`] key and its JSON name.
pub const KIND_COUNTERS: [(u16, &str); 16] = [
    (counter::SIGNALS, "signals"),
    (counter::BROADCASTS, "broadcasts"),
    (counter::REACQUIRE_WAIT_TOTAL_NS, "reacquire_wait_total_ns"),
    (counter::REACQUIRE_WAIT_MAX_NS, "reacquire_wait_max_ns"),
    (counter::POSTS, "posts"),
    (counter::READ_ACQUISITIONS, "read_acquisitions"),
    (counter::READ_CONTENDED, "read_contended"),
    (counter::READ_WAIT_TOTAL_NS, "read_wait_total_ns"),
    (counter::READ_WAIT_MAX_NS, "read_wait_max_ns"),
    (counter::READ_MAX_WAITERS, "read_max_waiters"),
    (counter::ROUNDS, "rounds"),
    (counter::WAKES, "wakes"),
    (counter::HOLDS_WAITED_FOR, "holds_waited_for"),
    (
        counter::HOLDS_WAITED_FOR_TOTAL_NS,
        "holds_waited_for_total_ns",
    ),
    (
        counter::HOLDS_WAITED_FOR_FROM_ARRIVAL,
        "holds_waited_for_from_arrival",
    ),
    (
        counter::HOLDS_WAITED_FOR_FROM_ARRIVAL_NS,
        "holds_waited_for_from_arrival_ns",
    ),
];

/// The JSON name of a kind-specific counter (`posts`), `key_N` for one this analyzer does not
/// know.
pub fn kind_counter_json(key: u16) -> String {
    KIND_COUNTERS
        .iter()
        .find(|&&(k, _)| k == key)
        .map_or_else(|| format!("key_{key}"), |&(_, n)| n.to_string())
}

/// Whether `key` is a reason code (how a wait ended), or the count of an errno that ended waits,
/// rather than a kind-specific counter.
pub fn is_ended_key(key: u16) -> bool {
    ENDED.iter().any(|&(k, _, _)| k == key) || counter::errno_of(key).is_some()
}

/// The symbolic name of a Linux errno (`EINVAL`), or `errno N` for one not listed.
pub fn errno_name(errno: u16) -> String {
    const NAMES: [(u16, &str); 24] = [
        (1, "EPERM"),
        (2, "ENOENT"),
        (3, "ESRCH"),
        (4, "EINTR"),
        (5, "EIO"),
        (9, "EBADF"),
        (11, "EAGAIN"),
        (12, "ENOMEM"),
        (13, "EACCES"),
        (14, "EFAULT"),
        (16, "EBUSY"),
        (17, "EEXIST"),
        (22, "EINVAL"),
        (24, "EMFILE"),
        (28, "ENOSPC"),
        (34, "ERANGE"),
        (35, "EDEADLK"),
        (38, "ENOSYS"),
        (75, "EOVERFLOW"),
        (95, "EOPNOTSUPP"),
        (110, "ETIMEDOUT"),
        (125, "ECANCELED"),
        (130, "EOWNERDEAD"),
        (131, "ENOTRECOVERABLE"),
    ];
    NAMES
        .iter()
        .find(|&&(e, _)| e == errno)
        .map_or_else(|| format!("errno {errno}"), |&(_, n)| n.to_string())
}

/// The JSON name of a reason code: `acquired`, ..., `key_N` for a code this analyzer does not
/// know; `None` for 0 (the wait had not ended).
pub fn reason_json(code: u16) -> Option<String> {
    if code == 0 {
        return None;
    }
    Some(
        ENDED
            .iter()
            .find(|&&(k, _, _)| k == code)
            .map_or_else(|| format!("key_{code}"), |&(_, json, _)| json.to_string()),
    )
}

/// The text name of a reason code (`timed out`), `reason N` for a code this analyzer does not
/// know, `not ended` for 0.
pub fn reason_text(code: u16) -> String {
    if code == 0 {
        return "not ended".into();
    }
    ENDED.iter().find(|&&(k, _, _)| k == code).map_or_else(
        || format!("reason {code}"),
        |&(_, _, text)| text.to_string(),
    )
}

/// The kind of short-lived objects ([`ObjectsChurned::kind`]) in the text report: its name, or
/// `kind N` for a kind this analyzer does not know.
pub fn churn_kind_text(kind: u8) -> String {
    ObjectKind::from_u8(kind).map_or_else(|| format!("kind {kind}"), |k| k.name().to_string())
}

/// The same in the JSON report: the name, or `kind_N`.
pub fn churn_kind_json(kind: u8) -> String {
    ObjectKind::from_u8(kind).map_or_else(|| format!("kind_{kind}"), |k| k.name().to_string())
}

/// The name of a [`snapshot_source`] code.
pub fn snapshot_source_name(source: u8) -> &'static str {
    snapshot_source::name(source)
}

/// Cuts `list` to at most `max` items, freeing the rest. Whether it was cut.
fn cut_list<T>(list: &mut Vec<T>, max: usize) -> bool {
    if list.len() <= max {
        return false;
    }
    list.truncate(max);
    list.shrink_to_fit();
    true
}

/// Cuts `s` to at most `max` bytes, on a character boundary. Whether it was cut.
fn cut_string(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.shrink_to_fit();
    true
}

#[derive(Debug, Clone, Default)]
pub struct Thread {
    pub tid: u32,
    /// Which of the threads that had this tid it is: 1 for the first, 2 for the one that got
    /// it next (the kernel gives an ended thread's tid to a later one), ...; 0 when not known
    /// (past the tids followed).
    pub nth: u32,
    pub parent_tid: u32,
    pub start_ns: Option<u64>,
    pub start_routine: u64,
    pub chain_id: u32,
    pub is_main: bool,
    /// The latest name the thread was given.
    pub name: Option<String>,
    pub exit_ns: Option<u64>,
    /// For a thread without an exit record whose tid a later thread got: that thread's start,
    /// before which it ended.
    pub ended_before_ns: Option<u64>,
}

impl Thread {
    /// `1234`, or `1234 (2nd)` for a later thread with a reused tid: how the reports show a
    /// thread's tid where it stands for that thread alone.
    pub fn tid_text(&self) -> String {
        if self.nth <= 1 {
            return self.tid.to_string();
        }
        let suffix = match (self.nth % 10, self.nth % 100) {
            (_, 11..=13) => "th",
            (1, _) => "st",
            (2, _) => "nd",
            (3, _) => "rd",
            _ => "th",
        };
        format!("{} ({}{suffix})", self.tid, self.nth)
    }

    /// Its life: from its start (or the run's, `run_start`) to its exit (or `end`); for a
    /// thread without an exit record whose tid went to a later thread, to that thread's start
    /// (at most its life).
    pub fn life_ns(&self, run_start: u64, end: u64) -> u64 {
        let from = self.start_ns.unwrap_or(run_start).max(run_start);
        let to = self
            .exit_ns
            .or(self.ended_before_ns)
            .unwrap_or(end)
            .min(end);
        to.saturating_sub(from)
    }
}

/// What is kept of the threads of one tid that were put aside: how many had it, and their
/// name if they all had the same one, so that a record naming the tid alone can name the
/// thread only when that name is true of whichever thread it was.
#[derive(Debug, Clone)]
struct TidUses {
    /// The `nth` of the last one put aside ([`Thread::nth`]).
    nth: u32,
    /// `Some(name)`: each had that name (`Some(None)`: none had one); `None`: names differed.
    name: Option<Option<Box<str>>>,
}

impl TidUses {
    fn same_name(&self, name: Option<&str>) -> bool {
        self.name.as_ref().is_some_and(|n| n.as_deref() == name)
    }
}

/// What a report may call the thread a record names by its tid alone ([`Model::thread_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TidName<'a> {
    /// Every thread that had the tid had this name (or the one thread).
    Name(&'a str),
    /// No thread that had it had a name, or the log has none.
    Unnamed,
    /// This many threads had the tid in turn, with different names: which one the record
    /// means is in its time, not in the tid.
    Several(u32),
}

/// A thread that ended and was put aside ([`Model::ended_threads`]), with what the sampler saw
/// of it.
#[derive(Debug, Clone)]
pub struct EndedThread {
    pub thread: Thread,
    pub states: Option<crate::states::ThreadStates>,
}

impl EndedThread {
    /// Time not running (ready for a CPU, or waiting): what makes an ended thread worth a row.
    pub fn not_running_ns(&self) -> u64 {
        self.states.as_ref().map_or(0, |s| {
            s.run_delay_ns
                .saturating_add(s.tracked_ns)
                .saturating_add(s.other_ns())
        })
    }
}

/// Ended threads put aside without a row of their own, summed.
#[derive(Debug, Clone, Default)]
pub struct EndedSum {
    pub threads: u64,
    pub life_ns: u64,
    /// Of them, those the sampler saw, and what it saw of them.
    pub sampled: u64,
    pub on_cpu_ns: u64,
    pub run_delay_ns: u64,
    pub tracked_ns: u64,
    pub other_ns: u64,
    pub timeslices: u64,
}

impl EndedSum {
    fn add(&mut self, t: &EndedThread, life_ns: u64) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        self.threads += 1;
        add(&mut self.life_ns, life_ns);
        if let Some(s) = t.states.as_ref().filter(|s| s.sampled) {
            self.sampled += 1;
            add(&mut self.on_cpu_ns, s.on_cpu_ns);
            add(&mut self.run_delay_ns, s.run_delay_ns);
            add(&mut self.tracked_ns, s.tracked_ns);
            add(&mut self.other_ns, s.other_ns());
            add(&mut self.timeslices, s.timeslices);
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Object {
    pub object_id: u64,
    /// Absent when only later records about the object survived (damage).
    pub create: Option<ObjectCreate>,
    pub destroy_ns: Option<u64>,
    /// The latest cumulative counters.
    pub counters: Option<Counters>,
    /// What only some objects have (a name, contended waits), apart: a run's many objects that
    /// were never contended cost a pointer for it.
    pub extra: Option<Box<ObjectExtra>>,
}

#[derive(Debug, Clone, Default)]
pub struct ObjectExtra {
    pub name: Option<String>,
    /// Latest cumulative wait site per waiter chain.
    pub wait_sites: BTreeMap<u32, WaitSite>,
    /// The latest kind-specific counters and reason codes ([`counter`] key, value), by key.
    pub kind_counters: Vec<(u16, u64)>,
}

static NO_WAIT_SITES: BTreeMap<u32, WaitSite> = BTreeMap::new();

impl Object {
    /// The name given through the C API.
    pub fn name(&self) -> Option<&str> {
        self.extra.as_ref()?.name.as_deref()
    }

    /// Where threads waited on it: the latest cumulative wait site per waiter chain.
    pub fn wait_sites(&self) -> &BTreeMap<u32, WaitSite> {
        self.extra
            .as_ref()
            .map_or(&NO_WAIT_SITES, |x| &x.wait_sites)
    }

    /// The latest kind-specific counters and reason codes ([`counter`] key, value), by key.
    pub fn kind_counters(&self) -> &[(u16, u64)] {
        self.extra.as_ref().map_or(&[], |x| &x.kind_counters)
    }

    fn extra(&mut self) -> &mut ObjectExtra {
        self.extra.get_or_insert_with(Default::default)
    }

    pub fn kind(&self) -> Option<ObjectKind> {
        self.create
            .as_ref()
            .and_then(|c| ObjectKind::from_u8(c.kind))
    }

    pub fn kind_name(&self) -> &'static str {
        self.kind().map_or("object", ObjectKind::name)
    }

    /// Whether the shim first saw the object in a lock call, never initialised (a static
    /// `PTHREAD_MUTEX_INITIALIZER`): its creation chain is then where it was first used.
    pub fn first_use(&self) -> bool {
        self.create
            .as_ref()
            .is_some_and(|c| c.origin == waitshim_format::origin::FIRST_USE)
    }

    /// The size in bytes of one object of this kind on x86-64 glibc (`sizeof(pthread_mutex_t)`
    /// …): how an array of them is indexed. None for joined threads and futex words (whose
    /// size says nothing of the variable around them).
    pub fn object_bytes(&self) -> Option<u64> {
        Some(match self.kind()? {
            ObjectKind::Mutex => 40,
            ObjectKind::RwLock => 56,
            ObjectKind::Cond => 48,
            ObjectKind::Semaphore => 32,
            ObjectKind::Spin => 4,
            ObjectKind::Barrier => 32,
            ObjectKind::Thread | ObjectKind::Futex => return None,
        })
    }

    /// Total hold time, and whether it is estimated. Holds that made a thread wait are each
    /// measured (`holds_waited_for`): from their start when it was timed, exactly; else from the
    /// first waiter's arrival (`holds_waited_for_from_arrival`), a lower bound. The other holds
    /// are timed one in 64 per thread (two clock reads in every critical section would lengthen
    /// it). Holds not measured exactly count as the larger of: their lower bounds plus the
    /// unmeasured ones at the timed holds' mean, or all of them at that mean (a hold whose
    /// waiter came late is as long as the others on average, not as its bound). Exact when every
    /// hold was measured from its start. None when no hold was timed or measured.
    pub fn hold_total_estimate(&self) -> Option<(u64, bool)> {
        let c = self.counters.as_ref()?;
        let waited = self.kind_counter(counter::HOLDS_WAITED_FOR);
        let waited_ns = self.kind_counter(counter::HOLDS_WAITED_FOR_TOTAL_NS);
        let bounded = self.kind_counter(counter::HOLDS_WAITED_FOR_FROM_ARRIVAL);
        let bounded_ns = self.kind_counter(counter::HOLDS_WAITED_FOR_FROM_ARRIVAL_NS);
        if c.hold_samples == 0 && waited == 0 {
            return None;
        }
        let exact_ns = u128::from(waited_ns.saturating_sub(bounded_ns));
        // Holds neither measured nor timed.
        let untimed = c
            .acquisitions
            .saturating_sub(waited)
            .saturating_sub(c.hold_samples);
        let at_mean = |n: u64| {
            if c.hold_samples == 0 {
                0
            } else {
                u128::from(c.hold_total_ns) * u128::from(n) / u128::from(c.hold_samples)
            }
        };
        let rest = (u128::from(bounded_ns) + at_mean(untimed)).max(at_mean(untimed + bounded));
        let total = exact_ns + u128::from(c.hold_total_ns) + rest;
        let estimated = bounded > 0 || untimed > 0;
        Some((u64::try_from(total).unwrap_or(u64::MAX), estimated))
    }

    /// Total time threads waited on the object (both sides of an rwlock).
    pub fn wait_total_ns(&self) -> u64 {
        self.counters
            .as_ref()
            .map_or(0, |c| c.wait_total_ns)
            .saturating_add(self.kind_counter(counter::READ_WAIT_TOTAL_NS))
    }

    /// A kind-specific counter or reason count; 0 when the log has none.
    pub fn kind_counter(&self, key: u16) -> u64 {
        let values = self.kind_counters();
        values
            .binary_search_by_key(&key, |&(k, _)| k)
            .map_or(0, |i| values[i].1)
    }

    /// How the object's waits ended: (JSON name, text name, count), non-zero counts only.
    pub fn ended(&self) -> Vec<(&'static str, &'static str, u64)> {
        ENDED
            .iter()
            .map(|&(k, json, text)| (json, text, self.kind_counter(k)))
            .filter(|&(_, _, n)| n > 0)
            .collect()
    }

    /// The errnos that ended the object's waits in error: (errno, count), by errno.
    pub fn ended_errnos(&self) -> Vec<(u16, u64)> {
        self.kind_counters()
            .iter()
            .filter_map(|&(k, n)| counter::errno_of(k).map(|e| (e, n)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Whether the object did anything worth a row in the per-object table.
    pub fn has_activity(&self) -> bool {
        self.counters.as_ref().is_some_and(|c| {
            c.acquisitions > 0 || c.contended > 0 || c.busy > 0 || c.timeouts > 0 || c.errors > 0
        }) || !self.wait_sites().is_empty()
            || self.kind_counters().iter().any(|&(_, v)| v > 0)
    }

    pub fn was_contended(&self) -> bool {
        self.counters.as_ref().is_some_and(|c| c.contended > 0)
            || !self.wait_sites().is_empty()
            || self.kind_counter(counter::READ_CONTENDED) > 0
    }

    fn set_kind_counters(&mut self, k: KindCounters) -> bool {
        let mut values: Vec<(u16, u64)> = k.values.iter().map(|v| (v.key, v.value)).collect();
        // A repeated key: the last value in the record counts.
        values.reverse();
        values.sort_by_key(|&(key, _)| key);
        values.dedup_by_key(|&mut (key, _)| key);
        let cut = values.len() > MAX_KIND_VALUES;
        values.truncate(MAX_KIND_VALUES);
        values.shrink_to_fit();
        self.extra().kind_counters = values;
        cut
    }
}

/// One thread and chain that took a lock-order edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Witness {
    pub tid: u32,
    pub chain_id: u32,
    pub ns: u64,
}

/// Lock order: `to` was acquired while `from` was held.
#[derive(Debug, Clone, Default)]
pub struct LockEdge {
    pub from: u64,
    pub to: u64,
    /// Distinct (thread, chain) pairs that took the edge, in log order, at most [`MAX_WITNESSES`].
    pub witnesses: Vec<Witness>,
    /// Records of the edge beyond the kept witnesses (not deduplicated: the shim writes an edge
    /// once per thread, so these are mostly other threads).
    pub more_witnesses: u64,
}

/// One lock contention record: a high-contention episode, complete when its close was logged.
#[derive(Debug, Clone, Default)]
pub struct ContentionRecord {
    pub record_id: u64,
    pub object_id: u64,
    pub open: Option<ContentionOpen>,
    pub close: Option<ContentionClose>,
}

impl ContentionRecord {
    /// An episode whose end the log never saw: the program deadlocked, was killed, or is still
    /// running.
    pub fn still_open(&self) -> bool {
        self.close.is_none()
    }

    pub fn level(&self) -> u32 {
        match (&self.close, &self.open) {
            (Some(c), _) => c.level,
            (None, Some(o)) => o.level,
            (None, None) => 0,
        }
    }

    pub fn opened_ns(&self) -> Option<u64> {
        self.open.as_ref().map(|o| o.ns)
    }

    /// The elapsed-time counter; for a record still open, the time from its opening to the last
    /// thing the log saw (a lower bound).
    pub fn elapsed_ns(&self, log_end_ns: u64) -> u64 {
        match (&self.close, &self.open) {
            (Some(c), _) => c.elapsed_ns,
            (None, Some(o)) => log_end_ns.saturating_sub(o.ns),
            (None, None) => 0,
        }
    }

    pub fn reason(&self) -> Option<&'static str> {
        contention_reason::name(self.open.as_ref()?.reason)
    }

    pub fn holder_tid(&self) -> Option<u32> {
        match (&self.close, &self.open) {
            (Some(c), _) => Some(c.holder_tid),
            (None, Some(o)) => Some(o.holder_tid),
            (None, None) => None,
        }
    }

    /// Whether the wait that opened the episode was no wait after all: the close names the
    /// opener as the holder and not among the waiters (a barrier arrival the shim took for a
    /// waiter, which turned out to complete the round; the shim cancelled its wait).
    pub fn opener_was_holder(&self) -> bool {
        match (&self.open, &self.close) {
            (Some(o), Some(c)) => {
                c.holder_tid == o.waiter_tid && !c.waiters.iter().any(|w| w.tid == o.waiter_tid)
            }
            _ => false,
        }
    }

    /// Waiter chains of the episode (with the waiting thread), the opener's first unless it was
    /// the holder ([`Self::opener_was_holder`]).
    pub fn waiter_chains(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        if let Some(c) = &self.close {
            out.extend(c.waiters.iter().map(|w| (w.tid, w.chain_id)));
        }
        if let Some(o) = &self.open {
            if !out.iter().any(|&(t, _)| t == o.waiter_tid) && !self.opener_was_holder() {
                out.insert(0, (o.waiter_tid, o.waiter_chain));
            }
        }
        out
    }
}

/// Waits of flight-recorder batches kept in [`EventsSeen::windowed`] at most; beyond, they are
/// counted as kept.
pub const MAX_WINDOWED_WAITS: usize = 2_000_000;
/// (object, waker) pairs counted in [`EventsSeen::woken_by`] at most.
pub const MAX_WOKEN_BY: usize = 100_000;
/// Objects whose wait times are kept as a distribution ([`EventsSeen::histograms`]): about 1 kB
/// each.
pub const MAX_HISTOGRAMS: usize = 4096;

/// Adds a wait on `object` from `begin` to `end` to its distribution, within
/// [`MAX_HISTOGRAMS`] objects.
fn add_wait(histograms: &mut BTreeMap<u64, Histogram>, object: u64, end: u64, begin: u64) {
    let ns = end.saturating_sub(begin);
    if let Some(h) = histograms.get_mut(&object) {
        h.add(ns);
    } else if histograms.len() < MAX_HISTOGRAMS {
        histograms.entry(object).or_default().add(ns);
    }
}
/// Chunks (batches, one `WaitEvents` record each) of one thread's flight-recorder ring: the
/// shim's `RING` (`core/src/track/events.rs`), 1 KB each. A thread whose ring dropped waits
/// and whose every chunk was kept had a full ring: it lost waits right before its oldest kept.
pub const RING_CHUNKS: u64 = 64;
/// Bytes of one thread's flight-recorder ring ([`RING_CHUNKS`] chunks of 1 KB).
pub const RING_BYTES: u64 = RING_CHUNKS * 1024;

/// One wait of a flight-recorder batch: which are within its window is known only at the end
/// of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingWait {
    pub begin_ns: u64,
    pub end_ns: u64,
    pub object_id: u64,
    /// The thread that ended it, 0 when unknown.
    pub waker: u32,
    /// The thread that waited.
    pub tid: u32,
}

/// How far back the flight recorder's kept waits go ([`EventsSeen::coverage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Coverage {
    /// From the earliest begin of a kept wait to the end of the log; `None` with no kept wait.
    pub covers_ns: Option<u64>,
    /// Of the threads whose ring was full and dropped waits (so it lost waits within the
    /// window, right before its oldest kept one): the one whose kept waits go back the least,
    /// `(tid, how far back)`. Every thread's waits are complete only for that last stretch.
    pub shortest: Option<(u32, u64)>,
    /// Threads whose ring was full and dropped waits.
    pub rings_full: u64,
    /// Flight-recorder waits past the [`MAX_WINDOWED_WAITS`] the analyzer keeps: the figures
    /// are of the waits kept (the log's first), so `covers_ns` is exact and `shortest` is of
    /// the threads whose batches came first.
    pub waits_not_stored: u64,
}

/// What the log's per-wait events ([`WaitEvents`]) add up to.
#[derive(Debug, Clone, Default)]
pub struct EventsSeen {
    /// Records, the waits in them, and their size in the log (whole frames).
    pub records: u64,
    pub waits: u64,
    pub log_bytes: u64,
    /// Records whose packed events could not be read.
    pub damaged: u64,
    /// Events the shim left out, by thread (its latest cumulative count).
    pub dropped_by_shim: BTreeMap<u32, u64>,
    /// The flight recorder's window, 0 when every event was written.
    pub keep_ns: u64,
    /// Waits of the flight recorder's batches, in log order.
    pub windowed: Vec<RingWait>,
    /// Where each flight-recorder batch starts in [`EventsSeen::windowed`] (a batch is one
    /// thread's waits, in the order they ended).
    pub batches: Vec<u32>,
    /// Flight-recorder waits past [`MAX_WINDOWED_WAITS`], not stored.
    pub windowed_cut: u64,
    /// Waits ended by another thread, by (object, that thread), of batches with no window.
    woken_by: BTreeMap<(u64, u32), u64>,
    /// Wait times by object, of batches with no window (at most [`MAX_HISTOGRAMS`] objects).
    histograms: BTreeMap<u64, Histogram>,
}

impl EventsSeen {
    /// Whether the log has per-wait events (then the waits on the timeline are exact).
    pub fn any(&self) -> bool {
        self.records > 0
    }

    /// Whether a wait that ended at `end` is within the flight recorder's window `keep_ns`
    /// before `end_of_log` (always, when every event was written).
    pub fn keeps(keep_ns: u64, end: u64, end_of_log: u64) -> bool {
        keep_ns == 0 || end.saturating_add(keep_ns) >= end_of_log
    }

    /// (waits kept, waits dropped): those the shim dropped plus those older than the window.
    pub fn kept_and_dropped(&self, end_of_log: u64) -> (u64, u64) {
        let by_shim = self
            .dropped_by_shim
            .values()
            .fold(0u64, |a, &v| a.saturating_add(v));
        let old = self
            .windowed
            .iter()
            .filter(|w| !Self::keeps(self.keep_ns, w.end_ns, end_of_log))
            .count() as u64;
        (self.waits.saturating_sub(old), by_shim.saturating_add(old))
    }

    /// Waits ended by another thread, by (object, that thread): those kept.
    pub fn woken_by(&self, end_of_log: u64) -> BTreeMap<(u64, u32), u64> {
        let mut out = self.woken_by.clone();
        for w in &self.windowed {
            if w.waker != 0 && Self::keeps(self.keep_ns, w.end_ns, end_of_log) {
                let key = (w.object_id, w.waker);
                if out.len() < MAX_WOKEN_BY || out.contains_key(&key) {
                    *out.entry(key).or_default() += 1;
                }
            }
        }
        out
    }

    /// Wait times by object: those kept (the flight recorder's within its window).
    pub fn histograms(&self, end_of_log: u64) -> BTreeMap<u64, Histogram> {
        let mut out = self.histograms.clone();
        for w in &self.windowed {
            if Self::keeps(self.keep_ns, w.end_ns, end_of_log) {
                add_wait(&mut out, w.object_id, w.end_ns, w.begin_ns);
            }
        }
        out
    }

    /// How far back before `end_of_log` the flight recorder's kept waits go, over all threads
    /// and for the thread whose full ring goes back the least; `None` unless the log has a
    /// flight recorder (`ring:N`).
    pub fn coverage(&self, end_of_log: u64) -> Option<Coverage> {
        if self.keep_ns == 0 {
            return None;
        }
        // Per thread: (kept batches, earliest begin of a kept wait).
        let mut threads: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for (i, &start) in self.batches.iter().enumerate() {
            let start = start as usize;
            let end = self
                .batches
                .get(i + 1)
                .map_or(self.windowed.len(), |&e| e as usize);
            let Some(waits) = self.windowed.get(start..end) else {
                continue;
            };
            let kept = waits
                .iter()
                .filter(|w| Self::keeps(self.keep_ns, w.end_ns, end_of_log));
            let Some(first) = kept.clone().map(|w| w.begin_ns.min(w.end_ns)).min() else {
                continue;
            };
            let tid = waits[0].tid;
            let t = threads.entry(tid).or_insert((0, u64::MAX));
            t.0 += 1;
            t.1 = t.1.min(first);
        }
        let back = |begin: u64| end_of_log.saturating_sub(begin);
        let covers_ns = threads.values().map(|t| t.1).min().map(back);
        let full: Vec<(u32, u64)> = threads
            .iter()
            .filter(|(tid, t)| {
                t.0 >= RING_CHUNKS && self.dropped_by_shim.get(tid).is_some_and(|&d| d > 0)
            })
            .map(|(&tid, t)| (tid, back(t.1)))
            .collect();
        Some(Coverage {
            covers_ns,
            shortest: full
                .iter()
                .copied()
                .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0))),
            rings_full: full.len() as u64,
            waits_not_stored: self.windowed_cut,
        })
    }

    /// Takes in batch `r`, whose waits `waits` are (unpacked once for every reader of them,
    /// [`crate::pass`]).
    fn add(&mut self, r: &WaitEvents, waits: Result<&[WaitSpan], &DecodeError>) {
        self.records += 1;
        self.log_bytes += waitshim_format::frame::frame_len_of(r) as u64;
        let d = self.dropped_by_shim.entry(r.tid).or_default();
        *d = (*d).max(r.dropped);
        self.keep_ns = self.keep_ns.max(r.keep_ns);
        let Ok(waits) = waits else {
            self.damaged += 1;
            return;
        };
        self.waits += waits.len() as u64;
        if r.keep_ns > 0 && !waits.is_empty() {
            if self.windowed.len() + waits.len() <= MAX_WINDOWED_WAITS {
                self.batches.push(self.windowed.len() as u32);
                self.windowed.extend(waits.iter().map(|w| RingWait {
                    begin_ns: w.begin_ns,
                    end_ns: w.end_ns,
                    object_id: w.object_id,
                    waker: w.waker,
                    tid: r.tid,
                }));
            } else {
                self.windowed_cut += waits.len() as u64;
            }
            return;
        }
        for w in waits {
            if w.waker != 0 {
                let key = (w.object_id, w.waker);
                if let Some(n) = self.woken_by.get_mut(&key) {
                    *n += 1;
                } else if self.woken_by.len() < MAX_WOKEN_BY {
                    self.woken_by.insert(key, 1);
                }
            }
            add_wait(&mut self.histograms, w.object_id, w.end_ns, w.begin_ns);
        }
    }
}

/// Wait events of one (policy version, rule, object), summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitEventGroup {
    pub count: u64,
    pub wait_total_ns: u64,
    pub wait_max_ns: u64,
    /// Events per reason code (0: not ended when written), by code, at most
    /// [`MAX_GROUP_REASONS`] codes.
    pub reasons: Vec<(u16, u64)>,
}

/// What the policy rules collected: policy versions and rule statistics, and the wait events,
/// waiter chains, holder stacks and data requests of the log. Counted in full, listed up to caps.
#[derive(Debug, Clone, Default)]
pub struct PolicyData {
    /// Every policy version, in log order (the first [`MAX_POLICY_VERSIONS`]).
    pub versions: Vec<PolicyVersion>,
    /// The latest statistics of each (version, rule).
    pub rule_stats: BTreeMap<(u32, u32), RuleStats>,
    pub wait_events_total: u64,
    /// The first [`MAX_WAIT_EVENTS_LISTED`] wait events, in log order.
    pub wait_events: Vec<WaitEvent>,
    /// Wait events summed per (version, rule, object).
    pub wait_event_groups: BTreeMap<(u32, u32, u64), WaitEventGroup>,
    /// Where each listed wait event is in `wait_events`, by (object, tid, start, version,
    /// rule): a later change of its reason ([`WaitEventReason`]) finds it there.
    pub listed_index: HashMap<(u64, u32, u64, u32, u32), usize>,
    pub waiter_chains_total: u64,
    /// The first [`MAX_POLICY_LISTED`] waiter-chain records, in log order.
    pub waiter_chains: Vec<WaiterChains>,
    pub holder_stacks_total: u64,
    /// The first [`MAX_POLICY_LISTED`] holder stacks, in log order.
    pub holder_stacks: Vec<HolderStack>,
    pub snapshots_total: u64,
    /// The first [`MAX_POLICY_LISTED`] snapshots, in log order.
    pub snapshots: Vec<Snapshot>,
    /// The last snapshot in the log (listed or not).
    pub last_snapshot: Option<Snapshot>,
}

impl PolicyData {
    /// Whether a policy read from a file was ever in force (not only the built-in default).
    pub fn has_user_policy(&self) -> bool {
        self.versions.iter().any(|v| !v.source.is_empty())
    }

    /// The description of a version (the last one the log gives with that number).
    pub fn version(&self, version: u32) -> Option<&PolicyVersion> {
        self.versions.iter().rev().find(|v| v.version == version)
    }

    /// The summary line of a rule, when its version is in the log.
    pub fn rule_summary(&self, version: u32, rule: u32) -> Option<&str> {
        let v = self.version(version)?;
        v.rules.get(usize::try_from(rule).ok()?).map(String::as_str)
    }

    /// Whether the log has anything a policy rule collected (events, chains, holder stacks).
    pub fn has_collected(&self) -> bool {
        self.wait_events_total + self.waiter_chains_total + self.holder_stacks_total > 0
    }
}

/// Things the model could not keep (caps reached) or could not make sense of.
#[derive(Debug, Clone, Default)]
pub struct Overflow {
    pub chains: u64,
    pub threads: u64,
    pub objects: u64,
    pub wait_sites: u64,
    pub contention_records: u64,
    pub modules: u64,
    pub history: u64,
    pub chain_frames_cut: u64,
    pub lock_order_edges: u64,
    /// Objects whose kind-specific counters had more keys than kept.
    pub kind_values_cut: u64,
    /// Policy versions beyond [`MAX_POLICY_VERSIONS`].
    pub policy_versions: u64,
    /// Policy versions whose text or rule summaries were cut.
    pub policy_text_cut: u64,
    /// Distinct (version, rule) statistics beyond [`MAX_RULE_STATS`].
    pub rule_stats: u64,
    /// Wait events counted but not listed (beyond [`MAX_WAIT_EVENTS_LISTED`]).
    pub wait_events_unlisted: u64,
    /// Wait events in no (version, rule, object) sum (beyond [`MAX_WAIT_EVENT_GROUPS`]).
    pub wait_event_groups: u64,
    /// Wait events whose reason code was not counted (beyond [`MAX_GROUP_REASONS`] codes).
    pub wait_event_reasons: u64,
    /// Waiter-chain records counted but not listed.
    pub waiter_chains_unlisted: u64,
    /// Waiters cut from listed waiter-chain records (beyond [`MAX_LISTED_WAITERS`] each).
    pub chain_waiters_cut: u64,
    /// Holder stacks counted but not listed.
    pub holder_stacks_unlisted: u64,
    /// Snapshots counted but not listed.
    pub snapshots_unlisted: u64,
    /// Short-lived object records of (kind, creation chain) pairs beyond [`MAX_CHURN_SITES`].
    pub churn_sites: u64,
    /// Records kept with a name, path or text cut to [`MAX_NAME`], [`MAX_PATH`] or
    /// [`MAX_NOTE`] bytes, or a list cut to what is kept of it (segments, threads of a
    /// deadlock, waiters of a contention record, counters of short-lived objects).
    pub cut: u64,
}

impl Overflow {
    pub fn any(&self) -> bool {
        self.storage_any() || self.policy_any() || self.churn_sites > 0
    }

    /// Whether what the policy rules collected exceeded what the analyzer lists or keeps.
    pub fn policy_any(&self) -> bool {
        self.policy_versions
            + self.policy_text_cut
            + self.rule_stats
            + self.wait_events_unlisted
            + self.wait_event_groups
            + self.wait_event_reasons
            + self.waiter_chains_unlisted
            + self.chain_waiters_cut
            + self.holder_stacks_unlisted
            + self.snapshots_unlisted
            > 0
    }

    /// Whether the core model (chains, threads, objects, records, ...) hit a cap.
    pub fn storage_any(&self) -> bool {
        self.chains
            + self.threads
            + self.objects
            + self.wait_sites
            + self.contention_records
            + self.modules
            + self.history
            + self.chain_frames_cut
            + self.lock_order_edges
            + self.kind_values_cut
            + self.cut
            > 0
    }
}

/// What `WAITSHIM_DELAY` did to the run: its rules, and per object the sections it lengthened
/// and the busy time it added (the latest cumulative `Delayed` record of each).
#[derive(Debug, Clone, Default)]
pub struct DelayData {
    pub rules: Vec<waitshim_format::DelayRule>,
    pub objects: BTreeMap<u64, waitshim_format::Delayed>,
}

impl DelayData {
    /// Whether the run was slowed on purpose.
    pub fn any(&self) -> bool {
        !self.rules.is_empty() || !self.objects.is_empty()
    }

    /// Sections lengthened and busy time added, over every object.
    pub fn totals(&self) -> (u64, u64) {
        self.objects
            .values()
            .fold((0, 0), |a, d| (a.0 + d.sections, a.1 + d.total_ns))
    }

    /// The delay per section of rule `rule`.
    pub fn delay_of(&self, rule: u32) -> Option<u64> {
        self.rules
            .iter()
            .find(|r| r.rule == rule)
            .map(|r| r.delay_ns)
    }
}

/// Delay rules kept (the shim writes at most 16).
const MAX_DELAY_RULES: usize = 64;
/// Delayed objects kept (bounded memory whatever the input).
const MAX_DELAYED_OBJECTS: usize = 10_000;

/// Tids whose yield counts are kept ([`Model::yields`]).
pub const MAX_YIELD_TIDS: usize = 4096;

#[derive(Debug, Clone, Default)]
pub struct Model {
    pub run: Option<RunStart>,
    pub run_end: Option<RunEnd>,
    /// The contended waits in progress at the log's last look (the last `OpenWaits` record):
    /// the threads still waiting when the log ended, and for what.
    pub open_waits: Option<OpenWaits>,
    /// The per-wait events (`WaitEvents` records), counted: the exports read the waits again
    /// from the log ([`crate::export::timeline::for_each_wait`]).
    pub events: EventsSeen,
    /// The program the process replaced this one with, when the log ends with an exec.
    pub exec: Option<Exec>,
    pub modules: BTreeMap<u32, Module>,
    pub chains: HashMap<u32, Vec<u64>>,
    pub threads: Table<u32, Thread>,
    pub objects: Table<u64, Object>,
    pub records: BTreeMap<u64, ContentionRecord>,
    /// Every rise of the global highwater mark, in log order.
    pub highwater: Vec<Highwater>,
    /// The first [`MAX_DEADLOCKS`] deadlocks, in log order.
    pub deadlocks: Vec<Deadlock>,
    /// How a recorded wait-for cycle broke after all (a timed wait gave up), by the `ns` of its
    /// [`Deadlock`]: the first thread of it to stop waiting.
    pub deadlocks_broken: HashMap<u64, DeadlockBroken>,
    /// The lock-order graph: every distinct edge, by (from, to).
    pub lock_order: BTreeMap<(u64, u64), LockEdge>,
    pub notes: Vec<waitshim_format::Note>,
    /// Policy versions, rule statistics and what the rules collected.
    pub policy: PolicyData,
    /// `WAITSHIM_DELAY`: the run was slowed on purpose ([`DelayData`]).
    pub delay: DelayData,
    /// Objects never written on their own (created and destroyed uncontended), summed by the
    /// shim per (kind as u8, creation chain): the latest cumulative record of each pair.
    pub churned: BTreeMap<(u8, u32), ObjectsChurned>,
    /// Live objects the shim summed instead of writing them one by one (never contended,
    /// beyond its first few thousand), by (kind, creation chain): the latest sums.
    pub quiet: BTreeMap<(u8, u32), ObjectsQuiet>,
    /// Latest timestamp any record carried: where the log's knowledge of the run ends.
    pub last_ns: u64,
    pub overflow: Overflow,
    /// What the shim's sampler saw of the threads and CPUs.
    pub states: crate::states::States,
    /// What the shim's own thread cost, by its latest figures (cumulative: the last record).
    pub shim_cost: Option<waitshim_format::ShimCost>,
    /// Threads the log saw start, and exit (each counted once, kept or not).
    pub threads_started: u64,
    pub threads_exited: u64,
    /// Ended threads put aside (their tid went to a later thread, or ended threads were more
    /// than [`ENDED_IN_TABLE`]) that kept a row: the [`MAX_ENDED_ROWS`] that spent most time
    /// not running (up to twice as many while records are added; once finished and any are
    /// summed, every ended thread but the main one is put aside and ranked).
    pub ended_threads: Vec<EndedThread>,
    /// The other ended threads put aside, summed.
    pub ended_sum: EndedSum,
    /// Threads that started on a tid an earlier thread of the log had.
    pub tids_reused: u64,
    /// Each thread's `sched_yield` calls (`ThreadYields`), by tid: exact, the largest count the
    /// log has (a tid the kernel gave again: the largest of its threads'); at most
    /// [`MAX_YIELD_TIDS`] tids.
    pub yields: BTreeMap<u32, u64>,
    /// The same by call site: (tid, return address into the caller; 0 for a thread's calls
    /// past the sites the shim counts apart) to count, for the tids of [`Model::yields`].
    pub yield_sites: BTreeMap<(u32, u64), u64>,
    /// Tids whose threads were put aside (the first [`MAX_STORED`]): what is kept of them.
    tid_uses: HashMap<u32, TidUses>,
    /// Threads of [`Model::threads`] that ended.
    ended_in_table: usize,
    /// The sampler's last look when ended threads were last put aside.
    aside_at_look: Option<u64>,
    /// Module records read: a symbolizer built from fewer modules is out of date.
    pub modules_read: u64,
    wait_site_count: usize,
    /// The program's progress points (C API): throughput, latency, the phase they span.
    pub progress: crate::progress::Progress,
}

impl Model {
    pub fn new() -> Self {
        Self::default()
    }

    /// Done with adding records: puts back in order what came out of order, and frees the
    /// room kept for more. (A model not finished reports the same, with more work.)
    pub fn finish(&mut self) {
        self.objects.finish();
        self.threads.finish();
        let end = self.run_end.as_ref().map_or(self.last_ns, |e| e.ns);
        self.states.finish(end, self.run_end.is_some());
        // Once ended threads are summed, only the ones that spent most time not running keep a
        // row, whether they were put aside yet or not.
        if self.ended_sum.threads > 0 || self.ended_threads.len() > MAX_ENDED_ROWS {
            self.put_aside_ended(|_| true);
            self.prune_ended_rows();
        }
        let objects = self.objects.values().filter_map(|o| {
            let c = o.create.as_ref()?;
            // A futex word the shim follows is 4 bytes; a thread's object (at its pthread_t)
            // has no size that says which words are its own.
            let size = match o.kind()? {
                ObjectKind::Futex => 4,
                _ => o.object_bytes()?,
            };
            Some((o.object_id, c.addr, size, c.ns, o.destroy_ns))
        });
        self.states.name_futex_words(objects);
    }

    /// Monotonic time the run started; 0 when the start record is missing.
    pub fn start_ns(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.mono_ns)
    }

    /// Time of `ns` since the run started.
    pub fn rel(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.start_ns())
    }

    /// Run duration, and whether it is only a lower bound (no exit record).
    pub fn duration_ns(&self) -> (u64, bool) {
        match &self.run_end {
            Some(e) => (self.rel(e.ns), false),
            None => (self.rel(self.last_ns), true),
        }
    }

    /// How many short-lived objects the sums in [`Model::churned`] count (none of them is in
    /// [`Model::objects`]); a damaged log's sum saturates rather than wraps.
    pub fn objects_churned(&self) -> u64 {
        self.churned
            .values()
            .fold(0, |n, c| n.saturating_add(c.count))
    }

    /// Live objects summed by creation site instead of tracked one by one.
    pub fn objects_quiet(&self) -> u64 {
        self.quiet
            .values()
            .fold(0, |n, q| n.saturating_add(q.count))
    }

    /// The sums of live objects summed by creation site, most objects first.
    pub fn quiet_by_count(&self) -> Vec<&ObjectsQuiet> {
        let mut v: Vec<&ObjectsQuiet> = self.quiet.values().collect();
        v.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then((a.kind, a.chain_id).cmp(&(b.kind, b.chain_id)))
        });
        v
    }

    /// The sums of short-lived objects, most objects first.
    pub fn churned_by_count(&self) -> Vec<&ObjectsChurned> {
        let mut v: Vec<&ObjectsChurned> = self.churned.values().collect();
        v.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.kind.cmp(&b.kind))
                .then(a.chain_id.cmp(&b.chain_id))
        });
        v
    }

    /// The final highwater mark and the rise that set it.
    pub fn final_highwater(&self) -> Option<&Highwater> {
        self.highwater.iter().max_by_key(|h| h.hwm)
    }

    /// The highest the run's highwater mark rose during record `r`'s episode: a rise on its
    /// object from the episode's opening to its close (to the log's end while still open). The
    /// shim names the reason that opened an episode only; a later wait that joined it can raise
    /// the mark, and that record is then the one that did.
    pub fn raised_highwater(&self, r: &ContentionRecord) -> Option<u32> {
        let from = match (&r.open, &r.close) {
            (Some(o), _) => o.ns,
            (None, Some(c)) => c.ns.saturating_sub(c.elapsed_ns),
            (None, None) => return None,
        };
        let to = r.close.as_ref().map_or(self.last_ns, |c| c.ns);
        self.highwater
            .iter()
            .filter(|h| h.object_id == r.object_id && (from..=to).contains(&h.ns))
            .map(|h| h.hwm)
            .max()
    }

    /// Why record `r` is a record, as the reports name it: `exceeded` when the run's highwater
    /// mark rose during its episode (whatever opened it), else the reason that opened it.
    pub fn record_reason(&self, r: &ContentionRecord) -> Option<&'static str> {
        if self.raised_highwater(r).is_some() {
            return contention_reason::name(contention_reason::EXCEEDED);
        }
        r.reason()
    }

    /// How the recorded cycle `d` broke, if it did: then it was no deadlock after all.
    pub fn broken(&self, d: &Deadlock) -> Option<&DeadlockBroken> {
        self.deadlocks_broken.get(&d.ns)
    }

    /// The recorded cycles that never broke: the threads in them can never proceed.
    pub fn real_deadlocks(&self) -> impl Iterator<Item = &Deadlock> {
        self.deadlocks.iter().filter(|d| self.broken(d).is_none())
    }

    pub fn hwm(&self) -> u32 {
        let from_history = self.final_highwater().map_or(0, |h| h.hwm);
        let from_end = self.run_end.as_ref().map_or(0, |e| e.hwm);
        from_history.max(from_end)
    }

    /// Where the log's knowledge of the run ends: its end record, or its latest time.
    pub fn end_of_log(&self) -> u64 {
        self.run_end
            .as_ref()
            .map_or(self.last_ns, |e| e.ns.max(self.last_ns))
    }

    fn seen(&mut self, ns: u64) {
        self.last_ns = self.last_ns.max(ns);
    }

    /// Drops the objects `forget` picks, with their wait sites, and returns their ids: a live
    /// view following a long run keeps only what it may still show.
    pub fn forget_objects(&mut self, mut forget: impl FnMut(&Object) -> bool) -> Vec<u64> {
        let mut dropped = Vec::new();
        let mut sites = 0;
        self.objects.retain(|o| {
            let drop = forget(o);
            if drop {
                dropped.push(o.object_id);
                sites += o.wait_sites().len();
            }
            !drop
        });
        self.wait_site_count = self.wait_site_count.saturating_sub(sites);
        dropped
    }

    /// Drops the threads `forget` picks (they stay counted in [`Model::threads_started`]).
    pub fn forget_threads(&mut self, mut forget: impl FnMut(&Thread) -> bool) {
        let mut ended = 0;
        self.threads.retain(|t| {
            let drop = forget(t);
            ended += usize::from(drop && t.exit_ns.is_some());
            !drop
        });
        self.ended_in_table -= ended;
    }

    /// The thread that has `tid` now, made if the log had none: for a record about it.
    fn thread(&mut self, tid: u32) -> Option<&mut Thread> {
        self.thread_entry(tid, false)
    }

    /// The same, for its start record (`starting`): a tid whose threads were put aside makes a
    /// new thread only when one starts on it; any other record about it is about the ended one.
    fn thread_entry(&mut self, tid: u32, starting: bool) -> Option<&mut Thread> {
        // 0 stands for a thread the shim did not know (a holder it never saw), not a thread.
        if tid == 0 {
            return None;
        }
        if !self.threads.contains_key(&tid) {
            let before = self.tid_uses.get(&tid).map(|u| u.nth);
            if (before.is_some() && !starting) || self.threads.len() >= MAX_STORED {
                self.overflow.threads += u64::from(before.is_none());
                return None;
            }
            if before.is_some() {
                self.tids_reused += 1;
            }
            // Past the tids followed, whether an earlier thread had it is not known.
            let nth = match before {
                Some(0) => 0,
                Some(n) => n + 1,
                None if self.tid_uses.len() >= MAX_STORED => 0,
                None => 1,
            };
            self.threads.insert_new(
                tid,
                Thread {
                    tid,
                    nth,
                    ..Thread::default()
                },
            );
        }
        self.threads.get_mut(&tid)
    }

    /// The threads with a row: those of [`Model::threads`] and the ended ones kept with a row,
    /// by tid, the earlier threads of a reused tid first.
    pub fn threads_listed(&self) -> Vec<&Thread> {
        let mut v: Vec<&Thread> = self
            .threads
            .values()
            .chain(self.ended_threads.iter().map(|e| &e.thread))
            .collect();
        v.sort_by_key(|t| (t.tid, t.nth));
        v
    }

    /// Every thread the log had: those of [`Model::threads`] and those put aside.
    pub fn threads_seen(&self) -> u64 {
        (self.threads.len() + self.ended_threads.len()) as u64 + self.ended_sum.threads
    }

    /// Whether a thread of this process had `tid` (a holder another process's log names is not
    /// one).
    pub fn knows_tid(&self, tid: u32) -> bool {
        tid != 0 && (self.threads.contains_key(&tid) || self.tid_uses.contains_key(&tid))
    }

    /// What to call the thread a record names by `tid` alone: its name when every thread that
    /// had the tid had that name, else how many threads had it.
    pub fn thread_name(&self, tid: u32) -> TidName<'_> {
        let now = self.threads.get(&tid);
        fn named(name: Option<&str>) -> TidName<'_> {
            name.map_or(TidName::Unnamed, TidName::Name)
        }
        let Some(uses) = self.tid_uses.get(&tid) else {
            return named(now.and_then(|t| t.name.as_deref()));
        };
        match (now, &uses.name) {
            (Some(t), _) if uses.same_name(t.name.as_deref()) => named(t.name.as_deref()),
            (None, Some(name)) => named(name.as_deref()),
            (now, _) => TidName::Several(now.map_or(uses.nth, |t| t.nth)),
        }
    }

    /// Puts aside the ended thread `t` (its tid reused, or to keep memory bounded) at `at`,
    /// with the sampler's view of it: as a row while there are few, else only if it is among
    /// those that spent most time not running ([`Model::prune_ended_rows`]).
    fn put_aside(&mut self, t: Thread, at: u64) {
        let states = self.states.take_thread(t.tid, at);
        if let Some(uses) = self.tid_uses.get_mut(&t.tid) {
            uses.nth = t.nth;
            if !uses.same_name(t.name.as_deref()) {
                uses.name = None;
            }
        } else if self.tid_uses.len() < MAX_STORED {
            let name = Some(t.name.as_deref().map(Box::from));
            self.tid_uses.insert(t.tid, TidUses { nth: t.nth, name });
        }
        self.ended_threads.push(EndedThread { thread: t, states });
        if self.ended_threads.len() >= 2 * MAX_ENDED_ROWS {
            self.prune_ended_rows();
        }
    }

    /// Keeps the [`MAX_ENDED_ROWS`] ended rows that spent most time not running (the earliest
    /// among equals), summing the others.
    fn prune_ended_rows(&mut self) {
        let mut rows = std::mem::take(&mut self.ended_threads);
        rows.sort_by_key(|e| std::cmp::Reverse(e.not_running_ns()));
        let start = self.start_ns();
        for e in rows.drain(MAX_ENDED_ROWS.min(rows.len())..) {
            self.ended_sum
                .add(&e, e.thread.life_ns(start, self.last_ns));
        }
        self.ended_threads = rows;
    }

    /// Puts aside the ended threads of [`Model::threads`] once they are more than
    /// [`ENDED_IN_TABLE`]: those whose end the sampler has looked past (so their last interval
    /// counted), or all of them if that leaves too many.
    fn put_ended_aside(&mut self) {
        if self.ended_in_table <= ENDED_IN_TABLE {
            return;
        }
        let settled = if self.states.any() {
            self.states.last_look()
        } else {
            u64::MAX
        };
        let all = self.ended_in_table > 2 * ENDED_IN_TABLE;
        // No look since the last time: none more is settled (a sampler that stopped early).
        if !all && self.aside_at_look == Some(settled) {
            return;
        }
        self.aside_at_look = Some(settled);
        self.put_aside_ended(|x| all || x <= settled);
    }

    /// Puts aside the ended threads of [`Model::threads`] (but the main one) whose exit time
    /// `put` picks.
    fn put_aside_ended(&mut self, mut put: impl FnMut(u64) -> bool) {
        let mut aside = Vec::new();
        self.threads.retain(|t| {
            let aside_now = !t.is_main && t.exit_ns.is_some_and(&mut put);
            if aside_now {
                aside.push(t.clone());
            }
            !aside_now
        });
        self.ended_in_table -= aside.len();
        let at = self.last_ns;
        for t in aside {
            self.put_aside(t, at);
        }
    }

    fn object(&mut self, object_id: u64) -> Option<&mut Object> {
        if !self.objects.contains_key(&object_id) {
            if self.objects.len() >= MAX_STORED {
                self.overflow.objects += 1;
                return None;
            }
            self.objects.insert_new(
                object_id,
                Object {
                    object_id,
                    ..Object::default()
                },
            );
        }
        self.objects.get_mut(&object_id)
    }

    fn record(&mut self, record_id: u64, object_id: u64) -> Option<&mut ContentionRecord> {
        if !self.records.contains_key(&record_id) {
            if self.records.len() >= MAX_RECORDS {
                self.overflow.contention_records += 1;
                return None;
            }
            self.records.insert(
                record_id,
                ContentionRecord {
                    record_id,
                    object_id,
                    ..ContentionRecord::default()
                },
            );
        }
        self.records.get_mut(&record_id)
    }

    fn push_history<T>(list: &mut Vec<T>, item: T, overflow: &mut u64) {
        if list.len() < MAX_HISTORY {
            list.push(item);
        } else {
            *overflow += 1;
        }
    }

    /// Folds one batch of per-wait events into the model, its waits already unpacked (or why
    /// they could not be).
    pub fn add_wait_events(&mut self, e: &WaitEvents, waits: Result<&[WaitSpan], &DecodeError>) {
        self.seen(e.base_ns);
        self.events.add(e, waits);
    }

    /// Folds one record into the model.
    pub fn add(&mut self, record: Record) {
        match record {
            Record::RunStart(r) => {
                self.seen(r.mono_ns);
                // A second start record (damage, or a log reused) does not replace the first.
                if self.run.is_none() {
                    self.run = Some(r);
                }
            }
            Record::RunEnd(r) => {
                self.seen(r.ns);
                self.run_end = Some(r);
            }
            Record::ThreadSamples(t) => {
                self.seen(t.ns);
                let ncpus = self.run.as_ref().map_or(1, |r| r.ncpus);
                self.states.add_threads(t, ncpus);
            }
            Record::CpuSample(c) => {
                self.seen(c.ns);
                self.states.add_cpus(c);
            }
            Record::ThreadTotals(t) => {
                self.seen(t.ns);
                self.states.thread_totals(t);
            }
            Record::ThreadSwitches(t) => {
                self.seen(t.ns);
                self.states.thread_switches(t);
            }
            Record::BlockedChain(c) => {
                self.seen(c.ns);
                self.states.blocked_chain(&c);
            }
            Record::ProgressPoint(p) => {
                self.seen(p.ns);
                self.progress.point(p);
            }
            Record::ProgressCounts(c) => {
                self.seen(c.ns);
                self.progress.counts(c);
            }
            Record::ShimCost(mut c) => {
                self.seen(c.ns);
                // Totals since the thread started: the latest holds the others. A damaged log
                // cannot make the list long (there are a handful of kinds of work).
                if self.shim_cost.as_ref().is_none_or(|old| c.ns >= old.ns) {
                    c.tasks.truncate(MAX_SHIM_TASKS);
                    self.shim_cost = Some(c);
                }
            }
            Record::WaitEvents(e) => {
                let waits = e.waits();
                self.add_wait_events(&e, waits.as_deref());
            }
            Record::OpenWaits(mut w) => {
                self.seen(w.ns);
                let cut = cut_list(&mut w.waits, MAX_OPEN_WAITS);
                self.count_cut(cut);
                self.open_waits = Some(w);
            }
            Record::Exec(mut e) => {
                self.seen(e.ns);
                let cut = cut_string(&mut e.path, MAX_PATH);
                self.count_cut(cut);
                self.exec = Some(e);
            }
            Record::Module(mut m) => {
                self.modules_read += 1;
                if self.modules.len() >= MAX_MODULES && !self.modules.contains_key(&m.module_id) {
                    self.overflow.modules += 1;
                } else {
                    let mut cut = cut_string(&mut m.path, MAX_PATH);
                    cut |= cut_list(&mut m.build_id, MAX_BUILD_ID);
                    cut |= cut_list(&mut m.segments, MAX_SEGMENTS);
                    self.count_cut(cut);
                    self.modules.insert(m.module_id, m);
                }
            }
            Record::Chain(mut c) => {
                if self.chains.len() >= MAX_STORED && !self.chains.contains_key(&c.chain_id) {
                    self.overflow.chains += 1;
                    return;
                }
                if c.frames.len() > MAX_CHAIN_FRAMES {
                    c.frames.truncate(MAX_CHAIN_FRAMES);
                    self.overflow.chain_frames_cut += 1;
                }
                c.frames.shrink_to_fit();
                self.chains.insert(c.chain_id, c.frames);
            }
            Record::ThreadStart(s) => {
                self.seen(s.ns);
                // A start on a tid whose thread already started or ended: the kernel gave the
                // tid of an ended thread to a new one. The ended one is put aside.
                let reused = self
                    .threads
                    .get(&s.tid)
                    .is_some_and(|t| t.start_ns.is_some() || t.exit_ns.is_some());
                if let Some(t) = self.threads.get_mut(&s.tid).filter(|_| reused) {
                    let nth = if t.nth == 0 { 0 } else { t.nth + 1 };
                    let mut old = std::mem::replace(
                        t,
                        Thread {
                            tid: s.tid,
                            nth,
                            ..Thread::default()
                        },
                    );
                    if old.exit_ns.is_some() {
                        self.ended_in_table -= 1;
                    } else {
                        // Its exit record is missing (a full log, a raw exit): it ended before.
                        old.ended_before_ns = Some(s.ns);
                    }
                    self.tids_reused += 1;
                    self.put_aside(old, s.ns);
                }
                let mut first = false;
                if let Some(t) = self.thread_entry(s.tid, true) {
                    first = t.start_ns.is_none();
                    t.parent_tid = s.parent_tid;
                    t.start_ns = Some(s.ns);
                    t.start_routine = s.start_routine;
                    t.chain_id = s.chain_id;
                    t.is_main = s.is_main != 0;
                }
                self.threads_started += u64::from(first);
            }
            Record::ThreadName(mut n) => {
                self.seen(n.ns);
                let cut = cut_string(&mut n.name, MAX_NAME);
                if let Some(t) = self.thread(n.tid) {
                    t.name = Some(n.name);
                }
                self.count_cut(cut);
            }
            Record::ThreadExit(e) => {
                self.seen(e.ns);
                self.states.thread_exit(e.tid, e.ns);
                let mut first = false;
                if let Some(t) = self.thread(e.tid) {
                    first = t.exit_ns.is_none();
                    t.exit_ns = Some(e.ns);
                }
                self.threads_exited += u64::from(first);
                self.ended_in_table += usize::from(first);
                self.put_ended_aside();
            }
            Record::ObjectCreate(c) => {
                self.seen(c.ns);
                let tid = c.tid;
                if let Some(o) = self.object(c.object_id) {
                    o.create = Some(c);
                }
                self.thread(tid);
            }
            Record::ObjectName(mut n) => {
                let cut = cut_string(&mut n.name, MAX_NAME);
                if let Some(o) = self.object(n.object_id) {
                    o.extra().name = Some(n.name);
                }
                self.count_cut(cut);
            }
            Record::ObjectDestroy(d) => {
                self.seen(d.ns);
                if let Some(o) = self.object(d.object_id) {
                    o.destroy_ns = Some(d.ns);
                }
            }
            Record::Counters(c) => {
                self.seen(c.ns);
                if let Some(o) = self.object(c.object_id) {
                    o.counters = Some(c);
                }
            }
            Record::WaitSite(w) => {
                let full = self.wait_site_count >= MAX_STORED;
                let Some(o) = self.object(w.object_id) else {
                    return;
                };
                if o.wait_sites().contains_key(&w.chain_id) || !full {
                    if o.extra().wait_sites.insert(w.chain_id, w).is_none() {
                        self.wait_site_count += 1;
                    }
                } else {
                    self.overflow.wait_sites += 1;
                }
            }
            Record::ContentionOpen(o) => {
                self.seen(o.ns);
                let (object_id, holder, waiter) = (o.object_id, o.holder_tid, o.waiter_tid);
                if let Some(r) = self.record(o.record_id, o.object_id) {
                    r.open = Some(o);
                }
                self.object(object_id);
                self.thread(holder);
                self.thread(waiter);
            }
            Record::ContentionClose(mut c) => {
                self.seen(c.ns);
                let cut = cut_list(&mut c.waiters, MAX_RECORD_WAITERS);
                self.count_cut(cut);
                let object_id = c.object_id;
                if let Some(r) = self.record(c.record_id, c.object_id) {
                    r.close = Some(c);
                }
                self.object(object_id);
            }
            Record::Highwater(h) => {
                self.seen(h.ns);
                Self::push_history(&mut self.highwater, h, &mut self.overflow.history);
            }
            Record::Deadlock(mut d) => {
                self.seen(d.ns);
                if self.deadlocks.len() < MAX_DEADLOCKS {
                    let cut = cut_list(&mut d.cycle, MAX_CYCLE_EDGES);
                    self.count_cut(cut);
                    self.deadlocks.push(d);
                } else {
                    self.overflow.history += 1;
                }
            }
            Record::DeadlockBroken(b) => {
                self.seen(b.ns);
                if self.deadlocks.iter().any(|d| d.ns == b.deadlock_ns) {
                    self.deadlocks_broken.entry(b.deadlock_ns).or_insert(b);
                }
            }
            Record::Note(mut n) => {
                self.seen(n.ns);
                let cut = cut_string(&mut n.text, MAX_NOTE);
                self.count_cut(cut);
                Self::push_history(&mut self.notes, n, &mut self.overflow.history);
            }
            Record::KindCounters(k) => {
                self.seen(k.ns);
                let cut = self.object(k.object_id).map(|o| o.set_kind_counters(k));
                if cut == Some(true) {
                    self.overflow.kind_values_cut += 1;
                }
            }
            Record::LockOrder(l) => {
                self.seen(l.ns);
                self.lock_order_edge(l);
            }
            Record::PolicyVersion(v) => {
                self.seen(v.ns);
                self.policy_version(v);
            }
            Record::RuleStats(r) => {
                self.seen(r.ns);
                let key = (r.version, r.rule);
                let stats = &mut self.policy.rule_stats;
                if stats.contains_key(&key) || stats.len() < MAX_RULE_STATS {
                    stats.insert(key, r);
                } else {
                    self.overflow.rule_stats += 1;
                }
            }
            Record::WaitEvent(e) => {
                self.seen(e.ns.saturating_add(e.wait_ns));
                self.object(e.object_id);
                self.thread(e.tid);
                self.wait_event(e);
            }
            Record::WaitEventReason(r) => {
                self.object(r.object_id);
                self.thread(r.tid);
                self.wait_event_reason(r);
            }
            Record::WaiterChains(mut c) => {
                self.seen(c.ns);
                self.object(c.object_id);
                self.policy.waiter_chains_total += 1;
                if self.policy.waiter_chains.len() < MAX_POLICY_LISTED {
                    if c.waiters.len() > MAX_LISTED_WAITERS {
                        self.overflow.chain_waiters_cut +=
                            (c.waiters.len() - MAX_LISTED_WAITERS) as u64;
                        c.waiters.truncate(MAX_LISTED_WAITERS);
                    }
                    c.waiters.shrink_to_fit();
                    for w in &c.waiters {
                        self.thread(w.tid);
                    }
                    self.policy.waiter_chains.push(c);
                } else {
                    self.overflow.waiter_chains_unlisted += 1;
                }
            }
            Record::HolderStack(h) => {
                self.seen(h.ns);
                self.object(h.object_id);
                self.thread(h.holder_tid);
                self.thread(h.waiter_tid);
                self.policy.holder_stacks_total += 1;
                Self::push_listed(
                    &mut self.policy.holder_stacks,
                    h,
                    &mut self.overflow.holder_stacks_unlisted,
                );
            }
            Record::Snapshot(s) => {
                self.seen(s.ns);
                self.policy.snapshots_total += 1;
                self.policy.last_snapshot = Some(s.clone());
                Self::push_listed(
                    &mut self.policy.snapshots,
                    s,
                    &mut self.overflow.snapshots_unlisted,
                );
            }
            Record::ObjectsQuiet(mut q) => {
                self.seen(q.ns);
                let key = (q.kind, q.chain_id);
                if q.count == 0 {
                    self.quiet.remove(&key);
                } else if self.quiet.contains_key(&key) || self.quiet.len() < MAX_CHURN_SITES {
                    let cut = cut_list(&mut q.counters, MAX_KIND_VALUES);
                    self.count_cut(cut);
                    self.quiet.insert(key, q);
                } else {
                    self.overflow.churn_sites += 1;
                }
            }
            Record::ObjectsChurned(mut c) => {
                self.seen(c.ns);
                let key = (c.kind, c.chain_id);
                if self.churned.contains_key(&key) || self.churned.len() < MAX_CHURN_SITES {
                    let cut = cut_list(&mut c.counters, MAX_KIND_VALUES);
                    self.count_cut(cut);
                    self.churned.insert(key, c);
                } else {
                    self.overflow.churn_sites += 1;
                }
            }
            Record::DelayRule(r) => {
                if self.delay.rules.len() < MAX_DELAY_RULES
                    && !self.delay.rules.iter().any(|x| x.rule == r.rule)
                {
                    self.delay.rules.push(r);
                }
            }
            Record::Delayed(d) => {
                self.seen(d.ns);
                let known = self.delay.objects.contains_key(&d.object_id);
                if known || self.delay.objects.len() < MAX_DELAYED_OBJECTS {
                    let keep = self
                        .delay
                        .objects
                        .get(&d.object_id)
                        .is_none_or(|old| old.sections <= d.sections);
                    if keep {
                        self.delay.objects.insert(d.object_id, d);
                    }
                }
            }
            Record::ThreadYields(y) => {
                self.seen(y.ns);
                for c in y.threads {
                    let known = self.yields.contains_key(&c.tid);
                    if known || self.yields.len() < MAX_YIELD_TIDS {
                        let n = self.yields.entry(c.tid).or_default();
                        *n = (*n).max(c.yields);
                    }
                }
                for c in y.sites {
                    let key = (c.tid, c.ret);
                    if self.yields.contains_key(&c.tid)
                        && (self.yield_sites.contains_key(&key)
                            || self.yield_sites.len() < MAX_YIELD_TIDS * 8)
                    {
                        let n = self.yield_sites.entry(key).or_default();
                        *n = (*n).max(c.yields);
                    }
                }
            }
            Record::Unknown { .. } => {}
        }
    }

    fn count_cut(&mut self, cut: bool) {
        if cut {
            self.overflow.cut += 1;
        }
    }

    fn push_listed<T>(list: &mut Vec<T>, item: T, overflow: &mut u64) {
        if list.len() < MAX_POLICY_LISTED {
            list.push(item);
        } else {
            *overflow += 1;
        }
    }

    fn policy_version(&mut self, mut v: PolicyVersion) {
        if self.policy.versions.len() >= MAX_POLICY_VERSIONS {
            self.overflow.policy_versions += 1;
            return;
        }
        let mut cut = cut_string(&mut v.text, MAX_POLICY_TEXT);
        if v.rules.len() > MAX_POLICY_RULES {
            v.rules.truncate(MAX_POLICY_RULES);
            cut = true;
        }
        for r in &mut v.rules {
            cut |= cut_string(r, MAX_RULE_SUMMARY);
            r.shrink_to_fit();
        }
        v.text.shrink_to_fit();
        v.rules.shrink_to_fit();
        if cut {
            self.overflow.policy_text_cut += 1;
        }
        self.policy.versions.push(v);
    }

    fn wait_event(&mut self, e: WaitEvent) {
        let p = &mut self.policy;
        p.wait_events_total += 1;
        let key = (e.version, e.rule, e.object_id);
        if p.wait_event_groups.contains_key(&key)
            || p.wait_event_groups.len() < MAX_WAIT_EVENT_GROUPS
        {
            let g = p.wait_event_groups.entry(key).or_default();
            g.count = g.count.saturating_add(1);
            g.wait_total_ns = g.wait_total_ns.saturating_add(e.wait_ns);
            g.wait_max_ns = g.wait_max_ns.max(e.wait_ns);
            match g.reasons.binary_search_by_key(&e.reason, |&(k, _)| k) {
                Ok(i) => g.reasons[i].1 = g.reasons[i].1.saturating_add(1),
                Err(i) if g.reasons.len() < MAX_GROUP_REASONS => g.reasons.insert(i, (e.reason, 1)),
                Err(_) => self.overflow.wait_event_reasons += 1,
            }
        } else {
            self.overflow.wait_event_groups += 1;
        }
        if p.wait_events.len() < MAX_WAIT_EVENTS_LISTED {
            let key = (e.object_id, e.tid, e.ns, e.version, e.rule);
            p.listed_index.entry(key).or_insert(p.wait_events.len());
            p.wait_events.push(e);
        } else {
            self.overflow.wait_events_unlisted += 1;
        }
    }

    /// A wait event's reason changed after it was written (a condition variable wait found
    /// spurious later): moved in its group, and in the event itself if it is listed. A change
    /// that matches nothing (damaged or cut log) changes nothing.
    fn wait_event_reason(&mut self, r: WaitEventReason) {
        let p = &mut self.policy;
        let key = (r.object_id, r.tid, r.ns, r.version, r.rule);
        let all_listed = p.wait_events.len() < MAX_WAIT_EVENTS_LISTED;
        match p
            .listed_index
            .get(&key)
            .and_then(|&i| p.wait_events.get_mut(i))
        {
            Some(e) if e.reason == r.from => e.reason = r.to,
            // Listed with another reason, or not listed while every event is: no such event.
            Some(_) => return,
            None if all_listed => return,
            // An event past the listed ones: only its group can tell.
            None => {}
        }
        let Some(g) = p
            .wait_event_groups
            .get_mut(&(r.version, r.rule, r.object_id))
        else {
            return;
        };
        let Ok(i) = g.reasons.binary_search_by_key(&r.from, |&(k, _)| k) else {
            return;
        };
        g.reasons[i].1 -= 1;
        if g.reasons[i].1 == 0 {
            g.reasons.remove(i);
        }
        match g.reasons.binary_search_by_key(&r.to, |&(k, _)| k) {
            Ok(j) => g.reasons[j].1 = g.reasons[j].1.saturating_add(1),
            Err(j) if g.reasons.len() < MAX_GROUP_REASONS => g.reasons.insert(j, (r.to, 1)),
            Err(_) => self.overflow.wait_event_reasons += 1,
        }
    }

    fn lock_order_edge(&mut self, l: LockOrder) {
        let key = (l.from_object, l.to_object);
        if !self.lock_order.contains_key(&key) && self.lock_order.len() >= MAX_LOCK_ORDER_EDGES {
            self.overflow.lock_order_edges += 1;
            return;
        }
        let edge = self.lock_order.entry(key).or_insert_with(|| LockEdge {
            from: l.from_object,
            to: l.to_object,
            ..LockEdge::default()
        });
        if edge
            .witnesses
            .iter()
            .any(|w| w.tid == l.tid && w.chain_id == l.chain_id)
        {
            return;
        }
        if edge.witnesses.len() < MAX_WITNESSES {
            edge.witnesses.push(Witness {
                tid: l.tid,
                chain_id: l.chain_id,
                ns: l.ns,
            });
        } else {
            edge.more_witnesses = edge.more_witnesses.saturating_add(1);
        }
    }

    /// Objects that had at least one contended acquisition or contention record.
    pub fn contended_objects(&self) -> usize {
        let with_records = self.records_per_object();
        self.objects
            .values()
            .filter(|o| o.was_contended() || with_records.contains_key(&o.object_id))
            .count()
    }

    /// Number of contention records per object.
    pub fn records_per_object(&self) -> HashMap<u64, usize> {
        let mut n = HashMap::new();
        for r in self.records.values() {
            *n.entry(r.object_id).or_insert(0) += 1;
        }
        n
    }
}

#[cfg(test)]
mod coverage_tests {
    use super::*;
    use waitshim_format::events::WaitSpan;

    fn span(begin_ns: u64, end_ns: u64) -> WaitSpan {
        WaitSpan {
            begin_ns,
            end_ns,
            object_id: 1,
            ..WaitSpan::default()
        }
    }

    /// `n` flight-recorder batches (window 2000 ns) of thread `tid`, one wait each, the first
    /// beginning at `from`, one every 10 ns; `dropped` before them.
    fn batches(e: &mut EventsSeen, tid: u32, from: u64, n: u64, dropped: u64) {
        for i in 0..n {
            let b = from + i * 10;
            let r = WaitEvents::pack(tid, b, dropped, 2_000, &[span(b, b + 5)]);
            e.add(&r, r.waits().as_deref());
        }
    }

    #[test]
    fn a_full_ring_that_dropped_waits_bounds_what_every_thread_kept() {
        let mut e = EventsSeen::default();
        // Thread 1: a full ring that dropped waits, from 5000; thread 2: a full ring from
        // 4400, dropped too; thread 3: few batches, from 4100, dropped one (a flush at its
        // buffer): its ring was not full, so it lost nothing of the window to it.
        batches(&mut e, 1, 5000, RING_CHUNKS, 7);
        batches(&mut e, 2, 4400, RING_CHUNKS, 3);
        batches(&mut e, 3, 4100, 3, 1);
        let c = e.coverage(6000).expect("a flight recorder");
        assert_eq!(c.covers_ns, Some(1900));
        assert_eq!(c.shortest, Some((1, 1000)));
        assert_eq!(c.rings_full, 2);
        // Waits that ended before the window (2000 ns before 7005) are not kept: thread 3's
        // go, and thread 2 keeps its 4 batches from 5000 on: no longer a full ring.
        let c = e.coverage(7005).expect("a flight recorder");
        assert_eq!(c.covers_ns, Some(2005));
        assert_eq!(c.shortest, Some((1, 2005)));
        assert_eq!(c.rings_full, 1);
    }

    #[test]
    fn every_wait_written_has_no_coverage_and_no_kept_wait_has_none_to_say() {
        let mut e = EventsSeen::default();
        let r = WaitEvents::pack(1, 0, 0, 0, &[span(0, 5)]);
        e.add(&r, r.waits().as_deref());
        assert_eq!(e.coverage(10), None);
        let mut e = EventsSeen::default();
        batches(&mut e, 1, 0, 2, 0);
        let c = e.coverage(1_000_000).expect("a flight recorder");
        assert_eq!((c.covers_ns, c.shortest, c.rings_full), (None, None, 0));
    }
}

#[cfg(test)]
mod futex_word_tests {
    use super::*;
    use waitshim_format::{thread_state, ObjectDestroy, ThreadSamples, ThreadState};

    fn create(m: &mut Model, object_id: u64, addr: u64, kind: ObjectKind, ns: u64) {
        m.add(Record::ObjectCreate(ObjectCreate {
            object_id,
            addr,
            kind: kind as u8,
            subtype: 0,
            origin: waitshim_format::origin::INIT,
            ns,
            tid: 1,
            chain_id: 0,
        }));
    }

    /// Thread `tid` seen at `ns` blocked in `futex` on `word`, outside the shim's calls.
    fn futex_wait(m: &mut Model, ns: u64, tid: u32, word: u64) {
        m.add(Record::ThreadSamples(ThreadSamples {
            ns,
            interval_ns: 10,
            unsampled: 0,
            threads: vec![ThreadState {
                tid,
                state: thread_state::BLOCKED,
                waiting_kind: 0,
                on_cpu_ns: 0,
                run_delay_ns: 0,
                timeslices: 0,
                syscall: crate::states::SYS_FUTEX,
                arg0: word,
                what: format!("untracked futex word {word:#x}"),
                object_id: 0,
            }],
        }));
    }

    #[test]
    fn an_untracked_futex_word_inside_an_object_is_that_object() {
        let mut m = Model::new();
        // A mutex (40 bytes) at 0x1000, destroyed at 50; another at the same address from 60;
        // a condition variable (48 bytes) at 0x2000; a futex word the shim follows at 0x3000.
        create(&mut m, 1, 0x1000, ObjectKind::Mutex, 10);
        m.add(Record::ObjectDestroy(ObjectDestroy {
            object_id: 1,
            ns: 50,
            tid: 1,
        }));
        create(&mut m, 2, 0x1000, ObjectKind::Mutex, 60);
        create(&mut m, 3, 0x2000, ObjectKind::Cond, 10);
        create(&mut m, 4, 0x3000, ObjectKind::Futex, 10);
        // Seen at 20 on mutex 1's word; at 100 on the lock word of the mutex now at 0x1000
        // (2), on the condition variable's word at +4, on the followed word, just past the
        // condition variable, and on a word of no object.
        futex_wait(&mut m, 20, 7, 0x1000);
        futex_wait(&mut m, 100, 8, 0x1010);
        futex_wait(&mut m, 100, 9, 0x2004);
        futex_wait(&mut m, 100, 10, 0x3000);
        futex_wait(&mut m, 100, 11, 0x2030);
        futex_wait(&mut m, 100, 12, 0x9000);
        m.finish();
        let st = &m.states;
        let on = |word: u64| st.futex_object(202, &format!("untracked futex word {word:#x}"));
        assert_eq!(on(0x1000), Some((1, 0)));
        assert_eq!(on(0x1010), Some((2, 0x10)));
        assert_eq!(on(0x2004), Some((3, 4)));
        assert_eq!(on(0x3000), Some((4, 0)));
        assert_eq!(on(0x2030), None, "past the condition variable's 48 bytes");
        assert_eq!(on(0x9000), None);
        // Not a futex call, or not a word the sampler named.
        assert_eq!(st.futex_object(0, "untracked futex word 0x1000"), None);
        assert_eq!(st.futex_object(202, "pipe:[3]"), None);
    }

    #[test]
    fn an_address_reused_after_the_wait_began_is_not_the_object_waited_on() {
        let mut m = Model::new();
        // The wait is seen at 20; the only object at its address is created at 30, first
        // seen in a lock call after the wait began: still that memory's object (a static
        // mutex the program's code waited on directly before the shim saw it).
        futex_wait(&mut m, 20, 7, 0x1000);
        create(&mut m, 5, 0x1000, ObjectKind::Mutex, 30);
        // Another wait, seen at 200, on a mutex destroyed at 100: not it.
        create(&mut m, 6, 0x5000, ObjectKind::Mutex, 10);
        m.add(Record::ObjectDestroy(ObjectDestroy {
            object_id: 6,
            ns: 100,
            tid: 1,
        }));
        futex_wait(&mut m, 200, 8, 0x5000);
        m.finish();
        let on = |word: u64| {
            m.states
                .futex_object(202, &format!("untracked futex word {word:#x}"))
        };
        assert_eq!(on(0x1000), Some((5, 0)));
        assert_eq!(on(0x5000), None);
    }
}

#[cfg(test)]
mod thread_tests {
    use super::*;
    use waitshim_format::{thread_state, ThreadExit, ThreadSamples, ThreadStart, ThreadState};

    fn start(m: &mut Model, tid: u32, ns: u64) {
        m.add(Record::ThreadStart(ThreadStart {
            tid,
            parent_tid: 1,
            ns,
            start_routine: 0,
            chain_id: 0,
            is_main: 0,
        }));
    }

    fn exit(m: &mut Model, tid: u32, ns: u64) {
        m.add(Record::ThreadExit(ThreadExit { tid, ns }));
    }

    #[test]
    fn a_tid_reused_by_a_later_thread_is_another_thread() {
        let mut m = Model::new();
        start(&mut m, 1, 1);
        for (i, name) in ["first", "second", "third"].into_iter().enumerate() {
            let at = 100 * (i as u64 + 1);
            start(&mut m, 7, at);
            m.add(Record::ThreadName(waitshim_format::ThreadName {
                tid: 7,
                ns: at + 1,
                name: name.into(),
            }));
            // The second one waits from its first look to its end, as the sampler sees it.
            if i == 1 {
                m.add(Record::ThreadSamples(ThreadSamples {
                    ns: at + 2,
                    interval_ns: 10,
                    threads: vec![ThreadState {
                        tid: 7,
                        state: thread_state::BLOCKED,
                        syscall: 0,
                        on_cpu_ns: 1,
                        ..ThreadState::default()
                    }],
                    unsampled: 0,
                }));
                m.add(Record::ThreadSamples(ThreadSamples {
                    ns: at + 50,
                    interval_ns: 10,
                    threads: vec![ThreadState {
                        tid: 1,
                        state: thread_state::RUNNING,
                        on_cpu_ns: 1,
                        ..ThreadState::default()
                    }],
                    unsampled: 0,
                }));
            }
            exit(&mut m, 7, at + 60);
        }
        m.finish();
        assert_eq!(m.threads_seen(), 4, "main and three threads on tid 7");
        assert_eq!(m.threads_started, 4);
        assert_eq!(m.tids_reused, 2);
        let listed: Vec<(u32, u32, Option<&str>)> = m
            .threads_listed()
            .iter()
            .map(|t| (t.tid, t.nth, t.name.as_deref()))
            .collect();
        assert_eq!(
            listed,
            vec![
                (1, 1, None),
                (7, 1, Some("first")),
                (7, 2, Some("second")),
                (7, 3, Some("third"))
            ]
        );
        assert_eq!(m.ended_sum.threads, 0);
        assert_eq!(m.threads_listed()[2].tid_text(), "7 (2nd)");
        let second = &m.ended_threads[1];
        assert_eq!(second.states.as_ref().map(|s| s.other_ns()), Some(58));
    }

    #[test]
    fn a_quarter_million_threads_cost_a_bounded_model_and_every_one_is_counted() {
        let mut m = Model::new();
        start(&mut m, 1, 1);
        // pid_max 32768: tids go round, as the kernel gives them.
        let mut ns = 10;
        for i in 0..250_000u32 {
            let tid = 300 + i % 32_000;
            start(&mut m, tid, ns);
            exit(&mut m, tid, ns + 5);
            ns += 10;
        }
        m.finish();
        assert_eq!(m.threads_seen(), 250_001);
        assert_eq!(m.threads_started, 250_001);
        assert_eq!(m.threads_exited, 250_000);
        // Rows: the main thread, and the first 1000 that ended (none spent time not running).
        assert_eq!(m.threads.len(), 1);
        assert_eq!(m.ended_threads.len(), MAX_ENDED_ROWS);
        assert_eq!(m.threads_listed().len(), 1 + MAX_ENDED_ROWS);
        assert!(m
            .ended_threads
            .iter()
            .all(|e| e.thread.start_ns < Some(10 + 10 * MAX_ENDED_ROWS as u64)));
        assert_eq!(m.ended_sum.threads, 250_000 - MAX_ENDED_ROWS as u64);
        assert!(m.tid_uses.len() <= 32_000);
        assert_eq!(m.tids_reused, 250_000 - 32_000);
        assert_eq!(m.overflow.threads, 0);
        // Each thread lived 5 ns.
        let listed_life: u64 = m
            .threads_listed()
            .iter()
            .map(|t| t.life_ns(m.start_ns(), m.last_ns))
            .sum();
        assert_eq!(
            listed_life + m.ended_sum.life_ns,
            250_000 * 5 + (ns + 5 - 10 - 1)
        );
    }

    fn name(m: &mut Model, tid: u32, ns: u64, name: &str) {
        m.add(Record::ThreadName(waitshim_format::ThreadName {
            tid,
            ns,
            name: name.into(),
        }));
    }

    #[test]
    fn a_record_naming_a_reused_tid_gets_a_name_only_if_every_thread_that_had_it_had_it() {
        let mut m = Model::new();
        start(&mut m, 1, 1);
        // Tid 7: "pool" twice; tid 8: "reader", then "writer".
        for (tid, names) in [(7, ["pool", "pool"]), (8, ["reader", "writer"])] {
            for (i, n) in names.into_iter().enumerate() {
                let at = 100 * (i as u64 + 1) + u64::from(tid);
                start(&mut m, tid, at);
                name(&mut m, tid, at + 1, n);
                exit(&mut m, tid, at + 50);
            }
        }
        // Tid 9: one thread, still running.
        start(&mut m, 9, 500);
        name(&mut m, 9, 501, "alone");
        m.finish();
        assert_eq!(m.thread_name(7), TidName::Name("pool"));
        assert_eq!(m.thread_name(8), TidName::Several(2));
        assert_eq!(m.thread_name(9), TidName::Name("alone"));
        assert_eq!(m.thread_name(1), TidName::Unnamed);
        assert_eq!(m.threads_seen(), 6);
        assert_eq!(m.tids_reused, 2);
    }

    #[test]
    fn a_thread_whose_exit_record_is_missing_ended_before_its_tid_went_to_another() {
        let mut m = Model::new();
        start(&mut m, 1, 0);
        start(&mut m, 7, 100);
        // No exit record for the first thread on tid 7 (the log was full, or a raw exit).
        start(&mut m, 7, 400);
        exit(&mut m, 7, 450);
        m.add(Record::RunEnd(RunEnd {
            ns: 1_000,
            reason: waitshim_format::end_reason::EXIT,
            exit_status: 0,
            hwm: 0,
            dropped: 0,
        }));
        m.finish();
        let t: Vec<(u32, Option<u64>, Option<u64>)> = m
            .threads_listed()
            .iter()
            .filter(|t| t.tid == 7)
            .map(|t| (t.nth, t.exit_ns, t.ended_before_ns))
            .collect();
        assert_eq!(t, vec![(1, None, Some(400)), (2, Some(450), None)]);
        // Main 1000 ns, the first on tid 7 at most 300 (not to the end of the run), the second 50.
        assert_eq!(crate::findings::thread_time(&m), 1_000 + 300 + 50);
    }
}
