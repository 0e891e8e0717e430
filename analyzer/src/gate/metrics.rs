//! The figures the gate, the baselines and the history compare, computed once per log from the
//! model (the same counters, [`findings::costs`] and [`findings::thread_time`] the reports use).
//!
//! Run-level wait figures are over the *lock* group of objects (mutexes, rwlocks, spinlocks,
//! and the futex words a runtime's locks sleep on: see [`findings::Group`] and
//! [`Ctx::group_of`]): a condition variable a worker idles on while there is no work is not lost
//! time, a lock another thread holds is. Per-object figures are of whatever the selector names,
//! of any kind.

use std::collections::BTreeMap;

use crate::findings::{self, Group};
use crate::report::Ctx;
use crate::symbolize::Frame;
use crate::{Analysis, Options};
use waitshim_format::counter;

/// Where something is in the source: for annotations and for the report's words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// The source file as the debug information names it (often absolute).
    pub file: Option<String>,
    pub line: Option<u32>,
    /// `queue.c:41 (main)`, or the module offset when there is no debug information.
    pub site: String,
    /// The function, when known.
    pub function: Option<String>,
    /// What happened there: [`Place::CREATED`] or [`Place::WAITED`] (`None`: not said).
    pub role: Option<&'static str>,
}

impl Place {
    /// Where an object was created (or first used).
    pub const CREATED: &'static str = "created";
    /// The call site that waited for an object longest.
    pub const WAITED: &'static str = "waited for";

    fn of(frame: &Frame, role: &'static str) -> Place {
        Place {
            file: frame.file.clone(),
            line: frame.line.filter(|&l| l > 0),
            site: frame.site(),
            function: frame.function.clone(),
            role: Some(role),
        }
    }

    /// `queue.c:41` (base name and line) when the debug information gave them.
    pub fn source(&self) -> Option<String> {
        let file = crate::symbolize::basename(self.file.as_deref()?);
        Some(match self.line {
            Some(l) => format!("{file}:{l}"),
            None => file.to_string(),
        })
    }
}

/// One object's figures.
#[derive(Debug, Clone, Default)]
pub struct ObjectFigures {
    pub object_id: u64,
    pub kind: &'static str,
    pub group: Option<Group>,
    /// `mutex#3 "queue" queue_lock  created at queue.c:41 (main)`.
    pub label: String,
    /// The name given through the C API, and the variable holding it.
    pub api_name: Option<String>,
    pub global: Option<String>,
    /// Where it was created (or first used).
    pub created: Option<Place>,
    /// The call site that waited for it longest.
    pub wait_site: Option<Place>,
    pub acquisitions: u64,
    /// Acquisitions that found it held (brief waits included).
    pub contended: u64,
    /// Of those, the waits that blocked (went to sleep): not ended within the shim's back-off.
    pub blocking: u64,
    pub wait_ns: u64,
    pub wait_max_ns: u64,
    pub max_waiters: u64,
    /// Threads still waiting for it when the log ended.
    pub still_waiting: u64,
}

impl ObjectFigures {
    /// Its creation site, then where it was waited for longest.
    pub fn places(&self) -> impl Iterator<Item = Place> + '_ {
        self.created.iter().chain(self.wait_site.iter()).cloned()
    }

    /// Whether `selector` names this object: its C-API name, its variable, its creation site
    /// (`queue.c:41`, `queue.c`, the `queue.c:41 (main)` the report shows) or the function that
    /// created it.
    pub fn matches(&self, selector: &str) -> bool {
        let s = selector.trim();
        if self.api_name.as_deref() == Some(s) || self.global.as_deref() == Some(s) {
            return true;
        }
        let Some(p) = &self.created else {
            return false;
        };
        if p.site == s || p.function.as_deref() == Some(s) || p.source().as_deref() == Some(s) {
            return true;
        }
        // A file alone, or a path ending in the file and line.
        if let Some(file) = &p.file {
            let base = crate::symbolize::basename(file);
            if base == s || file == s {
                return true;
            }
            if let (Some(line), Some((f, l))) = (p.line, s.rsplit_once(':')) {
                if l.parse::<u32>().ok() == Some(line) && (file.ends_with(f) && !f.is_empty()) {
                    return true;
                }
            }
        }
        false
    }
}

/// One log's figures.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// The log's path as given.
    pub log: String,
    pub pid: u32,
    pub program: String,
    /// When the run started (wall clock, Unix seconds; 0 when the log does not say).
    pub started_unix_s: i64,
    pub duration_ns: u64,
    /// Every thread's life added up ([`findings::thread_time`]).
    pub thread_time_ns: u64,
    pub threads: u64,
    pub hwm: u64,
    /// The object whose waiters set the highwater mark.
    pub hwm_object: Option<u64>,
    /// Deadlocks that never broke: each cycle's objects.
    pub deadlocks: Vec<Vec<u64>>,
    /// Lock-order inversions (potential deadlocks, the ones that happened included).
    pub inversions: Vec<Vec<u64>>,
    /// Objects with any activity, by id.
    pub objects: BTreeMap<u64, ObjectFigures>,
    /// From the shim's sampler, when the run was sampled: the program's CPU capacity, what of it
    /// went unused while threads waited, and that by object (docs/report.md, Thread states).
    pub sampled_lost: Option<SampledLost>,
    /// The sampler's thread-state and CPU totals, when the run was sampled.
    pub states: Option<StateTotals>,
}

/// What the sampler saw, summed over the threads (and the CPUs) of one log.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StateTotals {
    /// Time on a CPU.
    pub running_ns: u64,
    /// Time ready to run, waiting for a CPU.
    pub runnable_ns: u64,
    /// Time in the waits the shim tracks (locks, condition variables, ...).
    pub tracked_wait_ns: u64,
    /// Time blocked elsewhere (I/O, sleeps, untracked futexes).
    pub blocked_ns: u64,
    /// The machine's CPUs' idle time over the sampled span, summed over the CPUs.
    pub idle_cpu_ns: u64,
    /// That span times the CPUs: what `idle_cpu_ns` is a share of.
    pub cpu_capacity_ns: u64,
}

/// Lost parallelism as the sampler measured it.
#[derive(Debug, Clone, Default)]
pub struct SampledLost {
    pub capacity_ns: u64,
    pub lost_ns: u64,
    pub by_object: BTreeMap<u64, u64>,
}

/// Ratio that is 0 for 0/0.
pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The sums of a set of objects, for run-level and selected figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sums {
    pub objects: u64,
    pub acquisitions: u64,
    pub contended: u64,
    pub blocking: u64,
    pub wait_ns: u64,
    pub wait_max_ns: u64,
    pub max_waiters: u64,
    pub still_waiting: u64,
}

impl Sums {
    pub fn of<'a>(objects: impl Iterator<Item = &'a ObjectFigures>) -> Sums {
        let mut s = Sums::default();
        for o in objects {
            s.objects += 1;
            s.acquisitions = s.acquisitions.saturating_add(o.acquisitions);
            s.contended = s.contended.saturating_add(o.contended);
            s.blocking = s.blocking.saturating_add(o.blocking);
            s.wait_ns = s.wait_ns.saturating_add(o.wait_ns);
            s.wait_max_ns = s.wait_max_ns.max(o.wait_max_ns);
            s.max_waiters = s.max_waiters.max(o.max_waiters);
            s.still_waiting = s.still_waiting.saturating_add(o.still_waiting);
        }
        s
    }
}

impl Figures {
    /// Reads the figures off an analysed log (symbolized unless `symbols` is false).
    pub fn of(a: &Analysis, symbols: bool) -> Figures {
        let opts = Options {
            symbols,
            ..Options::default()
        };
        let mut ctx = Ctx::new(a, &opts);
        let m = &a.model;
        let costs: BTreeMap<u64, findings::Cost> =
            ctx.costs().into_iter().map(|c| (c.object_id, c)).collect();
        let mut still: BTreeMap<u64, u64> = BTreeMap::new();
        if let Some(o) = &m.open_waits {
            for w in &o.waits {
                *still.entry(w.object_id).or_default() += 1;
            }
        }
        let mut objects = BTreeMap::new();
        let ids: Vec<u64> = m
            .objects
            .values()
            .filter(|o| o.has_activity() || costs.contains_key(&o.object_id))
            .map(|o| o.object_id)
            .collect();
        for id in ids {
            let Some(o) = m.objects.get(&id) else {
                continue;
            };
            let c = o.counters.as_ref();
            let cost = costs.get(&id);
            let acquisitions = c
                .map_or(0, |c| c.acquisitions)
                .saturating_add(o.kind_counter(counter::READ_ACQUISITIONS));
            let contended = c
                .map_or(0, |c| c.contended)
                .saturating_add(o.kind_counter(counter::READ_CONTENDED));
            let brief = o.kind_counter(counter::ENDED_BRIEF);
            let kind = o.kind_name();
            // A futex word is in the group its code says (a Rust `Condvar`'s waits are for
            // another thread to act, not for a lock).
            let group = o.kind().map(|_| ctx.group_of(id));
            let api_name = o.name().map(str::to_string);
            let global = ctx.global_name(id);
            let created = ctx.creation_site(id).map(|f| Place::of(&f, Place::CREATED));
            let wait_site = cost
                .and_then(|c| c.top_site)
                .and_then(|site| ctx.sym.site(m, site.chain_id))
                .map(|f| Place::of(&f, Place::WAITED));
            let label = ctx.object_label(id);
            objects.insert(
                id,
                ObjectFigures {
                    object_id: id,
                    kind,
                    group,
                    label,
                    api_name,
                    global,
                    created,
                    wait_site,
                    acquisitions,
                    contended,
                    blocking: contended.saturating_sub(brief),
                    wait_ns: cost.map_or_else(|| o.wait_total_ns(), |c| c.wait_ns),
                    wait_max_ns: cost.map_or(0, |c| c.max_wait_ns),
                    max_waiters: cost.map_or(0, |c| c.max_waiters),
                    still_waiting: still.get(&id).copied().unwrap_or(0),
                },
            );
        }
        let deadlocks = m
            .real_deadlocks()
            .map(|d| d.cycle.iter().map(|e| e.object_id).collect())
            .collect();
        let inversions = ctx
            .inversions
            .cycles
            .iter()
            .map(|c| c.cycle.clone())
            .collect();
        Figures {
            log: a.summary.path.display().to_string(),
            pid: m.run.as_ref().map_or(0, |r| r.pid),
            program: m.run.as_ref().map_or_else(String::new, |r| {
                crate::symbolize::basename(&r.exe).to_string()
            }),
            started_unix_s: m.run.as_ref().map_or(0, |r| {
                i64::try_from(r.realtime_ns / 1_000_000_000).unwrap_or(0)
            }),
            duration_ns: m.duration_ns().0,
            thread_time_ns: findings::thread_time(m),
            threads: m.threads_seen(),
            hwm: u64::from(m.hwm()),
            hwm_object: m.final_highwater().map(|h| h.object_id),
            deadlocks,
            inversions,
            objects,
            sampled_lost: (m.states.any() && m.states.lost.capacity_ns > 0).then(|| SampledLost {
                capacity_ns: m.states.lost.capacity_ns,
                lost_ns: m.states.lost.lost_ns,
                by_object: m
                    .states
                    .lost
                    .by
                    .iter()
                    .filter_map(|(k, &ns)| match k {
                        crate::states::Waited::Object(id) => Some((*id, ns)),
                        _ => None,
                    })
                    .collect(),
            }),
            states: m.states.any().then(|| {
                let mut t = StateTotals::default();
                for s in m.states.threads.values().filter(|s| s.sampled) {
                    t.running_ns = t.running_ns.saturating_add(s.on_cpu_ns);
                    t.runnable_ns = t.runnable_ns.saturating_add(s.run_delay_ns);
                    t.tracked_wait_ns = t.tracked_wait_ns.saturating_add(s.tracked_ns);
                    t.blocked_ns = t.blocked_ns.saturating_add(s.other_ns());
                }
                t.idle_cpu_ns = m.states.idle_ns;
                t.cpu_capacity_ns = m.states.cpu_sampled_ns.saturating_mul(m.states.cpus as u64);
                t
            }),
        }
    }

    /// Time threads waited for objects of every kind (locks, condition variables, semaphores,
    /// barriers, joins).
    pub fn wait_all_ns(&self) -> u64 {
        Sums::of(self.objects.values()).wait_ns
    }

    /// The program's name, for grouping the logs of one program.
    pub fn program_name(&self) -> &str {
        if self.program.is_empty() {
            "(unknown program)"
        } else {
            &self.program
        }
    }

    /// The sums over the lock group: what the run-level figures are of.
    pub fn locks(&self) -> Sums {
        Sums::of(
            self.objects
                .values()
                .filter(|o| o.group == Some(Group::Lock)),
        )
    }

    /// The objects a selector names.
    pub fn select(&self, selector: &str) -> Vec<&ObjectFigures> {
        self.objects
            .values()
            .filter(|o| o.matches(selector))
            .collect()
    }

    /// The lock that cost most: where a run-level figure about waiting points.
    pub fn costliest_lock(&self) -> Option<&ObjectFigures> {
        self.objects
            .values()
            .filter(|o| o.group == Some(Group::Lock) && o.wait_ns > 0)
            .max_by(|a, b| {
                a.wait_ns
                    .cmp(&b.wait_ns)
                    .then(b.object_id.cmp(&a.object_id))
            })
    }

    /// The value of a metric of the run (`selector` None) or of the selected objects, and the
    /// objects it is about (for annotations). `None` when the metric takes no selector.
    pub fn value(&self, metric: &str, selector: Option<&str>) -> Option<(f64, Vec<u64>)> {
        let (sums, about): (Sums, Vec<u64>) = match selector {
            Some(s) => {
                let sel = self.select(s);
                (
                    Sums::of(sel.iter().copied()),
                    sel.iter().map(|o| o.object_id).collect(),
                )
            }
            None => (
                self.locks(),
                self.costliest_lock()
                    .map(|o| o.object_id)
                    .into_iter()
                    .collect(),
            ),
        };
        let tt = self.thread_time_ns;
        let v = match (metric, selector) {
            ("deadlocks", None) => {
                return Some((
                    self.deadlocks.len() as f64,
                    self.deadlocks.iter().flatten().copied().collect(),
                ))
            }
            ("inversions", None) => {
                return Some((
                    self.inversions.len() as f64,
                    self.inversions.iter().flatten().copied().collect(),
                ))
            }
            // Figures of the whole run that no object makes: about none.
            ("threads", None) => return Some((self.threads as f64, Vec::new())),
            ("duration", None) => return Some((self.duration_ns as f64, Vec::new())),
            ("hwm", None) => return Some((self.hwm as f64, self.hwm_object.into_iter().collect())),
            ("still_waiting", None) => {
                // Every kind: a thread stuck on a condition variable at exit is stuck too.
                let all = Sums::of(self.objects.values());
                return Some((
                    all.still_waiting as f64,
                    self.objects
                        .values()
                        .filter(|o| o.still_waiting > 0)
                        .map(|o| o.object_id)
                        .collect(),
                ));
            }
            ("wait_share", None) => ratio(Sums::of(self.objects.values()).wait_ns, tt),
            ("hwm", Some(_)) => sums.max_waiters as f64,
            ("still_waiting", Some(_)) => sums.still_waiting as f64,
            ("acquisitions", _) => sums.acquisitions as f64,
            ("waits", _) => sums.contended as f64,
            ("blocking_waits", _) => sums.blocking as f64,
            ("wait_total", _) => sums.wait_ns as f64,
            ("wait_max", _) => sums.wait_max_ns as f64,
            ("contended_ratio", _) => ratio(sums.contended, sums.acquisitions),
            ("waits_per_acquisition", _) => ratio(sums.blocking, sums.acquisitions),
            // Sampled: the program's CPU time left unused while its threads waited (on the
            // selected objects); unsampled runs keep the share of the threads' time waited.
            ("lost_parallelism", None) if self.sampled_lost.is_some() => {
                let l = self.sampled_lost.as_ref().expect("checked");
                ratio(l.lost_ns, l.capacity_ns)
            }
            ("lost_parallelism", Some(_)) if self.sampled_lost.is_some() => {
                let l = self.sampled_lost.as_ref().expect("checked");
                let lost = about
                    .iter()
                    .map(|id| l.by_object.get(id).copied().unwrap_or(0))
                    .fold(0u64, u64::saturating_add);
                ratio(lost, l.capacity_ns)
            }
            ("wait_share", Some(_)) | ("lost_parallelism", _) => ratio(sums.wait_ns, tt),
            _ => return None,
        };
        Some((v, about))
    }
}
