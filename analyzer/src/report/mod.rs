//! Stage 4: reports. What both the text and the JSON report need is computed here once: the
//! warnings, the order of the contention records, commonality groups, and how an object is named.

pub mod bottlenecks;
pub mod json;
pub mod record_words;
pub mod text;

use std::collections::HashMap;
use std::str::FromStr;

use waitshim_format::note_level;

use crate::ending::NoEnd;
use crate::lockorder::{self, Inversions};
use crate::model::{ContentionRecord, Model, Object, Overflow, TidName, MAX_CHURN_SITES};
use crate::plain::quoted;
use crate::source::{Ending, ReadSummary};
use crate::symbolize::{Frame, Global, ModuleStatus, Symbolizer};

/// Order of the lock contention records (`--sort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Highwater level, then elapsed time.
    Hwm,
    /// Elapsed time of the episode, then level.
    Elapsed,
    /// Total wait on the record's object (locks first, joins last), then level and elapsed.
    Wait,
    /// Number of records on the record's object, then level and elapsed.
    Count,
    /// Lost parallelism the record's object caused (CPU time left unused while threads waited
    /// on it, from the sampler: THREAD STATES), then level and elapsed.
    Lost,
    /// Commonality: records grouped by the outermost N frames of their waiter chains.
    Outer(usize),
    /// Commonality: records grouped by the innermost N frames of their waiter chains.
    Inner(usize),
}

impl FromStr for SortKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let frames = |n: &str| match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("'{n}' is not a positive number of frames")),
        };
        match s {
            "hwm" => Ok(SortKey::Hwm),
            "elapsed" => Ok(SortKey::Elapsed),
            "wait" => Ok(SortKey::Wait),
            "count" => Ok(SortKey::Count),
            "lost" => Ok(SortKey::Lost),
            _ => match s.split_once(':') {
                Some(("outer", n)) => frames(n).map(SortKey::Outer),
                Some(("inner", n)) => frames(n).map(SortKey::Inner),
                _ => Err(format!(
                    "unknown sort key '{s}' (use hwm, elapsed, wait, count, lost, outer:N or inner:N)"
                )),
            },
        }
    }
}

impl std::fmt::Display for SortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SortKey::Hwm => f.write_str("hwm"),
            SortKey::Elapsed => f.write_str("elapsed"),
            SortKey::Wait => f.write_str("wait"),
            SortKey::Count => f.write_str("count"),
            SortKey::Lost => f.write_str("lost"),
            SortKey::Outer(n) => write!(f, "outer:{n}"),
            SortKey::Inner(n) => write!(f, "inner:{n}"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub sort: SortKey,
    /// Records (or commonality groups) shown in the text report.
    pub top: usize,
    /// Show objects without any activity in the per-object table too.
    pub all_objects: bool,
    /// Open the binaries named in the log to symbolize chains.
    pub symbols: bool,
    /// Deadlocks across the processes of the logs reported together (see
    /// [`crate::crossproc`]): each report shows those of its own process.
    pub cross_process: Vec<crate::crossproc::Cycle>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sort: SortKey::Wait,
            top: 20,
            all_objects: false,
            symbols: true,
            cross_process: Vec::new(),
        }
    }
}

/// Something the reader of a report must know about how complete it is.
#[derive(Debug, Clone)]
pub struct Warning {
    /// `damage`, `ending`, `unwritten-tail`, `next-log`, `read-error`, `no-start`,
    /// `unknown-records`, `limits`, `dropped`, `shim-warning`, `shim-note`, `symbols`.
    pub kind: &'static str,
    pub message: String,
    pub offset: Option<u64>,
    pub bytes: Option<u64>,
}

impl Warning {
    fn new(kind: &'static str, message: String) -> Self {
        Warning {
            kind,
            message,
            offset: None,
            bytes: None,
        }
    }
}

/// The policy part of the `limits` warning: only the counts that are not zero.
fn policy_limits(o: &Overflow) -> String {
    let listed: Vec<String> = [
        (o.wait_events_unlisted, "wait events"),
        (o.waiter_chains_unlisted, "waiter-chain records"),
        (o.holder_stacks_unlisted, "holder stacks"),
        (o.snapshots_unlisted, "snapshots"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let mut parts = Vec::new();
    if !listed.is_empty() {
        parts.push(format!(
            "policy data counted in the totals but not listed: {}",
            listed.join(", ")
        ));
    }
    for (n, what) in [
        (o.policy_versions, "policy versions not stored"),
        (
            o.policy_text_cut,
            "policy versions with their text or rules cut",
        ),
        (o.rule_stats, "rule statistics not stored"),
        (
            o.wait_event_groups,
            "wait events in no per-rule and per-object sum",
        ),
        (
            o.wait_event_reasons,
            "wait events whose reason was not counted",
        ),
        (o.chain_waiters_cut, "waiters cut from waiter-chain records"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    parts.join("; ")
}

/// What to say of a file that holds a second log from offset `at` on.
pub fn next_log_text(at: u64) -> String {
    format!(
        "another log starts at offset {at} (logs joined with cat?): this is the report of the \
         first one only; read the second with `tail -c +{} FILE > second.log`",
        at.saturating_add(1)
    )
}

/// Records sharing the same outermost / innermost frames of their waiter chains.
#[derive(Debug, Clone)]
pub struct Group {
    /// Function names in call order (outer first).
    pub frames: Vec<String>,
    pub records: Vec<u64>,
    pub total_elapsed_ns: u64,
    pub max_level: u32,
}

/// Durations the way people read them: `850 ns`, `12.5 µs`, `3.2 ms`, `1.25 s`.
/// What a wait-for cycle of `n` threads is, in words.
pub fn cycle_words(n: usize) -> String {
    match n {
        1 => "a thread waits for a lock it holds itself".to_string(),
        n => format!("{n} threads wait for each other"),
    }
}

/// Whether the deadlock was found by the shim's every-thread-waits check rather than as a
/// wait-for cycle.
pub fn every_thread_waits(d: &waitshim_format::Deadlock) -> bool {
    d.detected_by == waitshim_format::deadlock::EVERY_THREAD_WAITS
}

/// What a deadlock is, in words: a cycle, or every thread of the process waiting.
pub fn deadlock_words(d: &waitshim_format::Deadlock) -> String {
    if every_thread_waits(d) {
        match d.cycle.len() {
            1 => {
                "the process's one thread waits for what nothing in the process can do".to_string()
            }
            n => format!("all {n} threads of the process wait for one another"),
        }
    } else {
        cycle_words(d.cycle.len())
    }
}

/// Who found a deadlock: a waiting thread, or the shim's thread.
pub fn detector_words(d: &waitshim_format::Deadlock) -> String {
    if every_thread_waits(d) {
        "the shim's thread (every thread waited, unchanged, a second apart)".to_string()
    } else {
        format!("thread {}", d.detected_by)
    }
}

pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", f / 1e6)
    } else {
        format!("{:.2} s", f / 1e9)
    }
}

/// One log, read and modelled, with its symbolizer: what every report section draws on.
pub struct Ctx<'a> {
    pub summary: &'a ReadSummary,
    pub model: &'a Model,
    pub sym: Symbolizer,
    pub opts: &'a Options,
    /// The lock-order inversions (potential deadlocks), found once for every report.
    pub inversions: Inversions,
    /// Why the log has no end record, when it has none.
    pub no_end: Option<NoEnd>,
    /// What the model's read gathered for the critical path (None: it reads the log again).
    walk: Option<&'a crate::critical::Input>,
    /// The run's critical path, worked out when first asked.
    critical: std::cell::OnceCell<Option<crate::critical::Path>>,
    /// Wait times by object, from the per-wait events (made on first use).
    histograms: std::cell::OnceCell<std::collections::BTreeMap<u64, crate::histogram::Histogram>>,
    /// The futex words whose code says what they are (`findings::runtime_group`), when first
    /// asked.
    runtime_groups: Option<std::collections::HashMap<u64, crate::findings::Group>>,
}

/// `thread 1234 "worker"` for a record that names thread `tid`; for a tid several threads had
/// in turn with different names, `thread 1234 (tid of 3 threads in turn)`: the THREADS table
/// lists each.
pub fn thread_label(m: &Model, tid: u32) -> String {
    match m.thread_name(tid) {
        TidName::Name(name) => format!("thread {tid} {}", quoted(name)),
        TidName::Unnamed => format!("thread {tid}"),
        TidName::Several(n) if n >= 2 => format!("thread {tid} (tid of {n} threads in turn)"),
        TidName::Several(_) => format!("thread {tid} (tid of several threads in turn)"),
    }
}

impl<'a> Ctx<'a> {
    pub fn new(a: &'a crate::Analysis, opts: &'a Options) -> Self {
        let (summary, model) = (&a.summary, &a.model);
        let mut ctx = Ctx {
            summary,
            model,
            walk: a.walk.as_ref(),
            sym: Symbolizer::new(model, opts.symbols),
            opts,
            inversions: lockorder::find(model),
            no_end: NoEnd::find(summary, model, opts.symbols),
            critical: std::cell::OnceCell::new(),
            histograms: std::cell::OnceCell::new(),
            runtime_groups: None,
        };
        // The critical path needs to know which futex words are locks.
        ctx.runtime_groups();
        ctx
    }

    /// What each futex word threads waited on is, by the functions of the chain that first
    /// slept on it: a language runtime's lock, condition variable, parked thread or join
    /// ([`crate::findings::runtime_group`]). Words whose code says nothing are not in it.
    pub fn runtime_groups(&mut self) -> &std::collections::HashMap<u64, crate::findings::Group> {
        if self.runtime_groups.is_none() {
            let m = self.model;
            let mut groups = std::collections::HashMap::new();
            for o in m.objects.values() {
                if o.kind() != Some(waitshim_format::ObjectKind::Futex) || o.wait_total_ns() == 0 {
                    continue;
                }
                let Some(c) = o.create.as_ref() else { continue };
                let frames = self.sym.chain(m, c.chain_id);
                let g = crate::findings::runtime_group(
                    frames.iter().filter_map(|f| f.function.as_deref()),
                );
                if let Some(g) = g {
                    groups.insert(o.object_id, g);
                }
            }
            self.runtime_groups = Some(groups);
        }
        self.runtime_groups.get_or_insert_with(Default::default)
    }

    /// [`crate::findings::costs`], with runtime futex words in their groups.
    pub fn costs(&mut self) -> Vec<crate::findings::Cost> {
        let groups = self.runtime_groups().clone();
        crate::findings::costs_grouped(self.model, &groups)
    }

    /// The group of object `id`'s waits, as WHERE THE WAITING WENT shows it.
    pub fn group_of(&mut self, id: u64) -> crate::findings::Group {
        if let Some(&g) = self.runtime_groups().get(&id) {
            return g;
        }
        crate::findings::Group::of(self.model.objects.get(&id).and_then(|o| o.kind()))
    }

    /// The distribution of the waits on `object_id` the per-wait events give (those the flight
    /// recorder kept), if any.
    pub fn histogram(&self, object_id: u64) -> Option<&crate::histogram::Histogram> {
        self.histograms
            .get_or_init(|| self.model.events.histograms(self.model.end_of_log()))
            .get(&object_id)
            .filter(|h| h.waits > 0)
    }

    /// The run's critical path (`crate::critical`), None without per-wait events to follow or
    /// when the log cannot be read again.
    pub fn critical(&self) -> Option<&crate::critical::Path> {
        self.critical
            .get_or_init(|| {
                let locks = self.lock_words();
                crate::critical::critical_path(self.model, self.summary, &locks, self.walk)
                    .ok()
                    .flatten()
            })
            .as_ref()
    }

    /// The futex words whose code says they are locks (`findings::runtime_group`).
    fn lock_words(&self) -> std::collections::HashSet<u64> {
        self.runtime_groups
            .iter()
            .flatten()
            .filter(|(_, &g)| g == crate::findings::Group::Lock)
            .map(|(&id, _)| id)
            .collect()
    }

    /// The recorded threads, ready for what-if to run again; None when the one read did not
    /// gather them (a flight recorder's log) or the log is past the replay's size.
    pub fn replay(&self) -> Option<crate::critical::replay::Replay> {
        crate::critical::replay::Replay::of(self.model, self.walk?, &self.lock_words())
    }

    /// Where the object was created (the first frame of the program's own code, see
    /// [`Symbolizer::site`]), if known.
    pub fn creation_site(&mut self, object_id: u64) -> Option<Frame> {
        let chain = self
            .model
            .objects
            .get(&object_id)?
            .create
            .as_ref()?
            .chain_id;
        self.sym.site(self.model, chain)
    }

    /// The first frame of the program's own code ([`Frame::is_user`]) in a chain; `None` when
    /// the chain is unknown or has none.
    pub fn first_user_frame(&mut self, chain_id: u32) -> Option<Frame> {
        if chain_id == 0 {
            return None;
        }
        self.sym
            .chain(self.model, chain_id)
            .into_iter()
            .find(Frame::is_user)
    }

    /// The function name of a chain's first user frame, when known.
    pub fn user_function(&mut self, chain_id: u32) -> Option<String> {
        self.first_user_frame(chain_id)?.function
    }

    /// The global or static variable of the program (or of a library) that holds the object,
    /// from the symbol table of the module containing its address.
    pub fn global(&mut self, object_id: u64) -> Option<Global> {
        let o = self.model.objects.get(&object_id)?;
        let addr = o.create.as_ref()?.addr;
        if o.kind() == Some(waitshim_format::ObjectKind::Thread) {
            return None;
        }
        self.sym.global_at(addr)
    }

    /// How the report names the variable holding the object: `stats_lock`, `locks[3]`,
    /// `stats+0x8` (see [`Global::name`]).
    pub fn global_name(&mut self, object_id: u64) -> Option<String> {
        let elem = self.model.objects.get(&object_id)?.object_bytes();
        Some(self.global(object_id)?.name(elem))
    }

    /// How the site of an object's creation chain is introduced: `first used in` for an object
    /// the shim never saw initialised (static initializer), else `created at`.
    pub fn site_words(&self, object_id: u64) -> &'static str {
        match self.model.objects.get(&object_id) {
            Some(o) if o.first_use() => "first used in",
            _ => "created at",
        }
    }

    /// `mutex#3 "name" stats_lock @0x55..  first used in assoc.c:64 (assoc_init)`, or `..
    /// created at convoy.c:12 (main)` for an initialised object: how every section names an
    /// object.
    pub fn object_label(&mut self, object_id: u64) -> String {
        let Some(o) = self.model.objects.get(&object_id) else {
            return format!("object#{object_id} (not in the log)");
        };
        let mut s = format!("{}#{}", o.kind_name(), object_id);
        if let Some(name) = o.name() {
            s.push_str(&format!(" {}", quoted(name)));
        }
        let addr = o.create.as_ref().map(|c| c.addr);
        if let Some(global) = self.global_name(object_id) {
            s.push_str(&format!(" {global}"));
        }
        if let Some(addr) = addr {
            s.push_str(&format!(" @{addr:#x}"));
        }
        let words = self.site_words(object_id);
        match self.creation_site(object_id) {
            Some(f) => s.push_str(&format!("  {words} {}", f.site())),
            None => s.push_str("  creation site unknown"),
        }
        s
    }

    /// `mutex#3`: the short name of an object inside a line that names several.
    pub fn object_short(&self, object_id: u64) -> String {
        let kind = self
            .model
            .objects
            .get(&object_id)
            .map_or("object", |o| o.kind_name());
        format!("{kind}#{object_id}")
    }

    /// `thread 1234 "worker"`.
    pub fn thread_label(&self, tid: u32) -> String {
        thread_label(self.model, tid)
    }

    /// Everything the report should warn about, most important first.
    pub fn warnings(&self) -> Vec<Warning> {
        let s = self.summary;
        let m = self.model;
        let mut w = Vec::new();
        if let Some(e) = &s.io_error {
            w.push(Warning::new("read-error", e.clone()));
        }
        match s.ending {
            // The end record says how the run ended; the zeros after it are only space the shim
            // could not give back.
            Ending::Unwritten if m.run_end.is_some() => w.push(Warning {
                offset: Some(s.end_offset),
                ..Warning::new(
                    "unwritten-tail",
                    format!(
                        "the log has its end record, followed from offset {} by space the shim \
                         reserved and could not cut off (its ftruncate was refused, as a seccomp \
                         filter or other sandbox does, or the program had closed the log's \
                         descriptor): nothing of the run is missing",
                        s.end_offset
                    ),
                )
            }),
            Ending::Unwritten => w.push(Warning {
                offset: Some(s.end_offset),
                ..Warning::new(
                    "ending",
                    format!(
                        "the log ends in unwritten space, with no end record: {}",
                        self.no_end
                            .as_ref()
                            .unwrap_or(&NoEnd::NoExitHandlers)
                            .warning()
                    ),
                )
            }),
            Ending::Truncated => w.push(Warning {
                offset: Some(s.end_offset),
                ..Warning::new(
                    "ending",
                    format!(
                        "the log is truncated: it stops in the middle of a record at offset {}; \
                         this report shows what was written before",
                        s.end_offset
                    ),
                )
            }),
            Ending::Clean if m.run_end.is_none() && m.run.is_some() => w.push(Warning::new(
                "ending",
                format!(
                    "the log has no end record: {}",
                    self.no_end
                        .as_ref()
                        .unwrap_or(&NoEnd::NoExitHandlers)
                        .warning()
                ),
            )),
            Ending::Clean => {}
        }
        if let Some(at) = s.next_log {
            w.push(Warning {
                offset: Some(at),
                ..Warning::new("next-log", next_log_text(at))
            });
        }
        for d in &s.damage {
            w.push(Warning {
                offset: Some(d.offset),
                bytes: Some(d.bytes),
                ..Warning::new(
                    "damage",
                    format!(
                        "damaged log: {} bytes lost at offset {} ({}); reading resumed after them",
                        d.bytes, d.offset, d.why
                    ),
                )
            });
        }
        let unlisted = s.damage_count.saturating_sub(s.damage.len() as u64);
        if unlisted > 0 {
            w.push(Warning {
                bytes: Some(s.damage_bytes),
                ..Warning::new(
                    "damage",
                    format!(
                        "{unlisted} more damaged stretches not listed ({} bytes lost in all)",
                        s.damage_bytes
                    ),
                )
            });
        }
        if m.run.is_none() {
            w.push(Warning::new(
                "no-start",
                "the log has no run start record: program, pid and times are unknown".into(),
            ));
        }
        if let Some(e) = &m.run_end {
            if e.dropped > 0 {
                w.push(Warning::new(
                    "dropped",
                    format!(
                        "the shim could not write {} records (log full, or written while the shim \
                         was unavailable): counts in this report are lower bounds",
                        e.dropped
                    ),
                ));
            }
        }
        if s.unknown_records > 0 {
            w.push(Warning::new(
                "unknown-records",
                format!(
                    "{} records of types this analyzer does not know were skipped (written by a \
                     newer shim)",
                    s.unknown_records
                ),
            ));
        }
        if m.overflow.any() {
            let o = &m.overflow;
            let mut parts = Vec::new();
            if o.storage_any() {
                parts.push(format!(
                    "not stored: {} chains, {} threads, {} objects, {} wait sites, {} contention \
                     records, {} modules, {} history entries, {} lock-order edges; {} chains cut \
                     to their innermost frames; {} objects with kind counters cut; {} records \
                     with a name, path, text or list cut",
                    o.chains,
                    o.threads,
                    o.objects,
                    o.wait_sites,
                    o.contention_records,
                    o.modules,
                    o.history,
                    o.lock_order_edges,
                    o.chain_frames_cut,
                    o.kind_values_cut,
                    o.cut
                ));
            }
            if o.policy_any() {
                parts.push(policy_limits(o));
            }
            if o.churn_sites > 0 {
                parts.push(format!(
                    "{} records of short-lived objects not stored (beyond {MAX_CHURN_SITES} \
                     distinct kinds and creation sites)",
                    o.churn_sites
                ));
            }
            w.push(Warning::new(
                "limits",
                format!(
                    "the log holds more than this analyzer keeps; {}",
                    parts.join("; ")
                ),
            ));
        }
        for n in &m.notes {
            let kind = if n.level == note_level::WARNING {
                "shim-warning"
            } else {
                "shim-note"
            };
            w.push(Warning::new(kind, format!("shim: {}", n.text)));
        }
        for (_, path, status) in self.sym.module_status() {
            if !status.is_ok() && status != ModuleStatus::Disabled {
                w.push(Warning::new(
                    "symbols",
                    format!("{path}: {}", status.describe()),
                ));
            }
        }
        w
    }

    fn elapsed(&self, r: &ContentionRecord) -> u64 {
        r.elapsed_ns(self.model.last_ns)
    }

    /// All contention records in the order `--sort` asks for (commonality sorts order records by
    /// highwater level; their groups are in [`Ctx::groups`]).
    pub fn sorted_records(&self) -> Vec<&'a ContentionRecord> {
        let model = self.model;
        let counts = model.records_per_object();
        // By group, as WHERE THE WAITING WENT: locks, then condition variables, semaphores and
        // barriers, then joins (see `findings::costs`).
        let groups = self.runtime_groups.as_ref();
        let wait = |r: &ContentionRecord| {
            model
                .objects
                .get(&r.object_id)
                .map_or((crate::findings::Group::Join, 0), |o| {
                    let group = groups
                        .and_then(|g| g.get(&o.object_id).copied())
                        .unwrap_or_else(|| crate::findings::Group::of(o.kind()));
                    (group, u64::MAX - o.wait_total_ns())
                })
        };
        let count = |r: &ContentionRecord| counts.get(&r.object_id).copied().unwrap_or(0);
        let end = model.last_ns;
        let mut v: Vec<&ContentionRecord> = model.records.values().collect();
        let by_hwm = |a: &&ContentionRecord, b: &&ContentionRecord| {
            b.level()
                .cmp(&a.level())
                .then(b.elapsed_ns(end).cmp(&a.elapsed_ns(end)))
                .then(a.record_id.cmp(&b.record_id))
        };
        match self.opts.sort {
            SortKey::Hwm | SortKey::Outer(_) | SortKey::Inner(_) => v.sort_by(by_hwm),
            SortKey::Elapsed => {
                v.sort_by(|a, b| b.elapsed_ns(end).cmp(&a.elapsed_ns(end)).then(by_hwm(a, b)))
            }
            SortKey::Wait => v.sort_by(|a, b| wait(a).cmp(&wait(b)).then(by_hwm(a, b))),
            SortKey::Count => v.sort_by(|a, b| count(b).cmp(&count(a)).then(by_hwm(a, b))),
            SortKey::Lost => {
                let lost = |r: &ContentionRecord| {
                    let key = crate::states::Waited::Object(r.object_id);
                    model.states.lost.by.get(&key).copied().unwrap_or(0)
                };
                v.sort_by(|a, b| lost(b).cmp(&lost(a)).then(by_hwm(a, b)))
            }
        }
        v
    }

    /// The lost parallelism attributed to an object (CPU time the program left unused while
    /// threads waited on it, see [`crate::states::Lost`]); `None` when the run was not sampled.
    pub fn lost_to(&self, object_id: u64) -> Option<u64> {
        let st = &self.model.states;
        st.any().then(|| {
            let key = crate::states::Waited::Object(object_id);
            st.lost.by.get(&key).copied().unwrap_or(0)
        })
    }

    /// The objects in the order of the per-object tables: with `--sort lost`, most lost
    /// parallelism first, then most total wait; with any other key, most total wait first (the
    /// text report) or by id (`by_id`: the JSON report, whose readers look objects up by id).
    pub fn sorted_objects<'o>(&self, objs: Vec<&'o Object>, by_id: bool) -> Vec<&'o Object> {
        let mut objs = objs;
        let lost = |o: &Object| self.lost_to(o.object_id).unwrap_or(0);
        let by_wait = |a: &&Object, b: &&Object| {
            b.wait_total_ns()
                .cmp(&a.wait_total_ns())
                .then(a.object_id.cmp(&b.object_id))
        };
        match self.opts.sort {
            SortKey::Lost => objs.sort_by(|a, b| lost(b).cmp(&lost(a)).then(by_wait(a, b))),
            _ if by_id => objs.sort_by_key(|o| o.object_id),
            _ => objs.sort_by(by_wait),
        }
        objs
    }

    /// Commonality groups for `--sort outer:N|inner:N`, largest total elapsed time first. A record
    /// joins the group of each distinct key among its waiter chains. Frames that are not the
    /// program's own code ([`Frame::is_user`]) at either end of a chain are not counted.
    pub fn groups(&mut self) -> Option<Vec<Group>> {
        let (outer, n) = match self.opts.sort {
            SortKey::Outer(n) => (true, n),
            SortKey::Inner(n) => (false, n),
            _ => return None,
        };
        let mut groups: Vec<Group> = Vec::new();
        let mut index: HashMap<Vec<String>, usize> = HashMap::new();
        for r in self.sorted_records() {
            let mut keys: Vec<Vec<String>> = Vec::new();
            for (_, chain) in r.waiter_chains() {
                let all = self.sym.chain(self.model, chain);
                // Thread entry (`start_thread`, `__clone3`), `main`'s callers in libc and the
                // inlined `std::mutex::lock` are common to every chain: the program's own frames
                // are what tell components apart.
                let first = all.iter().position(Frame::is_user);
                let last = all.iter().rposition(Frame::is_user);
                let frames = match (first, last) {
                    (Some(a), Some(b)) => all.get(a..=b).unwrap_or(&all),
                    _ => &all[..],
                };
                let mut key: Vec<String> = if outer {
                    frames.iter().rev().take(n).map(Frame::short_name).collect()
                } else {
                    let mut k: Vec<String> = frames.iter().take(n).map(Frame::short_name).collect();
                    k.reverse();
                    k
                };
                if key.is_empty() {
                    key.push("(no call chain)".into());
                }
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            if keys.is_empty() {
                keys.push(vec!["(no call chain)".into()]);
            }
            let elapsed = self.elapsed(r);
            for key in keys {
                let i = *index.entry(key.clone()).or_insert_with(|| {
                    groups.push(Group {
                        frames: key,
                        records: Vec::new(),
                        total_elapsed_ns: 0,
                        max_level: 0,
                    });
                    groups.len() - 1
                });
                if let Some(g) = groups.get_mut(i) {
                    g.records.push(r.record_id);
                    g.total_elapsed_ns = g.total_elapsed_ns.saturating_add(elapsed);
                    g.max_level = g.max_level.max(r.level());
                }
            }
        }
        groups.sort_by(|a, b| {
            b.total_elapsed_ns
                .cmp(&a.total_elapsed_ns)
                .then(b.records.len().cmp(&a.records.len()))
                .then(a.frames.cmp(&b.frames))
        });
        Some(groups)
    }
}
