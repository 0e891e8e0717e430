//! The command-line arguments of `check`, `baseline`, `history` and `run` (main.rs only names
//! the subcommands).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::{CheckOptions, Format};
use crate::launch::RunOptions;

fn parse_tolerance(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (s, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale <= 100.0 => Ok(v * scale),
        _ => Err(format!("'{s}' is not a tolerance (0.5, or 50%)")),
    }
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale <= 7.0 * 86_400.0 => {
            Ok(Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!("'{s}' is not a duration (30s, 500ms, 10m)")),
    }
}

/// What `check` and `run --check` share.
#[derive(Args, Debug, Clone)]
pub struct GateArgs {
    /// Fail when this expression holds (repeatable), e.g. `hwm > 3`, `wait_total("queue.c:41") > 200ms`,
    /// `lost_parallelism > 30% && threads > 2`. Metrics are listed in docs/ci.md.
    #[arg(long = "fail-if", value_name = "EXPR")]
    pub fail_if: Vec<String>,
    /// Compare with a baseline written by `waitshim-analyze baseline`.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// How much a baseline figure may grow (relative) before it counts as worse.
    #[arg(long, value_name = "FRACTION", default_value = "50%", value_parser = parse_tolerance)]
    pub tolerance: f64,
    /// How failing conditions are written on stdout: text (`FAIL LOG: what [file:line]`),
    /// github (workflow annotations, `::error file=F,line=L::...`) or gitlab (a Code Quality
    /// report, a JSON array).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = |s: &str| s.parse::<Format>())]
    pub format: Format,
    /// Also write a JUnit XML report: a test case per rule of the gate and per process (and,
    /// with `run`, one for the command).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write a SARIF 2.1.0 log for code scanning: each failing condition, and the locks
    /// waited for most, at the line that created the object (and the line that waited).
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
    /// Do not fail on deadlocks and lock-order inversions unless an expression says so.
    #[arg(long)]
    pub no_default_gate: bool,
    /// Do not open the program's binaries (sites are then module offsets).
    #[arg(long)]
    pub no_symbols: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub gate: GateArgs,
    /// Logs to check (each is checked on its own; baselines sum the logs of one program).
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BaselineArgs {
    /// Where to write the baseline (`-` for stdout).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Do not open the program's binaries.
    #[arg(long)]
    pub no_symbols: bool,
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Check the logs with the gate (deadlocks, inversions, --fail-if, --baseline).
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Print one JSON document (schema waitshim-run/1, see analyzer/JSON.md: the command's
    /// status, the summary, the gate, every log's report) instead of text. The command's own
    /// stdout then goes to stderr, so that stdout holds the document alone.
    #[arg(long)]
    pub json: bool,
    /// Print no report (the summary line, the gate's lines and the files asked for only).
    #[arg(long)]
    pub no_report: bool,
    /// After the summary, the full report of every process (by default a run that wrote one
    /// log gets its report, a run of several processes one summary across them).
    #[arg(long)]
    pub each: bool,
    /// Write the report (text, or JSON with --json) to FILE instead of stdout; the command's
    /// output and the gate's annotations stay on stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write each process's report to DIR (created if missing), as LOGNAME.txt (or .json
    /// with --json), beside the summary.
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// The shim to preload. Default: $WAITSHIM_SHIM, else the first libwaitshim.so found beside
    /// waitshim-analyze, in ../lib/waitshim/, ../lib/, `../lib/<multiarch>/waitshim/` (from the
    /// binary's directory, symlinks resolved).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// Directory for the logs (created if missing; default: a new one in $TMPDIR). Logs
    /// already in it are an earlier run's: left out of the report and the gate, and left there.
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Stop the command when it runs longer: SIGTERM to every process of its process group,
    /// SIGKILL 5 s later to those still running. 30s, 500ms, 10m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Also add the run to the history of this job (see `history add`).
    #[arg(long, value_name = "NAME")]
    pub history_job: Option<String>,
    #[command(flatten)]
    pub db: DbArgs,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub cmd: Vec<OsString>,
}

/// Where a history is kept, and how long a PostgreSQL server is waited for.
#[derive(Args, Debug, Clone, Default)]
pub struct DbArgs {
    /// The history database: a SQLite file (created with its directory by the commands that
    /// add runs; it must be a regular file), a postgres://USER:PASSWORD@HOST/DB URL, or a
    /// key=value connection string ('host=H user=U password=P dbname=D'). Passwords are never
    /// printed. Default: $WAITSHIM_HISTORY, else .waitshim/history.sqlite.
    #[arg(long, value_name = "FILE|URL")]
    pub db: Option<String>,
    /// PostgreSQL: give up when the server has not accepted the connection and answered its
    /// start-up within this long (default 10s, or the connection string's connect_timeout).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub connect_timeout: Option<Duration>,
    /// PostgreSQL: give up on a statement the server has not answered within this long; the
    /// server is asked to cancel it at the same limit (default 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub statement_timeout: Option<Duration>,
}

#[derive(Args, Debug, Clone)]
pub struct HistoryCommon {
    /// The job the runs belong to (a CI job's name).
    #[arg(long, value_name = "NAME")]
    pub job: String,
    #[command(flatten)]
    pub db: DbArgs,
}

#[derive(Subcommand, Debug)]
pub enum HistoryCommand {
    /// Store the figures of a run (its logs) in the job's history.
    Add {
        #[command(flatten)]
        common: HistoryCommon,
        /// Do not open the program's binaries.
        #[arg(long)]
        no_symbols: bool,
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
    },
    /// Print every figure stored for the job (the run's, then each creation site's): its value
    /// in each run, and its mean by hour of day and by day of week (UTC). A database that does
    /// not exist is an error: nothing is created.
    Show {
        #[command(flatten)]
        common: HistoryCommon,
        /// Runs shown at most (the latest).
        #[arg(long, default_value_t = 30)]
        last: usize,
    },
    /// Compare a run with the job's history; exit 1 and a notification when a figure moved, 2
    /// when the history or a log cannot be read.
    Check {
        #[command(flatten)]
        common: HistoryCommon,
        /// Notifications as JSON lines on stdout too.
        #[arg(long)]
        json: bool,
        /// Also store this run once compared (without it, a database that does not exist is an
        /// error: nothing is created).
        #[arg(long)]
        add: bool,
        /// Runs of history compared with at most.
        #[arg(long, default_value_t = 20)]
        window: usize,
        /// On a regression, run CMD (with `sh -c`) with the event as JSON on its stdin
        /// (`{"event": "waitshim-regression", "job", "run", "alerts": [...]}`) and
        /// WAITSHIM_EVENT set; it may run 60 s. Its output goes to stderr.
        #[arg(long, value_name = "CMD")]
        notify: Option<String>,
        /// Do not open the program's binaries.
        #[arg(long)]
        no_symbols: bool,
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
    },
}

impl GateArgs {
    fn options(&self, logs: Vec<PathBuf>) -> CheckOptions {
        CheckOptions {
            logs,
            fail_if: self.fail_if.clone(),
            baseline: self.baseline.clone(),
            tolerance: self.tolerance,
            format: self.format,
            default_gate: !self.no_default_gate,
            symbols: !self.no_symbols,
            files: super::outputs::Files {
                junit: self.junit.clone(),
                sarif: self.sarif.clone(),
            },
        }
    }
}

pub fn check(a: CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    super::check(&a.gate.options(a.logs), out, err)
}

pub fn baseline(a: BaselineArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut bad = false;
    let figs = super::figures_of(&a.logs, !a.no_symbols, err, &mut bad);
    if bad {
        return crate::EXIT_BAD_INPUT;
    }
    let text = super::baseline::build(&figs).to_json();
    if a.output.as_os_str() == "-" {
        let _ = out.write_all(text.as_bytes());
        return 0;
    }
    match std::fs::write(&a.output, text) {
        Ok(()) => {
            let _ = writeln!(
                err,
                "waitshim: baseline of {} log(s) written to {}",
                figs.len(),
                a.output.display()
            );
            0
        }
        Err(e) => {
            let _ = writeln!(
                err,
                "waitshim-analyze baseline: {}: {e}",
                a.output.display()
            );
            crate::EXIT_BAD_INPUT
        }
    }
}

pub fn run(a: RunArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let g = a.gate.options(Vec::new());
    let opts = RunOptions {
        cmd: a.cmd,
        shim: a.shim,
        log_dir: a.log_dir,
        timeout: a.timeout,
        json: a.json,
        no_report: a.no_report,
        each: a.each,
        output: a.output,
        report_dir: a.report_dir,
        files: g.files,
        check: a.check,
        fail_if: g.fail_if,
        baseline: g.baseline,
        tolerance: g.tolerance,
        format: g.format,
        default_gate: g.default_gate,
        symbols: g.symbols,
        history_job: a.history_job,
        db: a.db,
    };
    crate::launch::run(&opts, out, err)
}

pub fn history(c: HistoryCommand, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    super::history::command(c, out, err)
}
