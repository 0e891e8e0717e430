use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use waitshim_analyze::gate::cli as gate;
use waitshim_analyze::request::RequestOptions;
use waitshim_analyze::top::{Source, TopOptions};
use waitshim_analyze::{Options, SortKey};

/// Report why the threads of a program waited, from the logs libwaitshim.so wrote.
#[derive(Parser)]
#[command(
    name = "waitshim-analyze",
    version,
    override_usage = "waitshim-analyze [OPTIONS] FILE...\n       \
                      waitshim-analyze top [--pid PID | FILE] [--once] [--interval MS]\n       \
                      waitshim-analyze request PID [--timeout SECS] [--quiet]\n       \
                      waitshim-analyze policy check FILE\n       \
                      waitshim-analyze export --format FORMAT -o OUT FILE...\n       \
                      waitshim-analyze diff BEFORE AFTER [--json] [--html FILE]\n       \
                      waitshim-analyze whatif --hold SITE=FACTOR [--hold ...] [--json] LOG\n       \
                      waitshim-analyze whatif --delayed LOG_D [--delayed ...] [--json] LOG\n       \
                      waitshim-analyze why-no-log -- CMD [ARGS]\n       \
                      waitshim-analyze check LOG... [--fail-if EXPR]... [--baseline FILE] [--format text|github|gitlab] [--junit FILE] [--sarif FILE]\n       \
                      waitshim-analyze baseline -o FILE LOG...\n       \
                      waitshim-analyze history add|show|check --job NAME [--db FILE|postgres://...] [--notify CMD] [LOG...]\n       \
                      waitshim-analyze run [--check] [--fail-if EXPR]... [--json] [--each] [-o FILE] [--shim PATH] [--log-dir DIR] -- CMD [ARGS]",
    // `waitshim-analyze top.log` and `./top` are files; only a first argument that is exactly a
    // command's name is a command: `help` too (`help`, `help run`), so a log named `help` is
    // read as `./help`.
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "A log file named like a command (help, top, request, export, diff, whatif, policy, why-no-log, check, baseline, history, run) is read as a log when written \
                  as a path: ./help, ./top.\n\n\
                  Exit status of check, history check and run: 0 passed; 1 the gate failed; 2 the tool could not judge (no log, no shim, \
                  an input that cannot be read, a bad argument, a selector that matches no object); 3 the command given to run failed (its status is printed); \
                  4 the command and the gate failed."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Order of the lock contention records: wait (the records of the objects threads waited
    /// for longest first), hwm, elapsed, count, lost (the records of the objects whose waits
    /// left most CPU time unused first: lost parallelism, from the sampler; it orders the
    /// objects tables too), or commonality
    /// groups by the outermost /
    /// innermost N frames of the waiter chains (outer:N, inner:N).
    #[arg(long, default_value = "wait", value_parser = |s: &str| s.parse::<SortKey>())]
    sort: SortKey,
    /// Rows shown in each section of the text report: objects waited for, contention records
    /// (or groups), rows of each per-object table, objects in WHERE THREADS WAIT, threads, sums
    /// by creation site. Each cut section ends with a line saying how many more there are.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Print one JSON document (schema waitshim-report/1, see analyzer/JSON.md) instead of text.
    #[arg(long)]
    json: bool,
    /// List every tracked object in the per-object table, not only those with activity (at most
    /// 1000 rows per kind, those with the most wait; --json lists them all).
    #[arg(long)]
    all_objects: bool,
    /// Do not open the program's binaries: show chains as module+offset.
    #[arg(long)]
    no_symbols: bool,
    /// Log files (waitshim.<pid>.log); each is reported in its own section.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Follow a log while its program runs: a table, redrawn every interval, of the objects
    /// threads waited on most in that interval, with the highwater mark and any deadlock.
    /// Keys: q or Ctrl-C quits. Works on a log whose program has exited too.
    Top(TopArgs),
    /// Ask a program running under the shim for a snapshot of its data (the shim writes its
    /// counters and pending records to the log), then print the report of the log as it stands.
    Request(RequestArgs),
    /// Write the run in a format other tools open: pprof (gzipped profile.proto), folded
    /// (stacks weighted by wait ns), flamegraph (SVG), chrome (Trace Event JSON), perfetto
    /// (native protobuf trace) or html (a self-contained page: a timeline per thread and the
    /// objects table). See docs/exports.md.
    Export(ExportArgs),
    /// Compare two runs: objects and wait sites matched by kind, creation site and the
    /// program's own frames (addresses differ), each metric before → after with its change;
    /// new and vanished contention, highwater, deadlocks, inversions, thread states.
    Diff {
        /// The log of the run before the change.
        before: PathBuf,
        /// The log of the run after it.
        after: PathBuf,
        /// Print one JSON document (schema waitshim-diff/1) instead of text.
        #[arg(long)]
        json: bool,
        /// Also write a self-contained HTML page: both runs' thread timelines on one time
        /// axis (zoom and pan move both), the comparison above them.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Objects and wait sites shown in the text.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Do not open the program's binaries (objects then match by module+offset).
        #[arg(long)]
        no_symbols: bool,
    },
    /// Predict the run's time had the critical sections of an object taken FACTOR times as long
    /// (0.5: half, 0: none): an estimate from the run's critical path and what else bounds it
    /// (each lock's sections one after another, the CPUs, each thread's CPU time); the
    /// assumptions are printed with it. Needs per-wait events and the sampler (both on by
    /// default).
    Whatif {
        /// SITE=FACTOR: the objects SITE names (a C-API name, a variable, a creation site
        /// file:line, a file, or the function that created them), and the factor their
        /// critical sections are scaled by. Repeat for several objects.
        #[arg(long = "hold", required_unless_present = "delayed", conflicts_with = "delayed",
              value_name = "SITE=FACTOR",
              value_parser = |s: &str| s.parse::<waitshim_analyze::whatif::HoldChange>())]
        holds: Vec<waitshim_analyze::whatif::HoldChange>,
        /// LOG_D: the log of a run of the same program slowed on purpose (WAITSHIM_DELAY):
        /// check the estimate from LOG against it (measured and predicted run time and slope,
        /// the error in %). Repeat for a least-squares fit over several delays.
        #[arg(long = "delayed", value_name = "LOG_D")]
        delayed: Vec<PathBuf>,
        /// Print one JSON document (schema waitshim-whatif/1) instead of text.
        #[arg(long)]
        json: bool,
        /// Do not open the program's binaries (sites are then module+offset).
        #[arg(long)]
        no_symbols: bool,
        /// The log of the run.
        log: PathBuf,
    },
    /// Collection policies (WAITSHIM_POLICY).
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// A program run under the shim left no log: check, without running it, what would keep the
    /// shim out of CMD or its log from being written (a static, Go or setuid program; LD_PRELOAD
    /// unset, missing or for another machine; WAITSHIM_DISABLE; a log directory that is not
    /// writable), in this environment. Exit status 1 when something was found.
    WhyNoLog {
        /// The command as it was run (the program is looked up in PATH as a shell does);
        /// NAME=VALUE words before it (alone or after `env`) are its environment, over this one's:
        /// `why-no-log -- LD_PRELOAD=/abs/libwaitshim.so ./app`.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Gate a run in CI: exit 0 when it passes, 1 when it fails (deadlocks, lock-order
    /// inversions, --fail-if expressions, a --baseline), 2 when it cannot be judged (a log that
    /// cannot be read, a bad expression, a selector that matches no object). With
    /// $GITHUB_STEP_SUMMARY set, a job summary is appended to that file.
    Check(gate::CheckArgs),
    /// Write a baseline (a diff-friendly JSON summary to commit) of these logs.
    Baseline(gate::BaselineArgs),
    /// A job's history of runs: add a run, show trends, check a run against it.
    #[command(subcommand)]
    History(gate::HistoryCommand),
    /// Run CMD under the shim and report on every log it (and its children) wrote: the report
    /// of a single process, or one summary across several (per program: processes, highwater,
    /// lock wait, deadlocks, inversions, the gate's result; --each adds every process's
    /// report). Exit status: 0 passed, 1 the gate failed (--check), 2 the tool could not judge
    /// (no shim, no log, a command that cannot start), 3 CMD failed (its status is printed,
    /// and in --json), 4 CMD and the gate failed. CMD runs in a process group of its own
    /// (given the terminal when run has it); SIGINT, SIGTERM and SIGHUP sent to run are passed
    /// on to it, and run reports once it ended.
    Run(gate::RunArgs),
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate a policy file offline and explain in words what it will collect.
    Check { file: PathBuf },
}

#[derive(Args)]
struct ExportArgs {
    /// pprof, folded, flamegraph, chrome, perfetto or html.
    #[arg(long, value_name = "FORMAT",
          value_parser = |s: &str| s.parse::<waitshim_analyze::export::Format>())]
    format: waitshim_analyze::export::Format,
    /// Whose call chains the profiles (pprof, folded, flamegraph) show: waiters (where threads
    /// waited) or holders (where the holder released what they waited for).
    #[arg(long, value_name = "SIDE", default_value = "waiters",
          value_parser = |s: &str| s.parse::<waitshim_analyze::export::Side>())]
    side: waitshim_analyze::export::Side,
    /// The file to write (replaced when the export succeeds; `-` is stdout). A failed or
    /// interrupted export removes what it had written (a hidden file beside OUT).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: PathBuf,
    /// Do not open the program's binaries: show chains as module+offset.
    #[arg(long)]
    no_symbols: bool,
    /// perfetto: deflate the packets in batches (Perfetto's compressed_packets, read by its UI
    /// and trace_processor), for a file several times smaller.
    #[arg(long)]
    compress: bool,
    /// Log files; several go into one export.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

#[derive(Args)]
struct TopArgs {
    /// The log to follow (waitshim.<pid>.log).
    #[arg(
        required_unless_present = "pid",
        conflicts_with = "pid",
        value_name = "FILE"
    )]
    file: Option<PathBuf>,
    /// Follow the log of this running process (found through /proc/PID/maps).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pid: Option<i32>,
    /// Print the table once, as plain text, and exit (no terminal control). For a running
    /// program it looks twice, one interval apart, to show what changed in that interval.
    #[arg(long)]
    once: bool,
    /// Milliseconds between refreshes.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(50..=3_600_000))]
    interval: u64,
    /// Do not open the program's binaries: show creation sites as module+offset.
    #[arg(long)]
    no_symbols: bool,
}

#[derive(Args)]
struct RequestArgs {
    /// The process to ask (it must run with LD_PRELOAD=libwaitshim.so).
    #[arg(value_parser = clap::value_parser!(i32).range(1..))]
    pid: i32,
    /// Seconds to wait for the snapshot before giving up (exit status 1).
    #[arg(long, value_name = "SECS", default_value_t = 5.0,
          value_parser = parse_seconds)]
    timeout: f64,
    /// Print only the line naming the snapshot, not the report.
    #[arg(long)]
    quiet: bool,
    /// Do not open the program's binaries: show chains as module+offset.
    #[arg(long)]
    no_symbols: bool,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a number of seconds between 0 and 86400"
        )),
    }
}

/// The name the man pages and completions give the program.
const BIN: &str = "waitshim-analyze";

/// `waitshim-analyze --generate-files DIR`, taken before the command line is parsed: writes
/// the man pages (DIR/man/: one per visible command, `waitshim-analyze-run.1`, beside the
/// program's own) and the completions of bash, zsh and fish (DIR/completions/:
/// `waitshim-analyze.bash`, `_waitshim-analyze`, `waitshim-analyze.fish`), made from the
/// definition of the command line above; scripts/deb.sh packages them. Not a subcommand:
/// clap_complete offers hidden subcommands too, and an option-like word cannot be a log's
/// name given as it is.
const GENERATE_FILES: &str = "--generate-files";

fn generate_files(dir: &Path, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let write_all = || -> std::io::Result<Vec<PathBuf>> {
        let man = dir.join("man");
        let completions = dir.join("completions");
        std::fs::create_dir_all(&man)?;
        std::fs::create_dir_all(&completions)?;
        // `help` has no page of its own.
        clap_mangen::generate_to(Cli::command(), &man)?;
        let mut written: Vec<PathBuf> = std::fs::read_dir(&man)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        written.sort();
        let mut cmd = Cli::command();
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            written.push(clap_complete::generate_to(
                shell,
                &mut cmd,
                BIN,
                &completions,
            )?);
        }
        Ok(written)
    };
    match write_all() {
        Ok(files) => {
            for f in files {
                let _ = writeln!(out, "{}", f.display());
            }
            0
        }
        Err(e) => {
            let _ = writeln!(
                err,
                "waitshim-analyze {GENERATE_FILES}: {}: {e}",
                dir.display()
            );
            waitshim_analyze::exit::NOT_JUDGED
        }
    }
}

fn main() {
    waitshim_analyze::ignore_file_size_signal();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == GENERATE_FILES) {
        let err = &mut std::io::stderr().lock();
        let code = match &args[2..] {
            [dir] => generate_files(Path::new(dir), &mut std::io::stdout().lock(), err),
            _ => {
                let _ = writeln!(err, "usage: waitshim-analyze {GENERATE_FILES} DIR");
                waitshim_analyze::exit::NOT_JUDGED
            }
        };
        std::process::exit(code);
    }
    let cli = Cli::parse();
    let out = &mut std::io::stdout().lock();
    // Messages name files and programs: guarded as every plain-text output is.
    let err = &mut waitshim_analyze::plain::Guard::new(std::io::stderr().lock());
    let code = match cli.command {
        Some(Command::Top(t)) => {
            let source = match (t.pid, t.file) {
                (Some(pid), _) => Source::Pid(pid),
                (None, Some(file)) => Source::File(file),
                (None, None) => unreachable!("clap requires FILE or --pid"),
            };
            let opts = TopOptions {
                source,
                interval: Duration::from_millis(t.interval),
                once: t.once,
                symbols: !t.no_symbols,
            };
            waitshim_analyze::top::run(&opts, out, err)
        }
        Some(Command::Request(r)) => {
            let opts = RequestOptions {
                pid: r.pid,
                timeout: Duration::from_secs_f64(r.timeout),
                quiet: r.quiet,
                report: Options {
                    symbols: !r.no_symbols,
                    ..Options::default()
                },
            };
            waitshim_analyze::request::run(&opts, out, err)
        }
        Some(Command::Export(x)) => {
            let opts = waitshim_analyze::export::ExportOptions {
                format: x.format,
                side: x.side,
                output: x.output,
                symbols: !x.no_symbols,
                compress: x.compress,
            };
            waitshim_analyze::export::run(&x.files, &opts, err)
        }
        Some(Command::Diff {
            before,
            after,
            json,
            html,
            top,
            no_symbols,
        }) => {
            let opts = Options {
                top,
                symbols: !no_symbols,
                ..Options::default()
            };
            waitshim_analyze::diff::run(&before, &after, json, html.as_deref(), &opts, out, err)
        }
        Some(Command::Whatif {
            holds,
            delayed,
            json,
            no_symbols,
            log,
        }) => {
            let opts = waitshim_analyze::whatif::WhatIfOptions {
                holds,
                delayed,
                json,
                symbols: !no_symbols,
            };
            waitshim_analyze::whatif::run(&log, &opts, out, err)
        }
        Some(Command::Policy(PolicyCommand::Check { file })) => {
            waitshim_analyze::policycheck::run(&file, out, err)
        }
        Some(Command::WhyNoLog { cmd }) => waitshim_analyze::whynolog::run(&cmd, out, err),
        Some(Command::Check(a)) => gate::check(a, out, err),
        Some(Command::Baseline(a)) => gate::baseline(a, out, err),
        Some(Command::History(c)) => gate::history(c, out, err),
        Some(Command::Run(a)) => gate::run(a, out, err),
        None => {
            let opts = Options {
                sort: cli.sort,
                top: cli.top,
                all_objects: cli.all_objects,
                symbols: !cli.no_symbols,
                ..Options::default()
            };
            waitshim_analyze::run(&cli.files, &opts, cli.json, out, err)
        }
    };
    std::process::exit(code);
}
