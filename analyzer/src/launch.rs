//! `waitshim-analyze run -- CMD ARGS...`: runs a command under the shim, with its logs in a
//! directory of their own, then reports on every log this run wrote there (the command's, and
//! those of the processes it forked or exec'd, each named by its pid; logs already in a
//! `--log-dir` are left out): the report of a single process, or one summary across several
//! ([`crate::gate::summary`]). Its exit status tells the command's failure from the gate's
//! (see [`crate::gate`]) and from the tool's ([`crate::exit`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::gate::{self, summary, CommandEnd, Format, Verdict};
use crate::procgroup::{Caught, Group};
use crate::Options;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub cmd: Vec<OsString>,
    /// The shim to preload; by default the one [`crate::shimpath::locate`] finds.
    pub shim: Option<PathBuf>,
    /// Where the logs go; by default a new directory under the temporary directory.
    pub log_dir: Option<PathBuf>,
    /// Stop the command's processes (SIGTERM to its process group, then SIGKILL 5 s later)
    /// when it runs longer.
    pub timeout: Option<Duration>,
    pub json: bool,
    /// Print no report (the gate's lines and the log directory only).
    pub no_report: bool,
    /// Every process's report after the summary.
    pub each: bool,
    /// The report goes to this file instead of stdout.
    pub output: Option<PathBuf>,
    /// Each process's report is also written here.
    pub report_dir: Option<PathBuf>,
    /// JUnit and SARIF files.
    pub files: gate::outputs::Files,
    pub check: bool,
    pub fail_if: Vec<String>,
    pub baseline: Option<PathBuf>,
    pub tolerance: f64,
    pub format: Format,
    pub default_gate: bool,
    pub symbols: bool,
    /// Add the run to this job's history (in `db`).
    pub history_job: Option<String>,
    pub db: crate::gate::cli::DbArgs,
}

/// A new directory for the logs of one run: `$TMPDIR/waitshim-run.<pid>.<n>`.
fn fresh_dir() -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    let pid = std::process::id();
    let mut last = None;
    for n in 0..1000 {
        let dir = base.join(format!("waitshim-run.{pid}.{n}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

/// The logs in `dir`, by pid then by the `.N` the shim adds after an exec.
pub fn logs_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut logs: Vec<(Vec<u64>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let middle = name.strip_prefix("waitshim.")?.strip_suffix(".log")?;
            let key: Vec<u64> = middle
                .split('.')
                .map(|p| p.parse().unwrap_or(u64::MAX))
                .collect();
            Some((key, e.path()))
        })
        .collect();
    logs.sort();
    logs.into_iter().map(|(_, p)| p).collect()
}

/// Runs the command in a process group of its own (see [`crate::procgroup`]), its stdout on
/// `run`'s stderr when `stdout_to_stderr`; `Err` is a message for an exit status of 2.
fn launch(
    opts: &RunOptions,
    dir: &Path,
    shim: &Path,
    stdout_to_stderr: bool,
    err: &mut dyn Write,
) -> Result<CommandEnd, String> {
    let Some((program, args)) = opts.cmd.split_first() else {
        return Err("no command given (waitshim-analyze run -- CMD ARGS...)".into());
    };
    let mut preload = OsString::from(shim.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    let mut cmd = Command::new(program);
    cmd.args(args).env("LD_PRELOAD", preload).env(
        waitshim_format::contract::env::LOG,
        dir.join(waitshim_format::contract::LOG_PATTERN),
    );
    // `run` names the logs itself: the shim's line at each process's exit (dozens in a test
    // suite) is left out, unless the user asked for it.
    if std::env::var_os(waitshim_format::contract::env::QUIET).is_none() {
        cmd.env(waitshim_format::contract::env::QUIET, "1");
    }
    // Its summary counts every process the command ran, those with nothing to report too.
    if std::env::var_os(waitshim_format::contract::env::CHILD_LOGS).is_none() {
        cmd.env(waitshim_format::contract::env::CHILD_LOGS, "all");
    }
    if stdout_to_stderr {
        // stdout carries a document (JSON, a Code Quality report): the command's own output
        // must not mix into it.
        let fd = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("cannot pass the command's output to stderr: {e}"))?;
        cmd.stdout(Stdio::from(fd));
    }
    // SIGINT, SIGTERM and SIGHUP sent to `run` (a CI runner cancelling the job, Ctrl-C when the
    // command does not have the terminal) go to the command's processes; `run` stays to report
    // on what they logged. Caught before the start, so that none is missed.
    let _caught = Caught::install();
    let started = Instant::now();
    let group = Group::spawn(&mut cmd)
        .map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
    let status = group
        .wait(opts.timeout, &program.to_string_lossy(), err)
        .map_err(|e| format!("waiting for the command: {e}"))?;
    let (exit_code, signal) = (status.code(), status.signal());
    Ok(CommandEnd {
        argv: opts
            .cmd
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        status: match (exit_code, signal) {
            (Some(c), _) => c,
            (None, Some(sig)) => 128 + sig,
            (None, None) => 1,
        },
        exit_code,
        signal,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The logs already in `dir` before the command starts (by device and inode): not this run's.
fn earlier_logs(dir: &Path) -> HashSet<(u64, u64)> {
    logs_in(dir)
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(p).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect()
}

/// `waitshim-analyze run`.
pub fn run(opts: &RunOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let fail = |err: &mut dyn Write, msg: &str| {
        let _ = writeln!(err, "waitshim-analyze run: {msg}");
        crate::exit::NOT_JUDGED
    };
    let exprs = match gate::parse_all(&opts.fail_if) {
        Ok(e) => e,
        Err(msg) => return fail(err, &msg),
    };
    let base = match &opts.baseline {
        Some(p) => match gate::baseline::Baseline::load(p) {
            Ok(b) => Some((p.clone(), b)),
            Err(e) => return fail(err, &e),
        },
        None => None,
    };
    // stdout holds one document (the JSON report, a Code Quality report) or text.
    if opts.json && opts.output.is_none() && opts.format == Format::Gitlab {
        return fail(
            err,
            "--json and --format gitlab would both print a document on stdout: write the report to a file with -o FILE",
        );
    }
    let stdout_is_document = (opts.json && opts.output.is_none()) || opts.format == Format::Gitlab;
    // An absolute path: the loader searches its library path for a relative one.
    let shim = match crate::shimpath::locate(opts.shim.as_deref()) {
        Ok(p) => p,
        Err(e) => return fail(err, &e.to_string()),
    };
    // The files the report goes to are opened before the command runs: a path that cannot be
    // written is said at once, not after a long test suite.
    let mut report_file = match &opts.output {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some(std::io::BufWriter::new(f)),
            Err(e) => return fail(err, &format!("-o {}: {e}", p.display())),
        },
        None => None,
    };
    if let Some(d) = &opts.report_dir {
        if let Err(e) = std::fs::create_dir_all(d) {
            return fail(err, &format!("--report-dir {}: {e}", d.display()));
        }
    }
    let dir = match &opts.log_dir {
        Some(d) => std::fs::create_dir_all(d).map(|()| d.clone()),
        None => fresh_dir(),
    };
    let dir = match dir {
        Ok(d) => std::fs::canonicalize(&d).unwrap_or(d),
        Err(e) => return fail(err, &format!("cannot create the log directory: {e}")),
    };
    let _ = writeln!(err, "waitshim: logs in {}", dir.display());
    // The shim never replaces a file: the logs of this run are those that were not there.
    let earlier = earlier_logs(&dir);
    let end = match launch(opts, &dir, &shim, stdout_is_document, err) {
        Ok(s) => s,
        Err(msg) => {
            if opts.log_dir.is_none() {
                // The directory made for this run, empty: nothing ran.
                let _ = std::fs::remove_dir(&dir);
            }
            return fail(err, &msg);
        }
    };
    let (logs, left_out): (Vec<PathBuf>, Vec<PathBuf>) = logs_in(&dir).into_iter().partition(|p| {
        std::fs::symlink_metadata(p).is_ok_and(|m| !earlier.contains(&(m.dev(), m.ino())))
    });
    let _ = writeln!(
        err,
        "waitshim: the command {}; {} log(s) in {}",
        end.describe(),
        logs.len(),
        dir.display()
    );
    if !left_out.is_empty() {
        let _ = writeln!(
            err,
            "waitshim: {} log(s) that were in {} before this run left out (not read, not removed)",
            left_out.len(),
            dir.display()
        );
    }
    let mut verdict = Verdict {
        checked: opts.check,
        rules: if opts.check {
            gate::rules(
                opts.default_gate,
                &exprs,
                base.as_ref().map(|(p, _)| p.as_path()),
            )
        } else {
            Vec::new()
        },
        command: Some(end),
        ..Verdict::default()
    };
    if logs.is_empty() {
        verdict.not_judged.push(
            "no log was written: `waitshim-analyze why-no-log -- CMD` tells what kept the shim out"
                .into(),
        );
    }
    let mut bad = false;
    let figs = gate::figures_of(&logs, opts.symbols, err, &mut bad);
    if bad {
        verdict
            .not_judged
            .push("a log could not be read (said above)".into());
    }
    if opts.check && !logs.is_empty() {
        match gate::evaluate(
            &figs,
            opts.default_gate,
            &exprs,
            base.as_ref().map(|(p, b)| (p.as_path(), b)),
            opts.tolerance,
        ) {
            Ok(f) => verdict.failures = f,
            Err(why) => verdict.not_judged.extend(why),
        }
    }
    if let Some(job) = &opts.history_job {
        if !logs.is_empty() && gate::history::add(job, &opts.db, &logs, opts.symbols, err) != 0 {
            verdict.not_judged.push(format!(
                "the run could not be added to the history of job {job}"
            ));
        }
    }
    for why in &verdict.not_judged {
        let _ = writeln!(err, "waitshim: {why}");
    }
    let sums = summary::summarize(&figs, &verdict);
    let report_opts = Options {
        symbols: opts.symbols,
        ..Options::default()
    };
    // The report: to -o FILE, else stdout (stderr when stdout holds a Code Quality report).
    // Logs that cannot be read were named above already.
    let mut quiet = std::io::sink();
    {
        let dest: &mut dyn Write = match report_file.as_mut() {
            Some(f) => f,
            None if stdout_is_document && !opts.json => &mut *err,
            None => &mut *out,
        };
        if opts.json {
            let doc = RunDocument {
                dir: &dir,
                logs: &logs,
                left_out: &left_out,
                verdict: &verdict,
                sums: &sums,
            };
            let _ = doc.write(dest, (!opts.no_report).then_some(&report_opts), &mut quiet);
        } else {
            if !opts.no_report {
                let _ =
                    write_text_report(dest, opts, &logs, &verdict, &sums, &report_opts, &mut quiet);
            }
            if opts.output.is_some() {
                // The file says what the gate found too; the annotations go to stdout below.
                gate::write_failures(Format::Text, &verdict.failures, dest);
            }
        }
        let _ = dest.flush();
    }
    if let Some(mut f) = report_file.take() {
        if let Err(e) = f.flush() {
            verdict.not_judged.push(format!(
                "the report could not be written to {}: {e}",
                opts.output.as_deref().unwrap_or(Path::new("")).display()
            ));
        }
    }
    // The gate's lines: on stdout, or on stderr when stdout holds the JSON report.
    if opts.check {
        let lines: &mut dyn Write = if opts.json && opts.output.is_none() {
            &mut *err
        } else {
            &mut *out
        };
        gate::write_failures(opts.format, &verdict.failures, lines);
        let _ = lines.flush();
    }
    if let Some(d) = &opts.report_dir {
        if let Err(e) = write_report_dir(d, &logs, opts.json, &report_opts) {
            verdict
                .not_judged
                .push(format!("--report-dir {}: {e}", d.display()));
        }
    }
    if gate::outputs::write_files(&opts.files, &verdict, &figs, err, "run") != 0 {
        verdict
            .not_judged
            .push("a file asked for could not be written (said above)".into());
    }
    let code = verdict.exit_code();
    let _ = writeln!(
        err,
        "waitshim run: exit {code} ({}): the command {}; gate {}{}",
        crate::exit::meaning(code),
        verdict
            .command
            .as_ref()
            .map_or(String::new(), CommandEnd::describe),
        verdict.gate_result(),
        if verdict.checked {
            format!(
                " ({} failing of {} condition(s) over {} log(s))",
                verdict.failures.len(),
                verdict.rules.len(),
                figs.len()
            )
        } else {
            String::new()
        }
    );
    code
}

/// The text report: the report of the single process, or the summary across several, then
/// (with `--each`) every process's report.
fn write_text_report(
    w: &mut dyn Write,
    opts: &RunOptions,
    logs: &[PathBuf],
    v: &Verdict,
    sums: &[summary::ProgramSummary],
    report_opts: &Options,
    err: &mut dyn Write,
) -> std::io::Result<()> {
    if logs.is_empty() {
        return Ok(());
    }
    if logs.len() == 1 && !opts.each {
        crate::run(logs, report_opts, false, w, err);
        return Ok(());
    }
    summary::write_text(w, sums, v, logs.len())?;
    if opts.each {
        writeln!(w, "\n")?;
        crate::run(logs, report_opts, false, w, err);
    } else {
        writeln!(
            w,
            "\nThe report of each process: run --each, or --report-dir DIR, or waitshim-analyze LOG."
        )?;
    }
    Ok(())
}

/// Writes every log's report into `dir`, named after the log: `waitshim.1234.txt`.
fn write_report_dir(
    dir: &Path,
    logs: &[PathBuf],
    json: bool,
    opts: &Options,
) -> std::io::Result<()> {
    for log in logs {
        let stem = log
            .file_stem()
            .map_or_else(|| "waitshim".into(), |s| s.to_string_lossy().into_owned());
        let path = dir.join(format!("{stem}.{}", if json { "json" } else { "txt" }));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut sink = std::io::sink();
        crate::run(std::slice::from_ref(log), opts, json, &mut f, &mut sink);
        f.flush()?;
    }
    Ok(())
}

/// `run --json`: schema `waitshim-run/1` (analyzer/JSON.md).
struct RunDocument<'a> {
    dir: &'a Path,
    logs: &'a [PathBuf],
    left_out: &'a [PathBuf],
    verdict: &'a Verdict,
    sums: &'a [summary::ProgramSummary],
}

pub const RUN_SCHEMA: &str = "waitshim-run/1";

fn place_json(p: &gate::metrics::Place) -> serde_json::Value {
    serde_json::json!({
        "file": p.file,
        "line": p.line,
        "site": p.site,
        "role": p.role,
    })
}

/// A gate's verdict as JSON (the `gate` of `waitshim-run/1`).
pub fn verdict_json(v: &Verdict) -> serde_json::Value {
    serde_json::json!({
        "checked": v.checked,
        "result": v.gate_result(),
        "rules": v.rules,
        "failures": v.failures.iter().map(|f| serde_json::json!({
            "log": f.log,
            "logs": f.logs,
            "program": f.program,
            "check": f.check,
            "rule": f.rule,
            "message": f.message,
            "places": f.places.iter().map(place_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "not_judged": v.not_judged,
    })
}

impl RunDocument<'_> {
    /// Writes the document; the reports of the logs (`waitshim-report/1`) go in as they are
    /// made, as the value of `report` (null without `report`).
    fn write(
        &self,
        w: &mut dyn Write,
        report: Option<&Options>,
        err: &mut dyn Write,
    ) -> std::io::Result<()> {
        let v = self.verdict;
        let code = v.exit_code();
        let path = |p: &PathBuf| p.display().to_string();
        let head = serde_json::json!({
            "schema": RUN_SCHEMA,
            "exit_code": code,
            "outcome": crate::exit::meaning(code),
            "command": v.command.as_ref().map(|c| serde_json::json!({
                "argv": c.argv,
                "status": c.status,
                "exit_code": c.exit_code,
                "signal": c.signal,
                "seconds": c.seconds,
                "failed": c.failed(),
            })),
            "log_dir": self.dir.display().to_string(),
            "logs": self.logs.iter().map(path).collect::<Vec<_>>(),
            "left_out": self.left_out.iter().map(path).collect::<Vec<_>>(),
            "gate": verdict_json(v),
            "programs": summary::to_json(self.sums, v),
        });
        let mut text = serde_json::to_string_pretty(&head).map_err(std::io::Error::from)?;
        // Reopen the object to add the reports, streamed.
        if text.ends_with('}') {
            text.pop();
        }
        let text = text.trim_end().to_string();
        write!(w, "{text},\n  \"report\": ")?;
        match report {
            Some(opts) if !self.logs.is_empty() => {
                crate::run(self.logs, opts, true, w, err);
            }
            _ => write!(w, "null")?,
        }
        writeln!(w, "}}")
    }
}
