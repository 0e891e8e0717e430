//! One summary across the processes of a run: a test suite run under `run` starts dozens of
//! processes (a shell, each test program, the tools it calls), each with its own log. Per
//! program (the executable's base name), the summary adds up its processes: how many, the
//! highwater mark, the time threads waited for locks, deadlocks and lock-order inversions, the
//! gate's result, and the locks waited for most, summed over the processes by creation site.
//! The per-process reports stay available on request (`run --each`, `--report-dir`).

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Value};

use super::metrics::{Figures, Place};
use super::Verdict;
use crate::findings::Group;
use crate::report::fmt_ns;

/// Locks listed per program.
pub const WORST: usize = 3;

/// A lock (the locks created at one site) summed over a program's processes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorstObject {
    /// Kind and creation site: `mutex queue.c:41 (push)` (a baseline's key).
    pub key: String,
    /// How the report names it in the process that waited for it longest.
    pub label: String,
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    pub hwm: u64,
    /// Processes in which threads waited for it.
    pub processes: usize,
    /// The log (and pid) of the process that waited for it longest, and how long.
    pub worst_log: String,
    pub worst_pid: u32,
    pub worst_wait_ns: u64,
    /// Its creation site and the site that waited for it longest, in that process.
    pub places: Vec<Place>,
}

/// A program's processes summed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgramSummary {
    pub program: String,
    pub logs: Vec<String>,
    pub pids: Vec<u32>,
    /// Summed over its processes.
    pub duration_ns: u64,
    pub threads: u64,
    /// The highest of its processes'.
    pub hwm: u64,
    /// Time its threads waited for locks, summed.
    pub lock_wait_ns: u64,
    pub deadlocks: u64,
    /// Distinct lock-order inversions, as chains of creation sites.
    pub inversions: Vec<String>,
    /// Failing conditions of the gate about it.
    pub failures: usize,
    /// The locks waited for most, at most [`WORST`].
    pub worst: Vec<WorstObject>,
}

impl ProgramSummary {
    /// The gate's result for this program, in a word.
    pub fn gate(&self, v: &Verdict) -> &'static str {
        if !v.not_judged.is_empty() {
            "not judged"
        } else if !v.checked {
            "not checked"
        } else if self.failures == 0 {
            "passed"
        } else {
            "failed"
        }
    }
}

/// The programs of these logs, summed: those with failures first, then by the time their
/// threads waited for locks, then by name.
pub fn summarize(figs: &[Figures], verdict: &Verdict) -> Vec<ProgramSummary> {
    let base = super::baseline::build(figs);
    let mut by: BTreeMap<String, ProgramSummary> = BTreeMap::new();
    let mut objects: BTreeMap<(String, String), WorstObject> = BTreeMap::new();
    for f in figs {
        let name = f.program_name().to_string();
        let p = by.entry(name.clone()).or_insert_with(|| ProgramSummary {
            program: name.clone(),
            ..ProgramSummary::default()
        });
        p.logs.push(f.log.clone());
        p.pids.push(f.pid);
        p.duration_ns = p.duration_ns.saturating_add(f.duration_ns);
        p.threads = p.threads.saturating_add(f.threads);
        p.hwm = p.hwm.max(f.hwm);
        p.lock_wait_ns = p.lock_wait_ns.saturating_add(f.locks().wait_ns);
        p.deadlocks += f.deadlocks.len() as u64;
        for o in f
            .objects
            .values()
            .filter(|o| o.group == Some(Group::Lock) && o.wait_ns > 0)
        {
            let key = super::baseline::object_key(o);
            let w = objects.entry((name.clone(), key.clone())).or_default();
            w.key = key;
            w.wait_ns = w.wait_ns.saturating_add(o.wait_ns);
            w.max_wait_ns = w.max_wait_ns.max(o.wait_max_ns);
            w.hwm = w.hwm.max(o.max_waiters);
            if o.wait_ns > w.worst_wait_ns || w.label.is_empty() {
                w.label = o.label.clone();
                w.worst_log = f.log.clone();
                w.worst_pid = f.pid;
                w.worst_wait_ns = o.wait_ns;
                w.places = o.places().collect();
            }
        }
    }
    for ((program, _), w) in objects {
        if let Some(p) = by.get_mut(&program) {
            p.worst.push(w);
        }
    }
    for p in by.values_mut() {
        p.worst
            .sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.key.cmp(&b.key)));
        p.worst.truncate(WORST);
        if let Some(b) = base.programs.get(&p.program) {
            p.inversions = b.inversions.clone();
        }
        p.failures = verdict
            .failures
            .iter()
            .filter(|f| f.program == p.program || f.logs.iter().any(|l| p.logs.contains(l)))
            .count();
    }
    let mut out: Vec<ProgramSummary> = by.into_values().collect();
    count_processes(figs, &mut out);
    out.sort_by(|a, b| {
        b.failures
            .cmp(&a.failures)
            .then(b.lock_wait_ns.cmp(&a.lock_wait_ns))
            .then(a.program.cmp(&b.program))
    });
    out
}

/// How many processes of its program waited for each listed lock.
fn count_processes(figs: &[Figures], sums: &mut [ProgramSummary]) {
    for p in sums {
        for w in &mut p.worst {
            w.processes = figs
                .iter()
                .filter(|f| f.program_name() == p.program)
                .filter(|f| {
                    f.objects.values().any(|o| {
                        o.group == Some(Group::Lock)
                            && o.wait_ns > 0
                            && super::baseline::object_key(o) == w.key
                    })
                })
                .count();
        }
    }
}

/// `./run-tests.sh --fast`, for messages (at most 120 characters).
pub fn command_line(argv: &[String]) -> String {
    let mut s = argv
        .iter()
        .map(|a| {
            if a.is_empty()
                || a.chars()
                    .any(|c| c.is_whitespace() || "'\"$`\\;&|<>()*?".contains(c))
            {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    if s.chars().count() > 120 {
        s = s.chars().take(117).collect::<String>() + "...";
    }
    s
}

/// The first line of a summary: what ran, how it ended, the gate's result.
pub fn headline(v: &Verdict, logs: usize, programs: usize) -> String {
    let mut s = format!("{logs} log(s) of {programs} program(s)");
    if let Some(c) = &v.command {
        s.push_str(&format!(
            "; the command `{}` {}",
            command_line(&c.argv),
            c.describe()
        ));
    }
    s.push_str(&format!("; gate {}", v.gate_result()));
    s
}

/// The text summary.
pub fn write_text(
    out: &mut dyn Write,
    sums: &[ProgramSummary],
    v: &Verdict,
    logs: usize,
) -> std::io::Result<()> {
    writeln!(out, "waitshim summary: {}", headline(v, logs, sums.len()))?;
    if sums.is_empty() {
        return Ok(());
    }
    let rows: Vec<[String; 7]> = sums
        .iter()
        .map(|p| {
            [
                p.program.clone(),
                p.logs.len().to_string(),
                p.hwm.to_string(),
                fmt_ns(p.lock_wait_ns),
                p.deadlocks.to_string(),
                p.inversions.len().to_string(),
                p.gate(v).to_string(),
            ]
        })
        .collect();
    let head = [
        "PROGRAM",
        "PROCESSES",
        "HWM",
        "LOCK WAIT",
        "DEADLOCKS",
        "INVERSIONS",
        "GATE",
    ];
    let mut width = head.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 7]| -> String {
        let mut s = format!("{:<w$}", cells[0], w = width[0]);
        for (i, c) in cells.iter().enumerate().skip(1) {
            if i == 6 {
                s.push_str(&format!("  {c}"));
            } else {
                s.push_str(&format!("  {:>w$}", c, w = width[i]));
            }
        }
        s
    };
    writeln!(out, "{}", line(head))?;
    for r in &rows {
        let cells: [&str; 7] = std::array::from_fn(|i| r[i].as_str());
        writeln!(out, "{}", line(cells))?;
    }
    for p in sums {
        if p.worst.is_empty() && p.inversions.is_empty() && p.deadlocks == 0 {
            continue;
        }
        writeln!(
            out,
            "\n{}: {} process(es){}",
            p.program,
            p.logs.len(),
            if p.worst.is_empty() {
                String::new()
            } else {
                ", the locks its threads waited for most:".to_string()
            }
        )?;
        for w in &p.worst {
            writeln!(
                out,
                "  {}: {} in {} process(es), longest wait {}, hwm {}; most in pid {} ({}, {})",
                w.key,
                fmt_ns(w.wait_ns),
                w.processes,
                fmt_ns(w.max_wait_ns),
                w.hwm,
                w.worst_pid,
                fmt_ns(w.worst_wait_ns),
                w.worst_log
            )?;
        }
        if p.deadlocks > 0 {
            writeln!(out, "  {} deadlock(s)", p.deadlocks)?;
        }
        for inv in &p.inversions {
            writeln!(out, "  lock-order inversion: {inv}")?;
        }
    }
    Ok(())
}

fn place_json(p: Option<&Place>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "file": p.file,
            "line": p.line,
            "site": p.site,
        }),
    }
}

/// The summary as JSON (the `programs` of `waitshim-run/1`, see analyzer/JSON.md).
pub fn to_json(sums: &[ProgramSummary], v: &Verdict) -> Value {
    Value::Array(
        sums.iter()
            .map(|p| {
                json!({
                    "program": p.program,
                    "processes": p.logs.len(),
                    "logs": p.logs,
                    "pids": p.pids,
                    "duration_ns": p.duration_ns,
                    "threads": p.threads,
                    "hwm": p.hwm,
                    "lock_wait_ns": p.lock_wait_ns,
                    "deadlocks": p.deadlocks,
                    "inversions": p.inversions,
                    "gate": p.gate(v),
                    "failures": p.failures,
                    "worst": p.worst.iter().map(|w| json!({
                        "object": w.key,
                        "label": w.label,
                        "wait_ns": w.wait_ns,
                        "max_wait_ns": w.max_wait_ns,
                        "hwm": w.hwm,
                        "processes": w.processes,
                        "worst_log": w.worst_log,
                        "worst_pid": w.worst_pid,
                        "worst_wait_ns": w.worst_wait_ns,
                        "created": place_json(w.places.iter().find(|p| p.role == Some(Place::CREATED))),
                        "waited": place_json(w.places.iter().find(|p| p.role == Some(Place::WAITED))),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_are_quoted_and_cut() {
        let argv: Vec<String> = ["sh", "-c", "for i in 1 2; do ./t; done", "it's"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            command_line(&argv),
            "sh -c 'for i in 1 2; do ./t; done' 'it'\\''s'"
        );
        let long = vec!["x".repeat(300)];
        assert_eq!(command_line(&long).chars().count(), 120);
    }
}
