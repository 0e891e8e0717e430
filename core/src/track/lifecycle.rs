//! The life cycle of tracking: start, fork, exec and the end of the process.

use std::sync::atomic::AtomicUsize;

use super::thread_registry::attach_thread;
use super::*;

fn cmdline() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A new tracker and its log; in a forked child, `parent` is the parent's tracker, whose
/// module list the child's log starts with.
fn build(config: Config, ppid: u32, parent: Option<&Tracker>) -> Result<&'static Tracker, String> {
    let pid = getpid();
    let log = Log::create(&config.log_pattern, pid).map_err(|e| e.0)?;
    let now = now_ns();
    log.write(
        &RunStart {
            pid,
            ppid,
            realtime_ns: crate::clock::realtime_ns(),
            mono_ns: now,
            // SAFETY: plain library call.
            ncpus: unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32,
            exe: std::fs::read_link("/proc/self/exe")
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            cmdline: cmdline(),
            shim_version: env!("CARGO_PKG_VERSION").into(),
        }
        .into(),
    );
    let tr = Box::leak(Box::new(Tracker {
        log,
        config,
        pid,
        objects: registry::Registry::default(),
        threads: SkipMap::new(),
        by_pthread: SkipMap::new(),
        create_chains: SkipMap::new(),
        by_tid: Box::new(std::array::from_fn(
            |_| AtomicPtr::new(std::ptr::null_mut()),
        )),
        chains: Chains::new(),
        modules: Modules::new(),
        highwater: AtomicU32::new(0),
        live: AtomicI32::new(0),
        threaded: AtomicBool::new(false),
        blocked: Padded(AtomicI32::new(0)),
        blocked_elsewhere: AtomicI32::new(0),
        next_object: AtomicU64::new(1),
        next_record: AtomicU64::new(1),
        last_flush: AtomicU64::new(now),
        flushing: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        deadlocks: Mutex::new(Vec::new()),
        lock_graph: Mutex::new(lockgraph::Graph::default()),
        pending_names: Mutex::new(HashMap::new()),
        has_pending_names: AtomicBool::new(false),
        spare: std::array::from_fn(|_| Mutex::new(VecDeque::new())),
        churned: Mutex::new(HashMap::new()),
        churn_changed: AtomicBool::new(false),
        quiet_written: AtomicU64::new(0),
        quiet_sums: Mutex::new(HashMap::new()),
        waits_were_open: AtomicBool::new(false),
        progress: progress::Points::default(),
    }));
    match parent {
        Some(p) => tr.modules.inherit(&p.modules, &tr.log),
        None => tr.modules.scan(&tr.log),
    }
    Ok(tr)
}

/// Starts tracking: from the library constructor, or from the first interposed call if another
/// library's constructor gets there first. Failure leaves the program running untraced.
pub fn init() {
    if STATE
        .compare_exchange(UNINIT, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let _in = InShim::enter();
    // SAFETY: registering plain functions; done before anything else of the shim, also when
    // tracking is off (the heap is used all the same).
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(fork_child)) };
    crate::diag::init();
    // Resolved even when tracing is off: the wrappers still forward, and no forward may reach
    // `dlsym` later (in a signal handler).
    crate::real::resolve_all();
    let config = Config::from_env();
    events::set_mode(config.events.unwrap_or(crate::config::DEFAULT_EVENTS));
    if config.disabled {
        STATE.store(OFF, Ordering::Release);
        return;
    }
    crate::real::init_single_threaded();
    threads::check_tid_offset();
    threads::make_exit_key();
    chain::init();
    // SAFETY: plain system call.
    let ppid = unsafe { libc::getppid() } as u32;
    match build(config, ppid, None) {
        Ok(tr) => {
            TRACKER.store(tr as *const Tracker as *mut Tracker, Ordering::Release);
            register_thread(tr, None);
            hooks::start(tr);
            STATE.store(READY, Ordering::Release);
            // Paired with the fence in `hooks::register`: registered meanwhile (on another
            // thread), the layers above start here.
            std::sync::atomic::fence(Ordering::SeqCst);
            hooks::start(tr);
        }
        Err(msg) => {
            crate::diag::line(&format!("{msg}; the program runs untraced"));
            STATE.store(OFF, Ordering::Release);
        }
    }
}

/// A write faulted at `addr` (SIGBUS): true if it was a write into the log's mapping, which the
/// log has taken care of ([`crate::log::Log::take_fault`]). Async-signal-safe.
pub fn log_fault(addr: usize) -> bool {
    let p = TRACKER.load(Ordering::Acquire);
    // SAFETY: trackers are leaked once built and never freed.
    !p.is_null() && unsafe { &*p }.log.take_fault(addr)
}

/// The mode the forking thread had before [`before_fork`] (forks run their handlers one at a
/// time: glibc holds its fork-handler lock from the first to the last).
static MODE_BEFORE_FORK: AtomicUsize = AtomicUsize::new(0);

/// The process is about to fork: the shim's heap must be whole in the child, so its lock is
/// taken here and given back after the fork. In between, the forking thread goes straight to the
/// real functions: the program's own fork handlers may run then (an allocator locks all its
/// mutexes before a fork), and tracking them could allocate, or wait for a lock of the shim
/// held by a thread that waits for the heap.
extern "C" fn before_fork() {
    MODE_BEFORE_FORK.store(threads::enter_for_fork(), Ordering::Relaxed);
    crate::alloc::lock_for_fork();
}

extern "C" fn after_fork() {
    crate::alloc::unlock_after_fork();
    threads::leave_after_fork(MODE_BEFORE_FORK.load(Ordering::Relaxed));
}

extern "C" fn fork_child() {
    after_fork();
    let Some(old) = tracker() else { return };
    STATE.store(STARTING, Ordering::Release);
    let _in = InShim::enter();
    old.log.abandon();
    match build(old.config.clone(), old.pid, Some(old)) {
        Ok(tr) => {
            TRACKER.store(tr as *const Tracker as *mut Tracker, Ordering::Release);
            let p = threads::own_record();
            if p.is_null() {
                register_thread(tr, None);
            } else {
                // SAFETY: records are leaked; this is the owning (and only) thread.
                let rec = unsafe { &*p };
                rec.clear_cache();
                // SAFETY: owning thread, and nothing else of the shim runs on it now.
                let local = unsafe { rec.local() };
                local.held.clear();
                local.woken = None;
                rec.events.reset();
                // SAFETY: as above. The parent's objects are not this log's: forget them.
                *unsafe { rec.held_locks() } = lockorder::Held::default();
                rec.waiting_on
                    .store(std::ptr::null_mut(), Ordering::Relaxed);
                attach_thread(tr, rec, None);
            }
            if let Some(h) = hooks::get() {
                (h.forked_child)(tr);
            }
            STATE.store(READY, Ordering::Release);
        }
        Err(msg) => {
            crate::diag::line(&format!("forked child: {msg}; the child runs untraced"));
            STATE.store(OFF, Ordering::Release);
        }
    }
}

/// The process ends (`exit`, return from main, or `_exit`): write what is left and close the log.
pub fn finish(reason: u8) {
    // In a signal handler nothing may allocate (finding the stack's bounds the first time
    // does): the handler's path writes little (see `finish_in_handler`).
    if threads::in_handler() {
        finish_here(reason)
    } else {
        crate::stack::with_room(|| finish_here(reason))
    }
}

#[inline(always)]
fn finish_here(reason: u8) {
    let Some(tr) = tracker() else { return };
    // A vfork child shares our memory but must not end the parent's log.
    if getpid() != tr.pid || tr.finished.swap(true, Ordering::AcqRel) {
        return;
    }
    if threads::in_handler() {
        finish_in_handler(tr, reason);
        return;
    }
    let _in = InShim::enter();
    super::thread_registry::process_ending_on_this_thread(tr);
    if let Some(h) = hooks::get() {
        (h.ending)(tr, false);
    }
    tr.flush_all();
    if let Some(h) = hooks::get() {
        (h.flushed)(tr, true);
    }
    end_log(tr, reason);
    if nothing_to_report(tr, reason) {
        tr.log.discard();
        return;
    }
    if !tr.config.quiet {
        let how = match reason {
            end_reason::UNDERSCORE_EXIT => " (at _exit)",
            end_reason::CONFINED => {
                " (tracing stopped where the program confined itself with a seccomp filter)"
            }
            _ => "",
        };
        let dropped = tr.log.dropped.load(Ordering::Relaxed);
        let what = if dropped > 0 {
            format!(
                "log incomplete{how} ({dropped} records dropped after {} bytes: {})",
                tr.log.full_at.load(Ordering::Relaxed),
                tr.log.full_reason()
            )
        } else {
            format!("log written{how}")
        };
        crate::diag::line(&format!(
            "{what}: {0}   read it with: waitshim-analyze {0}",
            tr.log.path
        ));
    }
}

/// Whether the process's log says nothing worth a file and a line: it ran on one thread and
/// never waited, it ended normally, and its parent is traced too, so that the user, who started
/// that parent, has its log (a `make -j2` wrote 44 logs and 44 stderr lines, for its shells and
/// compilers). `WAITSHIM_CHILD_LOGS=all` keeps them.
fn nothing_to_report(tr: &Tracker, reason: u8) -> bool {
    !tr.config.all_child_logs
        && matches!(reason, end_reason::EXIT | end_reason::UNDERSCORE_EXIT)
        && !tr.threaded.load(Ordering::Relaxed)
        && tr.highwater.load(Ordering::Relaxed) == 0
        && !tr.progress.any()
        && tr.log.dropped.load(Ordering::Relaxed) == 0
        && parent_is_traced()
}

/// Whether the parent process has this library mapped, from `/proc/PPID/maps` (false when it
/// cannot be read). Read through a buffer on the stack: no allocation.
fn parent_is_traced() -> bool {
    const NEEDLE: &[u8] = b"libwaitshim";
    // SAFETY: plain system call.
    let ppid = unsafe { libc::getppid() };
    let mut digits = [0u8; 10];
    let mut path = [0u8; 32];
    let mut n = 0;
    for part in [&b"/proc/"[..], itoa(ppid as u32, &mut digits), b"/maps\0"] {
        path[n..n + part.len()].copy_from_slice(part);
        n += part.len();
    }
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    // Bytes kept from the previous read, so that a name split between two reads is found.
    let mut kept = 0;
    let found = loop {
        // SAFETY: reads into the buffer's free part.
        let got = unsafe { libc::read(fd, buf[kept..].as_mut_ptr().cast(), buf.len() - kept) };
        if got <= 0 {
            break false;
        }
        let end = kept + got as usize;
        if buf[..end].windows(NEEDLE.len()).any(|w| w == NEEDLE) {
            break true;
        }
        kept = (NEEDLE.len() - 1).min(end);
        buf.copy_within(end - kept..end, 0);
    };
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    found
}

/// The decimal digits of `v`, written into `buf`.
fn itoa(mut v: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// The program is about to confine itself with a seccomp filter: tracing ends here, before the
/// filter is in force, since the shim's own system calls (growing the log, the sampler's reads
/// of `/proc`, unwinding through the kernel) might then be refused or kill the process. The log
/// ends with a [`end_reason::CONFINED`] record; the program runs on untraced.
pub fn confining() {
    finish(end_reason::CONFINED);
}

/// A watched fatal signal `sig` is ending the process (called from its handler): the log ends
/// with a [`end_reason::SIGNAL`] record naming it.
pub fn finish_by_signal(sig: i32) {
    EXIT_STATUS.store(i64::from(sig), Ordering::Relaxed);
    finish(end_reason::SIGNAL);
}

/// The process is about to replace its program (`exec`) with `path`: what is counted reaches the
/// log, which ends with an exec record and is trimmed to what was written (no megabyte of
/// unwritten space left behind). A log with nothing in it (a forked child that only execs) is
/// removed. Returns whether [`exec_failed`] has a log to go on with.
pub fn before_exec(path: &str) -> bool {
    let Some(tr) = tracker() else { return false };
    // A vfork child shares our memory: the log is its parent's.
    if getpid() != tr.pid {
        return false;
    }
    let _in = InShim::enter();
    let empty = tr.objects.is_empty()
        && tr.live.load(Ordering::Relaxed) <= 1
        && tr.next_record.load(Ordering::Relaxed) == 1;
    if !empty {
        tr.flush_all();
        if let Some(h) = hooks::get() {
            (h.flushed)(tr, false);
        }
    }
    let now = now_ns();
    tr.log.write_final(
        &waitshim_format::Exec {
            ns: now,
            path: path.into(),
        }
        .into(),
    );
    tr.log.write_final(
        &RunEnd {
            ns: now,
            reason: end_reason::EXEC,
            exit_status: -1,
            hwm: tr.highwater.load(Ordering::Relaxed),
            dropped: tr.log.dropped.load(Ordering::Relaxed),
        }
        .into(),
    );
    tr.log.close();
    if empty {
        tr.log.discard();
        STATE.store(OFF, Ordering::Release);
    }
    !empty
}

/// The exec [`before_exec`] prepared for failed with `errno`: the log goes on (or, if it was
/// removed, the process runs on untraced).
pub fn exec_failed(path: &str, errno: i32) {
    let Some(tr) = tracker() else { return };
    let _in = InShim::enter();
    tr.log.reopen();
    tr.log.write(
        &Note {
            ns: now_ns(),
            level: note_level::INFO,
            text: format!(
                "exec of {path} failed ({}); the program went on",
                std::io::Error::from_raw_os_error(errno)
            ),
        }
        .into(),
    );
}

/// The end record (no allocation), then tracking off and the log closed.
fn end_log(tr: &Tracker, reason: u8) {
    tr.log.write_final(
        &RunEnd {
            ns: now_ns(),
            reason,
            exit_status: EXIT_STATUS.load(Ordering::Relaxed),
            hwm: tr.highwater.load(Ordering::Relaxed),
            dropped: tr.log.dropped.load(Ordering::Relaxed),
        }
        .into(),
    );
    STATE.store(OFF, Ordering::Release);
    tr.log.close();
}

/// [`finish`] from a signal handler (`_exit` there, or `exit`): the interrupted code may hold
/// malloc's lock, so this thread neither allocates nor locks. The shim's thread, if there is
/// one, flushes the counters (it waits at most a moment for it: it may need that lock too);
/// then the end record, which needs no allocation, and the stderr line, built in place.
fn finish_in_handler(tr: &Tracker, reason: u8) {
    if let Some(h) = hooks::get() {
        (h.ending)(tr, true);
    }
    end_log(tr, reason);
    if !tr.config.quiet {
        let p = &tr.log.path;
        let how = if reason == end_reason::SIGNAL {
            "log written (the process is being killed by a signal): "
        } else {
            "log written (in a signal handler): "
        };
        crate::diag::line_parts(&[how, p, "   read it with: waitshim-analyze ", p]);
    }
}

/// A `dlopen` succeeded: the modules it mapped join those chains are resolved in (their records
/// written), and the unwinder reads their tables.
pub fn library_loaded() {
    if let Some(tr) = tracker() {
        let _in = InShim::enter();
        tr.modules.scan(&tr.log);
        waitshim_unwind::refresh_if_loaded();
    }
}
