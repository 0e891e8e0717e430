//! `waitshim-analyze run -- CMD ARGS...`: runs a command under the shim, with its logs in a
//! directory of their own, then reports on every log this run wrote there (the command's, and
//! those of the processes it forked or exec'd, each named by its pid; logs already in a
//! `--log-dir` are left out), and exits with the command's status, or with the gate's (see
//! [`crate::gate`]) when asked to check.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::gate::{self, Format};
use crate::procgroup::{Caught, Group};
use crate::Options;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub cmd: Vec<OsString>,
    /// The shim to preload; by default `libwaitshim.so` beside this executable.
    pub shim: Option<PathBuf>,
    /// Where the logs go; by default a new directory under the temporary directory.
    pub log_dir: Option<PathBuf>,
    /// Stop the command's processes (SIGTERM to its process group, then SIGKILL 5 s later)
    /// when it runs longer.
    pub timeout: Option<Duration>,
    pub json: bool,
    /// Print no report (the gate's lines and the log directory only).
    pub no_report: bool,
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

/// The shim installed beside the running analyzer.
pub fn default_shim() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("libwaitshim.so"))
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

/// Runs the command in a process group of its own (see [`crate::procgroup`]); `Err` is a
/// message for an exit status of 2.
fn launch(opts: &RunOptions, dir: &Path, shim: &Path, err: &mut dyn Write) -> Result<i32, String> {
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
    // SIGINT, SIGTERM and SIGHUP sent to `run` (a CI runner cancelling the job, Ctrl-C when the
    // command does not have the terminal) go to the command's processes; `run` stays to report
    // on what they logged. Caught before the start, so that none is missed.
    let _caught = Caught::install();
    let group = Group::spawn(&mut cmd)
        .map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
    let status = group
        .wait(opts.timeout, &program.to_string_lossy(), err)
        .map_err(|e| format!("waiting for the command: {e}"))?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
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
    let exprs = match gate::parse_all(&opts.fail_if) {
        Ok(e) => e,
        Err(msg) => {
            let _ = writeln!(err, "waitshim-analyze run: {msg}");
            return crate::EXIT_BAD_INPUT;
        }
    };
    let base = match &opts.baseline {
        Some(p) => match gate::baseline::Baseline::load(p) {
            Ok(b) => Some(b),
            Err(e) => {
                let _ = writeln!(err, "waitshim-analyze run: {e}");
                return crate::EXIT_BAD_INPUT;
            }
        },
        None => None,
    };
    let Some(shim) = opts.shim.clone().or_else(default_shim) else {
        let _ = writeln!(
            err,
            "waitshim-analyze run: cannot tell where libwaitshim.so is: give --shim PATH"
        );
        return crate::EXIT_BAD_INPUT;
    };
    if !shim.is_file() {
        let _ = writeln!(
            err,
            "waitshim-analyze run: no shim at {} (install libwaitshim.so beside waitshim-analyze, or give --shim PATH)",
            shim.display()
        );
        return crate::EXIT_BAD_INPUT;
    }
    // The loader wants an absolute path, or it searches the library path for the name.
    let shim = std::fs::canonicalize(&shim).unwrap_or(shim);
    let dir = match &opts.log_dir {
        Some(d) => std::fs::create_dir_all(d).map(|()| d.clone()),
        None => fresh_dir(),
    };
    let dir = match dir {
        Ok(d) => std::fs::canonicalize(&d).unwrap_or(d),
        Err(e) => {
            let _ = writeln!(
                err,
                "waitshim-analyze run: cannot create the log directory: {e}"
            );
            return crate::EXIT_BAD_INPUT;
        }
    };
    let _ = writeln!(err, "waitshim: logs in {}", dir.display());
    // The shim never replaces a file: the logs of this run are those that were not there.
    let earlier = earlier_logs(&dir);
    let status = match launch(opts, &dir, &shim, err) {
        Ok(s) => s,
        Err(msg) => {
            let _ = writeln!(err, "waitshim-analyze run: {msg}");
            if opts.log_dir.is_none() {
                // The directory made for this run, empty: nothing ran.
                let _ = std::fs::remove_dir(&dir);
            }
            return crate::EXIT_BAD_INPUT;
        }
    };
    let (logs, left_out): (Vec<PathBuf>, Vec<PathBuf>) = logs_in(&dir).into_iter().partition(|p| {
        std::fs::symlink_metadata(p).is_ok_and(|m| !earlier.contains(&(m.dev(), m.ino())))
    });
    let _ = writeln!(
        err,
        "waitshim: the command ended with status {status}; {} log(s) in {}",
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
    if logs.is_empty() {
        let _ = writeln!(
            err,
            "waitshim: no log was written: `waitshim-analyze why-no-log -- CMD` tells what kept the shim out"
        );
    }
    let report_opts = Options {
        symbols: opts.symbols,
        ..Options::default()
    };
    let mut code = status;
    if !opts.no_report && !logs.is_empty() {
        let rc = crate::run(&logs, &report_opts, opts.json, out, err);
        if rc != 0 && opts.check {
            code = rc;
        }
    }
    if let Some(job) = &opts.history_job {
        if !logs.is_empty() {
            let rc = gate::history::add(job, &opts.db, &logs, opts.symbols, err);
            if rc != 0 && opts.check {
                code = rc;
            }
        }
    }
    if opts.check {
        let mut bad = false;
        let figs = gate::figures_of(&logs, opts.symbols, err, &mut bad);
        let failures = gate::evaluate(
            &figs,
            opts.default_gate,
            &exprs,
            base.as_ref(),
            opts.tolerance,
        );
        // The report may be JSON on stdout: the gate's lines then go to stderr.
        if opts.json && opts.format == Format::Text {
            gate::write_failures(opts.format, &failures, err);
        } else {
            gate::write_failures(opts.format, &failures, out);
        }
        let _ = writeln!(
            err,
            "waitshim check: {} ({} failing over {} log(s))",
            if bad || logs.is_empty() {
                "not decided"
            } else if failures.is_empty() {
                "passed"
            } else {
                "failed"
            },
            failures.len(),
            figs.len()
        );
        if bad || logs.is_empty() {
            return crate::EXIT_BAD_INPUT;
        }
        if !failures.is_empty() {
            return gate::EXIT_FAILED;
        }
    }
    code
}
