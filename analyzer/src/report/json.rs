//! The JSON report: one document, schema `waitshim-report/1`, documented field by field in
//! `analyzer/JSON.md`; each of its objects is a struct here, fields in the documented order.
//! Fields are only ever added; a field whose value is unknown is `null`.
//!
//! The report is written as it is made: the lists that grow with the log (objects, threads,
//! contention records, chains, ...) are `Each` lists, whose elements are made one at a time
//! while the serializer writes them, so that memory holds the model and one element, never the
//! whole document.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use waitshim_format::contract::holder_stack;
use waitshim_format::{
    end_reason, origin, Deadlock, Highwater, HolderStack, Module, ObjectKind, ObjectsChurned,
    ObjectsQuiet, PolicyVersion, RuleStats, Snapshot, WaitEvent, WaiterChains,
};

use super::{Ctx, Options, Warning};
use crate::ending::NoEnd;
use crate::findings::Collected;
use crate::lockorder::{Stopped, MAX_CYCLES, MAX_CYCLE_LEN};
use crate::model::{
    churn_kind_json, errno_name, is_ended_key, kind_counter_json, reason_json,
    snapshot_source_name, ContentionRecord, Model, Object, Thread, WaitEventGroup,
};
use crate::symbolize::Frame;
use crate::Analysis;

pub const SCHEMA: &str = "waitshim-report/1";

/// Addresses are strings (`"0x55d0c0ffee00"`): 64-bit values do not survive JSON readers that
/// use doubles.
fn addr(a: u64) -> String {
    format!("{a:#x}")
}

/// A chain id, `None` (`null`) for 0: no chain.
fn chain_ref(id: u32) -> Option<u32> {
    (id != 0).then_some(id)
}

/// A JSON array whose elements `make` builds from each of `items`, one at a time while the
/// array is written. It can be written once: the items are consumed.
struct Each<'c, 'a, I: Iterator, T> {
    ctx: &'c RefCell<Ctx<'a>>,
    items: RefCell<Option<I>>,
    make: fn(&mut Ctx<'a>, I::Item) -> T,
}

impl<'c, 'a, I: Iterator, T: Serialize> Each<'c, 'a, I, T> {
    fn new(ctx: &'c RefCell<Ctx<'a>>, items: I, make: fn(&mut Ctx<'a>, I::Item) -> T) -> Self {
        Each {
            ctx,
            items: RefCell::new(Some(items)),
            make,
        }
    }
}

impl<I: Iterator, T: Serialize> Serialize for Each<'_, '_, I, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        let items = self.items.borrow_mut().take();
        for item in items.into_iter().flatten() {
            let element = (self.make)(&mut self.ctx.borrow_mut(), item);
            seq.serialize_element(&element)?;
        }
        seq.end()
    }
}

/// A JSON object of counts by name, in the order given.
#[derive(Default)]
struct Counts(Vec<(String, u64)>);

impl Counts {
    /// Counts whose names may repeat: a name keeps its first place and its last count. For
    /// lists as short as what the model keeps of them.
    fn deduplicated(counts: impl Iterator<Item = (String, u64)>) -> Self {
        let mut out: Vec<(String, u64)> = Vec::new();
        for (name, n) in counts {
            match out.iter_mut().find(|(k, _)| *k == name) {
                Some(slot) => slot.1 = n,
                None => out.push((name, n)),
            }
        }
        Counts(out)
    }
}

/// Counts whose names are distinct.
impl FromIterator<(String, u64)> for Counts {
    fn from_iter<T: IntoIterator<Item = (String, u64)>>(iter: T) -> Self {
        Counts(iter.into_iter().collect())
    }
}

impl Serialize for Counts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, n) in &self.0 {
            map.serialize_entry(name, n)?;
        }
        map.end()
    }
}

/// FRAME.
#[derive(Serialize)]
struct FrameJson {
    addr: String,
    function: Option<String>,
    offset: Option<u64>,
    file: Option<String>,
    line: Option<u32>,
    module: Option<String>,
    module_offset: Option<u64>,
    inlined: bool,
    /// Only on a site (a frame standing for a chain): how many frames of the chain, innermost
    /// first, were passed over as runtime code before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped_frames: Option<u32>,
}

impl From<Frame> for FrameJson {
    fn from(f: Frame) -> Self {
        FrameJson {
            addr: addr(f.addr),
            function: f.function,
            offset: f.offset,
            file: f.file,
            line: f.line,
            module: f.module,
            module_offset: f.module_offset,
            inlined: f.inlined,
            skipped_frames: f.skipped,
        }
    }
}

/// WARNING.
#[derive(Serialize)]
struct WarningJson {
    kind: &'static str,
    message: String,
    offset: Option<u64>,
    bytes: Option<u64>,
}

impl From<Warning> for WarningJson {
    fn from(w: Warning) -> Self {
        WarningJson {
            kind: w.kind,
            message: w.message,
            offset: w.offset,
            bytes: w.bytes,
        }
    }
}

#[derive(Serialize)]
struct DamageJson {
    stretches: u64,
    bytes: u64,
}

/// RUN's `end`.
#[derive(Serialize)]
struct EndJson {
    at_ns: u64,
    reason: &'static str,
    exit_status: Option<i64>,
    exec_path: Option<String>,
    signal: Option<i64>,
    hwm: u32,
    dropped: u64,
}

/// RUN.
#[derive(Serialize)]
struct RunJson {
    pid: Option<u32>,
    ppid: Option<u32>,
    exe: Option<String>,
    cmdline: Option<Vec<String>>,
    shim_version: Option<String>,
    ncpus: Option<u32>,
    start_realtime_ns: Option<u64>,
    start_mono_ns: Option<u64>,
    duration_ns: u64,
    duration_is_lower_bound: bool,
    end: Option<EndJson>,
    no_end: Option<&'static str>,
    threads_seen: u64,
    objects_tracked: usize,
    objects_contended: usize,
    objects_churned: u64,
    objects_quiet: u64,
}

fn run(m: &Model, no_end: Option<&NoEnd>) -> RunJson {
    let r = m.run.as_ref();
    let (duration_ns, duration_is_lower_bound) = m.duration_ns();
    RunJson {
        pid: r.map(|r| r.pid),
        ppid: r.map(|r| r.ppid),
        exe: r.map(|r| r.exe.clone()),
        cmdline: r.map(|r| r.cmdline.clone()),
        shim_version: r.map(|r| r.shim_version.clone()),
        ncpus: r.map(|r| r.ncpus),
        start_realtime_ns: r.map(|r| r.realtime_ns),
        start_mono_ns: r.map(|r| r.mono_ns),
        duration_ns,
        duration_is_lower_bound,
        end: m.run_end.as_ref().map(|e| EndJson {
            at_ns: m.rel(e.ns),
            reason: end_reason::name(e.reason),
            exit_status: (e.exit_status >= 0 && e.reason != end_reason::SIGNAL)
                .then_some(e.exit_status),
            signal: (e.reason == end_reason::SIGNAL).then_some(e.exit_status),
            exec_path: (e.reason == end_reason::EXEC)
                .then(|| m.exec.as_ref().map(|x| x.path.clone()))
                .flatten(),
            hwm: e.hwm,
            dropped: e.dropped,
        }),
        no_end: no_end.map(|n| match n {
            NoEnd::Running { .. } => "running",
            NoEnd::Unverified { .. } => "unknown",
            NoEnd::GoProgram(_) => "go_program",
            NoEnd::NoExitHandlers => "no_exit_handlers",
        }),
        threads_seen: m.threads_seen(),
        objects_tracked: m.objects.len(),
        objects_contended: m.contended_objects(),
        objects_churned: m.objects_churned(),
        objects_quiet: m.objects_quiet(),
    }
}

/// An element of HIGHWATER's `history`.
#[derive(Serialize)]
struct RiseJson {
    at_ns: u64,
    hwm: u32,
    object_id: u64,
    tid: u32,
}

/// HIGHWATER.
#[derive(Serialize)]
struct HighwaterJson<H> {
    hwm: u32,
    object_id: Option<u64>,
    tid: Option<u32>,
    at_ns: Option<u64>,
    history: H,
}

/// An element of DEADLOCK's `cycle`.
#[derive(Serialize)]
struct DeadlockEdgeJson {
    tid: u32,
    object_id: u64,
    wait_chain: u32,
    holder_tid: u32,
}

/// DEADLOCK.
#[derive(Serialize)]
struct DeadlockJson {
    at_ns: u64,
    detected_by: u32,
    found_by: &'static str,
    broken: Option<BrokenJson>,
    cycle: Vec<DeadlockEdgeJson>,
}

/// DEADLOCK's `broken`.
#[derive(Serialize)]
struct BrokenJson {
    tid: u32,
    at_ns: u64,
    ended: Option<String>,
}

/// LOCK_ORDER.
#[derive(Serialize)]
struct LockOrderJson {
    edges: usize,
    potential_deadlocks: usize,
    search: &'static str,
    max_cycles: usize,
    max_cycle_length: usize,
    long_cycles_skipped: bool,
}

/// An element of EDGE's `witnesses`.
#[derive(Serialize)]
struct WitnessJson {
    tid: u32,
    chain: u32,
    at_ns: u64,
}

/// EDGE.
#[derive(Serialize)]
struct EdgeJson {
    from: u64,
    to: u64,
    tid: Option<u32>,
    chain: Option<u32>,
    witnesses: Vec<WitnessJson>,
    more_witnesses: u64,
}

/// POTENTIAL_DEADLOCK.
#[derive(Serialize)]
struct PotentialDeadlockJson {
    cycle: Vec<u64>,
    deadlocked: bool,
    edges: Vec<EdgeJson>,
}

/// RECORD's `opened_by`.
#[derive(Serialize)]
struct OpenedByJson {
    tid: u32,
    chain_id: u32,
}

/// An element of RECORD's `waiters`.
#[derive(Serialize)]
struct RecordWaiterJson {
    tid: u32,
    chain_id: u32,
    wait_ns: u64,
}

/// RECORD.
#[derive(Serialize)]
struct RecordJson {
    record_id: u64,
    object_id: u64,
    state: &'static str,
    level: u32,
    reason: Option<&'static str>,
    opened_at_ns: Option<u64>,
    closed_at_ns: Option<u64>,
    elapsed_ns: u64,
    elapsed_is_lower_bound: bool,
    threads_tried: Option<u32>,
    holder_tid: Option<u32>,
    holder_chain: Option<u32>,
    opened_by: Option<OpenedByJson>,
    waiters: Vec<RecordWaiterJson>,
    waiters_total: Option<u32>,
    coalesced: u32,
}

fn record(m: &Model, r: &ContentionRecord) -> RecordJson {
    use crate::report::record_words::WaitedFor;
    // An open record's holder is the one the shim saw at the opening: only objects a thread
    // holds (and a joined thread) have one; the others wait for an act nobody had done yet.
    let waited = WaitedFor::of(m.objects.get(&r.object_id).and_then(|o| o.kind()));
    let holder_tid = r
        .holder_tid()
        .filter(|_| r.close.is_some() || matches!(waited, WaitedFor::Holder | WaitedFor::Exit));
    RecordJson {
        record_id: r.record_id,
        object_id: r.object_id,
        state: if r.still_open() { "open" } else { "complete" },
        level: r.level(),
        reason: m.record_reason(r),
        opened_at_ns: r.opened_ns().map(|ns| m.rel(ns)),
        closed_at_ns: r.close.as_ref().map(|c| m.rel(c.ns)),
        elapsed_ns: r.elapsed_ns(m.last_ns),
        elapsed_is_lower_bound: r.still_open(),
        threads_tried: r.close.as_ref().map(|c| c.threads_tried),
        holder_tid,
        holder_chain: r.close.as_ref().map(|c| c.holder_chain),
        opened_by: r.open.as_ref().map(|o| OpenedByJson {
            tid: o.waiter_tid,
            chain_id: o.waiter_chain,
        }),
        waiters: r
            .close
            .iter()
            .flat_map(|c| &c.waiters)
            .map(|w| RecordWaiterJson {
                tid: w.tid,
                chain_id: w.chain_id,
                wait_ns: w.wait_ns,
            })
            .collect(),
        waiters_total: r.close.as_ref().map(|c| c.waiters_total),
        coalesced: r.close.as_ref().map_or(0, |c| c.coalesced),
    }
}

/// GROUP.
#[derive(Serialize)]
struct GroupJson {
    frames: Vec<String>,
    records: Vec<u64>,
    total_elapsed_ns: u64,
    max_level: u32,
}

/// An element of OBJECT's `wait_sites`.
#[derive(Serialize)]
struct WaitSiteJson {
    chain_id: u32,
    count: u64,
    wait_total_ns: u64,
    wait_max_ns: u64,
}

/// OBJECT.
#[derive(Serialize)]
struct ObjectJson {
    object_id: u64,
    kind: Option<&'static str>,
    /// What waiting on it is: `lock`, `event` (another thread to act) or `join`.
    waits_are: &'static str,
    subtype: Option<u32>,
    origin: Option<&'static str>,
    addr: Option<String>,
    name: Option<String>,
    created_at_ns: Option<u64>,
    created_by_tid: Option<u32>,
    creation_chain: Option<u32>,
    creation_site: Option<FrameJson>,
    /// The global or static variable holding the object, when its address is in a module.
    global: Option<GlobalJson>,
    destroyed_at_ns: Option<u64>,
    counters: Option<Counts>,
    ended: Counts,
    ended_errors: Counts,
    wait_sites: Vec<WaitSiteJson>,
    /// CPU time lost to it (THREAD_STATES `lost_parallelism`); null when the run was not
    /// sampled.
    lost_parallelism_ns: Option<u64>,
    /// Time of the process's stops during which a thread was seen in a wait on it (null: none).
    waited_while_stopped_ns: Option<u64>,
    /// The distribution of its waits from the per-wait events (null without any).
    wait_times: Option<WaitTimesJson>,
}

/// OBJECT's `wait_times`: percentiles as the upper bounds of log-scale buckets (four to a power
/// of two), never above the longest wait; the buckets with waits.
#[derive(Serialize)]
struct WaitTimesJson {
    events: u64,
    total_ns: u64,
    max_ns: u64,
    p50_at_most_ns: u64,
    p90_at_most_ns: u64,
    p99_at_most_ns: u64,
    buckets: Vec<BucketJson>,
}

#[derive(Serialize)]
struct BucketJson {
    from_ns: u64,
    to_ns: u64,
    count: u64,
}

fn wait_times(h: &crate::histogram::Histogram) -> WaitTimesJson {
    let at = |share| h.at_most(share).unwrap_or(0);
    WaitTimesJson {
        events: h.waits,
        total_ns: h.total_ns,
        max_ns: h.max_ns,
        p50_at_most_ns: at(0.5),
        p90_at_most_ns: at(0.9),
        p99_at_most_ns: at(0.99),
        buckets: h
            .buckets()
            .map(|(from_ns, to_ns, count)| BucketJson {
                from_ns,
                to_ns,
                count,
            })
            .collect(),
    }
}

/// An object's counters: those every object has (when the log has its `Counters` record), then
/// the kind-specific ones its `KindCounters` record holds, by name (`key_N` for keys this
/// analyzer does not know); `None` when it has neither. Reason codes are in `ended`, not here.
fn counters(o: &Object) -> Option<Counts> {
    let common = o.counters.iter().flat_map(|k| {
        [
            ("acquisitions", k.acquisitions),
            ("contended", k.contended),
            ("owner_changes", k.owner_changes),
            ("busy", k.busy),
            ("timeouts", k.timeouts),
            ("errors", k.errors),
            ("wait_total_ns", k.wait_total_ns),
            ("wait_max_ns", k.wait_max_ns),
            ("hold_total_ns", k.hold_total_ns),
            ("hold_max_ns", k.hold_max_ns),
            ("hold_samples", k.hold_samples),
            ("max_waiters", u64::from(k.max_waiters)),
        ]
        .map(|(name, n)| (name.to_string(), n))
    });
    // The total hold time, scaled from the timed holds when not every hold was timed.
    let estimate = o
        .hold_total_estimate()
        .map(|(ns, _)| ("hold_total_estimated_ns".to_string(), ns));
    let kind = o
        .kind_counters()
        .iter()
        .filter(|&&(key, _)| !is_ended_key(key))
        .map(|&(key, n)| (kind_counter_json(key), n));
    let counts: Counts = common.chain(estimate).chain(kind).collect();
    (!counts.0.is_empty()).then_some(counts)
}

fn object(ctx: &mut Ctx<'_>, o: &Object) -> ObjectJson {
    let c = o.create.as_ref();
    let m = ctx.model;

    let waits_are = match ctx.group_of(o.object_id) {
        crate::findings::Group::Lock => "lock",
        crate::findings::Group::Event => "event",
        crate::findings::Group::Join => "join",
    };
    ObjectJson {
        object_id: o.object_id,
        kind: o.kind().map(ObjectKind::name),
        waits_are,
        subtype: c.map(|c| c.subtype),
        origin: c.map(|c| match c.origin {
            origin::INIT => "init",
            origin::FIRST_USE => "first_use",
            _ => "unknown",
        }),
        addr: c.map(|c| addr(c.addr)),
        name: o.name().map(str::to_string),
        created_at_ns: c.map(|c| m.rel(c.ns)),
        created_by_tid: c.map(|c| c.tid),
        creation_chain: c.map(|c| c.chain_id),
        creation_site: ctx.creation_site(o.object_id).map(FrameJson::from),
        global: ctx.global(o.object_id).map(|g| GlobalJson {
            name: g.name(o.object_bytes()),
            symbol: g.symbol,
            offset: g.offset,
            size: g.size,
            module: g.module,
        }),
        destroyed_at_ns: o.destroy_ns.map(|ns| m.rel(ns)),
        counters: counters(o),
        ended: o
            .ended()
            .into_iter()
            .map(|(name, _, n)| (name.to_string(), n))
            .collect(),
        ended_errors: o
            .ended_errnos()
            .into_iter()
            .map(|(e, n)| (errno_name(e), n))
            .collect(),
        wait_sites: o
            .wait_sites()
            .values()
            .map(|w| WaitSiteJson {
                chain_id: w.chain_id,
                count: w.count,
                wait_total_ns: w.wait_total_ns,
                wait_max_ns: w.wait_max_ns,
            })
            .collect(),
        lost_parallelism_ns: ctx.lost_to(o.object_id),
        waited_while_stopped_ns: ctx.model.states.stops.in_waits.get(&o.object_id).copied(),
        wait_times: ctx.histogram(o.object_id).map(wait_times),
    }
}

/// GLOBAL.
#[derive(Serialize)]
struct GlobalJson {
    name: String,
    symbol: String,
    offset: u64,
    size: u64,
    module: String,
}

/// SHORT_LIVED.
#[derive(Serialize)]
struct ShortLivedJson {
    kind: String,
    chain_id: u32,
    count: u64,
    acquisitions: u64,
    lifetime_total_ns: u64,
    lifetime_max_ns: u64,
    counters: Counts,
    created_at: Option<FrameJson>,
}

/// An element of OPEN_WAITS's `waits`.
#[derive(Serialize)]
struct OpenWaitJson {
    tid: u32,
    object_id: u64,
    since_ns: u64,
    waited_ns: u64,
    chain_id: u32,
    holder_tid: Option<u32>,
    holder_in_process: bool,
}

/// OPEN_WAITS.
#[derive(Serialize)]
struct OpenWaitsJson {
    at_ns: Option<u64>,
    waits: Vec<OpenWaitJson>,
    waiting_while_holding: Vec<HoldingJson>,
}

/// An element of OPEN_WAITS' `waiting_while_holding`.
#[derive(Serialize)]
struct HoldingJson {
    tid: u32,
    waits_on: u64,
    holds: u64,
    needed_by: u32,
}

fn open_waits(ctx: &Ctx<'_>) -> OpenWaitsJson {
    let m = ctx.model;
    let Some(o) = m.open_waits.as_ref() else {
        return OpenWaitsJson {
            at_ns: None,
            waits: Vec::new(),
            waiting_while_holding: Vec::new(),
        };
    };
    OpenWaitsJson {
        at_ns: Some(m.rel(o.ns)),
        waits: o
            .waits
            .iter()
            .map(|w| OpenWaitJson {
                tid: w.tid,
                object_id: w.object_id,
                since_ns: m.rel(w.since_ns),
                waited_ns: o.ns.saturating_sub(w.since_ns),
                chain_id: w.chain_id,
                holder_tid: (w.holder_tid != 0).then_some(w.holder_tid),
                holder_in_process: m.knows_tid(w.holder_tid),
            })
            .collect(),
        waiting_while_holding: crate::findings::waiting_while_holding(m)
            .into_iter()
            .map(|h| HoldingJson {
                tid: h.tid,
                waits_on: h.waits_on,
                holds: h.holds,
                needed_by: h.needed_by,
            })
            .collect(),
    }
}

/// An element of a CROSS_DEADLOCK's `waits`.
#[derive(Serialize)]
struct CrossWaitJson {
    pid: u32,
    tid: u32,
    object_id: u64,
    holder_tid: u32,
    log: String,
}

/// CROSS_DEADLOCK.
#[derive(Serialize)]
struct CrossDeadlockJson {
    waits: Vec<CrossWaitJson>,
}

fn cross_process(ctx: &Ctx<'_>) -> Vec<CrossDeadlockJson> {
    let Some(pid) = ctx.model.run.as_ref().map(|r| r.pid) else {
        return Vec::new();
    };
    ctx.opts
        .cross_process
        .iter()
        .filter(|c| c.involves(pid))
        .map(|c| CrossDeadlockJson {
            waits: c
                .waits
                .iter()
                .map(|w| CrossWaitJson {
                    pid: w.pid,
                    tid: w.tid,
                    object_id: w.object_id,
                    holder_tid: w.holder_tid,
                    log: w.log.clone(),
                })
                .collect(),
        })
        .collect()
}

/// QUIET.
#[derive(Serialize)]
struct QuietJson {
    kind: String,
    chain_id: u32,
    count: u64,
    acquisitions: u64,
    owner_changes: u64,
    counters: Counts,
    created_at: Option<FrameJson>,
}

fn quiet(ctx: &mut Ctx<'_>, q: &ObjectsQuiet) -> QuietJson {
    let m = ctx.model;
    QuietJson {
        kind: churn_kind_json(q.kind),
        chain_id: q.chain_id,
        count: q.count,
        acquisitions: q.acquisitions,
        owner_changes: q.owner_changes,
        counters: Counts::deduplicated(
            q.counters
                .iter()
                .map(|v| (kind_counter_json(v.key), v.value)),
        ),
        created_at: ctx.sym.site(m, q.chain_id).map(FrameJson::from),
    }
}

/// THREAD.
#[derive(Serialize)]
struct ThreadJson {
    tid: u32,
    nth: Option<u32>,
    parent_tid: Option<u32>,
    name: Option<String>,
    is_main: bool,
    start_ns: Option<u64>,
    exit_ns: Option<u64>,
    ended_before_ns: Option<u64>,
    start_routine: Option<FrameJson>,
    creation_chain: Option<u32>,
    created_at: Option<FrameJson>,
    yields: Option<u64>,
    yield_sites: Option<Vec<YieldSiteJson>>,
}

#[derive(Serialize)]
struct YieldSiteJson {
    at: Option<FrameJson>,
    yields: u64,
}

/// Ended threads put aside without a row (see JSON.md, THREADS_SUMMED).
#[derive(Serialize)]
struct ThreadsSummedJson {
    threads: u64,
    life_ns: u64,
    sampled: u64,
    running_ns: u64,
    runnable_ns: u64,
    tracked_wait_ns: u64,
    other_wait_ns: u64,
    timeslices: u64,
    tids_reused: u64,
}

fn threads_summed(m: &Model) -> ThreadsSummedJson {
    let s = &m.ended_sum;
    ThreadsSummedJson {
        threads: s.threads,
        life_ns: s.life_ns,
        sampled: s.sampled,
        running_ns: s.on_cpu_ns,
        runnable_ns: s.run_delay_ns,
        tracked_wait_ns: s.tracked_ns,
        other_wait_ns: s.other_ns,
        timeslices: s.timeslices,
        tids_reused: m.tids_reused,
    }
}

fn thread(ctx: &mut Ctx<'_>, t: &Thread) -> ThreadJson {
    let m = ctx.model;
    ThreadJson {
        tid: t.tid,
        nth: (t.nth > 0).then_some(t.nth),
        parent_tid: t.start_ns.map(|_| t.parent_tid),
        name: t.name.clone(),
        is_main: t.is_main,
        start_ns: t.start_ns.map(|ns| m.rel(ns)),
        exit_ns: t.exit_ns.map(|ns| m.rel(ns)),
        ended_before_ns: t.ended_before_ns.map(|ns| m.rel(ns)),
        start_routine: (t.start_routine != 0)
            .then(|| FrameJson::from(ctx.sym.frame(t.start_routine, false))),
        creation_chain: chain_ref(t.chain_id),
        created_at: if t.chain_id != 0 {
            ctx.sym.site(m, t.chain_id).map(FrameJson::from)
        } else {
            None
        },
        yields: m.yields.get(&t.tid).copied(),
        yield_sites: m.yields.contains_key(&t.tid).then(|| {
            let mut sites: Vec<(u64, u64)> = m
                .yield_sites
                .range((t.tid, 0)..=(t.tid, u64::MAX))
                .filter(|(_, &n)| n > 0)
                .map(|(&(_, ret), &n)| (ret, n))
                .collect();
            sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            sites
                .into_iter()
                .map(|(ret, yields)| YieldSiteJson {
                    at: (ret != 0).then(|| FrameJson::from(ctx.sym.frame(ret, true))),
                    yields,
                })
                .collect()
        }),
    }
}

/// THREAD_STATES: what the shim's sampler saw (see analyzer/JSON.md).
#[derive(Serialize)]
struct StatesJson {
    sampled: bool,
    /// The span the figures hold over (from the run's start), and whether it reaches the end.
    sampled_from_ns: u64,
    sampled_until_ns: u64,
    sampled_to_end: bool,
    /// When the whole process was stopped (estimated), not counted as waiting.
    stopped_ns: u64,
    stops: Vec<StopJson>,
    stops_count: u64,
    interval_ns: u64,
    samples: u64,
    unsampled_threads: u32,
    /// Ended threads the sampler saw, summed without a row (null: none).
    threads_summed: Option<StatesSummedJson>,
    threads: Vec<ThreadStatesJson>,
    resources: Vec<ResourceJson>,
    cpus: CpusJson,
    lost_parallelism: LostJson,
}

/// THREAD_STATES' `threads_summed`.
#[derive(Serialize)]
struct StatesSummedJson {
    threads: u64,
    running_ns: u64,
    runnable_ns: u64,
    tracked_wait_ns: u64,
    other_wait_ns: u64,
    timeslices: u64,
}

/// THREAD_STATES' `stops`.
#[derive(Serialize)]
struct StopJson {
    from_ns: u64,
    to_ns: u64,
}

/// The waits outside tracked objects on one resource, over all threads.
#[derive(Serialize)]
struct ResourceJson {
    syscall: i32,
    name: Option<&'static str>,
    what: String,
    ns: u64,
    max_ns: u64,
    waits: u64,
    threads: u32,
    /// Where the blocked threads were in their code, most waits first (see JSON.md).
    chains: Vec<ResourceChainJson>,
    other_chain_waits: u64,
    /// The object of the log whose bytes hold the untracked futex word.
    futex_object_id: Option<u64>,
}

#[derive(Serialize)]
struct ResourceChainJson {
    chain: u32,
    waits: u64,
    /// Indices into the chain's frames (in `chains`) the text report marks `?`.
    doubtful_frames: Vec<usize>,
}

#[derive(Serialize)]
struct LostJson {
    /// The span it was measured over (THREAD_STATES' sampled span).
    from_ns: u64,
    until_ns: u64,
    capacity_ns: u64,
    used_ns: u64,
    lost_ns: u64,
    by: Vec<LostToJson>,
}

#[derive(Serialize)]
struct LostToJson {
    /// Lost while threads were ready to run, waiting for a CPU.
    runnable: bool,
    object_id: Option<u64>,
    syscall: Option<i32>,
    what: Option<String>,
    futex_object_id: Option<u64>,
    ns: u64,
}

#[derive(Serialize)]
struct ThreadStatesJson {
    pid: Option<u32>,
    tid: u32,
    nth: Option<u32>,
    name: Option<String>,
    life_ns: u64,
    running_ns: u64,
    runnable_ns: u64,
    timeslices: u64,
    voluntary_switches: Option<u64>,
    involuntary_switches: Option<u64>,
    longest_slice_estimated_ns: Option<u64>,
    tracked_wait_ns: u64,
    other_wait_ns: u64,
    blocked_in: Vec<BlockedInJson>,
    state_at_end: Option<&'static str>,
    state_at_end_since_ns: Option<u64>,
    state_at_end_object_id: Option<u64>,
    state_at_end_blocked_in: Option<EndBlockedJson>,
}

/// THREAD_STATE's `state_at_end_blocked_in`.
#[derive(Serialize)]
struct EndBlockedJson {
    syscall: i32,
    name: Option<&'static str>,
    what: String,
    futex_object_id: Option<u64>,
}

#[derive(Serialize)]
struct BlockedInJson {
    syscall: i32,
    name: Option<&'static str>,
    what: String,
    futex_object_id: Option<u64>,
    ns: u64,
}

#[derive(Serialize)]
struct CpusJson {
    count: usize,
    sampled_ns: u64,
    idle_ns: u64,
    iowait_ns: u64,
    per_cpu: Vec<CpuJson>,
}

#[derive(Serialize)]
struct CpuJson {
    cpu: usize,
    idle_ns: u64,
    iowait_ns: u64,
}

fn thread_states(
    m: &crate::model::Model,
    doubtful: &std::collections::HashMap<u32, Vec<usize>>,
) -> StatesJson {
    let st = &m.states;
    StatesJson {
        sampled: st.any(),
        sampled_from_ns: m.rel(st.sampled_from_ns),
        sampled_until_ns: m.rel(st.sampled_until_ns),
        sampled_to_end: st.sampled_to_end,
        stopped_ns: st.stops.total_ns,
        stops: st
            .stops
            .spans
            .iter()
            .map(|&(from, to)| StopJson {
                from_ns: m.rel(from),
                to_ns: m.rel(to),
            })
            .collect(),
        stops_count: st.stops.count,
        interval_ns: st.interval_ns,
        samples: st.samples,
        unsampled_threads: st.unsampled,
        threads_summed: (m.ended_sum.sampled > 0).then_some(StatesSummedJson {
            threads: m.ended_sum.sampled,
            running_ns: m.ended_sum.on_cpu_ns,
            runnable_ns: m.ended_sum.run_delay_ns,
            tracked_wait_ns: m.ended_sum.tracked_ns,
            other_wait_ns: m.ended_sum.other_ns,
            timeslices: m.ended_sum.timeslices,
        }),
        threads: crate::states::rows(m)
            .into_iter()
            .map(|r| ThreadStatesJson {
                pid: m.run.as_ref().map(|run| run.pid),
                tid: r.tid,
                nth: (r.nth > 0).then_some(r.nth),
                name: r.name.map(str::to_string),
                life_ns: r.life_ns,
                running_ns: r.s.on_cpu_ns,
                runnable_ns: r.s.run_delay_ns,
                timeslices: r.s.timeslices,
                voluntary_switches: r.s.switches_known.then_some(r.s.voluntary),
                involuntary_switches: r.s.switches_known.then_some(r.s.involuntary),
                longest_slice_estimated_ns: (r.s.longest_slice_ns > 0)
                    .then_some(r.s.longest_slice_ns),
                tracked_wait_ns: r.s.tracked_ns,
                other_wait_ns: r.s.other_ns(),
                blocked_in: r
                    .s
                    .blocked
                    .iter()
                    .map(|b| BlockedInJson {
                        syscall: b.syscall,
                        name: crate::states::syscall_name(b.syscall),
                        what: b.what.clone(),
                        futex_object_id: st.futex_object(b.syscall, &b.what).map(|o| o.0),
                        ns: b.ns,
                    })
                    .collect(),
                state_at_end: r.s.end_state.as_ref().map(|e| e.name()),
                state_at_end_since_ns: r.s.end_state.as_ref().map(|e| m.rel(e.since())),
                state_at_end_object_id: match &r.s.end_state {
                    Some(crate::states::EndState::Tracked { object_id, .. }) => Some(*object_id),
                    _ => None,
                },
                state_at_end_blocked_in: match &r.s.end_state {
                    Some(crate::states::EndState::Blocked { syscall, what, .. }) => {
                        Some(EndBlockedJson {
                            syscall: *syscall,
                            name: crate::states::syscall_name(*syscall),
                            what: what.clone(),
                            futex_object_id: st.futex_object(*syscall, what).map(|o| o.0),
                        })
                    }
                    _ => None,
                },
            })
            .collect(),
        resources: crate::states::resource_rows(st)
            .into_iter()
            .map(|r| ResourceJson {
                syscall: r.syscall,
                name: crate::states::syscall_name(r.syscall),
                what: r.what.to_string(),
                ns: r.w.ns,
                max_ns: r.w.max_ns,
                waits: r.w.waits,
                threads: r.threads,
                chains: r
                    .w
                    .chains
                    .iter()
                    .map(|&(chain, waits)| ResourceChainJson {
                        chain,
                        waits,
                        doubtful_frames: doubtful.get(&chain).cloned().unwrap_or_default(),
                    })
                    .collect(),
                other_chain_waits: r.w.other_chains,
                futex_object_id: st.futex_object(r.syscall, r.what).map(|o| o.0),
            })
            .collect(),
        lost_parallelism: LostJson {
            from_ns: m.rel(st.sampled_from_ns),
            until_ns: m.rel(st.sampled_until_ns),
            capacity_ns: st.lost.capacity_ns,
            used_ns: st.lost.used_ns,
            lost_ns: st.lost.lost_ns,
            by: st
                .lost
                .ranked()
                .into_iter()
                .map(|(k, ns)| {
                    use crate::states::Waited;
                    let (object_id, syscall, what) = match k {
                        Waited::Object(id) => (Some(*id), None, None),
                        Waited::Blocked(sys, w) => (None, Some(*sys), Some(w.clone())),
                        Waited::Cpu | Waited::Other => (None, None, None),
                    };
                    let futex_object_id = match k {
                        Waited::Blocked(sys, w) => st.futex_object(*sys, w).map(|o| o.0),
                        _ => None,
                    };
                    LostToJson {
                        runnable: *k == Waited::Cpu,
                        object_id,
                        syscall,
                        what,
                        futex_object_id,
                        ns,
                    }
                })
                .collect(),
        },
        cpus: CpusJson {
            count: st.cpus,
            sampled_ns: st.cpu_sampled_ns,
            idle_ns: st.idle_ns,
            iowait_ns: st.iowait_ns,
            per_cpu: st
                .per_cpu
                .iter()
                .enumerate()
                .map(|(cpu, &(idle_ns, iowait_ns))| CpuJson {
                    cpu,
                    idle_ns,
                    iowait_ns,
                })
                .collect(),
        },
    }
}

/// An element of POLICY's `versions`.
#[derive(Serialize)]
struct VersionJson<'m> {
    version: u32,
    at_ns: u64,
    source: &'m str,
    builtin: bool,
    text: &'m str,
    rules: &'m [String],
}

/// An element of POLICY's `rules`.
#[derive(Serialize)]
struct RuleJson<'m> {
    version: u32,
    rule: u32,
    summary: Option<&'m str>,
    requests: u64,
    acted: u64,
    suppressed: u64,
}

/// POLICY.
#[derive(Serialize)]
struct PolicyJson<V, R> {
    versions: V,
    rules: R,
}

/// An element of WAIT_EVENTS' `listed`.
#[derive(Serialize)]
struct WaitEventJson {
    object_id: u64,
    tid: u32,
    at_ns: u64,
    wait_ns: u64,
    waiters: u32,
    reason: Option<String>,
    version: u32,
    rule: u32,
    chain: Option<u32>,
}

/// An element of WAIT_EVENTS' `by_rule`.
#[derive(Serialize)]
struct ByRuleJson {
    version: u32,
    rule: u32,
    object_id: u64,
    count: u64,
    wait_total_ns: u64,
    wait_max_ns: u64,
    ended: Counts,
    not_ended: u64,
}

fn by_rule(key: (u32, u32, u64), g: &WaitEventGroup) -> ByRuleJson {
    let (version, rule, object_id) = key;
    let mut not_ended = 0;
    let mut ended = Counts::default();
    // Events written before their wait ended (code 0) are counted apart; codes this analyzer
    // does not know by `key_N`.
    for &(code, n) in &g.reasons {
        match reason_json(code) {
            Some(name) => ended.0.push((name, n)),
            None => not_ended += n,
        }
    }
    ByRuleJson {
        version,
        rule,
        object_id,
        count: g.count,
        wait_total_ns: g.wait_total_ns,
        wait_max_ns: g.wait_max_ns,
        ended,
        not_ended,
    }
}

/// WAIT_EVENTS, WAITER_CHAINS, HOLDER_STACKS and SNAPSHOTS: a count and the first ones.
#[derive(Serialize)]
struct Listed<L> {
    total: u64,
    listed: L,
}

/// PER_WAIT_EVENTS.
#[derive(Serialize)]
struct PerWaitEventsJson {
    records: u64,
    waits: u64,
    kept: u64,
    dropped: u64,
    log_bytes: u64,
    bytes_per_wait: Option<f64>,
    window_ns: Option<u64>,
    ring_bytes: Option<u64>,
    covers_ns: Option<u64>,
    rings_full: Option<u64>,
    shortest_thread_covers_ns: Option<u64>,
    shortest_thread_tid: Option<u32>,
    coverage_waits_not_read: Option<u64>,
    damaged: u64,
    woken_by: Vec<WokenByJson>,
}

#[derive(Serialize)]
struct WokenByJson {
    object_id: u64,
    tid: u32,
    waits: u64,
}

fn per_wait_events(m: &Model) -> PerWaitEventsJson {
    let e = &m.events;
    let (kept, dropped) = e.kept_and_dropped(m.end_of_log());
    let cov = e.coverage(m.end_of_log());
    PerWaitEventsJson {
        records: e.records,
        waits: e.waits,
        kept,
        dropped,
        log_bytes: e.log_bytes,
        bytes_per_wait: (e.waits > 0).then(|| e.log_bytes as f64 / e.waits as f64),
        window_ns: (e.keep_ns > 0).then_some(e.keep_ns),
        ring_bytes: cov.map(|_| crate::model::RING_BYTES),
        covers_ns: cov.and_then(|c| c.covers_ns),
        rings_full: cov.map(|c| c.rings_full),
        shortest_thread_covers_ns: cov.and_then(|c| c.shortest.map(|s| s.1)),
        shortest_thread_tid: cov.and_then(|c| c.shortest.map(|s| s.0)),
        coverage_waits_not_read: cov.map(|c| c.waits_not_stored),
        damaged: e.damaged,
        woken_by: e
            .woken_by(m.end_of_log())
            .iter()
            .map(|(&(object_id, tid), &waits)| WokenByJson {
                object_id,
                tid,
                waits,
            })
            .collect(),
    }
}

/// WAIT_EVENTS.
#[derive(Serialize)]
struct WaitEventsJson<L, B> {
    total: u64,
    listed: L,
    by_rule: B,
}

/// An element of WAITER_CHAINS' `listed` `waiters`.
#[derive(Serialize)]
struct ChainWaiterJson {
    tid: u32,
    chain: Option<u32>,
    wait_ns: u64,
}

/// An element of WAITER_CHAINS' `listed`.
#[derive(Serialize)]
struct WaiterChainsJson {
    object_id: u64,
    at_ns: u64,
    version: u32,
    rule: u32,
    waiters: Vec<ChainWaiterJson>,
}

/// An element of HOLDER_STACKS' `listed`.
#[derive(Serialize)]
struct HolderStackJson {
    object_id: u64,
    at_ns: u64,
    holder_tid: u32,
    waiter_tid: u32,
    version: u32,
    rule: u32,
    live: bool,
    how: &'static str,
    chain: Option<u32>,
    function: Option<String>,
}

/// A rule, in COLLECTED's `holder_groups`.
#[derive(Serialize)]
struct RuleRefJson {
    version: u32,
    rule: u32,
}

/// An element of COLLECTED's `holder_groups`.
#[derive(Serialize)]
struct HolderGroupJson {
    holder_tid: u32,
    how: &'static str,
    chain: Option<u32>,
    function: Option<String>,
    first_at_ns: u64,
    rules: Vec<RuleRefJson>,
    waiter_tids: Vec<u32>,
}

/// COLLECTED: what the policy rules collected about one object.
#[derive(Serialize)]
struct CollectedJson {
    object_id: u64,
    wait_events: u64,
    wait_total_ns: u64,
    by_rule: Vec<ByRuleJson>,
    holder_stacks: u64,
    holder_groups: Vec<HolderGroupJson>,
    waiter_chains: Vec<usize>,
}

/// An element of SNAPSHOTS' `listed`.
#[derive(Serialize)]
struct SnapshotJson {
    seq: u64,
    at_ns: u64,
    source: &'static str,
    requester_pid: Option<u32>,
}

/// MODULE.
#[derive(Serialize)]
struct ModuleJson<'m> {
    module_id: u32,
    path: &'m str,
    base: String,
    build_id: String,
}

/// SYMBOLS.
#[derive(Serialize)]
struct SymbolsJson {
    module_id: u32,
    path: String,
    ok: bool,
    status: String,
    /// For a module without debug information whose code the report shows as the program's
    /// own: where to get it.
    advice: Option<String>,
}

/// `chains`: each chain a report names, symbolized while it is written.
struct ChainsJson<'c, 'a> {
    ctx: &'c RefCell<Ctx<'a>>,
    ids: BTreeSet<u32>,
}

impl Serialize for ChainsJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for &id in &self.ids {
            let mut ctx = self.ctx.borrow_mut();
            let m = ctx.model;
            if !m.chains.contains_key(&id) {
                continue;
            }
            let frames: Vec<FrameJson> = ctx
                .sym
                .chain(m, id)
                .into_iter()
                .map(FrameJson::from)
                .collect();
            map.serialize_entry(&id.to_string(), &frames)?;
        }
        map.end()
    }
}

/// `symbols`: read when it is written, after every chain was symbolized.
struct SymbolsList<'c, 'a>(&'c RefCell<Ctx<'a>>);

impl Serialize for SymbolsList<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ctx = self.0.borrow();
        let advice: HashMap<String, String> = ctx.sym.debug_advice().into_iter().collect();
        let list: Vec<SymbolsJson> = ctx
            .sym
            .module_status()
            .into_iter()
            .map(|(module_id, path, status)| SymbolsJson {
                module_id,
                ok: status.is_ok(),
                status: status.describe(),
                advice: advice.get(&path).cloned(),
                path,
            })
            .collect();
        list.serialize(s)
    }
}

/// Every chain the report of one log names, which `chains` lists: the chains of deadlocks,
/// potential deadlocks, contention records, objects' creations and wait sites, short-lived
/// objects, threads' creations and what the policy rules collected.
fn chains_named(ctx: &Ctx<'_>) -> BTreeSet<u32> {
    let m = ctx.model;
    let p = &m.policy;
    let mut ids = BTreeSet::new();
    ids.extend(
        m.deadlocks
            .iter()
            .flat_map(|d| &d.cycle)
            .map(|e| e.wait_chain),
    );
    for c in &ctx.inversions.cycles {
        for edge in c.edges().filter_map(|key| m.lock_order.get(&key)) {
            ids.extend(edge.witnesses.iter().map(|w| w.chain_id));
        }
    }
    for r in m.records.values() {
        if let Some(c) = &r.close {
            ids.insert(c.holder_chain);
            ids.extend(c.waiters.iter().map(|w| w.chain_id));
        }
        ids.extend(r.open.iter().map(|o| o.waiter_chain));
    }
    for o in m.objects.values() {
        ids.extend(o.create.iter().map(|c| c.chain_id));
        ids.extend(o.wait_sites().keys());
    }
    ids.extend(m.churned.values().map(|c| c.chain_id));
    ids.extend(m.quiet.values().map(|q| q.chain_id));
    ids.extend(
        m.open_waits
            .iter()
            .flat_map(|o| o.waits.iter().map(|w| w.chain_id)),
    );
    ids.extend(m.threads_listed().iter().map(|t| t.chain_id));
    ids.extend(
        m.states
            .resources
            .by
            .values()
            .flat_map(|r| r.chains.iter().map(|c| c.0)),
    );
    ids.extend(p.wait_events.iter().map(|e| e.chain_id));
    ids.extend(
        p.waiter_chains
            .iter()
            .flat_map(|c| &c.waiters)
            .map(|w| w.chain_id),
    );
    ids.extend(p.holder_stacks.iter().map(|h| h.chain_id));
    ids.remove(&0);
    ids
}

type Iter<'a, T> = std::slice::Iter<'a, T>;
type Values<'a, K, V> = std::collections::btree_map::Values<'a, K, V>;

/// One part of the critical path.
#[derive(Serialize)]
struct CauseJson {
    /// `held`, `waited`, `work`, `cpus_busy`, `wake_latency`, `blocked`, `stopped`.
    cause: &'static str,
    object_id: Option<u64>,
    tid: Option<u32>,
    syscall: Option<i32>,
    what: Option<String>,
    ns: u64,
}

#[derive(Serialize)]
struct CriticalJson {
    start_ns: u64,
    end_ns: u64,
    length_ns: u64,
    hops: u64,
    estimated: bool,
    /// The path is that of the phase between the program's progress points (start_ns to
    /// end_ns), not of the whole run.
    between_progress_points: bool,
    by: Vec<CauseJson>,
    /// For each lock listed as a bottleneck: the run's predicted time with its critical
    /// sections half as long and free (`crate::whatif`, estimates).
    whatif: Vec<WhatIfJson>,
}

#[derive(Serialize)]
struct WhatIfJson {
    object_id: u64,
    factor: f64,
    predicted_duration_ns: u64,
    predicted_speedup: f64,
    bound: crate::whatif::Bound,
    /// Each progress point's throughput then (empty without points).
    throughput: Vec<crate::whatif::ThroughputJson>,
}

/// One progress point (C API), times from the run's start.
#[derive(Serialize)]
struct ProgressJson {
    id: u32,
    name: String,
    visits: u64,
    first_ns: u64,
    last_ns: u64,
    first_begin_ns: Option<u64>,
    per_second: Option<f64>,
    begins: u64,
    ends: u64,
    in_flight: u64,
    mean_latency_ns: Option<u64>,
    latency_exact: bool,
}

fn progress(m: &Model) -> Vec<ProgressJson> {
    m.progress
        .rows()
        .into_iter()
        .map(|r| ProgressJson {
            id: r.id,
            name: r.name,
            visits: r.visits,
            first_ns: m.rel(r.first_ns),
            last_ns: m.rel(r.last_ns),
            first_begin_ns: (r.first_begin_ns > 0).then(|| m.rel(r.first_begin_ns)),
            per_second: r.per_second,
            begins: r.begins,
            ends: r.ends,
            in_flight: r.in_flight,
            mean_latency_ns: r.mean_latency_ns,
            latency_exact: r.latency_exact,
        })
        .collect()
}

fn critical(
    m: &Model,
    p: &crate::critical::Path,
    basis: Option<&crate::whatif::Basis>,
) -> CriticalJson {
    use crate::critical::Cause;
    let whatif = basis.map_or_else(Vec::new, |b| {
        super::bottlenecks::held_objects(p)
            .into_iter()
            .flat_map(|o| {
                [0.5, 0.0].map(|f| {
                    let x = b.predict(&[(o, f)].into());
                    WhatIfJson {
                        object_id: o,
                        factor: f,
                        predicted_duration_ns: x.predicted_ns,
                        predicted_speedup: x.speedup(),
                        bound: x.bound,
                        throughput: crate::whatif::throughput(m, &x),
                    }
                })
            })
            .collect()
    });
    CriticalJson {
        whatif,
        start_ns: m.rel(p.start_ns),
        end_ns: m.rel(p.end_ns),
        length_ns: p.length_ns(),
        hops: p.hops,
        estimated: p.estimated,
        between_progress_points: p.phase.is_some(),
        by: p
            .by
            .iter()
            .map(|(c, ns)| {
                let (cause, object_id, tid, syscall, what) = match c {
                    Cause::Held(o) => ("held", Some(*o), None, None, None),
                    Cause::Waited(o) => ("waited", Some(*o), None, None, None),
                    Cause::Work(t) => ("work", None, Some(*t), None, None),
                    Cause::CpusBusy(t) => ("cpus_busy", None, Some(*t), None, None),
                    Cause::WakeLatency(o) => {
                        ("wake_latency", (*o != 0).then_some(*o), None, None, None)
                    }
                    Cause::Blocked(sys, what) => {
                        ("blocked", None, None, Some(*sys), Some(what.clone()))
                    }
                    Cause::Stopped => ("stopped", None, None, None, None),
                };
                CauseJson {
                    cause,
                    object_id,
                    tid,
                    syscall,
                    what,
                    ns: *ns,
                }
            })
            .collect(),
    }
}

/// LOG: the report of one log.
#[derive(Serialize)]
struct LogJson<'c, 'a> {
    file: String,
    warnings: Vec<WarningJson>,
    ending: &'static str,
    damage: DamageJson,
    records_read: u64,
    run: RunJson,
    /// `WAITSHIM_DELAY`: the run was slowed on purpose; null when it was not.
    delay: Option<DelayJson>,
    highwater: HighwaterJson<Each<'c, 'a, Iter<'a, Highwater>, RiseJson>>,
    deadlocks: Each<'c, 'a, Iter<'a, Deadlock>, DeadlockJson>,
    open_waits: OpenWaitsJson,
    cross_process_deadlocks: Vec<CrossDeadlockJson>,
    lock_order: LockOrderJson,
    potential_deadlocks: Vec<PotentialDeadlockJson>,
    sort: String,
    contention_records: Each<'c, 'a, std::vec::IntoIter<&'a ContentionRecord>, RecordJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<Vec<GroupJson>>,
    objects: Each<'c, 'a, std::vec::IntoIter<&'a Object>, ObjectJson>,
    short_lived_objects: Each<'c, 'a, std::vec::IntoIter<&'a ObjectsChurned>, ShortLivedJson>,
    quiet_objects: Each<'c, 'a, std::vec::IntoIter<&'a ObjectsQuiet>, QuietJson>,
    threads: Each<'c, 'a, std::vec::IntoIter<&'a Thread>, ThreadJson>,
    threads_summed: ThreadsSummedJson,
    thread_states: StatesJson,
    /// CRITICAL_PATH: what the end of the run waited for; null without per-wait events.
    critical_path: Option<CriticalJson>,
    /// PROGRESS: the program's progress points (empty without them).
    progress: Vec<ProgressJson>,
    /// What the shim's own thread cost (null when the log has no figures: a run shorter than
    /// a flush interval with the sampler off).
    shim_cost: Option<ShimCostJson>,
    policy: PolicyJson<Versions<'c, 'a>, Rules<'c, 'a>>,
    wait_events: WaitEventsJson<Events<'c, 'a>, ByRule<'c, 'a>>,
    per_wait_events: PerWaitEventsJson,
    waiter_chains: Listed<Each<'c, 'a, Iter<'a, WaiterChains>, WaiterChainsJson>>,
    holder_stacks: Listed<Each<'c, 'a, Iter<'a, HolderStack>, HolderStackJson>>,
    snapshots: Listed<Each<'c, 'a, Iter<'a, Snapshot>, SnapshotJson>>,
    collected_by_object: Each<'c, 'a, std::vec::IntoIter<(u64, Collected)>, CollectedJson>,
    chains: ChainsJson<'c, 'a>,
    modules: Each<'c, 'a, Values<'a, u32, Module>, ModuleJson<'a>>,
    symbols: SymbolsList<'c, 'a>,
}

#[derive(Serialize)]
struct DelayJson {
    rules: Vec<DelayRuleJson>,
    objects: Vec<DelayedJson>,
    /// Over every object.
    sections: u64,
    added_ns: u64,
}

#[derive(Serialize)]
struct DelayRuleJson {
    rule: u32,
    site: String,
    delay_ns: u64,
}

#[derive(Serialize)]
struct DelayedJson {
    object_id: u64,
    label: String,
    rule: u32,
    sections: u64,
    added_ns: u64,
}

/// What `WAITSHIM_DELAY` did, if anything.
fn delay(x: &mut Ctx<'_>) -> Option<DelayJson> {
    let d = &x.model.delay;
    if !d.any() {
        return None;
    }
    let (sections, added_ns) = d.totals();
    let rules = d
        .rules
        .iter()
        .map(|r| DelayRuleJson {
            rule: r.rule,
            site: r.site.clone(),
            delay_ns: r.delay_ns,
        })
        .collect();
    let objects: Vec<_> = d.objects.values().cloned().collect();
    Some(DelayJson {
        rules,
        objects: objects
            .into_iter()
            .map(|o| DelayedJson {
                object_id: o.object_id,
                label: x.object_label(o.object_id),
                rule: o.rule,
                sections: o.sections,
                added_ns: o.total_ns,
            })
            .collect(),
        sections,
        added_ns,
    })
}

#[derive(Serialize)]
struct ShimCostJson {
    /// When the figures were taken, since the run started.
    at_ns: u64,
    thread_cpu_ns: u64,
    tasks: Vec<TaskCostJson>,
}

#[derive(Serialize)]
struct TaskCostJson {
    task: &'static str,
    runs: u64,
    cpu_ns: u64,
}

fn shim_cost(m: &Model, c: &waitshim_format::ShimCost) -> ShimCostJson {
    ShimCostJson {
        at_ns: m.rel(c.ns),
        thread_cpu_ns: c.thread_cpu_ns,
        tasks: c
            .tasks
            .iter()
            .map(|t| TaskCostJson {
                task: waitshim_format::shim_task::name(t.task),
                runs: t.runs,
                cpu_ns: t.cpu_ns,
            })
            .collect(),
    }
}

type ByRuleIter<'a> = std::collections::btree_map::Iter<'a, (u32, u32, u64), WaitEventGroup>;
type Versions<'c, 'a> = Each<'c, 'a, Iter<'a, PolicyVersion>, VersionJson<'a>>;
type Rules<'c, 'a> = Each<'c, 'a, Values<'a, (u32, u32), RuleStats>, RuleJson<'a>>;
type Events<'c, 'a> = Each<'c, 'a, Iter<'a, WaitEvent>, WaitEventJson>;
type ByRule<'c, 'a> = Each<'c, 'a, ByRuleIter<'a>, ByRuleJson>;

fn deadlock(ctx: &mut Ctx<'_>, d: &Deadlock) -> DeadlockJson {
    let m = ctx.model;
    DeadlockJson {
        at_ns: m.rel(d.ns),
        detected_by: d.detected_by,
        found_by: if crate::report::every_thread_waits(d) {
            "every_thread_waits"
        } else {
            "cycle"
        },
        broken: m.broken(d).map(|b| BrokenJson {
            tid: b.tid,
            at_ns: m.rel(b.ns),
            ended: crate::model::reason_json(b.outcome),
        }),
        cycle: d
            .cycle
            .iter()
            .map(|e| DeadlockEdgeJson {
                tid: e.tid,
                object_id: e.object_id,
                wait_chain: e.wait_chain,
                holder_tid: e.holder_tid,
            })
            .collect(),
    }
}

fn short_lived(ctx: &mut Ctx<'_>, c: &ObjectsChurned) -> ShortLivedJson {
    let m = ctx.model;
    ShortLivedJson {
        kind: churn_kind_json(c.kind),
        chain_id: c.chain_id,
        count: c.count,
        acquisitions: c.acquisitions,
        lifetime_total_ns: c.lifetime_total_ns,
        lifetime_max_ns: c.lifetime_max_ns,
        // The shim writes each key once; a damaged record may not.
        counters: Counts::deduplicated(
            c.counters
                .iter()
                .map(|v| (kind_counter_json(v.key), v.value)),
        ),
        created_at: ctx.sym.site(m, c.chain_id).map(FrameJson::from),
    }
}

fn version<'a>(ctx: &mut Ctx<'a>, v: &'a PolicyVersion) -> VersionJson<'a> {
    VersionJson {
        version: v.version,
        at_ns: ctx.model.rel(v.ns),
        source: &v.source,
        builtin: v.source.is_empty(),
        text: &v.text,
        rules: &v.rules,
    }
}

fn rule<'a>(ctx: &mut Ctx<'a>, r: &'a RuleStats) -> RuleJson<'a> {
    let m: &'a Model = ctx.model;
    RuleJson {
        version: r.version,
        rule: r.rule,
        summary: m.policy.rule_summary(r.version, r.rule),
        requests: r.requests,
        acted: r.acted,
        suppressed: r.suppressed,
    }
}

fn wait_event(ctx: &mut Ctx<'_>, e: &WaitEvent) -> WaitEventJson {
    WaitEventJson {
        object_id: e.object_id,
        tid: e.tid,
        at_ns: ctx.model.rel(e.ns),
        wait_ns: e.wait_ns,
        waiters: e.waiters,
        reason: reason_json(e.reason),
        version: e.version,
        rule: e.rule,
        chain: chain_ref(e.chain_id),
    }
}

fn waiter_chains(ctx: &mut Ctx<'_>, c: &WaiterChains) -> WaiterChainsJson {
    WaiterChainsJson {
        object_id: c.object_id,
        at_ns: ctx.model.rel(c.ns),
        version: c.version,
        rule: c.rule,
        waiters: c
            .waiters
            .iter()
            .map(|w| ChainWaiterJson {
                tid: w.tid,
                chain: chain_ref(w.chain_id),
                wait_ns: w.wait_ns,
            })
            .collect(),
    }
}

/// How a holder's stack was taken (`HolderStack::live`), by name.
fn how(live: u8) -> &'static str {
    match live {
        holder_stack::ACQUIRED => "acquired",
        holder_stack::BY_SIGNAL => "signal",
        _ => "scanned",
    }
}

fn collected(ctx: &mut Ctx<'_>, (object_id, c): (u64, Collected)) -> CollectedJson {
    CollectedJson {
        object_id,
        wait_events: c.events,
        wait_total_ns: c.wait_total_ns,
        by_rule: c
            .groups
            .iter()
            .map(|((version, rule), g)| by_rule((*version, *rule, object_id), g))
            .collect(),
        holder_stacks: c.holder_stacks,
        holder_groups: c
            .holders
            .iter()
            .map(|g| HolderGroupJson {
                holder_tid: g.holder_tid,
                how: how(g.live),
                chain: chain_ref(g.chain_id),
                function: ctx.user_function(g.chain_id),
                first_at_ns: ctx.model.rel(g.first_ns),
                rules: g
                    .rules
                    .iter()
                    .map(|&(version, rule)| RuleRefJson { version, rule })
                    .collect(),
                waiter_tids: g.waiters.clone(),
            })
            .collect(),
        waiter_chains: c.waiter_sets,
    }
}

fn holder_stack(ctx: &mut Ctx<'_>, h: &HolderStack) -> HolderStackJson {
    HolderStackJson {
        object_id: h.object_id,
        at_ns: ctx.model.rel(h.ns),
        holder_tid: h.holder_tid,
        waiter_tid: h.waiter_tid,
        version: h.version,
        rule: h.rule,
        live: h.live != 0,
        how: how(h.live),
        chain: chain_ref(h.chain_id),
        function: ctx.user_function(h.chain_id),
    }
}

fn snapshot(ctx: &mut Ctx<'_>, s: &Snapshot) -> SnapshotJson {
    SnapshotJson {
        seq: s.seq,
        at_ns: ctx.model.rel(s.ns),
        source: snapshot_source_name(s.source),
        requester_pid: (s.requester_pid != 0).then_some(s.requester_pid),
    }
}

fn module<'a>(_: &mut Ctx<'a>, md: &'a Module) -> ModuleJson<'a> {
    ModuleJson {
        module_id: md.module_id,
        path: &md.path,
        base: addr(md.base),
        build_id: md.build_id.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// The report of one log, ready to be written. The binaries its chains name are opened first:
/// the warnings, written before anything else, say which could not be used.
fn log<'c, 'a>(ctx: &'c RefCell<Ctx<'a>>) -> LogJson<'c, 'a> {
    let mut x = ctx.borrow_mut();
    let m: &'a Model = x.model;
    let chains = chains_named(&x);
    let addrs = chains
        .iter()
        .filter_map(|id| m.chains.get(id))
        .flatten()
        .map(|&a| (a, true));
    let routines = m
        .threads
        .values()
        .filter(|t| t.start_routine != 0)
        .map(|t| (t.start_routine, false));
    x.sym.open_modules(addrs.chain(routines));

    let p = &m.policy;
    let delay = delay(&mut x);
    let final_hw = m.final_highwater();
    let potential_deadlocks = x
        .inversions
        .cycles
        .iter()
        .map(|c| PotentialDeadlockJson {
            cycle: c.cycle.clone(),
            deadlocked: c.deadlocked,
            edges: c
                .edges()
                .filter_map(|key| m.lock_order.get(&key))
                .map(|e| EdgeJson {
                    from: e.from,
                    to: e.to,
                    tid: e.witnesses.first().map(|w| w.tid),
                    chain: e.witnesses.first().map(|w| w.chain_id),
                    witnesses: e
                        .witnesses
                        .iter()
                        .map(|w| WitnessJson {
                            tid: w.tid,
                            chain: w.chain_id,
                            at_ns: m.rel(w.ns),
                        })
                        .collect(),
                    more_witnesses: e.more_witnesses,
                })
                .collect(),
        })
        .collect();
    let groups = x.groups().map(|gs| {
        gs.into_iter()
            .map(|g| GroupJson {
                frames: g.frames,
                records: g.records,
                total_elapsed_ns: g.total_elapsed_ns,
                max_level: g.max_level,
            })
            .collect()
    });
    let basis = crate::whatif::Basis::of(&x);
    let critical_path = x.critical().map(|p| critical(m, p, basis.as_ref()));
    // The frames of the scanned chains of blocked threads that the text report marks `?`.
    let scanned: BTreeSet<u32> = crate::states::resource_rows(&m.states)
        .iter()
        .flat_map(|r| r.w.chains.iter().map(|c| c.0))
        .collect();
    let doubtful = scanned
        .into_iter()
        .map(|id| {
            let frames = x.sym.scanned_chain(m, id);
            let marked = frames
                .iter()
                .enumerate()
                .filter(|(_, (_, d))| *d)
                .map(|(i, _)| i)
                .collect();
            (id, marked)
        })
        .collect();
    LogJson {
        critical_path,
        progress: progress(m),
        file: x.summary.path.display().to_string(),
        warnings: x.warnings().into_iter().map(From::from).collect(),
        ending: x.summary.ending.as_str(),
        damage: DamageJson {
            stretches: x.summary.damage_count,
            bytes: x.summary.damage_bytes,
        },
        records_read: x.summary.records,
        run: run(m, x.no_end.as_ref()),
        delay,
        highwater: HighwaterJson {
            hwm: m.hwm(),
            object_id: final_hw.map(|h| h.object_id),
            tid: final_hw.map(|h| h.tid),
            at_ns: final_hw.map(|h| m.rel(h.ns)),
            history: Each::new(ctx, m.highwater.iter(), |ctx, h| RiseJson {
                at_ns: ctx.model.rel(h.ns),
                hwm: h.hwm,
                object_id: h.object_id,
                tid: h.tid,
            }),
        },
        deadlocks: Each::new(ctx, m.deadlocks.iter(), deadlock),
        open_waits: open_waits(&x),
        cross_process_deadlocks: cross_process(&x),
        lock_order: LockOrderJson {
            edges: m.lock_order.len(),
            potential_deadlocks: x.inversions.cycles.len(),
            search: x.inversions.stopped.map_or("complete", Stopped::as_str),
            max_cycles: MAX_CYCLES,
            max_cycle_length: MAX_CYCLE_LEN,
            long_cycles_skipped: x.inversions.depth_limited,
        },
        potential_deadlocks,
        sort: x.opts.sort.to_string(),
        contention_records: Each::new(ctx, x.sorted_records().into_iter(), |ctx, r| {
            record(ctx.model, r)
        }),
        groups,
        objects: Each::new(
            ctx,
            x.sorted_objects(m.objects.values().collect(), true)
                .into_iter(),
            object,
        ),
        short_lived_objects: Each::new(ctx, m.churned_by_count().into_iter(), short_lived),
        quiet_objects: Each::new(ctx, m.quiet_by_count().into_iter(), quiet),
        threads: Each::new(ctx, m.threads_listed().into_iter(), thread),
        threads_summed: threads_summed(m),
        thread_states: thread_states(m, &doubtful),
        shim_cost: m.shim_cost.as_ref().map(|c| shim_cost(m, c)),
        policy: PolicyJson {
            versions: Each::new(ctx, p.versions.iter(), version),
            rules: Each::new(ctx, p.rule_stats.values(), rule),
        },
        wait_events: WaitEventsJson {
            total: p.wait_events_total,
            listed: Each::new(ctx, p.wait_events.iter(), wait_event),
            by_rule: Each::new(ctx, p.wait_event_groups.iter(), |_, (&k, g)| by_rule(k, g)),
        },
        per_wait_events: per_wait_events(m),
        waiter_chains: Listed {
            total: p.waiter_chains_total,
            listed: Each::new(ctx, p.waiter_chains.iter(), waiter_chains),
        },
        holder_stacks: Listed {
            total: p.holder_stacks_total,
            listed: Each::new(ctx, p.holder_stacks.iter(), holder_stack),
        },
        snapshots: Listed {
            total: p.snapshots_total,
            listed: Each::new(ctx, p.snapshots.iter(), snapshot),
        },
        collected_by_object: Each::new(
            ctx,
            crate::findings::collected_by_object(m).into_iter(),
            collected,
        ),
        chains: ChainsJson { ctx, ids: chains },
        modules: Each::new(ctx, m.modules.values(), module),
        symbols: SymbolsList(ctx),
    }
}

/// The report of one log as a JSON value (one element of the document's `logs`). For small
/// logs and tests: [`write_document`] writes the reports of logs of any size.
pub fn render(ctx: Ctx<'_>) -> serde_json::Value {
    let ctx = RefCell::new(ctx);
    serde_json::to_value(log(&ctx)).unwrap_or_default()
}

/// The document's `logs`: the report of each analysis, made and written one after the other.
struct Logs<'o, I> {
    analyses: RefCell<Option<I>>,
    opts: &'o Options,
}

impl<I: Iterator<Item = Analysis>> Serialize for Logs<'_, I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        let analyses = self.analyses.borrow_mut().take();
        for a in analyses.into_iter().flatten() {
            let ctx = RefCell::new(Ctx::new(&a, self.opts));
            seq.serialize_element(&log(&ctx))?;
        }
        seq.end()
    }
}

/// The document.
#[derive(Serialize)]
#[serde(bound = "")]
struct Document<'o, I: Iterator<Item = Analysis>> {
    schema: &'static str,
    logs: Logs<'o, I>,
}

/// Writes the whole document, `{"schema": ..., "logs": [...]}`, indented, with a report for
/// each analysis `analyses` gives: each is read, reported and dropped before the next.
pub fn write_document(
    out: &mut dyn Write,
    analyses: impl Iterator<Item = Analysis>,
    opts: &Options,
) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(out);
    let mut ser = serde_json::Serializer::pretty(&mut w);
    Document {
        schema: SCHEMA,
        logs: Logs {
            analyses: RefCell::new(Some(analyses)),
            opts,
        },
    }
    .serialize(&mut ser)
    .map_err(std::io::Error::from)?;
    writeln!(w)?;
    w.flush()
}
