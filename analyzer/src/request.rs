//! `waitshim-analyze request PID`: asks a program running under the shim for a data snapshot
//! (the shim flushes its counters and pending records, then writes a `Snapshot` record) and
//! reports on its log as it then stands.
//!
//! The request is the signal the process's shim listens on (`WAITSHIM_SIGNAL` in its
//! environment, default [`waitshim_policy::signal::DEFAULT_REQUEST`]). The signal is sent only
//! when the process has a handler for it: a real-time signal nobody handles would kill it.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use waitshim_format::{snapshot_source, Record, Snapshot};
use waitshim_policy::signal::{self, SignalSpec};

use crate::source::live::Follower;
use crate::top::procfs;
use crate::{model::Model, source, Analysis, Options};

/// Exit code of a request that failed (no such process, no shim, no answer in time).
pub const EXIT_FAILED: i32 = 1;
/// How often the log is looked at while waiting for the answer.
const POLL_EVERY: Duration = Duration::from_millis(20);
/// Each look at the log reads all that is new: nothing is drawn meanwhile.
const READ_BUDGET: u64 = u64::MAX;

#[derive(Debug, Clone)]
pub struct RequestOptions {
    pub pid: i32,
    /// How long to wait for the snapshot.
    pub timeout: Duration,
    /// Print only the one line naming the snapshot, not the report.
    pub quiet: bool,
    pub report: Options,
}

/// Why a request failed; the message is what the user reads.
#[derive(Debug)]
pub struct RequestError(pub String);

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The request signal of process `pid`, from its `WAITSHIM_SIGNAL` (`None` → default).
pub fn request_signal(pid: i32, setting: Option<&str>) -> Result<i32, RequestError> {
    let spec = setting.unwrap_or(signal::DEFAULT_REQUEST);
    match signal::parse(spec, libc::SIGRTMIN(), libc::SIGRTMAX()) {
        Ok(SignalSpec::Number(n)) => Ok(n),
        Ok(SignalSpec::None) => Err(RequestError(format!(
            "data requests are disabled for process {pid} (it runs with WAITSHIM_SIGNAL={spec})"
        ))),
        Err(why) => Err(RequestError(format!(
            "process {pid} has an unusable WAITSHIM_SIGNAL, so its shim takes no requests: {why}"
        ))),
    }
}

/// Whether a snapshot record answers a request sent by `me` with a signal.
fn answers(s: &Snapshot, me: u32) -> bool {
    s.source == snapshot_source::SIGNAL && (s.requester_pid == 0 || s.requester_pid == me)
}

/// A snapshot was written: its record and the log it is in.
pub struct Answer {
    pub snapshot: Snapshot,
    pub log: PathBuf,
    pub follower: Follower,
}

/// Sends the request and waits for the snapshot.
pub fn request(opts: &RequestOptions) -> Result<Answer, RequestError> {
    let pid = opts.pid;
    let err = |e: procfs::FindError| RequestError(e.to_string());
    let maps = procfs::read_maps(pid).map_err(err)?;
    if !procfs::has_shim(&maps) {
        return Err(err(procfs::FindError::NotTraced(pid)));
    }
    let setting =
        procfs::environ_var(pid, waitshim_format::contract::env::SIGNAL).map_err(|e| {
            RequestError(format!(
                "cannot read the environment of process {pid} to learn its request signal: {e}"
            ))
        })?;
    let sig = request_signal(pid, setting.as_deref())?;
    let sig_name = signal::name(sig, libc::SIGRTMIN(), libc::SIGRTMAX());
    let (log, file) = procfs::find_log(pid).map_err(err)?;
    let mut follower = Follower::from_file(file, &log).map_err(|e| RequestError(e.to_string()))?;
    if procfs::catches_signal(pid, sig) == Some(false) {
        return Err(RequestError(format!(
            "process {pid} has no handler for its request signal {sig_name} ({sig}): its shim \
             does not take data requests, and the signal would kill it; not sent"
        )));
    }

    // Everything already in the log is from before the request.
    let mut before = 0u64;
    let mut ended = false;
    loop {
        let p = follower
            .poll(true, READ_BUDGET, |r| match r {
                Record::Snapshot(_) => before += 1,
                Record::RunEnd(_) => ended = true,
                _ => {}
            })
            .map_err(|e| RequestError(format!("{}: read error: {e}", log.display())))?;
        if p.caught_up {
            break;
        }
    }
    if ended {
        return Err(RequestError(format!(
            "process {pid} has already written its exit record to {}; the log is complete",
            log.display()
        )));
    }

    // The shim serves requests on its own thread (named `waitshim`): the signal goes to that
    // thread alone, so that no thread of the program is interrupted. A process without it (no
    // thread created yet) has nobody to serve the request: it is not sent.
    let Some(service) = procfs::thread_named(pid, waitshim_format::contract::SHIM_THREAD_NAME)
    else {
        return Err(RequestError(format!(
            "process {pid} has no waitshim thread yet: the shim serves requests from its own \
             thread, which starts with the program's first pthread_create (the log of a \
             single-threaded program is complete at exit); not sent"
        )));
    };
    // SAFETY: tgkill(2) with ids and a signal number; no memory is involved.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::c_long::from(pid),
            libc::c_long::from(service),
            libc::c_long::from(sig),
        )
    };
    if sent != 0 {
        let e = std::io::Error::last_os_error();
        return Err(RequestError(format!(
            "cannot send {sig_name} to process {pid}: {e}"
        )));
    }
    let me = std::process::id();
    let deadline = Instant::now() + opts.timeout;
    loop {
        let mut found = None;
        let mut ended = false;
        follower
            .poll(true, READ_BUDGET, |r| match r {
                Record::Snapshot(s) if found.is_none() && answers(&s, me) => found = Some(s),
                Record::RunEnd(_) => ended = true,
                _ => {}
            })
            .map_err(|e| RequestError(format!("{}: read error: {e}", log.display())))?;
        if let Some(snapshot) = found {
            return Ok(Answer {
                snapshot,
                log,
                follower,
            });
        }
        if ended || !procfs::maps_file(pid, follower.file(), &log) {
            return Err(RequestError(format!(
                "process {pid} ended before it wrote the snapshot ({} snapshots in its log \
                 before the request)",
                before
            )));
        }
        if Instant::now() >= deadline {
            return Err(RequestError(format!(
                "process {pid} wrote no snapshot to {} within {:.1} s of the request \
                 ({sig_name})",
                log.display(),
                opts.timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// Runs `request`; returns the exit code.
pub fn run(opts: &RequestOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let answer = match request(opts) {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze request: {e}");
            return EXIT_FAILED;
        }
    };
    let _ = writeln!(
        out,
        "snapshot {} of pid {} written to {}",
        answer.snapshot.seq,
        opts.pid,
        answer.log.display()
    );
    if opts.quiet {
        return 0;
    }
    // The report reads the log from the start, through the file already open (the path may not
    // be reachable from here: another mount namespace).
    let file = answer.follower.file();
    let mut model = Model::new();
    let summary = match file
        .try_clone()
        .map_err(|e| e.to_string())
        .and_then(|mut f| {
            use std::io::Seek;
            f.rewind().map_err(|e| e.to_string())?;
            source::read_from(std::io::BufReader::new(f), &answer.log, |r| model.add(r))
                .map_err(|e| e.why)
        }) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(
                err,
                "waitshim-analyze request: {}: {e}",
                answer.log.display()
            );
            return EXIT_FAILED;
        }
    };
    model.finish();
    let analysis = Analysis { summary, model };
    let _ = write!(out, "\n{}", crate::text_report(&analysis, &opts.report));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_signal_follows_waitshim_signal() {
        let rtmax = libc::SIGRTMAX();
        assert_eq!(request_signal(1, None).unwrap(), rtmax - 3);
        assert_eq!(request_signal(1, Some("SIGUSR2")).unwrap(), libc::SIGUSR2);
        let e = request_signal(42, Some("none")).unwrap_err().to_string();
        assert!(
            e.contains("data requests are disabled for process 42"),
            "{e}"
        );
        let e = request_signal(42, Some("SIGSEGV")).unwrap_err().to_string();
        assert!(e.contains("unusable WAITSHIM_SIGNAL"), "{e}");
    }

    #[test]
    fn only_signal_snapshots_for_this_requester_answer() {
        let s = |source, requester_pid| Snapshot {
            seq: 1,
            ns: 1,
            source,
            requester_pid,
        };
        assert!(answers(&s(snapshot_source::SIGNAL, 0), 7));
        assert!(answers(&s(snapshot_source::SIGNAL, 7), 7));
        assert!(!answers(&s(snapshot_source::SIGNAL, 8), 7));
        assert!(!answers(&s(snapshot_source::API, 7), 7));
        assert!(!answers(&s(snapshot_source::PERIODIC, 0), 7));
    }

    #[test]
    fn a_process_without_the_shim_is_refused() {
        let opts = RequestOptions {
            pid: std::process::id() as i32,
            timeout: Duration::from_millis(10),
            quiet: true,
            report: Options::default(),
        };
        let e = request(&opts).err().expect("refused").to_string();
        assert!(e.contains("is not running under waitshim"), "{e}");
    }
}
