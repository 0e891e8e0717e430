//! The CI side of the analyzer: `check` (a gate over one or more logs, with exit codes and
//! annotations), `baseline` (a committed summary a later run is compared with), `history` (runs
//! of a job stored in a database, with a regression rule) and `run` (the launcher, in
//! [`crate::launch`]).
//!
//! Exit codes of every command here ([`crate::exit`]): 0 the gate passed, 1 it failed, 2 the
//! tool could not judge (an input could not be read, an argument is bad, a selector matches no
//! object); `run` adds 3 (the command failed) and 4 (the command and the gate failed).

pub mod baseline;
pub mod cli;
pub mod expr;
pub mod history;
pub mod metrics;
pub mod outputs;
pub mod summary;

use std::io::Write;
use std::path::{Path, PathBuf};

use metrics::{Figures, Place};

/// The gate failed.
pub const EXIT_FAILED: i32 = crate::exit::GATE_FAILED;

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
    /// Files to write besides: JUnit XML, SARIF 2.1.0.
    pub files: outputs::Files,
}

/// One failing condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The log it was found in (several, comma-separated, for a baseline's program figures).
    pub log: String,
    /// Those logs one by one.
    pub logs: Vec<String>,
    /// The program (executable's base name) the logs are of.
    pub program: String,
    /// `deadlock`, `inversion`, `fail-if`, `baseline`.
    pub check: &'static str,
    /// The rule of the gate that failed, as [`rules`] names it.
    pub rule: String,
    pub message: String,
    /// Source places it is about, most relevant first (creation and wait sites).
    pub places: Vec<Place>,
}

/// The places of some objects of a log: creation site, then where they were waited for.
pub fn places_of(f: &Figures, ids: &[u64]) -> Vec<Place> {
    let mut out = Vec::new();
    for id in ids {
        if let Some(o) = f.objects.get(id) {
            out.extend(o.places());
        }
    }
    out
}

/// The rule names of the default gate.
pub const RULE_DEADLOCKS: &str = "no deadlock";
pub const RULE_INVERSIONS: &str = "no lock-order inversion";

/// The rules of a gate, in the order they are checked: the default gate's two, each
/// `--fail-if`, the baseline. Failures name theirs ([`Failure::rule`]).
pub fn rules(
    default_gate: bool,
    exprs: &[(String, expr::Expr)],
    baseline: Option<&Path>,
) -> Vec<String> {
    let mut out = Vec::new();
    if default_gate {
        out.push(RULE_DEADLOCKS.to_string());
        out.push(RULE_INVERSIONS.to_string());
    }
    out.extend(exprs.iter().map(|(t, _)| fail_if_rule(t)));
    if let Some(b) = baseline {
        out.push(baseline_rule(b));
    }
    out
}

pub fn fail_if_rule(text: &str) -> String {
    format!("fail-if {text}")
}

pub fn baseline_rule(path: &Path) -> String {
    format!("baseline {}", path.display())
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
            logs: vec![f.log.clone()],
            program: f.program.clone(),
            check: "deadlock",
            rule: RULE_DEADLOCKS.to_string(),
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
            logs: vec![f.log.clone()],
            program: f.program.clone(),
            check: "inversion",
            rule: RULE_INVERSIONS.to_string(),
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
/// names no object of this log gives 0 for it (the object may live in another process's log;
/// [`unmatched_selectors`] refuses one that names no object in any log).
pub fn eval_fail_if(text: &str, e: &expr::Expr, f: &Figures) -> Option<Failure> {
    let mut shown = Vec::new();
    let mut about = Vec::new();
    let mut hints = Vec::new();
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
                if selector.is_none() {
                    // A figure of the whole run: it is about no object, but may point at the
                    // one that made most of it (annotations need a place).
                    if let Some(hint) = run_hint(name, f, &ids) {
                        if !hints.contains(&hint) {
                            hints.push(hint);
                        }
                    }
                } else {
                    about.extend(ids.iter().copied());
                }
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
    let mut places = places_of(f, &about);
    for (words, id) in &hints {
        message.push_str(&format!(" ({words}: {})", labels(f, &[*id])));
        places.extend(places_of(f, &[*id]));
    }
    Some(Failure {
        log: f.log.clone(),
        logs: vec![f.log.clone()],
        program: f.program.clone(),
        check: "fail-if",
        rule: fail_if_rule(text),
        message,
        places,
    })
}

/// For a run-level metric, the object that made most of it, in words: the lock waited for
/// longest for the lock-wait figures, the object that set the highwater mark for `hwm`, and
/// none for figures no object makes (`threads`, `duration`).
fn run_hint(metric: &str, f: &Figures, ids: &[u64]) -> Option<(&'static str, u64)> {
    let first = *ids.first()?;
    let words = match metric {
        "threads" | "duration" => return None,
        "hwm" => "set at",
        "deadlocks" => "deadlocked on",
        "inversions" => "inverted order of",
        "still_waiting" => "still waited for",
        _ => "the lock waited for most",
    };
    f.objects.contains_key(&first).then_some((words, first))
}

/// The selectors of these expressions that name no object in any of the logs: a typo in a
/// lock's name would otherwise make its condition never hold, and the gate pass.
pub fn unmatched_selectors(exprs: &[(String, expr::Expr)], figs: &[Figures]) -> Vec<String> {
    let mut out = Vec::new();
    for (text, e) in exprs {
        for (lhs, _, rhs) in e.comparisons() {
            for op in [lhs, rhs] {
                if let expr::Operand::Metric {
                    selector: Some(sel),
                    ..
                } = op
                {
                    if !figs.iter().any(|f| !f.select(sel).is_empty()) {
                        let msg = format!(
                            "--fail-if `{text}`: {sel:?} matches no object in the {} log(s) checked (a selector names an object by its WAITSHIM_NAME_OBJECT name, its variable, its creation site as the report shows it, such as queue.c:41, or the function that created it; only objects that were used count)",
                            figs.len()
                        );
                        if !out.contains(&msg) {
                            out.push(msg);
                        }
                    }
                }
            }
        }
    }
    out
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

/// Every failure of the gate over these figures; `Err` with the reasons the gate cannot be
/// judged (a selector that matches no object in any log).
pub fn evaluate(
    figs: &[Figures],
    default_gate: bool,
    exprs: &[(String, expr::Expr)],
    base: Option<(&Path, &baseline::Baseline)>,
    tolerance: f64,
) -> Result<Vec<Failure>, Vec<String>> {
    let unmatched = unmatched_selectors(exprs, figs);
    if !unmatched.is_empty() {
        return Err(unmatched);
    }
    let mut failures = Vec::new();
    for f in figs {
        if default_gate {
            failures.extend(default_failures(f));
        }
        for (text, e) in exprs {
            failures.extend(eval_fail_if(text, e, f));
        }
    }
    if let Some((path, b)) = base {
        let rule = baseline_rule(path);
        failures.extend(
            baseline::compare(b, figs, tolerance)
                .into_iter()
                .map(|mut f| {
                    f.rule = rule.clone();
                    f
                }),
        );
    }
    Ok(failures)
}

/// What a gate found, for the files and summaries written from it.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// Whether a gate was asked for (`check`, `run --check`).
    pub checked: bool,
    /// The gate's rules, in order ([`rules`]).
    pub rules: Vec<String>,
    pub failures: Vec<Failure>,
    /// Why the tool could not judge, when it could not (then the exit status is 2).
    pub not_judged: Vec<String>,
    /// `run`: the command and how it ended.
    pub command: Option<CommandEnd>,
}

/// How the command `run` started ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommandEnd {
    /// The command line, as given.
    pub argv: Vec<String>,
    /// Its status as a shell shows it: the exit code, or 128 + the signal that killed it.
    pub status: i32,
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Seconds it ran.
    pub seconds: f64,
}

impl CommandEnd {
    pub fn failed(&self) -> bool {
        self.status != 0
    }

    /// `ended with status 3`, `was killed by SIGTERM (status 143)`.
    pub fn describe(&self) -> String {
        match self.signal {
            Some(sig) => format!(
                "was killed by {} (status {})",
                crate::procgroup::signal_name(sig),
                self.status
            ),
            None => format!("ended with status {}", self.status),
        }
    }
}

impl Verdict {
    pub fn gate_failed(&self) -> bool {
        self.checked && !self.failures.is_empty()
    }

    /// The exit status ([`crate::exit`]).
    pub fn exit_code(&self) -> i32 {
        crate::exit::combine(
            self.command.as_ref().is_some_and(CommandEnd::failed),
            self.gate_failed(),
            !self.not_judged.is_empty(),
        )
    }

    /// `passed`, `failed`, `not judged`, `not checked`: the gate's result in a word.
    pub fn gate_result(&self) -> &'static str {
        if !self.not_judged.is_empty() {
            "not judged"
        } else if !self.checked {
            "not checked"
        } else if self.failures.is_empty() {
            "passed"
        } else {
            "failed"
        }
    }

    /// The failures of one log (by its path as given).
    pub fn failures_of<'a>(&'a self, log: &'a str) -> impl Iterator<Item = &'a Failure> + 'a {
        self.failures
            .iter()
            .filter(move |f| f.logs.iter().any(|l| l == log))
    }

    /// The failures of one rule.
    pub fn failures_of_rule<'a>(&'a self, rule: &'a str) -> impl Iterator<Item = &'a Failure> + 'a {
        self.failures.iter().filter(move |f| f.rule == rule)
    }
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
            Ok(b) => Some((p.as_path(), b)),
            Err(e) => {
                let _ = writeln!(err, "waitshim-analyze check: {e}");
                return crate::EXIT_BAD_INPUT;
            }
        },
        None => None,
    };
    let mut bad = false;
    let figs = figures_of(&opts.logs, opts.symbols, err, &mut bad);
    let mut verdict = Verdict {
        checked: true,
        rules: rules(opts.default_gate, &exprs, base.as_ref().map(|(p, _)| *p)),
        ..Verdict::default()
    };
    if bad {
        verdict
            .not_judged
            .push("an input could not be read as a log".into());
    }
    match evaluate(
        &figs,
        opts.default_gate,
        &exprs,
        base.as_ref().map(|(p, b)| (*p, b)),
        opts.tolerance,
    ) {
        Ok(f) => verdict.failures = f,
        Err(why) => verdict.not_judged.extend(why),
    }
    for why in &verdict.not_judged {
        let _ = writeln!(err, "waitshim-analyze check: {why}");
    }
    write_failures(opts.format, &verdict.failures, out);
    let code = outputs::write_files(&opts.files, &verdict, &figs, err, "check");
    let verdict_words = match verdict.gate_result() {
        "not judged" => "not judged (exit 2)",
        w => w,
    };
    let _ = writeln!(
        err,
        "waitshim check: {verdict_words}: {} failing, {} condition(s) over {} log(s)",
        verdict.failures.len(),
        verdict.rules.len(),
        figs.len()
    );
    if code != 0 {
        return code;
    }
    verdict.exit_code()
}

/// A debug-info path as a CI system wants it: relative to the working directory (the
/// checkout) when it is inside it.
pub fn repo_path(file: &str) -> String {
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
pub fn anchor(f: &Failure) -> Option<(String, u32)> {
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
pub fn fingerprint(parts: &[&str]) -> String {
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
