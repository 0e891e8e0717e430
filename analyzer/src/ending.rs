//! What can be said about a log that has no end record. The shim writes one when the program
//! calls `exit` (or returns from `main`), `_exit`, or `exec`; a log without one belongs to a
//! program that is still running, or that ended without any of those: by a raw `exit_group`
//! system call (Go's runtime ends every Go program that way, cgo included) or by a signal no
//! handler can see (SIGKILL). The two cannot be told apart from the log, so the report says
//! both, unless the process is found still writing the log or the program is a Go program.

use std::fs::File;
use std::path::Path;

use crate::model::Model;
use crate::source::ReadSummary;
use crate::top::procfs::{self, Writes};

/// Why a log has no end record, as far as can be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoEnd {
    /// Process `pid` still has the log mapped (or open): it is running. `log_pid` is the pid
    /// the log gives it, another one when it runs in a PID namespace of its own.
    Running { pid: u32, log_pid: u32 },
    /// Process `pid` exists but cannot be inspected from here (another user's, or not
    /// dumpable), and nothing rules out that it is the program: whether the program still runs
    /// is not known. `comm`: the process's name, when it could be read.
    Unverified { pid: u32, comm: Option<String> },
    /// The program is a Go program: it ended (most likely) through Go's raw `exit_group`.
    GoProgram(String),
    /// No exit handler ran: a raw `exit_group`, or a signal that cannot be caught.
    NoExitHandlers,
}

/// How the run ended if it did end without an end record.
const WITHOUT_HANDLERS: &str = "the process ended without running its exit handlers (a raw \
                                exit_group system call, or killed by a signal no handler sees: \
                                SIGKILL, or a seccomp filter's kill)";

impl NoEnd {
    /// Finds why the log of `summary` has no end record; `None` when it has one (or is not
    /// the log of a run). `open_binaries`: whether the program may be opened (not under
    /// `--no-symbols`).
    pub fn find(summary: &ReadSummary, model: &Model, open_binaries: bool) -> Option<NoEnd> {
        if model.run_end.is_some() {
            return None;
        }
        let run = model.run.as_ref()?;
        let mut unverified = None;
        if let Ok(file) = File::open(&summary.path) {
            let names = program_names(model);
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let pid = run.pid as i32;
            let running = |pid: u32| NoEnd::Running {
                pid,
                log_pid: run.pid,
            };
            if pid > 0 {
                match procfs::writes_log(pid, &file, &summary.path, Some((run.mono_ns, &names))) {
                    Writes::Yes => return Some(running(run.pid)),
                    Writes::No => {}
                    Writes::Unknown(comm) => {
                        unverified = Some(NoEnd::Unverified { pid: run.pid, comm })
                    }
                }
            }
            // The pid in the log may be the program's in a PID namespace of its own.
            if let Some(other) = procfs::find_writer(&file, &summary.path, pid, run.mono_ns, &names)
            {
                return Some(running(other as u32));
            }
        }
        if unverified.is_some() {
            return unverified;
        }
        if open_binaries && is_go_program(Path::new(&run.exe)) {
            return Some(NoEnd::GoProgram(run.exe.clone()));
        }
        Some(NoEnd::NoExitHandlers)
    }

    /// The run summary's `ended:` line, after the label.
    pub fn ended_line(&self) -> String {
        match self {
            NoEnd::Running { pid, log_pid } if pid != log_pid => format!(
                "no exit record yet: process {pid} is still running (pid {log_pid} in its own \
                 PID namespace)"
            ),
            NoEnd::Running { pid, .. } => {
                format!("no exit record yet: process {pid} is still running")
            }
            NoEnd::Unverified { pid, comm } => format!(
                "no exit record: process {pid}{} cannot be inspected from here (another user's, \
                 or not dumpable), so whether it is this program still running is not known; if \
                 the program ended, {WITHOUT_HANDLERS}",
                comm_text(comm)
            ),
            NoEnd::GoProgram(_) => "no exit record: a Go program, ended by its runtime's raw \
                                    exit_group (no exit handler runs), or killed"
                .to_string(),
            NoEnd::NoExitHandlers => format!("no exit record: {WITHOUT_HANDLERS}"),
        }
    }

    /// The warning's explanation (after what the log's tail looks like).
    pub fn warning(&self) -> String {
        match self {
            NoEnd::Running { pid, .. } => format!(
                "process {pid} is still running and writing this log; this report shows what it \
                 has written so far"
            ),
            NoEnd::Unverified { pid, comm } => format!(
                "process {pid}{} exists but its mappings cannot be read from here (another \
                 user's process, or one made not dumpable), so it cannot be told whether it is \
                 this program still writing the log or another process that took its pid; if \
                 the program ended, it ran no exit handler; this report shows what the shim's \
                 last flush wrote",
                comm_text(comm)
            ),
            NoEnd::GoProgram(exe) => format!(
                "{exe} is a Go program: Go's runtime ends the process with a raw exit_group \
                 system call, which runs no exit handler and no library destructor, so a Go \
                 program's log never gets an end record (it may also have been killed); this \
                 report shows what the shim's last flush wrote"
            ),
            NoEnd::NoExitHandlers => "the process ended without running its exit handlers: it \
                                      made a raw exit_group system call that bypasses libc's \
                                      exit (as Go programs do, cgo included), or it was killed \
                                      by a signal that cannot be caught (SIGKILL: kill -9, the \
                                      OOM killer, a timeout; or the SIGSYS of a seccomp filter \
                                      that kills the process); this report shows what the \
                                      shim's last flush wrote"
                .to_string(),
        }
    }
}

/// ` ("name")`, a process's name as the report shows a name the program chose.
fn comm_text(comm: &Option<String>) -> String {
    comm.as_ref()
        .map_or_else(String::new, |c| format!(" ({})", crate::plain::quoted(c)))
}

/// The names the program's process may go by (its `comm`): its executable's and its first
/// argument's base names, the names its main thread was given, the program it exec'd.
fn program_names(model: &Model) -> Vec<String> {
    let mut names = Vec::new();
    let base = |p: &str| crate::symbolize::basename(p).to_string();
    if let Some(run) = &model.run {
        names.push(base(&run.exe));
        if let Some(arg0) = run.cmdline.first() {
            names.push(base(arg0));
        }
    }
    if let Some(x) = &model.exec {
        names.push(base(&x.path));
    }
    names.extend(
        model
            .threads
            .values()
            .filter(|t| t.is_main)
            .filter_map(|t| t.name.clone()),
    );
    names.retain(|n| !n.is_empty());
    names.dedup();
    names
}

/// Whether the ELF file at `path` has the sections of a Go program. Only a regular file is
/// opened, and only its headers and section names are read.
fn is_go_program(path: &Path) -> bool {
    use object::{Object, ObjectSection};
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    let Ok(file) = File::open(path) else {
        return false;
    };
    let cache = object::read::ReadCache::new(file);
    let Ok(obj) = object::File::parse(&cache) else {
        return false;
    };
    obj.sections().any(|s| {
        matches!(
            s.name(),
            Ok(".go.buildinfo" | ".note.go.buildid" | ".gopclntab")
        )
    })
}

/// `SIGTERM` for 15, and so on for the signals the shim watches; `signal N` for others.
pub fn signal_name(n: i64) -> String {
    let name = match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => return format!("signal {n}"),
    };
    format!("signal {n} ({name})")
}
