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

/// Why a log has no end record, as far as can be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoEnd {
    /// Process `pid` still has the log mapped: it is running.
    Running(u32),
    /// The program is a Go program: it ended (most likely) through Go's raw `exit_group`.
    GoProgram(String),
    /// No exit handler ran: a raw `exit_group`, or a signal that cannot be caught.
    NoExitHandlers,
}

impl NoEnd {
    /// Finds why the log of `summary` has no end record; `None` when it has one (or is not
    /// the log of a run). `open_binaries`: whether the program may be opened (not under
    /// `--no-symbols`).
    pub fn find(summary: &ReadSummary, model: &Model, open_binaries: bool) -> Option<NoEnd> {
        if model.run_end.is_some() {
            return None;
        }
        let run = model.run.as_ref()?;
        if let Ok(file) = File::open(&summary.path) {
            let pid = run.pid as i32;
            if pid > 0 && crate::top::procfs::maps_file(pid, &file, &summary.path) {
                return Some(NoEnd::Running(run.pid));
            }
        }
        if open_binaries && is_go_program(Path::new(&run.exe)) {
            return Some(NoEnd::GoProgram(run.exe.clone()));
        }
        Some(NoEnd::NoExitHandlers)
    }

    /// The run summary's `ended:` line, after the label.
    pub fn ended_line(&self) -> String {
        match self {
            NoEnd::Running(pid) => format!("no exit record yet: process {pid} is still running"),
            NoEnd::GoProgram(_) => "no exit record: a Go program, ended by its runtime's raw \
                                    exit_group (no exit handler runs), or killed"
                .to_string(),
            NoEnd::NoExitHandlers => "no exit record: the process ended without running its exit \
                                      handlers (a raw exit_group system call, or killed by a \
                                      signal no handler sees: SIGKILL, or a seccomp filter's \
                                      kill)"
                .to_string(),
        }
    }

    /// The warning's explanation (after what the log's tail looks like).
    pub fn warning(&self) -> String {
        match self {
            NoEnd::Running(pid) => format!(
                "process {pid} is still running and writing this log; this report shows what it \
                 has written so far"
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
