//! `waitshim-analyze whatif --hold SITE=FACTOR LOG`: how long the run would have taken had the
//! critical sections of the objects at SITE taken FACTOR times as long (0.5: half, 0: none).
//!
//! An estimate from what the log measured, never a figure of its own: the run's critical path
//! (`crate::critical`) with those sections scaled, weighed against what else would then bound
//! the run. A run takes at least as long as each of
//! - its critical path: the pieces inside the scaled sections shrink (the sections the path
//!   went through, exactly; the holds nobody waited for, which the path counts as their
//!   thread's work, in proportion to the share of those threads' CPU time the object's holds
//!   took);
//! - every lock's critical sections one after another (they cannot overlap): the scaled ones
//!   at their new length;
//! - the program's CPU time spread over the machine's CPUs, less what the scaled sections save;
//! - each thread's own CPU time, less its share of the savings.
//!
//! The prediction is the run's time scaled by how the largest of these moves: when nothing is
//! scaled it is the run's time. Which one bounds the prediction is said, with the assumptions.
//!
//! With progress points, the phase they span takes the run's place (the critical path is that
//! of the phase; the run's CPU and hold totals are taken in proportion to the phase's length),
//! and each point's throughput is predicted with it: the same visits in the predicted time.
//!
//! `whatif BASE --delayed LOG_D [--delayed ...]` checks the estimate against the program
//! itself: each LOG_D is a run slowed on purpose (`WAITSHIM_DELAY`, d of busy waiting added to
//! each section of some locks). Its delays are a hold-time increase of BASE's objects (factor
//! 1 + sections x d / total hold), the estimate predicts the run time, and the measured and
//! predicted slopes (run-time change per µs of d) are compared; with two delayed runs or more,
//! least-squares slopes over all of them.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use serde::Serialize;

use crate::critical::replay::Replay;
use crate::critical::{Cause, Path};
use crate::gate::metrics::Figures;
use crate::report::Ctx;
use crate::{analyze, Analysis, Options, EXIT_BAD_INPUT};

/// One `--hold SITE=FACTOR`.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldChange {
    pub site: String,
    pub factor: f64,
}

impl std::str::FromStr for HoldChange {
    type Err = String;

    fn from_str(s: &str) -> Result<HoldChange, String> {
        let (site, factor) = s
            .rsplit_once('=')
            .ok_or_else(|| format!("{s:?}: expected SITE=FACTOR, such as queue.c:41=0.5"))?;
        let site = site.trim();
        if site.is_empty() {
            return Err(format!("{s:?}: no SITE before '='"));
        }
        let factor: f64 = factor
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: FACTOR {factor:?} is not a number"))?;
        if !factor.is_finite() || factor < 0.0 {
            return Err(format!(
                "{s:?}: FACTOR must be 0 or more (0.5: half as long, 0: free, 2: twice)"
            ));
        }
        Ok(HoldChange {
            site: site.to_string(),
            factor,
        })
    }
}

/// What bounds a prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Bound {
    CriticalPath,
    /// One lock's critical sections, one after another.
    Serialised {
        object_id: u64,
    },
    Cpus,
    /// One thread's own CPU time.
    Thread {
        tid: u32,
    },
    /// The replay of the recorded threads ([`crate::critical::replay`]).
    Replay,
}

/// The run's figures the estimate starts from, worked out once per log.
pub struct Basis {
    /// The run's length, or the phase's between progress points.
    run_ns: u64,
    /// The phase's share of the run, by which run-wide totals were scaled (1 without one).
    phase_share: Option<f64>,
    path: Path,
    ncpus: u64,
    /// Each lock's total hold time (estimated when the shim timed only some holds).
    holds: BTreeMap<u64, (u64, bool)>,
    /// Each thread's CPU time (the kernel's figure, from the sampler).
    running: BTreeMap<u32, u64>,
    /// Each thread's time ready for a CPU it did not get (the kernel's figure).
    ready: BTreeMap<u32, u64>,
    /// The recorded threads to run again, and how long the run took in the replay with
    /// nothing scaled; None for a phase between progress points, a flight recorder's log, or a
    /// log past [`crate::critical::replay::MAX_WAITS`] (then the bounds alone estimate).
    replay: Option<(Replay, f64)>,
}

/// A prediction for one set of changes.
#[derive(Debug, Clone)]
pub struct Prediction {
    pub baseline_ns: u64,
    pub predicted_ns: u64,
    pub bound: Bound,
    /// Any hold time it used was estimated (timed on some holds only).
    pub holds_estimated: bool,
}

impl Prediction {
    pub fn speedup(&self) -> f64 {
        self.baseline_ns as f64 / self.predicted_ns.max(1) as f64
    }
}

impl Basis {
    /// The basis of a log's estimates; None without a critical path (no per-wait events) or
    /// sampled CPU times.
    pub fn of(ctx: &Ctx<'_>) -> Option<Basis> {
        let path = ctx.critical()?.clone();
        let m = ctx.model;
        let running: BTreeMap<u32, u64> = m
            .states
            .threads
            .iter()
            .map(|(&t, s)| (t, s.on_cpu_ns))
            .filter(|&(_, ns)| ns > 0)
            .collect();
        if running.is_empty() {
            return None;
        }
        let ready: BTreeMap<u32, u64> = m
            .states
            .threads
            .iter()
            .map(|(&t, s)| (t, s.run_delay_ns))
            .collect();
        let holds: BTreeMap<u64, (u64, bool)> = m
            .objects
            .values()
            .filter(|o| {
                matches!(
                    o.kind(),
                    Some(
                        waitshim_format::ObjectKind::Mutex
                            | waitshim_format::ObjectKind::RwLock
                            | waitshim_format::ObjectKind::Spin
                    )
                )
            })
            .filter_map(|o| Some((o.object_id, o.hold_total_estimate()?)))
            .collect();
        let run = m.duration_ns().0;
        let phase_share = path
            .phase
            .map(|_| (path.length_ns() as f64 / run.max(1) as f64).min(1.0));
        // In a phase: the threads' CPU time within it; each lock's holds at most the phase
        // long (they are the run's: the log has no hold times by moment).
        let (running, ready, holds) = if phase_share.is_some() {
            let within = |f: fn(&(u64, u64)) -> u64| -> BTreeMap<u32, u64> {
                path.phase_cpu.iter().map(|(&t, r)| (t, f(r))).collect()
            };
            let cap = path.length_ns();
            (
                within(|r| r.0),
                within(|r| r.1),
                holds
                    .into_iter()
                    .map(|(o, (ns, est))| (o, (ns.min(cap), est)))
                    .collect(),
            )
        } else {
            (running, ready, holds)
        };
        if running.is_empty() {
            return None;
        }
        // With a phase, the replay's phase stands for it (when the replay could place both its
        // ends); else the run.
        let in_phase = phase_share.is_some();
        let replay = ctx
            .replay()
            .filter(|r| !in_phase || r.has_phase())
            .and_then(|r| {
                let base = r.run(|_| 1.0, |_| 1.0);
                let base = if in_phase { base.phase? } else { base.end };
                (base > 0.0).then_some((r, base))
            });
        Some(Basis {
            replay,
            run_ns: if phase_share.is_some() {
                path.length_ns()
            } else {
                run
            },
            phase_share,
            ncpus: u64::from(m.run.as_ref().map_or(1, |r| r.ncpus.max(1))),
            path,
            holds,
            running,
            ready,
        })
    }

    /// The bounds of the run with the critical sections of each object in `changes` scaled by
    /// its factor: (critical path, each lock's serialised holds, CPUs, each thread), as
    /// floating-point nanoseconds.
    fn bounds(&self, changes: &HashMap<u64, f64>) -> Vec<(Bound, f64)> {
        let p = &self.path;
        let mut path = p.length_ns() as f64;
        let mut total_cpu: f64 = self.running.values().map(|&n| n as f64).sum();
        let mut thread_cpu: BTreeMap<u32, f64> =
            self.running.iter().map(|(&t, &n)| (t, n as f64)).collect();
        for (&o, &f) in changes {
            let cut = 1.0 - f;
            // Only the time the holders were on a CPU inside the sections shrinks.
            let held_on_path = p.held_running.get(&o).copied().unwrap_or(0) as f64;
            path -= cut * held_on_path;
            let Some(&(hold, _)) = self.holds.get(&o) else {
                continue;
            };
            let hold = hold as f64;
            let unseen = (hold - p.ns(&Cause::Held(o)) as f64).max(0.0);
            for (tid, weight) in self.holder_weights(o) {
                let c = self.cpu(tid);
                if c <= 0.0 {
                    continue;
                }
                // The holds the path did not see as such are part of this thread's computing
                // there: its work, and its waits for a CPU (less work, less of those).
                let ready = self.ready.get(&tid).copied().unwrap_or(0) as f64;
                let on_path = (weight * unseen / (c + ready)).min(1.0);
                let computing = p.ns(&Cause::Work(tid)) + p.ns(&Cause::CpusBusy(tid));
                path -= cut * on_path * computing as f64;
                let share = (weight * hold / c).min(1.0);
                if let Some(t) = thread_cpu.get_mut(&tid) {
                    let saved = cut * share * c;
                    *t -= saved;
                    total_cpu -= saved;
                }
            }
        }
        let mut bounds = vec![(Bound::CriticalPath, path.max(0.0))];
        for (&o, &(hold, _)) in &self.holds {
            let f = changes.get(&o).copied().unwrap_or(1.0);
            bounds.push((Bound::Serialised { object_id: o }, f * hold as f64));
        }
        bounds.push((Bound::Cpus, total_cpu.max(0.0) / self.ncpus as f64));
        for (&t, &c) in &thread_cpu {
            bounds.push((Bound::Thread { tid: t }, c.max(0.0)));
        }
        bounds
    }

    /// The run's time had the objects in `changes` held for their factor of the time.
    pub fn predict(&self, changes: &HashMap<u64, f64>) -> Prediction {
        let holds_estimated = |bound: Bound| {
            changes
                .keys()
                .any(|o| self.holds.get(o).is_some_and(|h| h.1))
                || matches!(bound, Bound::Serialised { object_id } if self.holds.get(&object_id).is_some_and(|h| h.1))
        };
        let cap = self.run_ns.saturating_mul(1000);
        if let Some((replay, base)) = &self.replay {
            let outside = self.outside_factors(replay, changes);
            let out = replay.run(
                |o| changes.get(&o).copied().unwrap_or(1.0),
                |t| outside.get(&t).copied().unwrap_or(1.0),
            );
            let then = if self.phase_share.is_some() {
                out.phase.unwrap_or(*base)
            } else {
                out.end
            };
            let mut predicted = self.run_ns as f64 * then / base;
            if changes.values().all(|&f| f <= 1.0) {
                // Shorter sections make no run longer: a replay that says so met an order the
                // recording did not show, and the run as measured is the better figure.
                predicted = predicted.min(self.run_ns as f64);
            }
            let mut bound = Bound::Replay;
            // No lock's sections take less than all of them one after another (a hold total
            // estimated past the run's length is taken as the run's: they cannot overlap). Not
            // for a phase: the holds are the run's.
            let holds = self.holds.iter().filter(|_| self.phase_share.is_none());
            for (&o, &(hold, _)) in holds {
                let serial = changes.get(&o).copied().unwrap_or(1.0) * hold.min(self.run_ns) as f64;
                if serial > predicted {
                    predicted = serial;
                    bound = Bound::Serialised { object_id: o };
                }
            }
            return Prediction {
                baseline_ns: self.run_ns,
                predicted_ns: (predicted.round() as u64).min(cap),
                bound,
                holds_estimated: holds_estimated(bound),
            };
        }
        let largest = |b: Vec<(Bound, f64)>| {
            b.into_iter().fold(
                (Bound::CriticalPath, 0.0f64),
                |a, x| if x.1 > a.1 { x } else { a },
            )
        };
        let (_, now) = largest(self.bounds(&HashMap::new()));
        let (bound, then) = largest(self.bounds(changes));
        let predicted = if now > 0.0 {
            (self.run_ns as f64 * then / now).round() as u64
        } else {
            self.run_ns
        };
        Prediction {
            baseline_ns: self.run_ns,
            predicted_ns: predicted.min(cap),
            bound,
            holds_estimated: holds_estimated(bound),
        }
    }

    /// Thread `t`'s CPU time.
    fn cpu(&self, t: u32) -> f64 {
        self.running.get(&t).copied().unwrap_or(0) as f64
    }

    /// Each thread seen holding lock `o`, with its part of the lock's holds: by how often it
    /// released the lock to a waiter (a lock held long is the one others wait for), else by
    /// its CPU time.
    fn holder_weights(&self, o: u64) -> Vec<(u32, f64)> {
        let holders = self.path.holders.get(&o).map(Vec::as_slice).unwrap_or(&[]);
        let releases: f64 = holders.iter().map(|h| h.1 as f64).sum();
        let all_cpu: f64 = holders.iter().map(|h| self.cpu(h.0)).sum();
        holders
            .iter()
            .map(|h| {
                let w = if releases > 0.0 {
                    h.1 as f64 / releases
                } else if all_cpu > 0.0 {
                    self.cpu(h.0) / all_cpu
                } else {
                    0.0
                };
                (h.0, w)
            })
            .collect()
    }

    /// For the replay: how much each thread's work outside the known critical sections takes
    /// with `changes`. The holds of a scaled lock that the replay does not place (nobody waited
    /// for them) are spread over its holders ([`Basis::holder_weights`]): each holder's
    /// part of them is that part of its work outside the known sections.
    fn outside_factors(&self, replay: &Replay, changes: &HashMap<u64, f64>) -> HashMap<u32, f64> {
        let seen: HashMap<u64, u64> = replay.sections().collect();
        let outside: HashMap<u32, u64> = replay.outside_work().collect();
        let mut f: HashMap<u32, f64> = HashMap::new();
        for (&o, &factor) in changes {
            let Some(&(hold, _)) = self.holds.get(&o) else {
                continue;
            };
            let unseen = hold.saturating_sub(seen.get(&o).copied().unwrap_or(0)) as f64;
            for (tid, weight) in self.holder_weights(o) {
                let work = outside.get(&tid).copied().unwrap_or(0) as f64;
                if work <= 0.0 {
                    continue;
                }
                let share = (weight * unseen / work).min(1.0);
                let g = f.entry(tid).or_insert(1.0);
                *g = (*g - (1.0 - factor) * share).max(0.0);
            }
        }
        f
    }

    /// The phase's share of the run, when the estimates are of a phase between progress points.
    pub fn phase_share(&self) -> Option<f64> {
        self.phase_share
    }

    /// What the estimate assumes: [`REPLAY_ASSUMPTIONS`] or [`ASSUMPTIONS`], and how a phase
    /// was taken.
    pub fn assumptions(&self) -> Vec<&'static str> {
        if self.replay.is_some() {
            let mut a = REPLAY_ASSUMPTIONS.to_vec();
            if self.phase_share.is_some() {
                a.push(REPLAY_PHASE_ASSUMPTION);
            }
            return a;
        }
        let mut a = ASSUMPTIONS.to_vec();
        if self.phase_share.is_some() {
            a.push(PHASE_ASSUMPTION);
        }
        a
    }

    /// How long the replay of the run as measured took (nothing scaled), if the estimate
    /// replays the run: how far the replay is from the run it replays.
    pub fn replayed_ns(&self) -> Option<u64> {
        self.replay.as_ref().map(|r| r.1.round() as u64)
    }

    /// The CPUs the replay gave the program (its average), if it replays the run.
    pub fn replay_cpus(&self) -> Option<f64> {
        self.replay.as_ref().map(|r| r.0.cpus)
    }

    pub fn hold_ns(&self, object_id: u64) -> Option<(u64, bool)> {
        self.holds.get(&object_id).copied()
    }
}

/// What the replay assumes, as the report and JSON say it.
pub const REPLAY_ASSUMPTIONS: [&str; 5] = [
    "the recorded threads run again on the CPUs the program had on average (its CPU time plus \
     the idle CPUs the sampler saw); each thread's work keeps its length except the scaled \
     critical sections, and the threads that have work share the CPUs",
    "a lock held by one thread at a time (a mutex, a spin lock, a runtime's lock word) is \
     locked again: a thread waits for it only while another holds it in the replay; any other \
     wait ends when the thread that ended it reaches the same point of its own work, at once if \
     it already has; waits nobody is known to have ended keep their length",
    "a critical section is known where its holder released the lock to a waiter (from the \
     holder's previous wait, at most the lock's longest measured hold), and after a wait that \
     took the lock (its mean hold, when nobody waited for the release); the holds nobody \
     waited for are shared among the threads seen holding the lock, by how often each released \
     it to a waiter, as part of their work",
    "time blocked in a system call or stopped, and time ready for a CPU while one was idle \
     (being woken), keep their length; the run takes no less than a lock's critical sections \
     one after another",
    "the prediction is the run's measured time scaled by the replay's: the replay with \
     nothing scaled stands for the run as measured",
];

/// Said when the replay's estimate is of a phase between progress points.
pub const REPLAY_PHASE_ASSUMPTION: &str = "the phase between the first and the last progress \
     mark takes the run's place: the log does not say which thread reached a mark, so each end \
     is placed on every thread that was running then (not in a wait), and the replay's phase \
     runs from the earliest of them reaching the start to the latest reaching the end; each \
     point's visits stay as many, so its throughput moves with the phase's time";

/// What the estimate assumes, as the report and JSON say it.
pub const ASSUMPTIONS: [&str; 4] = [
    "the run takes as long as the largest of: its critical path, each lock's critical sections \
     one after another, its CPU time over the machine's CPUs, and each thread's own CPU time; \
     scaled sections shrink each, the rest stay as measured",
    "the object's holds are shared among the threads seen holding it by how often each released \
     it to a waiter (by their CPU time when none did); those nobody waited for are part of the \
     holder's work on the critical path",
    "only the time holders computed inside the sections (on a CPU, or ready for one) shrinks; \
     time they were blocked in a system call or stopped while holding stays",
    "the machine keeps the CPUs it had: other programs take as much of them as they did",
];

/// Said when the estimate is of a phase between progress points.
pub const PHASE_ASSUMPTION: &str = "the phase between the first and the last progress mark \
     takes the run's place: the critical path and the threads' CPU time are the phase's; each \
     lock's hold time is the run's (the log does not time holds by moment), at most the phase's \
     length; each point's visits stay as many, so its throughput moves with the phase's time";

/// A progress point's throughput, measured and predicted.
#[derive(Serialize)]
pub struct ThroughputJson {
    pub name: String,
    pub visits: u64,
    pub per_second: f64,
    pub predicted_per_second: f64,
}

/// The progress points' throughput had the phase taken `p`'s predicted time.
pub fn throughput(model: &crate::model::Model, p: &Prediction) -> Vec<ThroughputJson> {
    model
        .progress
        .rows()
        .into_iter()
        .filter_map(|r| {
            let per_second = r.per_second?;
            Some(ThroughputJson {
                name: r.name,
                visits: r.visits,
                per_second,
                predicted_per_second: per_second * p.speedup(),
            })
        })
        .collect()
}

#[derive(Serialize)]
struct HoldJson<'a> {
    site: &'a str,
    factor: f64,
    object_ids: Vec<u64>,
}

#[derive(Serialize)]
struct WhatIfJson<'a> {
    schema: &'static str,
    log: String,
    holds: Vec<HoldJson<'a>>,
    baseline_duration_ns: u64,
    predicted_duration_ns: u64,
    predicted_speedup: f64,
    bound: Bound,
    holds_estimated: bool,
    /// How long the replay of the run as measured took, when the estimate replays the run
    /// (absent: the bounds estimate it).
    #[serde(skip_serializing_if = "Option::is_none")]
    replayed_duration_ns: Option<u64>,
    /// The CPUs the replay gave the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_cpus: Option<f64>,
    /// The phase between progress points the durations are of (absent: the whole run).
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<PhaseJson>,
    /// Each progress point's throughput, measured and predicted (empty without points).
    throughput: Vec<ThroughputJson>,
    assumptions: Vec<&'static str>,
}

#[derive(Serialize)]
struct PhaseJson {
    start_ns: u64,
    end_ns: u64,
    share_of_run: f64,
}

/// The objects `site` names (a C-API name, a variable, a creation site `file:line`, a file, the
/// function that created it), by id.
fn resolve(figs: &Figures, site: &str) -> Vec<u64> {
    figs.objects
        .values()
        .filter(|o| o.matches(site))
        .map(|o| o.object_id)
        .collect()
}

pub struct WhatIfOptions {
    pub holds: Vec<HoldChange>,
    /// `--delayed`: logs of runs slowed on purpose (`WAITSHIM_DELAY`) to check the estimate
    /// against (`slope_check`).
    pub delayed: Vec<std::path::PathBuf>,
    pub json: bool,
    pub symbols: bool,
}

/// Runs `whatif`; returns the exit code.
pub fn run(
    log: &std::path::Path,
    opts: &WhatIfOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let a: Analysis = match analyze(log) {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze whatif: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let figs = Figures::of(&a, opts.symbols);
    let ropts = Options {
        symbols: opts.symbols,
        ..Options::default()
    };
    let mut ctx = Ctx::new(&a, &ropts);
    let Some(basis) = Basis::of(&ctx) else {
        let _ = writeln!(
            err,
            "waitshim-analyze whatif: {}: no critical path to work from: the log needs per-wait \
             events (WAITSHIM_EVENTS, all by default) and the sampler's CPU times \
             (WAITSHIM_SAMPLE, on by default)",
            log.display()
        );
        return EXIT_BAD_INPUT;
    };
    if !opts.delayed.is_empty() {
        return slope_check(log, &a, &figs, &mut ctx, &basis, opts, out, err);
    }
    let mut changes: HashMap<u64, f64> = HashMap::new();
    let mut named = Vec::new();
    for h in &opts.holds {
        let ids = resolve(&figs, &h.site);
        if ids.is_empty() {
            let _ = writeln!(
                err,
                "waitshim-analyze whatif: --hold {}: no object of {} is named or created \
                 there (a name, a variable, file:line, a file or the function that created it)",
                h.site,
                log.display()
            );
            return EXIT_BAD_INPUT;
        }
        for &id in &ids {
            changes.insert(id, h.factor);
        }
        named.push((h, ids));
    }
    let p = basis.predict(&changes);
    if opts.json {
        let doc = WhatIfJson {
            schema: "waitshim-whatif/1",
            log: log.display().to_string(),
            holds: named
                .iter()
                .map(|(h, ids)| HoldJson {
                    site: &h.site,
                    factor: h.factor,
                    object_ids: ids.clone(),
                })
                .collect(),
            baseline_duration_ns: p.baseline_ns,
            predicted_duration_ns: p.predicted_ns,
            predicted_speedup: p.speedup(),
            bound: p.bound,
            holds_estimated: p.holds_estimated,
            replayed_duration_ns: basis.replayed_ns(),
            replay_cpus: basis.replay_cpus(),
            phase: basis
                .path
                .phase
                .zip(basis.phase_share)
                .map(|((a, b), s)| PhaseJson {
                    start_ns: a,
                    end_ns: b,
                    share_of_run: s,
                }),
            throughput: throughput(&a.model, &p),
            assumptions: basis.assumptions(),
        };
        let ok = serde_json::to_writer_pretty(&mut *out, &doc).is_ok() && writeln!(out).is_ok();
        return if ok { 0 } else { EXIT_BAD_INPUT };
    }
    let mut text = format!("what-if for {}\n", log.display());
    for (h, ids) in &named {
        for &id in ids {
            let label = ctx.object_label(id);
            let held = match basis.hold_ns(id) {
                Some((ns, est)) => format!(
                    "held {}{} in all",
                    crate::report::fmt_ns(ns),
                    if est { " (estimated)" } else { "" }
                ),
                None => "no hold timed".into(),
            };
            let on_path = basis.path.ns(&Cause::Held(id));
            text.push_str(&format!(
                "  {label}: critical sections x{} ({held}; {} of them on the critical path)\n",
                h.factor,
                crate::report::fmt_ns(on_path)
            ));
        }
    }
    text.push_str(&format!(
        "  {}: {} as measured; predicted {} (speed-up {:.2}x), bound then by {}\n",
        if basis.phase_share.is_some() {
            "phase between progress points"
        } else {
            "run"
        },
        crate::report::fmt_ns(p.baseline_ns),
        crate::report::fmt_ns(p.predicted_ns),
        p.speedup(),
        bound_text(&mut ctx, p.bound)
    ));
    for t in throughput(&a.model, &p) {
        text.push_str(&format!(
            "  {}: {:.1}/s as measured; predicted {:.1}/s\n",
            t.name, t.per_second, t.predicted_per_second
        ));
    }
    if let (Some(ns), Some(cpus)) = (basis.replayed_ns(), basis.replay_cpus()) {
        text.push_str(&format!(
            "  the replay of the {} as measured, on {cpus:.2} CPUs, takes {} against the {} \
             measured\n",
            if basis.phase_share.is_some() {
                "phase"
            } else {
                "run"
            },
            crate::report::fmt_ns(ns),
            crate::report::fmt_ns(p.baseline_ns)
        ));
    }
    text.push_str("  an estimate, assuming:\n");
    for a in basis.assumptions() {
        text.push_str(&format!("    - {a}\n"));
    }
    if write!(out, "{text}").is_err() {
        return EXIT_BAD_INPUT;
    }
    0
}

/// One delayed run checked against the estimate from the base run.
#[derive(Debug, Clone, Serialize)]
pub struct SlopeCheck {
    pub log: String,
    /// The busy delay added to each lengthened section.
    pub delay_ns: u64,
    pub objects: Vec<DelayedObject>,
    pub measured_duration_ns: u64,
    /// None when the base run timed no hold of a delayed object.
    pub predicted_duration_ns: Option<u64>,
    /// Run-time change per µs of delay per section, in ns.
    pub measured_slope_ns_per_us: f64,
    pub predicted_slope_ns_per_us: Option<f64>,
    /// (predicted slope - measured slope) / measured slope, in %.
    pub error_pct: Option<f64>,
}

/// A delayed object of a delayed run, and what the estimate made of it.
#[derive(Debug, Clone, Serialize)]
pub struct DelayedObject {
    /// Its id in the delayed log.
    pub object_id: u64,
    /// The object in the base log it is (same creation site, or name).
    pub base_object_id: u64,
    pub label: String,
    pub sections: u64,
    pub added_ns: u64,
    /// The base run's total hold of it (None: not timed).
    pub base_hold_ns: Option<u64>,
    /// The factor its critical sections are scaled by in the estimate:
    /// 1 + sections x delay / base hold.
    pub factor: Option<f64>,
}

/// A least-squares line through (delay µs, run time ns), the base run at 0 included.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct SlopeFit {
    pub runs: usize,
    pub measured_slope_ns_per_us: f64,
    pub predicted_slope_ns_per_us: Option<f64>,
    pub error_pct: Option<f64>,
}

/// The slope of the least-squares line through `points` (x, y); None without two distinct x.
pub fn least_squares_slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    Some(sxy / sxx)
}

fn error_pct(predicted: f64, measured: f64) -> Option<f64> {
    (measured.abs() > 0.0).then(|| 100.0 * (predicted - measured) / measured)
}

/// The base log's object that `o` (of another run of the program) is: the same creation site,
/// else the same C-API name, else the same variable.
fn counterpart(base: &Figures, o: &crate::gate::metrics::ObjectFigures) -> Option<u64> {
    let same = |f: &dyn Fn(&crate::gate::metrics::ObjectFigures) -> Option<String>| {
        let want = f(o)?;
        let found: Vec<u64> = base
            .objects
            .values()
            .filter(|b| b.kind == o.kind && f(b).as_deref() == Some(want.as_str()))
            .map(|b| b.object_id)
            .collect();
        (found.len() == 1).then(|| found[0])
    };
    same(&|x| x.created.as_ref().map(|p| p.site.clone()))
        .or_else(|| same(&|x| x.api_name.clone()))
        .or_else(|| same(&|x| x.global.clone()))
}

/// The assumptions of the slope check, besides the estimate's own.
pub const SLOPE_ASSUMPTIONS: [&str; 2] = [
    "a delay of d per section is a hold-time increase: the object's sections are scaled by \
     1 + sections x d / (the base run's total hold of it)",
    "the delayed runs did the base run's work: the slope is their run-time change per µs of \
     delay per section",
];

#[derive(Serialize)]
struct SlopeJson {
    schema: &'static str,
    log: String,
    baseline_duration_ns: u64,
    slope_check: Vec<SlopeCheck>,
    /// With two delayed runs or more: least-squares slopes over all of them.
    fit: Option<SlopeFit>,
    assumptions: Vec<&'static str>,
}

/// `whatif BASE --delayed LOG_D...`: for each run slowed on purpose, the run time the estimate
/// from BASE predicts for its delays, against the one measured; the slopes, and their error.
#[allow(clippy::too_many_arguments)]
fn slope_check(
    log: &std::path::Path,
    a: &Analysis,
    figs: &Figures,
    ctx: &mut Ctx<'_>,
    basis: &Basis,
    opts: &WhatIfOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let fail = |err: &mut dyn Write, msg: String| {
        let _ = writeln!(err, "waitshim-analyze whatif: {msg}");
        EXIT_BAD_INPUT
    };
    if a.model.delay.any() {
        return fail(
            err,
            format!(
                "{} was itself slowed on purpose (WAITSHIM_DELAY): give the log of a run \
                 without delay as the base",
                log.display()
            ),
        );
    }
    let exe = |a: &Analysis| a.model.run.as_ref().map(|r| r.exe.clone());
    let base_ns = basis.run_ns;
    let mut checks = Vec::new();
    for path in &opts.delayed {
        let d = match analyze(path) {
            Ok(d) => d,
            Err(e) => return fail(err, format!("--delayed {}: {e}", path.display())),
        };
        if exe(&d) != exe(a) {
            return fail(
                err,
                format!(
                    "--delayed {}: a run of another program ({}) than {} ({})",
                    path.display(),
                    exe(&d).unwrap_or_default(),
                    log.display(),
                    exe(a).unwrap_or_default()
                ),
            );
        }
        let delay = &d.model.delay;
        if !delay.any() {
            return fail(
                err,
                format!(
                    "--delayed {}: no WAITSHIM_DELAY records: that run was not slowed on purpose",
                    path.display()
                ),
            );
        }
        let delays: std::collections::BTreeSet<u64> =
            delay.rules.iter().map(|r| r.delay_ns).collect();
        let Some(&delay_ns) = delays.iter().next() else {
            return fail(
                err,
                format!("--delayed {}: no WAITSHIM_DELAY rule", path.display()),
            );
        };
        if delays.len() > 1 {
            return fail(
                err,
                format!(
                    "--delayed {}: rules with different delays; one slope needs one delay per \
                     section",
                    path.display()
                ),
            );
        }
        if delay.objects.is_empty() {
            return fail(
                err,
                format!(
                    "--delayed {}: its delay rules lengthened no section (no lock matched)",
                    path.display()
                ),
            );
        }
        let dfigs = Figures::of(&d, opts.symbols);
        let mut objects = Vec::new();
        let mut changes: HashMap<u64, f64> = HashMap::new();
        let mut all_timed = true;
        for o in delay.objects.values() {
            let Some(base_id) = dfigs
                .objects
                .get(&o.object_id)
                .and_then(|f| counterpart(figs, f))
            else {
                return fail(
                    err,
                    format!(
                        "--delayed {}: its delayed object #{} has no counterpart in {} (the same \
                         creation site or name)",
                        path.display(),
                        o.object_id,
                        log.display()
                    ),
                );
            };
            let hold = basis.hold_ns(base_id).map(|h| h.0).filter(|&h| h > 0);
            let factor = hold.map(|h| 1.0 + o.sections as f64 * delay_ns as f64 / h as f64);
            match factor {
                Some(f) => {
                    *changes.entry(base_id).or_insert(1.0) += f - 1.0;
                }
                None => all_timed = false,
            }
            objects.push(DelayedObject {
                object_id: o.object_id,
                base_object_id: base_id,
                label: ctx.object_label(base_id),
                sections: o.sections,
                added_ns: o.total_ns,
                base_hold_ns: hold,
                factor,
            });
        }
        let measured = d.model.duration_ns().0;
        let us = delay_ns as f64 / 1000.0;
        let predicted = all_timed.then(|| basis.predict(&changes).predicted_ns);
        let measured_slope = (measured as f64 - base_ns as f64) / us;
        let predicted_slope = predicted.map(|p| (p as f64 - base_ns as f64) / us);
        checks.push(SlopeCheck {
            log: path.display().to_string(),
            delay_ns,
            objects,
            measured_duration_ns: measured,
            predicted_duration_ns: predicted,
            measured_slope_ns_per_us: measured_slope,
            predicted_slope_ns_per_us: predicted_slope,
            error_pct: predicted_slope.and_then(|p| error_pct(p, measured_slope)),
        });
    }
    let fit = (checks.len() >= 2)
        .then(|| {
            let x = |c: &SlopeCheck| c.delay_ns as f64 / 1000.0;
            let mut measured = vec![(0.0, base_ns as f64)];
            measured.extend(checks.iter().map(|c| (x(c), c.measured_duration_ns as f64)));
            let m = least_squares_slope(&measured)?;
            let predicted: Option<Vec<(f64, f64)>> = std::iter::once(Some((0.0, base_ns as f64)))
                .chain(
                    checks
                        .iter()
                        .map(|c| c.predicted_duration_ns.map(|p| (x(c), p as f64))),
                )
                .collect();
            let p = predicted.and_then(|p| least_squares_slope(&p));
            Some(SlopeFit {
                runs: checks.len(),
                measured_slope_ns_per_us: m,
                predicted_slope_ns_per_us: p,
                error_pct: p.and_then(|p| error_pct(p, m)),
            })
        })
        .flatten();
    if opts.json {
        let doc = SlopeJson {
            schema: "waitshim-whatif/1",
            log: log.display().to_string(),
            baseline_duration_ns: base_ns,
            slope_check: checks,
            fit,
            assumptions: basis
                .assumptions()
                .into_iter()
                .chain(SLOPE_ASSUMPTIONS)
                .collect(),
        };
        let ok = serde_json::to_writer_pretty(&mut *out, &doc).is_ok() && writeln!(out).is_ok();
        return if ok { 0 } else { EXIT_BAD_INPUT };
    }
    let ms_per_us = |ns: f64| format!("{:+.3} ms per µs", ns / 1e6);
    let pct = |e: Option<f64>| e.map_or_else(|| "n/a".to_string(), |e| format!("{e:+.1} %"));
    let mut text = format!(
        "slope check of the what-if estimate from {} ({} as measured)\n",
        log.display(),
        crate::report::fmt_ns(base_ns)
    );
    for c in &checks {
        text.push_str(&format!(
            "  {}: {} per section\n",
            c.log,
            crate::report::fmt_ns(c.delay_ns)
        ));
        for o in &c.objects {
            let factor = o.factor.map_or_else(
                || "base run timed no hold of it: no estimate".to_string(),
                |f| format!("sections x{f:.3} in the estimate"),
            );
            text.push_str(&format!(
                "    {}: {} sections lengthened ({} added); {factor}\n",
                o.label,
                o.sections,
                crate::report::fmt_ns(o.added_ns)
            ));
        }
        text.push_str(&format!(
            "    run: measured {}, predicted {}\n    slope (run-time change per µs of delay \
             per section): measured {}, predicted {}; error {}\n",
            crate::report::fmt_ns(c.measured_duration_ns),
            c.predicted_duration_ns
                .map_or_else(|| "n/a".into(), crate::report::fmt_ns),
            ms_per_us(c.measured_slope_ns_per_us),
            c.predicted_slope_ns_per_us
                .map_or_else(|| "n/a".into(), ms_per_us),
            pct(c.error_pct)
        ));
    }
    if let Some(f) = fit {
        text.push_str(&format!(
            "  least-squares fit over {} delayed runs and the base: slope measured {}, \
             predicted {}; error {}\n",
            f.runs,
            ms_per_us(f.measured_slope_ns_per_us),
            f.predicted_slope_ns_per_us
                .map_or_else(|| "n/a".into(), ms_per_us),
            pct(f.error_pct)
        ));
    }
    text.push_str("  the estimate assumes:\n");
    for a in basis.assumptions().iter().chain(&SLOPE_ASSUMPTIONS) {
        text.push_str(&format!("    - {a}\n"));
    }
    if write!(out, "{text}").is_err() {
        return EXIT_BAD_INPUT;
    }
    0
}

/// What bounds a prediction, in words.
pub fn bound_text(ctx: &mut Ctx<'_>, b: Bound) -> String {
    match b {
        Bound::CriticalPath => "the critical path".into(),
        Bound::Serialised { object_id } => format!(
            "the critical sections of {} one after another",
            ctx.object_label(object_id)
        ),
        Bound::Cpus => "the program's CPU time over the machine's CPUs".into(),
        Bound::Thread { tid } => format!("the CPU time of {}", ctx.thread_label(tid)),
        Bound::Replay => "the replay of the recorded threads".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basis(path_by: Vec<(Cause, u64)>, holders: &[(u64, &[(u32, u64)])]) -> Basis {
        let length: u64 = path_by.iter().map(|x| x.1).sum();
        Basis {
            run_ns: length,
            phase_share: None,
            path: Path {
                start_ns: 0,
                end_ns: length,
                phase: None,
                phase_cpu: Default::default(),
                by: path_by,
                hops: 0,
                estimated: false,
                holders: holders.iter().map(|(o, t)| (*o, t.to_vec())).collect(),
                held_running: Default::default(),
            },
            ncpus: 2,
            holds: BTreeMap::new(),
            running: BTreeMap::new(),
            ready: BTreeMap::new(),
            replay: None,
        }
    }

    #[test]
    fn the_least_squares_slope_of_a_line_and_of_noisy_points() {
        assert_eq!(least_squares_slope(&[(0.0, 100.0)]), None);
        assert_eq!(least_squares_slope(&[(1.0, 1.0), (1.0, 5.0)]), None);
        let s = least_squares_slope(&[(0.0, 100.0), (10.0, 300.0), (20.0, 500.0)]).unwrap();
        assert!((s - 20.0).abs() < 1e-9, "{s}");
        let s = least_squares_slope(&[(0.0, 0.0), (1.0, 2.0), (2.0, 3.0)]).unwrap();
        assert!((s - 1.5).abs() < 1e-9, "{s}");
        assert_eq!(error_pct(11.0, 10.0).map(|e| e.round()), Some(10.0));
        assert_eq!(error_pct(1.0, 0.0), None);
    }

    #[test]
    fn sites_and_factors_are_parsed_and_bad_ones_refused() {
        let h: HoldChange = "queue.c:41=0.5".parse().unwrap();
        assert_eq!((h.site.as_str(), h.factor), ("queue.c:41", 0.5));
        let h: HoldChange = "a=b=0".parse().unwrap();
        assert_eq!((h.site.as_str(), h.factor), ("a=b", 0.0));
        for bad in ["queue.c:41", "=0.5", "x=-1", "x=half", "x=inf", "x=NaN"] {
            assert!(bad.parse::<HoldChange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_lock_that_serialises_the_run_halves_it_when_its_sections_halve() {
        // Three threads take lock 7 in turn, 900 ms of holds, on the path throughout.
        let mut b = basis(
            vec![(Cause::Held(7), 900), (Cause::Work(1), 100)],
            &[(7, &[(1, 30), (2, 30), (3, 30)])],
        );
        b.holds.insert(7, (900, false));
        b.path.held_running.insert(7, 900);
        b.running = [(1, 330), (2, 330), (3, 340)].into();
        let p = b.predict(&[(7, 0.5)].into());
        assert_eq!(p.bound, Bound::CriticalPath);
        assert_eq!(p.predicted_ns, 550);
        // Free sections: the CPUs bound what is left (1000 - 900 CPU over 2 CPUs = 50), below
        // the path's remaining 100 of work.
        let p = b.predict(&[(7, 0.0)].into());
        assert_eq!(p.predicted_ns, 100);
        // Unchanged: the run as measured.
        assert_eq!(b.predict(&HashMap::new()).predicted_ns, 1000);
        // A holder preempted for half of each section: only its time on a CPU shrinks.
        b.path.held_running.insert(7, 450);
        assert_eq!(b.predict(&[(7, 0.5)].into()).predicted_ns, 775);
    }

    #[test]
    fn a_lock_off_the_path_buys_nothing_while_the_cpus_bound_the_run() {
        // Four threads compute on two CPUs; lock 9's short holds are nowhere on the path.
        let mut b = basis(
            vec![(Cause::Work(1), 600), (Cause::CpusBusy(1), 400)],
            &[(9, &[(1, 0), (2, 0), (3, 0), (4, 0)])],
        );
        b.holds.insert(9, (40, true));
        b.running = [(1, 500), (2, 500), (3, 500), (4, 500)].into();
        let p = b.predict(&[(9, 0.5)].into());
        // The path loses half of thread 1's share of the holds (10 of its 500 CPU-ns) of its
        // computing there (work and waits for a CPU: 1000): 10; the CPUs, 10 of 1000 too.
        assert_eq!(p.bound, Bound::CriticalPath);
        assert_eq!(p.predicted_ns, 990);
        assert!(p.holds_estimated);
    }
}
