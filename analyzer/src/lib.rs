//! waitshim-analyze: reads the logs libwaitshim.so writes and reports why the program's threads
//! waited. Stages, in data-flow order: [`source`] → [`pass`] (one read into the [`model`] and
//! the sinks beside it) → [`symbolize`] → [`report`] ([`lockorder`] finds the potential deadlocks
//! the reports show; the model keeps its largest collections in [`table`]s). [`top`] follows a log live, [`request`] asks a running program
//! for a snapshot of its data. Logs come from anywhere: any input gives an error or a report,
//! in memory that grows with the run's objects, threads and chains, never with its events.

pub mod critical;
pub mod crossproc;
pub mod diff;
pub mod ending;
pub mod export;
pub mod findings;
pub mod gate;
pub mod histogram;
pub mod launch;
pub mod lockorder;
pub mod model;
pub mod pass;
pub mod plain;
pub mod policycheck;
pub mod procgroup;
pub mod progress;
pub mod report;
pub mod request;
pub mod shimpath;
pub mod source;
pub mod states;
pub mod symbolize;
pub mod table;
pub mod top;
pub mod whatif;
pub mod whynolog;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use report::{Options, SortKey};

/// Whether SIGXFSZ had its default action when the analyzer started.
static FILE_SIZE_SIGNAL_WAS_DEFAULT: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

/// Ignores SIGXFSZ: a write past the file size limit (`ulimit -f`) then fails with EFBIG, which
/// each command reports (removing what it left half-written), instead of killing the analyzer.
/// The command `run` starts gets the disposition back ([`file_size_signal_was_default`]).
pub fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN, at start-up.
    let old = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    FILE_SIZE_SIGNAL_WAS_DEFAULT.store(old == libc::SIG_DFL, std::sync::atomic::Ordering::SeqCst);
}

/// Whether SIGXFSZ had its default action before [`ignore_file_size_signal`].
pub fn file_size_signal_was_default() -> bool {
    FILE_SIZE_SIGNAL_WAS_DEFAULT.load(std::sync::atomic::Ordering::SeqCst)
}

/// Exit code when an input could not be read as a log: the tool could not judge
/// ([`exit::NOT_JUDGED`]).
pub const EXIT_BAD_INPUT: i32 = exit::NOT_JUDGED;

/// The exit codes of the CI commands (`check`, `run`, `history check`), one per outcome, so
/// that a job tells "the tests failed" from "the gate failed" from "the tool could not judge".
pub mod exit {
    /// Everything asked for passed.
    pub const PASSED: i32 = 0;
    /// The gate failed (a condition held, something got worse, a regression); the command,
    /// when there was one, succeeded.
    pub const GATE_FAILED: i32 = 1;
    /// The tool could not judge: no log, no shim, an input that cannot be read (a log, a
    /// baseline, a history database), a bad argument or expression, a command that could not
    /// be started. Wins over the others: what was asked could not be done.
    pub const NOT_JUDGED: i32 = 2;
    /// `run`: the command failed (a status other than 0, or a signal); the gate, when asked,
    /// passed. The command's own status is printed, and in `--json`.
    pub const COMMAND_FAILED: i32 = 3;
    /// `run --check`: both the command and the gate failed.
    pub const BOTH_FAILED: i32 = 4;

    /// The code of a run: `not_judged` wins, then the two failures combine.
    pub fn combine(command_failed: bool, gate_failed: bool, not_judged: bool) -> i32 {
        match (not_judged, command_failed, gate_failed) {
            (true, _, _) => NOT_JUDGED,
            (false, true, true) => BOTH_FAILED,
            (false, true, false) => COMMAND_FAILED,
            (false, false, true) => GATE_FAILED,
            (false, false, false) => PASSED,
        }
    }

    /// What a code means, in the words `--help` and docs/ci.md use.
    pub fn meaning(code: i32) -> &'static str {
        match code {
            PASSED => "passed",
            GATE_FAILED => "the gate failed",
            NOT_JUDGED => "the tool could not judge",
            COMMAND_FAILED => "the command failed",
            BOTH_FAILED => "the command and the gate failed",
            _ => "unknown",
        }
    }
}

/// One log read into a model, with what its critical path needs, gathered in the same read.
pub struct Analysis {
    pub summary: source::ReadSummary,
    pub model: model::Model,
    /// None: the critical path reads the log again when asked for.
    pub walk: Option<critical::Input>,
}

impl Analysis {
    /// A model made elsewhere (a live program's snapshot): the critical path, if asked for,
    /// reads the log again.
    pub fn of(summary: source::ReadSummary, model: model::Model) -> Analysis {
        Analysis {
            summary,
            model,
            walk: None,
        }
    }
}

/// Reads and models the log at `path`, in one read ([`pass`]).
pub fn analyze(path: &Path) -> Result<Analysis, source::ReadError> {
    let mut walk = critical::Input::streaming();
    let (summary, model) = pass::read(path, &mut [&mut walk])?;
    Ok(Analysis {
        summary,
        model,
        walk: Some(walk),
    })
}

/// Reads and models a log from any byte stream (`name` labels it in the report).
pub fn analyze_bytes(bytes: &[u8], name: &Path) -> Result<Analysis, source::ReadError> {
    let mut walk = critical::Input::streaming();
    let (summary, model) = pass::read_from(bytes, name, &mut [&mut walk])?;
    Ok(Analysis {
        summary,
        model,
        walk: Some(walk),
    })
}

/// The text report of one analysed log, guarded ([`plain::Guard`]) against what the names the
/// program chose might do to a terminal or a CI log.
pub fn text_report(a: &Analysis, opts: &Options) -> String {
    let mut ctx = report::Ctx::new(a, opts);
    plain::guarded(&report::text::render(&mut ctx))
}

/// The JSON report of one analysed log (one element of the document's `logs`), as a value: for
/// tests and small logs (`run` writes reports as they are made).
pub fn json_report(a: &Analysis, opts: &Options) -> serde_json::Value {
    report::json::render(report::Ctx::new(a, opts))
}

/// Reports on every file, each in its own section (or element of `logs`), one file at a time so
/// that memory holds one model at most. Files that are not logs are reported on `err`; the return
/// value is the process exit code.
pub fn run(
    paths: &[PathBuf],
    opts: &Options,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut code = 0;
    let mut with_cross;
    let mut opts = opts;
    if paths.len() > 1 {
        // A light first pass: the waits each log ended with, for deadlocks across processes.
        let waits: Vec<crossproc::Wait> = paths
            .iter()
            .filter_map(|p| crossproc::open_waits(p))
            .flatten()
            .collect();
        let cycles = crossproc::cycles(&waits);
        if !cycles.is_empty() {
            with_cross = opts.clone();
            with_cross.cross_process = cycles;
            opts = &with_cross;
        }
    }
    let mut analyses = paths.iter().filter_map(|path| match analyze(path) {
        Ok(a) => Some(a),
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze: {e}");
            if std::fs::symlink_metadata(path).is_err() {
                let _ = writeln!(err, "  {}", whynolog::HINT);
                let similar = whynolog::similar_logs(path, 5);
                if !similar.is_empty() {
                    let names: Vec<String> =
                        similar.iter().map(|p| p.display().to_string()).collect();
                    let _ = writeln!(err, "  logs there, newest first: {}", names.join(", "));
                }
            }
            code = EXIT_BAD_INPUT;
            None
        }
    });
    if json {
        // A reader that went away (`| head`) ends the report, not the exit status.
        let _ = report::json::write_document(out, &mut analyses, opts);
    } else {
        let mut first = true;
        for a in &mut analyses {
            let sep = if first { "" } else { "\n\n" };
            first = false;
            if write!(out, "{sep}{}", text_report(&a, opts)).is_err() {
                break;
            }
        }
    }
    drop(analyses);
    code
}
