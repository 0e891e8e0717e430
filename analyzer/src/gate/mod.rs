//! The CI side of the analyzer: `check` (a gate over one or more logs, with exit codes and
//! annotations), `baseline` (a committed summary a later run is compared with), `history` (runs
//! of a job stored in a database, with a regression rule) and `run` (the launcher, in
//! [`crate::launch`]).
//!
//! Exit codes of every command here: 0 the gate passed, 1 it failed, 2 an input could not be
//! read or an argument is bad ([`crate::EXIT_BAD_INPUT`]).

pub mod baseline;
pub mod cli;
pub mod expr;
pub mod history;
pub mod metrics;

use std::io::Write;
use std::path::{Path, PathBuf};

use metrics::{Figures, Place};

/// The gate failed.
pub const EXIT_FAILED: i32 = 1;

/// How failures are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One line per failing condition.
    #[default]
    Text,
    /// GitHub Actions workflow commands: `::error file=F,line=L::message`.
    Github,
    /// A GitLab Code Quality report (a JSON array) on stdout.
    Gitlab,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Format::Text),
            "github" => Ok(Format::Github),
            "gitlab" => Ok(Format::Gitlab),
            _ => Err(format!("'{s}' is not a format: text, github or gitlab")),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    pub logs: Vec<PathBuf>,
    /// `--fail-if` expressions, as given.
    pub fail_if: Vec<String>,
    pub baseline: Option<PathBuf>,
    /// Relative tolerance of baseline comparisons (0.5 = 50%).
    pub tolerance: f64,
    pub format: Format,
    /// Fail on deadlocks and lock-order inversions (on unless `--no-default-gate`).
    pub default_gate: bool,
    pub symbols: bool,
}

/// One failing condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The log it was found in.
    pub log: String,
    /// `deadlock`, `inversion`, `fail-if`, `baseline`, `history`.
    pub check: &'static str,
    pub message: String,
    /// Source places it is about, most relevant first (creation and wait sites).
    pub places: Vec<Place>,
}

/// The places of some objects of a log: creation site, then where they were waited for.
pub fn places_of(f: &Figures, ids: &[u64]) -> Vec<Place> {
    let mut out = Vec::new();
    for id in ids {
        if let Some(o) = f.objects.get(id) {
            out.extend(o.created.iter().cloned());
            out.extend(o.wait_site.iter().cloned());
        }
    }
    out
}

fn labels(f: &Figures, ids: &[u64]) -> String {
    let mut seen = Vec::new();
    for id in ids {
        if !seen.contains(id) {
            seen.push(*id);
        }
    }
    seen.iter()
        .map(|id| {
            f.objects
                .get(id)
                .map_or_else(|| format!("object#{id}"), |o| o.label.clone())
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The default gate: deadlocks and lock-order inversions.
pub fn default_failures(f: &Figures) -> Vec<Failure> {
    let mut out = Vec::new();
    for cycle in &f.deadlocks {
        out.push(Failure {
            log: f.log.clone(),
            check: "deadlock",
            message: format!(
                "deadlock: {} threads wait for each other on {}",
                cycle.len(),
                labels(f, cycle)
            ),
            places: places_of(f, cycle),
        });
    }
    for cycle in &f.inversions {
        // A cycle that deadlocked is reported above already.
        let mut sorted = cycle.clone();
        sorted.sort_unstable();
        if f.deadlocks.iter().any(|d| {
            let mut d = d.clone();
            d.sort_unstable();
            d == sorted
        }) {
            continue;
        }
        out.push(Failure {
            log: f.log.clone(),
            check: "inversion",
            message: format!(
                "lock-order inversion (a potential deadlock): {} taken in both orders: {}",
                if cycle.len() == 2 {
                    "two locks".to_string()
                } else {
                    format!("{} locks", cycle.len())
                },
                labels(f, cycle)
            ),
            places: places_of(f, cycle),
        });
    }
    out
}

/// How a value of a metric is written: `312ms`, `25.0%`, `4`.
pub fn show(metric: &str, v: f64) -> String {
    match expr::metric_def(metric).map(|d| d.dim) {
        Some(expr::Dim::Time) => crate::report::fmt_ns(v.max(0.0) as u64),
        Some(expr::Dim::Ratio) => format!("{:.1}%", v * 100.0),
        _ => format!("{v}"),
    }
}

/// Evaluates one parsed `--fail-if` on one log: the failure when it holds. A selector that
/// names no object of the log gives 0 for it (the object may live in another process's log).
pub fn eval_fail_if(text: &str, e: &expr::Expr, f: &Figures) -> Option<Failure> {
    let mut shown = Vec::new();
    let mut about = Vec::new();
    let holds = e
        .eval::<()>(&mut |op| match op {
            expr::Operand::Number { value, .. } => Ok(*value),
            expr::Operand::Metric { name, selector } => {
                let (v, ids) = f
                    .value(name, selector.as_deref())
                    .unwrap_or((0.0, Vec::new()));
                let s = format!("{op} = {}", show(name, v));
                if !shown.contains(&s) {
                    shown.push(s);
                }
                about.extend(ids);
                Ok(v)
            }
        })
        .unwrap_or(false);
    if !holds {
        return None;
    }
    let mut message = format!("fail-if `{text}` holds: {}", shown.join(", "));
    about.dedup();
    if !about.is_empty() {
        message.push_str(&format!(
            " (about {})",
            labels(f, &about[..about.len().min(3)])
        ));
    }
    Some(Failure {
        log: f.log.clone(),
        check: "fail-if",
        message,
        places: places_of(f, &about),
    })
}

/// Parses every `--fail-if`; the first bad one as an error message.
pub fn parse_all(texts: &[String]) -> Result<Vec<(String, expr::Expr)>, String> {
    texts
        .iter()
        .map(|t| match expr::parse(t) {
            Ok(e) => Ok((t.clone(), e)),
            Err(e) => Err(format!("--fail-if: {}", e.render(t))),
        })
        .collect()
}

/// Reads each log into its figures; an unreadable one is reported on `err` and sets `bad`.
pub fn figures_of(
    logs: &[PathBuf],
    symbols: bool,
    err: &mut dyn Write,
    bad: &mut bool,
) -> Vec<Figures> {
    let mut out = Vec::new();
    for path in logs {
        match crate::analyze(path) {
            Ok(a) => out.push(Figures::of(&a, symbols)),
            Err(e) => {
                let _ = writeln!(err, "waitshim-analyze: {e}");
                *bad = true;
            }
        }
    }
    out
}

/// Every failure of the gate over these figures.
pub fn evaluate(
    figs: &[Figures],
    default_gate: bool,
    exprs: &[(String, expr::Expr)],
    base: Option<&baseline::Baseline>,
    tolerance: f64,
) -> Vec<Failure> {
    let mut failures = Vec::new();
    for f in figs {
        if default_gate {
            failures.extend(default_failures(f));
        }
        for (text, e) in exprs {
            failures.extend(eval_fail_if(text, e, f));
        }
    }
    if let Some(b) = base {
        failures.extend(baseline::compare(b, figs, tolerance));
    }
    failures
}

/// `waitshim-analyze check`.
pub fn check(opts: &CheckOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let exprs = match parse_all(&opts.fail_if) {
        Ok(e) => e,
        Err(msg) => {
            let _ = writeln!(err, "waitshim-analyze check: {msg}");
            return crate::EXIT_BAD_INPUT;
        }
    };
    let base = match &opts.baseline {
        Some(p) => match baseline::Baseline::load(p) {
            Ok(b) => Some(b),
            Err(e) => {
                let _ = writeln!(err, "waitshim-analyze check: {e}");
                return crate::EXIT_BAD_INPUT;
            }
        },
        None => None,
    };
    let mut bad = false;
    let figs = figures_of(&opts.logs, opts.symbols, err, &mut bad);
    let failures = evaluate(
        &figs,
        opts.default_gate,
        &exprs,
        base.as_ref(),
        opts.tolerance,
    );
    let conditions = usize::from(opts.default_gate) * 2 + exprs.len() + usize::from(base.is_some());
    write_failures(opts.format, &failures, out);
    let verdict = if bad {
        "not decided: an input could not be read"
    } else if failures.is_empty() {
        "passed"
    } else {
        "failed"
    };
    let _ = writeln!(
        err,
        "waitshim check: {verdict}: {} failing, {conditions} condition(s) over {} log(s)",
        failures.len(),
        figs.len()
    );
    if bad {
        crate::EXIT_BAD_INPUT
    } else if failures.is_empty() {
        0
    } else {
        EXIT_FAILED
    }
}

/// A debug-info path as a CI system wants it: relative to the working directory (the
/// checkout) when it is inside it.
fn repo_path(file: &str) -> String {
    let base = std::env::var("GITHUB_WORKSPACE")
        .ok()
        .or_else(|| std::env::var("CI_PROJECT_DIR").ok())
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok());
    if let Some(base) = base {
        if let Ok(rel) = Path::new(file).strip_prefix(&base) {
            return rel.display().to_string();
        }
    }
    file.to_string()
}

/// The first place with a file and a line.
fn anchor(f: &Failure) -> Option<(String, u32)> {
    f.places
        .iter()
        .find_map(|p| Some((repo_path(p.file.as_deref()?), p.line?)))
}

fn gh_escape(s: &str, property: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            ':' if property => out.push_str("%3A"),
            ',' if property => out.push_str("%2C"),
            c => out.push(c),
        }
    }
    out
}

/// A stable fingerprint (FNV-1a, 64 bits, hex) of what a failure is, for GitLab to follow it
/// from run to run.
fn fingerprint(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Writes the failures in the chosen format.
pub fn write_failures(format: Format, failures: &[Failure], out: &mut dyn Write) {
    match format {
        Format::Text => {
            for f in failures {
                let at =
                    anchor(f).map_or(String::new(), |(file, line)| format!(" [{file}:{line}]"));
                let line = format!("FAIL {}: {}{at}\n", f.log, f.message);
                let _ = out.write_all(crate::plain::guarded(&line).as_bytes());
            }
        }
        Format::Github => {
            for f in failures {
                let msg = gh_escape(&format!("waitshim {}: {}", f.log, f.message), false);
                let _ = match anchor(f) {
                    Some((file, line)) => writeln!(
                        out,
                        "::error file={},line={line},title={}::{msg}",
                        gh_escape(&file, true),
                        gh_escape(&format!("waitshim {}", f.check), true)
                    ),
                    None => writeln!(
                        out,
                        "::error title={}::{msg}",
                        gh_escape(&format!("waitshim {}", f.check), true)
                    ),
                };
            }
        }
        Format::Gitlab => {
            let items: Vec<serde_json::Value> = failures
                .iter()
                .map(|f| {
                    let (path, line) = anchor(f).unwrap_or_else(|| (f.log.clone(), 1));
                    // The pid-free part of the message identifies the finding across runs.
                    let key = f.places.first().map_or(f.message.as_str(), |p| p.site.as_str());
                    serde_json::json!({
                        "description": format!("{}: {}", f.log, f.message),
                        "check_name": format!("waitshim-{}", f.check),
                        "fingerprint": fingerprint(&[f.check, key, &path, &line.to_string()]),
                        "severity": if matches!(f.check, "deadlock" | "inversion") { "blocker" } else { "major" },
                        "location": { "path": path, "lines": { "begin": line } },
                    })
                })
                .collect();
            let _ = serde_json::to_writer_pretty(&mut *out, &items);
            let _ = writeln!(out);
        }
    }
}
