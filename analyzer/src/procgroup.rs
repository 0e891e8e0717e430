//! The command `run` starts, in a process group of its own: a timeout, or a signal `run`
//! receives, then reaches every process the command started, not only the first. When `run`
//! holds the terminal, the command's group is given it, so that the command reads it, and
//! Ctrl-C and Ctrl-Z reach it, as they would without `run`; a command stopped from the terminal
//! stops `run` too, and continues with it.

use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The signals `run` passes on to the command's processes.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
/// After the timeout's SIGTERM, how long the command's processes have before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);
/// How often the command is looked at while it runs.
const POLL: Duration = Duration::from_millis(20);

/// The last forwarded signal received and not yet passed on (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// [`FORWARDED`] caught for as long as this lives, then given back their dispositions.
pub struct Caught {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Caught {
    /// Catches each of [`FORWARDED`] that is not ignored: an ignored signal stays ignored, for
    /// `run` and for the command (which inherits it), as without `run`. A caught one is back to
    /// its default in the command after exec.
    pub fn install() -> Caught {
        let mut old = Vec::new();
        for sig in FORWARDED {
            // SAFETY: sigaction on zeroed structs; the handler only stores to an atomic, which
            // is async-signal-safe.
            unsafe {
                let mut cur: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut cur) != 0
                    || cur.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) == 0 {
                    old.push((sig, cur));
                }
            }
        }
        Caught { old }
    }

    /// The signal received since the last look, if any.
    fn take() -> Option<libc::c_int> {
        match RECEIVED.swap(0, Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }
}

impl Drop for Caught {
    fn drop(&mut self) {
        for (sig, old) in &self.old {
            // SAFETY: restoring a disposition sigaction returned.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

/// A signal's name, for messages.
pub fn signal_name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGFPE => "SIGFPE".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGXFSZ => "SIGXFSZ".into(),
        libc::SIGXCPU => "SIGXCPU".into(),
        s => format!("signal {s}"),
    }
}

/// The first of descriptors 0, 1 and 2 that is a terminal whose foreground process group is
/// `run`'s: the terminal to hand to the command.
fn foreground_terminal() -> Option<libc::c_int> {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read the state of descriptors and processes.
    (0..3).find(|&fd| unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == libc::getpgrp() })
}

/// Makes `pgid` the terminal `fd`'s foreground process group, with SIGTTOU blocked (a
/// background process may then do it).
fn give_terminal(fd: libc::c_int, pgid: libc::pid_t) {
    // SAFETY: signal mask calls on local sets, and tcsetpgrp, all async-signal-safe (this also
    // runs between fork and exec).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        libc::tcsetpgrp(fd, pgid);
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// The command, running in its own process group (its id is the command's pid).
pub struct Group {
    child: Child,
    pgid: libc::pid_t,
    /// The terminal the command's group was given, to be taken back.
    terminal: Option<libc::c_int>,
}

impl Group {
    /// Starts `cmd` as the leader of a new process group, with the terminal when `run` has it.
    pub fn spawn(cmd: &mut Command) -> io::Result<Group> {
        let terminal = foreground_terminal();
        // The analyzer ignores SIGXFSZ; the command gets the disposition `run` was given.
        let file_size_default = crate::file_size_signal_was_default();
        // SAFETY: between fork and exec the closure calls only async-signal-safe functions
        // (setpgid, getpid, sigprocmask, tcsetpgrp, sigaction).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(fd) = terminal {
                    give_terminal(fd, libc::getpid());
                }
                if file_size_default {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(libc::SIGXFSZ, &dfl, std::ptr::null_mut());
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(child) => {
                let pgid = child.id() as libc::pid_t;
                Ok(Group {
                    child,
                    pgid,
                    terminal,
                })
            }
            Err(e) => {
                // The child may have taken the terminal before its exec failed.
                if let Some(fd) = terminal {
                    // SAFETY: getpgrp has no preconditions.
                    give_terminal(fd, unsafe { libc::getpgrp() });
                }
                Err(e)
            }
        }
    }

    /// Sends `sig` to every process of the command's group.
    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our child's process group; the leader is not reaped before the
        // end of `wait`, so the group's id cannot have been reused.
        unsafe { libc::kill(-self.pgid, sig) };
    }

    /// Whether the leader has exited, without reaping it (its pid, the group's id, stays ours).
    fn leader_exited(&self) -> io::Result<bool> {
        // SAFETY: waitid on our own child into a zeroed siginfo_t; WNOWAIT leaves it unreaped.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            if libc::waitid(
                libc::P_PID,
                self.pgid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(info.si_pid() != 0)
        }
    }

    /// A stop of the leader from the terminal (Ctrl-Z, or reading the terminal in the
    /// background): `run` takes the terminal back and stops the same way, so that its shell
    /// sees the job stopped; continued, it gives the terminal back (when in the foreground)
    /// and continues the command.
    fn follow_stop(&mut self) -> io::Result<()> {
        // SAFETY: waitid on our own child into a zeroed siginfo_t; only stops are reported.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            if libc::waitid(
                libc::P_PID,
                self.pgid as libc::id_t,
                &mut info,
                libc::WSTOPPED | libc::WNOHANG,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if info.si_pid() == 0 {
                return Ok(());
            }
            info.si_status()
        };
        if ![libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU].contains(&sig) {
            // SIGSTOP from someone else: whoever stopped it continues it.
            return Ok(());
        }
        if let Some(fd) = self.terminal.take() {
            // SAFETY: getpgrp has no preconditions.
            give_terminal(fd, unsafe { libc::getpgrp() });
        }
        // SAFETY: raise stops this process (the default action) until it is continued; an
        // ignored stop signal returns at once.
        unsafe { libc::raise(sig) };
        if let Some(fd) = foreground_terminal() {
            give_terminal(fd, self.pgid);
            self.terminal = Some(fd);
        }
        self.signal(libc::SIGCONT);
        Ok(())
    }

    /// Whether a process of the group other than its exited leader is still alive (from
    /// `/proc`; without it, assumed so).
    fn others_alive(&self) -> bool {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return true;
        };
        dir.filter_map(Result::ok).any(|e| {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else {
                return false;
            };
            if pid == self.pgid {
                return false;
            }
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                return false;
            };
            // After the command's name (in parentheses, which it may contain): state, ppid, pgrp.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("");
            let pgrp = fields.nth(1).and_then(|p| p.parse::<libc::pid_t>().ok());
            pgrp == Some(self.pgid) && state != "Z" && state != "X"
        })
    }

    /// Waits for the command. Forwarded signals `run` receives go to its processes. After
    /// `timeout` they get SIGTERM, and SIGKILL [`GRACE`] later if any still runs; the wait then
    /// lasts until all of them ended.
    pub fn wait(
        mut self,
        timeout: Option<Duration>,
        name: &str,
        err: &mut dyn Write,
    ) -> io::Result<ExitStatus> {
        let start = Instant::now();
        let mut termed: Option<Instant> = None;
        let mut killed = false;
        loop {
            if let Some(sig) = Caught::take() {
                let _ = writeln!(
                    err,
                    "waitshim: {} received: passed on to {name} and its processes (process group {})",
                    signal_name(sig),
                    self.pgid
                );
                self.signal(sig);
            }
            let now = Instant::now();
            match (timeout, termed) {
                (Some(limit), None) if now.duration_since(start) >= limit => {
                    let _ = writeln!(
                        err,
                        "waitshim: {name} still runs after {limit:?}: sending SIGTERM to its processes (process group {})",
                        self.pgid
                    );
                    self.signal(libc::SIGTERM);
                    termed = Some(now);
                }
                (_, Some(t)) if !killed && now.duration_since(t) >= GRACE => {
                    let _ = writeln!(
                        err,
                        "waitshim: processes of {name} still run {GRACE:?} after SIGTERM: sending SIGKILL"
                    );
                    self.signal(libc::SIGKILL);
                    killed = true;
                }
                _ => {}
            }
            if self.leader_exited()? {
                if termed.is_none() || killed || !self.others_alive() {
                    break;
                }
            } else {
                self.follow_stop()?;
            }
            std::thread::sleep(POLL);
        }
        let status = self.child.wait();
        if let Some(fd) = self.terminal.take() {
            // SAFETY: getpgrp has no preconditions.
            give_terminal(fd, unsafe { libc::getpgrp() });
        }
        status
    }
}
