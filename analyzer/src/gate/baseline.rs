//! Baselines: a small JSON summary of a run, meant to be committed beside the code, and the
//! comparison of a later run with it.
//!
//! The file is keyed by program (the executable's base name), then by object creation site
//! (`mutex queue.c:41 (push)`: kind and site, no address, no pid) and by lock-order chain; keys
//! are sorted and values rounded so that two runs of the same code give small diffs. Only
//! scale-free figures are kept — they do not change with the speed of the machine the run
//! happened on: contended ratio, waits per acquisition, highwater, share of the threads' time
//! spent waiting, lost parallelism. Objects created at one site (an array of locks initialised
//! in a loop) are summed together. Logs of one program (forked children) are summed too.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::metrics::{ratio, Figures, ObjectFigures, Place, Sums};
use super::Failure;
use crate::findings::Group;

pub const FORMAT: &str = "waitshim-baseline/1";

/// Figures of the run over its locks, or of the locks created at one site. Waits for condition
/// variables, semaphores, barriers and joins are left out: they are mostly idle time (no work),
/// whose share of the run swings with the machine's load and says nothing about contention.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Scaled {
    pub contended_ratio: f64,
    pub hwm: u64,
    /// Only in run figures: the locks' wait over the threads' time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_parallelism: Option<f64>,
    /// Only in object figures: their wait over the threads' time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_share: Option<f64>,
    pub waits_per_acquisition: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Program {
    pub deadlocks: u64,
    /// Lock-order inversions, each as its chain of creation sites, `a -> b -> a`.
    pub inversions: Vec<String>,
    pub objects: BTreeMap<String, Scaled>,
    pub run: Scaled,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Baseline {
    pub format: String,
    pub programs: BTreeMap<String, Program>,
}

fn round(v: f64) -> f64 {
    if v.is_finite() {
        (v * 10_000.0).round() / 10_000.0
    } else {
        0.0
    }
}

/// The key of an object: its kind and creation site.
pub fn object_key(o: &ObjectFigures) -> String {
    match &o.created {
        Some(p) => format!("{} {}", o.kind, p.site),
        None => format!("{} (creation site unknown)", o.kind),
    }
}

fn scaled(s: &Sums, thread_time: u64, run: bool) -> Scaled {
    let share = round(ratio(s.wait_ns, thread_time));
    Scaled {
        contended_ratio: round(ratio(s.contended, s.acquisitions)),
        hwm: s.max_waiters,
        lost_parallelism: run.then_some(share),
        wait_share: (!run).then_some(share),
        waits_per_acquisition: round(ratio(s.blocking, s.acquisitions)),
    }
}

/// A program's logs summed: per key the sums and the objects behind them.
struct Summed<'a> {
    thread_time: u64,
    hwm: u64,
    run: Vec<&'a ObjectFigures>,
    objects: BTreeMap<String, Vec<&'a ObjectFigures>>,
    deadlocks: u64,
    inversions: Vec<String>,
}

fn by_program(figs: &[Figures]) -> BTreeMap<String, Summed<'_>> {
    let mut out: BTreeMap<String, Summed<'_>> = BTreeMap::new();
    for f in figs {
        let name = f.program_name().to_string();
        let s = out.entry(name).or_insert_with(|| Summed {
            thread_time: 0,
            hwm: 0,
            run: Vec::new(),
            objects: BTreeMap::new(),
            deadlocks: 0,
            inversions: Vec::new(),
        });
        s.thread_time = s.thread_time.saturating_add(f.thread_time_ns);
        s.hwm = s.hwm.max(f.hwm);
        s.deadlocks += f.deadlocks.len() as u64;
        for o in f.objects.values().filter(|o| o.group == Some(Group::Lock)) {
            s.run.push(o);
            if o.contended > 0 || o.wait_ns > 0 {
                s.objects.entry(object_key(o)).or_default().push(o);
            }
        }
        for cycle in &f.inversions {
            let mut keys: Vec<String> = cycle
                .iter()
                .map(|id| {
                    f.objects
                        .get(id)
                        .map_or_else(|| format!("object#{id}"), object_key)
                })
                .collect();
            // Start at the smallest key, so that the text does not depend on object ids.
            if let Some(min) = (0..keys.len()).min_by(|&a, &b| keys[a].cmp(&keys[b])) {
                keys.rotate_left(min);
            }
            if let Some(first) = keys.first().cloned() {
                keys.push(first);
            }
            s.inversions.push(keys.join(" -> "));
        }
        s.inversions.sort();
        s.inversions.dedup();
    }
    out
}

/// The baseline of these logs.
pub fn build(figs: &[Figures]) -> Baseline {
    let programs = by_program(figs)
        .into_iter()
        .map(|(name, s)| {
            let mut run = scaled(&Sums::of(s.run.iter().copied()), s.thread_time, true);
            run.hwm = s.hwm;
            let objects = s
                .objects
                .iter()
                .map(|(k, objs)| {
                    (
                        k.clone(),
                        scaled(&Sums::of(objs.iter().copied()), s.thread_time, false),
                    )
                })
                .collect();
            (
                name,
                Program {
                    deadlocks: s.deadlocks,
                    inversions: s.inversions,
                    objects,
                    run,
                },
            )
        })
        .collect();
    Baseline {
        format: FORMAT.to_string(),
        programs,
    }
}

impl Baseline {
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    pub fn load(path: &Path) -> Result<Baseline, String> {
        let text = crate::gate::history::read_small(path, 16 << 20)
            .map_err(|e| format!("baseline {}: {e}", path.display()))?;
        let b: Baseline = serde_json::from_str(&text)
            .map_err(|e| format!("baseline {}: not a waitshim baseline: {e}", path.display()))?;
        if b.format != FORMAT {
            return Err(format!(
                "baseline {}: format '{}', this analyzer reads '{FORMAT}'",
                path.display(),
                b.format
            ));
        }
        Ok(b)
    }
}

/// How much a figure may grow before it counts as worse: more than `tolerance` relative *and*
/// more than the absolute floor (5 points for a ratio, 1 thread for a highwater), so that a
/// figure near 0 doubling from noise is not a regression.
pub fn worse(old: f64, new: f64, tolerance: f64, floor: f64) -> bool {
    new > old * (1.0 + tolerance) && new - old > floor
}

/// Floor of ratios of counts (5 percentage points), of shares of time (15 points: on a loaded
/// CI machine the share of time a run's threads wait moves by several points between identical
/// runs, 0.5% to 10.9% over 25 runs of `fixtures/gate_load.c` with two compilers running) and of
/// highwater marks (1 thread).
pub const RATIO_FLOOR: f64 = 0.05;
pub const SHARE_FLOOR: f64 = 0.15;
pub const HWM_FLOOR: f64 = 1.0;

fn describe_change(name: &str, old: f64, new: f64) -> String {
    if name == "hwm" {
        format!("{name} rose from {old} to {new}")
    } else {
        let factor = if old > 0.0 {
            format!(", x{:.1}", new / old)
        } else {
            String::new()
        };
        format!(
            "{name} rose from {:.1}% to {:.1}% (+{:.1} points{factor})",
            old * 100.0,
            new * 100.0,
            (new - old) * 100.0
        )
    }
}

fn compare_scaled(old: &Scaled, new: &Scaled, tolerance: f64) -> Vec<String> {
    let mut out = Vec::new();
    let mut figure = |name: &str, o: f64, n: f64, floor: f64| {
        if worse(o, n, tolerance, floor) {
            out.push(describe_change(name, o, n));
        }
    };
    figure(
        "contended_ratio",
        old.contended_ratio,
        new.contended_ratio,
        RATIO_FLOOR,
    );
    figure(
        "waits_per_acquisition",
        old.waits_per_acquisition,
        new.waits_per_acquisition,
        RATIO_FLOOR,
    );
    if let (Some(o), Some(n)) = (old.wait_share, new.wait_share) {
        figure("wait_share", o, n, SHARE_FLOOR);
    }
    if let (Some(o), Some(n)) = (old.lost_parallelism, new.lost_parallelism) {
        figure("lost_parallelism", o, n, SHARE_FLOOR);
    }
    figure("hwm", old.hwm as f64, new.hwm as f64, HWM_FLOOR);
    out
}

fn places(objs: &[&ObjectFigures]) -> Vec<Place> {
    let mut v: Vec<&&ObjectFigures> = objs.iter().collect();
    v.sort_by_key(|o| std::cmp::Reverse(o.wait_ns));
    v.iter().flat_map(|o| o.places()).collect()
}

/// What got worse in these logs against the baseline: one failure per object (or run) and
/// figure set, naming the figures, by how much, and where.
pub fn compare(base: &Baseline, figs: &[Figures], tolerance: f64) -> Vec<Failure> {
    let now = build(figs);
    let summed = by_program(figs);
    let mut out = Vec::new();
    for (program, new) in &now.programs {
        let Some(old) = base.programs.get(program) else {
            continue;
        };
        let s = summed.get(program);
        let logs: Vec<String> = figs
            .iter()
            .filter(|f| f.program_name() == program)
            .map(|f| f.log.clone())
            .collect();
        let log = logs.join(", ");
        let mut fail = |message: String, places: Vec<Place>| {
            out.push(Failure {
                log: log.clone(),
                logs: logs.clone(),
                program: program.clone(),
                check: "baseline",
                rule: String::from("baseline"),
                message,
                places,
            })
        };
        let run_worse = compare_scaled(&old.run, &new.run, tolerance);
        if !run_worse.is_empty() {
            let mut costly: Vec<&ObjectFigures> = s.map_or_else(Vec::new, |s| s.run.clone());
            costly.retain(|o| o.wait_ns > 0);
            fail(
                format!(
                    "baseline: {program}, whole run (locks): {}",
                    run_worse.join("; ")
                ),
                places(&costly),
            );
        }
        for (key, n) in &new.objects {
            let objs: Vec<&ObjectFigures> = s
                .and_then(|s| s.objects.get(key))
                .cloned()
                .unwrap_or_default();
            match old.objects.get(key) {
                Some(o) => {
                    let w = compare_scaled(o, n, tolerance);
                    if !w.is_empty() {
                        fail(
                            format!("baseline: {program}, {key}: {}", w.join("; ")),
                            places(&objs),
                        );
                    }
                }
                None => {
                    let share = n.wait_share.unwrap_or(0.0);
                    if share > SHARE_FLOOR || n.hwm as f64 > HWM_FLOOR + 1.0 {
                        fail(
                            format!(
                                "baseline: {program}, {key}: newly contended: wait_share {:.1}%, hwm {}, contended_ratio {:.1}%",
                                share * 100.0,
                                n.hwm,
                                n.contended_ratio * 100.0
                            ),
                            places(&objs),
                        );
                    }
                }
            }
        }
        for inv in &new.inversions {
            if !old.inversions.contains(inv) {
                fail(
                    format!("baseline: {program}: new lock-order inversion {inv}"),
                    Vec::new(),
                );
            }
        }
        if new.deadlocks > old.deadlocks {
            fail(
                format!(
                    "baseline: {program}: {} deadlock(s), the baseline has {}",
                    new.deadlocks, old.deadlocks
                ),
                Vec::new(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worse_needs_both_the_relative_and_the_absolute_change() {
        assert!(!worse(0.01, 0.03, 0.5, RATIO_FLOOR), "tripled but tiny");
        assert!(
            !worse(0.50, 0.60, 0.5, RATIO_FLOOR),
            "+10 points but only +20%"
        );
        assert!(worse(0.10, 0.40, 0.5, RATIO_FLOOR));
        assert!(!worse(1.0, 2.0, 0.5, HWM_FLOOR));
        assert!(worse(1.0, 3.0, 0.5, HWM_FLOOR));
    }

    #[test]
    fn keys_are_sorted_and_numbers_rounded() {
        let mut b = Baseline {
            format: FORMAT.into(),
            ..Baseline::default()
        };
        let mut p = Program::default();
        p.objects.insert(
            "mutex z.c:1 (f)".into(),
            Scaled {
                wait_share: Some(round(1.0 / 3.0)),
                ..Scaled::default()
            },
        );
        p.objects
            .insert("mutex a.c:1 (f)".into(), Scaled::default());
        b.programs.insert("prog".into(), p);
        let text = b.to_json();
        assert!(text.find("a.c:1").unwrap() < text.find("z.c:1").unwrap());
        assert!(text.contains("0.3333"), "{text}");
        let back: Baseline = serde_json::from_str(&text).unwrap();
        assert_eq!(back, b);
    }
}
