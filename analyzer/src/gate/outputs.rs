//! The files CI systems read, written from a gate's [`Verdict`]: JUnit XML (`--junit FILE`: a
//! test case per gate rule and per process, and one for the command `run` ran), SARIF 2.1.0
//! (`--sarif FILE`: the failing conditions and the locks waited for most, each at the source
//! line that created the object, with the line that waited for it), and GitHub's job summary
//! (markdown appended to the file `$GITHUB_STEP_SUMMARY` names, when it is set). The GitHub
//! annotations and the GitLab Code Quality report are written by [`super::write_failures`].

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::metrics::{Figures, Place};
use super::summary::{self, ProgramSummary};
use super::{anchor, fingerprint, repo_path, Failure, Verdict};
use crate::report::fmt_ns;

/// The files to write besides the report.
#[derive(Debug, Clone, Default)]
pub struct Files {
    pub junit: Option<PathBuf>,
    pub sarif: Option<PathBuf>,
}

/// The environment variable GitHub Actions sets to the step's summary file.
pub const STEP_SUMMARY_ENV: &str = "GITHUB_STEP_SUMMARY";

/// Writes the JUnit and SARIF files asked for and, when `$GITHUB_STEP_SUMMARY` is set, appends
/// the job summary to it. A file that cannot be written is said on `err` and makes the result
/// 2 (the tool could not do what was asked); 0 otherwise.
pub fn write_files(
    files: &Files,
    v: &Verdict,
    figs: &[Figures],
    err: &mut dyn Write,
    who: &str,
) -> i32 {
    let mut code = 0;
    let sums = summary::summarize(figs, v);
    let mut put = |path: &Path, text: String, what: &str| {
        if let Err(e) = write_whole(path, text.as_bytes()) {
            let _ = writeln!(
                err,
                "waitshim-analyze {who}: cannot write the {what} {}: {e}",
                path.display()
            );
            code = crate::exit::NOT_JUDGED;
        }
    };
    if let Some(p) = &files.junit {
        put(p, junit(v, figs), "JUnit report");
    }
    if let Some(p) = &files.sarif {
        let mut text = serde_json::to_string_pretty(&sarif(v, &sums)).unwrap_or_default();
        text.push('\n');
        put(p, text, "SARIF report");
    }
    if let Some(p) = std::env::var_os(STEP_SUMMARY_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        let text = step_summary(v, figs, &sums);
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&p)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = appended {
            let _ = writeln!(
                err,
                "waitshim-analyze {who}: cannot append the job summary to ${STEP_SUMMARY_ENV} ({}): {e}",
                p.display()
            );
            code = crate::exit::NOT_JUDGED;
        }
    }
    code
}

/// Writes `bytes` to `path` through a hidden file beside it, renamed over it once whole, so
/// that a reader never sees half a report.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if path.as_os_str() == "-" {
        return std::io::stdout().lock().write_all(bytes);
    }
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut hidden = std::ffi::OsString::from(".");
    hidden.push(name);
    hidden.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(hidden);
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Text as XML character data or an attribute value: the five special characters escaped, and
/// the characters XML 1.0 cannot hold at all (controls other than tab, newline, return)
/// replaced by U+FFFD.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn seconds(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

/// A failure as one line: `FAIL LOG: message [file:line]`.
fn fail_line(f: &Failure) -> String {
    let at = anchor(f).map_or(String::new(), |(file, line)| format!(" [{file}:{line}]"));
    format!("FAIL {}: {}{at}", f.log, f.message)
}

/// The JUnit XML report: a suite `waitshim gate` with a test case per rule of the gate (and one
/// for the command `run` ran, and one error when the tool could not judge), and a suite
/// `waitshim processes` with a test case per log, failing when a condition failed in it.
pub fn junit(v: &Verdict, figs: &[Figures]) -> String {
    let mut gate = String::new();
    let (mut g_tests, mut g_fail, mut g_err) = (0usize, 0usize, 0usize);
    if let Some(c) = &v.command {
        g_tests += 1;
        let _ = write!(
            gate,
            "    <testcase name=\"{}\" classname=\"waitshim.command\" time=\"{:.3}\">",
            xml_escape(&format!("command {}", summary::command_line(&c.argv))),
            c.seconds.max(0.0)
        );
        if c.failed() {
            g_fail += 1;
            let _ = write!(
                gate,
                "<failure type=\"command\" message=\"{}\">{}</failure>",
                xml_escape(&format!("the command {}", c.describe())),
                xml_escape(&format!(
                    "`{}` {}",
                    summary::command_line(&c.argv),
                    c.describe()
                ))
            );
        }
        gate.push_str("</testcase>\n");
    }
    for rule in &v.rules {
        g_tests += 1;
        let _ = write!(
            gate,
            "    <testcase name=\"{}\" classname=\"waitshim.gate\" time=\"0.000\">",
            xml_escape(rule)
        );
        let failing: Vec<&Failure> = v.failures_of_rule(rule).collect();
        if v.not_judged.is_empty() && !failing.is_empty() {
            g_fail += 1;
            let text: Vec<String> = failing.iter().map(|f| fail_line(f)).collect();
            let _ = write!(
                gate,
                "<failure type=\"{}\" message=\"{}\">{}</failure>",
                xml_escape(failing[0].check),
                xml_escape(&format!(
                    "{} failing: {}",
                    failing.len(),
                    failing[0].message
                )),
                xml_escape(&text.join("\n"))
            );
        }
        gate.push_str("</testcase>\n");
    }
    if !v.not_judged.is_empty() {
        g_tests += 1;
        g_err += 1;
        let _ = writeln!(
            gate,
            "    <testcase name=\"waitshim could judge the run\" classname=\"waitshim.gate\" time=\"0.000\"><error type=\"not-judged\" message=\"{}\">{}</error></testcase>",
            xml_escape(&v.not_judged[0]),
            xml_escape(&v.not_judged.join("\n"))
        );
    }
    let mut procs = String::new();
    let (mut p_fail, mut p_time) = (0usize, 0u64);
    for f in figs {
        p_time = p_time.saturating_add(f.duration_ns);
        let _ = write!(
            procs,
            "    <testcase name=\"{}\" classname=\"{}\" time=\"{}\">",
            xml_escape(&format!("{} pid {}", f.program_name(), f.pid)),
            xml_escape(&format!("waitshim.process.{}", f.program_name())),
            seconds(f.duration_ns)
        );
        let failing: Vec<&Failure> = v.failures_of(&f.log).collect();
        if !failing.is_empty() {
            p_fail += 1;
            let text: Vec<String> = failing.iter().map(|f| fail_line(f)).collect();
            let _ = write!(
                procs,
                "<failure type=\"{}\" message=\"{}\">{}</failure>",
                xml_escape(failing[0].check),
                xml_escape(&format!(
                    "{} failing: {}",
                    failing.len(),
                    failing[0].message
                )),
                xml_escape(&text.join("\n"))
            );
        }
        let locks = f.locks();
        let _ = writeln!(
            procs,
            "<system-out>{}</system-out></testcase>",
            xml_escape(&format!(
                "log {}: {} thread(s), hwm {}, {} lock acquisitions, {} waited for locks, {} deadlock(s), {} lock-order inversion(s)",
                f.log,
                f.threads,
                f.hwm,
                locks.acquisitions,
                fmt_ns(locks.wait_ns),
                f.deadlocks.len(),
                f.inversions.len()
            ))
        );
    }
    let total_time = v.command.as_ref().map_or(0.0, |c| c.seconds.max(0.0));
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"waitshim\" tests=\"{}\" failures=\"{}\" errors=\"{g_err}\" time=\"{total_time:.3}\">",
        g_tests + figs.len(),
        g_fail + p_fail
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"waitshim gate\" tests=\"{g_tests}\" failures=\"{g_fail}\" errors=\"{g_err}\" skipped=\"0\" time=\"{total_time:.3}\">"
    );
    x.push_str(&gate);
    x.push_str("  </testsuite>\n");
    let _ = writeln!(
        x,
        "  <testsuite name=\"waitshim processes\" tests=\"{}\" failures=\"{p_fail}\" errors=\"0\" skipped=\"0\" time=\"{}\">",
        figs.len(),
        seconds(p_time)
    );
    x.push_str(&procs);
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// A path or URI reference with the characters a URI may not hold percent-encoded.
fn uri_escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The checkout the relative paths are relative to ([`repo_path`]).
fn source_root() -> Option<String> {
    std::env::var("GITHUB_WORKSPACE")
        .ok()
        .or_else(|| std::env::var("CI_PROJECT_DIR").ok())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::env::current_dir()
                .ok()
                .map(|d| d.display().to_string())
        })
}

/// A SARIF physical location for a place with a file and a line.
fn location(p: &Place, message: Option<&str>) -> Option<Value> {
    let file = p.file.as_deref()?;
    let line = p.line?;
    let rel = repo_path(file);
    let artifact = if rel.starts_with('/') {
        json!({ "uri": format!("file://{}", uri_escape(&rel)) })
    } else {
        json!({ "uri": uri_escape(&rel), "uriBaseId": "%SRCROOT%" })
    };
    let mut loc = json!({
        "physicalLocation": {
            "artifactLocation": artifact,
            "region": { "startLine": line },
        }
    });
    if let Some(m) = message {
        loc["message"] = json!({ "text": m });
    }
    Some(loc)
}

/// The rules a SARIF log may name, in `tool.driver.rules` order.
const SARIF_RULES: &[(&str, &str, &str, &str)] = &[
    (
        "deadlock",
        "Deadlock",
        "Threads waited for each other and none could go on.",
        "error",
    ),
    (
        "inversion",
        "LockOrderInversion",
        "Locks were taken in both orders: threads running that code can deadlock.",
        "error",
    ),
    (
        "fail-if",
        "FailIf",
        "A --fail-if condition of the gate held.",
        "error",
    ),
    (
        "baseline",
        "WorseThanBaseline",
        "A figure got worse than the committed baseline allows.",
        "error",
    ),
    (
        "contention",
        "Contention",
        "Threads waited for this lock: the locks waited for most in each program.",
        "note",
    ),
];

fn rule_index(id: &str) -> usize {
    SARIF_RULES
        .iter()
        .position(|r| r.0 == id)
        .unwrap_or(SARIF_RULES.len() - 1)
}

fn role_words(p: &Place) -> &'static str {
    match p.role {
        Some(Place::CREATED) => "the object was created here",
        Some(Place::WAITED) => "threads waited for it here",
        _ => "here",
    }
}

/// A SARIF result at `places` (the first with a file and line is the location, the others
/// related locations).
fn result(rule: &str, level: &str, message: &str, places: &[Place], key: &[&str]) -> Value {
    let mut located = places
        .iter()
        .filter(|p| p.file.is_some() && p.line.is_some());
    let mut r = json!({
        "ruleId": rule,
        "ruleIndex": rule_index(rule),
        "level": level,
        "message": { "text": message },
        "partialFingerprints": { "waitshimFingerprint/v1": fingerprint(key) },
    });
    if let Some(first) = located.next() {
        if let Some(l) = location(first, Some(role_words(first))) {
            r["locations"] = json!([l]);
        }
    }
    let related: Vec<Value> = located
        .enumerate()
        .filter_map(|(i, p)| {
            let mut l = location(p, Some(role_words(p)))?;
            l["id"] = json!(i + 1);
            Some(l)
        })
        .collect();
    if !related.is_empty() {
        r["relatedLocations"] = Value::Array(related);
    }
    r
}

/// The SARIF 2.1.0 log: one run of the tool `waitshim`, a result per failing condition
/// (level error) and per lock listed in the summary (level note).
pub fn sarif(v: &Verdict, sums: &[ProgramSummary]) -> Value {
    let rules: Vec<Value> = SARIF_RULES
        .iter()
        .map(|(id, name, text, level)| {
            json!({
                "id": id,
                "name": name,
                "shortDescription": { "text": text },
                "defaultConfiguration": { "level": level },
            })
        })
        .collect();
    let mut results: Vec<Value> = v
        .failures
        .iter()
        .map(|f| {
            let key = f
                .places
                .first()
                .map_or(f.message.as_str(), |p| p.site.as_str());
            result(
                f.check,
                "error",
                &format!("{}: {}", f.program, f.message),
                &f.places,
                &[f.check, &f.rule, key],
            )
        })
        .collect();
    for p in sums {
        for w in &p.worst {
            results.push(result(
                "contention",
                "note",
                &format!(
                    "{}: {} waited for {} in {} process(es) (longest wait {}, up to {} thread(s) waiting at once)",
                    p.program,
                    w.key,
                    fmt_ns(w.wait_ns),
                    w.processes,
                    fmt_ns(w.max_wait_ns),
                    w.hwm
                ),
                &w.places,
                &["contention", &p.program, &w.key],
            ));
        }
    }
    let mut notifications = Vec::new();
    for why in &v.not_judged {
        notifications.push(json!({ "level": "error", "message": { "text": why } }));
    }
    let mut invocation = json!({
        "executionSuccessful": v.not_judged.is_empty(),
        "exitCode": v.exit_code(),
        "exitCodeDescription": crate::exit::meaning(v.exit_code()),
    });
    if !notifications.is_empty() {
        invocation["toolExecutionNotifications"] = Value::Array(notifications);
    }
    if let Some(c) = &v.command {
        invocation["commandLine"] = json!(summary::command_line(&c.argv));
    }
    let mut run = json!({
        "tool": { "driver": {
            "name": "waitshim",
            "version": env!("CARGO_PKG_VERSION"),
            "semanticVersion": env!("CARGO_PKG_VERSION"),
            "rules": rules,
        } },
        "invocations": [invocation],
        "results": results,
    });
    if let Some(root) = source_root() {
        let mut uri = format!("file://{}", uri_escape(&root));
        if !uri.ends_with('/') {
            uri.push('/');
        }
        run["originalUriBaseIds"] = json!({ "%SRCROOT%": { "uri": uri } });
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [run],
    })
}

/// Text for a markdown table cell: no line breaks, pipes escaped.
fn cell(s: &str) -> String {
    s.replace(['\n', '\r'], " ").replace('|', "\\|")
}

/// Text inside backticks: none of its own.
fn code(s: &str) -> String {
    format!("`{}`", s.replace('`', "'").replace(['\n', '\r'], " "))
}

/// The job summary GitHub shows on the run's page (`$GITHUB_STEP_SUMMARY`), in markdown.
pub fn step_summary(v: &Verdict, figs: &[Figures], sums: &[ProgramSummary]) -> String {
    let code_ = v.exit_code();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### waitshim: {} (exit {code_})\n",
        crate::exit::meaning(code_)
    );
    if let Some(c) = &v.command {
        let _ = writeln!(
            s,
            "The command {} {}.",
            code(&summary::command_line(&c.argv)),
            c.describe()
        );
    }
    let _ = writeln!(
        s,
        "{} log(s) of {} program(s); gate {}.\n",
        figs.len(),
        sums.len(),
        v.gate_result()
    );
    for why in &v.not_judged {
        let _ = writeln!(s, "- **not judged**: {}", cell(why));
    }
    if !v.not_judged.is_empty() {
        s.push('\n');
    }
    if !sums.is_empty() {
        s.push_str("| program | processes | hwm | lock wait | deadlocks | inversions | gate |\n");
        s.push_str("|---|---:|---:|---:|---:|---:|---|\n");
        for p in sums {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                cell(&p.program),
                p.logs.len(),
                p.hwm,
                fmt_ns(p.lock_wait_ns),
                p.deadlocks,
                p.inversions.len(),
                p.gate(v)
            );
        }
        s.push('\n');
    }
    if !v.failures.is_empty() {
        let _ = writeln!(s, "**Failing conditions** ({})\n", v.failures.len());
        for f in v.failures.iter().take(50) {
            let at = anchor(f).map_or(String::new(), |(file, line)| {
                format!(" at {}", code(&format!("{file}:{line}")))
            });
            let _ = writeln!(s, "- {}{at}: {}", cell(&f.program), cell(&f.message));
        }
        if v.failures.len() > 50 {
            let _ = writeln!(s, "- and {} more", v.failures.len() - 50);
        }
        s.push('\n');
    }
    let worst: Vec<(&ProgramSummary, &summary::WorstObject)> = sums
        .iter()
        .flat_map(|p| p.worst.iter().map(move |w| (p, w)))
        .collect();
    if !worst.is_empty() {
        s.push_str("**Locks waited for most**\n\n");
        s.push_str("| program | lock | waited | processes | longest wait | hwm |\n");
        s.push_str("|---|---|---:|---:|---:|---:|\n");
        for (p, w) in worst {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                cell(&p.program),
                cell(&w.key),
                fmt_ns(w.wait_ns),
                w.processes,
                fmt_ns(w.max_wait_ns),
                w.hwm
            );
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_is_escaped_and_controls_replaced() {
        assert_eq!(
            xml_escape("a<b & \"c\" 'd'>\u{1}\te"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;\u{FFFD}\te"
        );
    }

    #[test]
    fn uris_are_percent_encoded() {
        assert_eq!(uri_escape("src/a b#1.c"), "src/a%20b%231.c");
        assert_eq!(uri_escape("é"), "%C3%A9");
    }

    #[test]
    fn markdown_cells_hold_no_pipe_or_line_break() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
        assert_eq!(code("x`y"), "`x'y`");
    }
}
