//! `waitshim-analyze request PID`: asks a program running under the shim for a data snapshot
//! (the shim flushes its counters and pending records, then writes a `Snapshot` record) and
//! reports on its log as it then stands.
//!
//! The request goes through the log's mailbox, a word in its file header
//! (`waitshim_format::contract::mailbox`): this command adds to it and wakes the futex the
//! shim's thread sleeps on. No signal is sent, so none of the program's signals, masks or
//! handlers is touched. It needs write access to the log (the same user as the program, or
//! root: what a signal would need too).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use waitshim_format::contract::mailbox;
use waitshim_format::{snapshot_source, Record, Snapshot};

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

/// Whether a snapshot record answers a request: one through the mailbox, or one sent by `me`
/// with the request signal (a shim that takes signals too).
fn answers(s: &Snapshot, me: u32) -> bool {
    s.source == snapshot_source::REQUEST
        || (s.source == snapshot_source::SIGNAL && (s.requester_pid == 0 || s.requester_pid == me))
}

/// Puts a request in the mailbox of the log at `path` and wakes the shim's thread.
fn post_request(path: &std::path::Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open {} to post the request: {e}", path.display()))?;
    let len = waitshim_format::FILE_HEADER_LEN;
    // SAFETY: a shared read-write mapping of the first page of the log, unmapped below; the
    // kernel checks the descriptor's access.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(format!(
            "cannot map {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the header's 4-byte aligned mailbox word lies in the mapping; the shim only ever
    // accesses it atomically.
    let word = unsafe {
        std::sync::atomic::AtomicU32::from_ptr(base.cast::<u8>().add(mailbox::OFFSET).cast())
    };
    word.fetch_add(mailbox::REQUEST, std::sync::atomic::Ordering::AcqRel);
    // SAFETY: FUTEX_WAKE (shared: the shim's thread waits on the same file page) on our mapping
    // of the word; then our mapping goes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
        );
        libc::munmap(base, len);
    }
    Ok(())
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
    let (log, file) = procfs::find_log(pid).map_err(err)?;
    let mut follower = Follower::from_file(file, &log).map_err(|e| RequestError(e.to_string()))?;

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

    // The shim serves requests on its own thread (named `waitshim`). A process without it (no
    // thread created yet) has nobody to serve the request.
    if procfs::thread_named(pid, waitshim_format::contract::SHIM_THREAD_NAME).is_none() {
        return Err(RequestError(format!(
            "process {pid} has no waitshim thread: the shim serves requests from its own \
             thread, which starts with the program's first pthread_create, and ends if the \
             program runs out of tasks (the log of a single-threaded program is complete at \
             exit); not sent"
        )));
    }
    post_request(&log).map_err(RequestError)?;
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
                "process {pid} wrote no snapshot to {} within {:.1} s of the request",
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
    let analysis = Analysis::of(summary, model);
    let _ = write!(out, "\n{}", crate::text_report(&analysis, &opts.report));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailbox_snapshots_and_signal_snapshots_for_this_requester_answer() {
        let s = |source, requester_pid| Snapshot {
            seq: 1,
            ns: 1,
            source,
            requester_pid,
        };
        assert!(answers(&s(snapshot_source::REQUEST, 0), 7));
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
