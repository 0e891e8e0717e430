//! The shim's own thread and data requests.
//!
//! The thread starts with the program's first `pthread_create` (before that the program is
//! single-threaded, and glibc locks without atomic instructions while it is: a thread of ours
//! would cost every lock of a single-threaded program). It never runs program code, blocks every
//! signal but the request signal, and serves data requests and runs a few periodic tasks, each
//! with its own interval ([`periodic_tasks`]): flushing counters (so that a killed run keeps them
//! even when no lock was ever contended) and policy statistics, hot reload of the policy file,
//! and the sampler.
//!
//! A data request comes through the log's mailbox, a word in the file's header
//! (`waitshim_format::contract::mailbox`): `waitshim-analyze request PID` adds to it and wakes
//! the futex this thread sleeps on. No signal, no descriptor: a program's signals, masks and
//! handlers stay its own (a program that blocks every signal and takes them with `sigwait` gets
//! every one of them), and a program that closes every descriptor it did not open closes none of
//! ours. A request signal is taken only when `WAITSHIM_SIGNAL` names one, for `kill`: the
//! handler then counts the request and wakes this thread, and is installed only when the
//! program has none for that signal.

use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering,
};
use waitshim_format::contract::{mailbox, SHIM_THREAD_NAME};

use waitshim_format::{shim_task, snapshot_source, ShimCost, Snapshot, TaskCost};

use crate::clock::{now_ns, thread_cpu_ns};
use crate::track::threads::{gettid, InShim};
use crate::track::{tracker, Tracker};

const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
/// Could not start (resources): the program runs on without periodic work.
const FAILED: u8 = 3;
/// Ended to give the program the task it could not create ([`step_back_for_tasks`]).
const STEPPED_BACK: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
/// The futex word the thread sleeps on; bumped to wake it.
static WAKE: AtomicU32 = AtomicU32::new(0);
/// Requests through the log's mailbox served (its request count when last served).
static SERVED_MAILBOX: AtomicU16 = AtomicU16::new(0);
/// Requests received by the signal handler, and served.
static REQUESTS: AtomicU64 = AtomicU64::new(0);
static SERVED: AtomicU64 = AtomicU64::new(0);
static REQUESTER: AtomicU32 = AtomicU32::new(0);
/// The request signal, 0 when requests are off.
static REQUEST_SIGNAL: AtomicI32 = AtomicI32::new(0);
static SERVICE_TID: AtomicU32 = AtomicU32::new(0);
static SNAPSHOTS: AtomicU64 = AtomicU64::new(0);
/// Set at exit: the thread must stop touching the log; `BUSY` says it is between two checks.
static STOP: AtomicBool = AtomicBool::new(false);
static BUSY: AtomicBool = AtomicBool::new(false);
/// Complete flushes asked of the thread (by a thread that must not allocate), and done.
static FLUSHES_ASKED: AtomicU64 = AtomicU64::new(0);
static FLUSHES_DONE: AtomicU64 = AtomicU64::new(0);
/// The sampler's last look, asked by the thread ending the process (its tid), and done.
static LAST_LOOK_BY: AtomicU32 = AtomicU32::new(0);
static LAST_LOOK_DONE: AtomicBool = AtomicBool::new(false);
/// How long the ending process waits for the sampler's last look at most.
const LAST_LOOK_WAIT_NS: u64 = 100_000_000;

/// Counters reach the log at least this often while the program runs.
const FLUSH_EVERY_NS: u64 = 1_000_000_000;
/// The policy file is checked for changes this often.
const RELOAD_CHECK_NS: u64 = 500_000_000;
const SLEEP_NS: u64 = 250_000_000;

/// Sets up data requests by signal (from the tracker's start), when `WAITSHIM_SIGNAL` (`spec`)
/// names one: its handler. Requests through the log's mailbox need no setting up.
pub fn init(tr: &Tracker, spec: Option<&str>) {
    let (rtmin, rtmax) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    let Some(spec_text) = spec else {
        return;
    };
    let sig = match waitshim_policy::signal::parse(spec_text, rtmin, rtmax) {
        Ok(waitshim_policy::signal::SignalSpec::None) => return,
        Ok(waitshim_policy::signal::SignalSpec::Number(n)) => n,
        Err(e) => {
            crate::diag::say(
                &tr.log,
                &format!("WAITSHIM_SIGNAL: {e}; data requests by signal are off"),
            );
            return;
        }
    };
    let name = waitshim_policy::signal::name(sig, rtmin, rtmax);
    match crate::signals::install(sig, on_request) {
        Ok(()) => REQUEST_SIGNAL.store(sig, Ordering::Relaxed),
        Err(why) => crate::diag::say(
            &tr.log,
            &format!("data request signal {name}: {why}; data requests by signal are off"),
        ),
    }
}

/// Wakes this thread: on the mailbox it sleeps on while tracking is on, and on its own word
/// before. Async-signal-safe.
fn wake() {
    WAKE.fetch_add(1, Ordering::Release);
    crate::sys::futex_wake(&WAKE, 1);
    if let Some(tr) = tracker() {
        let mailbox = tr.log.mailbox();
        mailbox.fetch_add(mailbox::WAKE, Ordering::Release);
        crate::sys::futex_wake_shared(mailbox);
    }
}

/// The words this thread sleeps on as it last read them: its own, and the log's mailbox.
#[derive(Clone, Copy)]
struct Seen {
    own: u32,
    mailbox: u32,
}

fn seen_now() -> Seen {
    Seen {
        own: WAKE.load(Ordering::Acquire),
        mailbox: tracker().map_or(0, |tr| tr.log.mailbox().load(Ordering::Acquire)),
    }
}

/// Sleeps until woken or `ns` (less than a second) passed, unless a wake-up or a request came
/// since `seen`.
fn sleep_from(seen: Seen, ns: u64) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: ns.min(999_999_999) as libc::c_long,
    };
    match tracker() {
        Some(tr) => crate::sys::futex_wait_shared(tr.log.mailbox(), seen.mailbox, &ts),
        None => crate::sys::futex_wait(&WAKE, seen.own, Some(&ts)),
    }
}

/// The request signal's handler: async-signal-safe (atomics and write(2) only).
extern "C" fn on_request(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saved and restored so the interrupted code sees its own.
    let errno = unsafe { *libc::__errno_location() };
    if !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
        let pid = unsafe { (*info).si_pid() };
        REQUESTER.store(pid.max(0) as u32, Ordering::Relaxed);
    }
    REQUESTS.fetch_add(1, Ordering::AcqRel);
    wake();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Starts the thread if it is not running (called after the program created a thread).
#[inline]
pub fn ensure_started() {
    if STATE.load(Ordering::Acquire) == NOT_STARTED {
        start();
    }
}

#[cold]
fn start() {
    if STATE
        .compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // The new thread inherits the creator's signal mask: block everything around the creation so
    // that no program signal is ever delivered to it, then restore the caller's mask.
    // SAFETY: sigset operations on locals; pthread calls with valid arguments.
    let ok = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        libc::pthread_attr_setstacksize(&mut attr, 256 * 1024);
        let mut th: libc::pthread_t = 0;
        let r = crate::real::pthread_create(&mut th, &attr, run, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r == 0
    };
    STATE.store(if ok { RUNNING } else { FAILED }, Ordering::Release);
}

extern "C" fn run(_: *mut libc::c_void) -> *mut libc::c_void {
    // Everything this thread calls goes straight to the real functions.
    std::mem::forget(InShim::enter());
    let mut name = [0u8; 16];
    let n = SHIM_THREAD_NAME.len().min(15);
    name[..n].copy_from_slice(&SHIM_THREAD_NAME.as_bytes()[..n]);
    // SAFETY: prctl with a NUL-terminated name; names this thread only (the program's threads
    // are found by their own names; `request` finds this one by it).
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) };
    SERVICE_TID.store(gettid(), Ordering::Release);
    // Under a filter from the start, `unshare` may be one it kills for.
    let own_table = !crate::confinement::seccomp_at_start() && crate::fdtable::separate();
    if let Some(tr) = tracker() {
        tr.log.open_for_shim_thread(own_table);
    }
    let sig = REQUEST_SIGNAL.load(Ordering::Relaxed);
    // SAFETY: sigset operations on a local; unblocks on this thread only SIGBUS (this thread
    // reads the log's mailbox: a log another process truncated faults, and the handler that
    // takes care of it must run, not the kernel's default) and the request signal, if any.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGBUS);
        if sig > 0 {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    let (mut tasks, flush, sampler) = periodic_tasks();
    let mut costs = Costs::default();
    let mut seen = seen_now();
    loop {
        let now = now_ns();
        let next = tasks.iter().map(|t| t.due).min().unwrap_or(now + SLEEP_NS);
        sleep_from(seen, next.saturating_sub(now).clamp(1, SLEEP_NS));
        seen = seen_now();
        BUSY.store(true, Ordering::SeqCst);
        if STOP.load(Ordering::SeqCst) || STATE.load(Ordering::Acquire) == STEPPED_BACK {
            BUSY.store(false, Ordering::SeqCst);
            return std::ptr::null_mut();
        }
        if let Some(tr) = tracker() {
            tr.log.grow_ahead();
            let by = LAST_LOOK_BY.swap(0, Ordering::AcqRel);
            if by != 0 {
                if let Some(s) = &sampler {
                    costs.timed(shim_task::SAMPLER, || s.borrow_mut().last_look(tr, by));
                }
                // The run's figures, before the ending thread closes the log.
                costs.write(tr);
                LAST_LOOK_DONE.store(true, Ordering::Release);
            }
            let now = now_ns();
            // The CPU clock is a system call: read only around work there is.
            if requests_pending(tr) {
                costs.timed(shim_task::REQUESTS, || serve_requests(tr));
                // Everything was just written: the periodic flush can wait its full interval.
                tasks[flush].due = now + FLUSH_EVERY_NS;
            }
            let mut flushed = false;
            for task in tasks.iter_mut().filter(|t| now >= t.due) {
                let start = thread_cpu_ns();
                let (due, end) = (task.run)(tr, task.due, now, start);
                task.due = due;
                let end = end.unwrap_or_else(thread_cpu_ns);
                costs.add(task.kind, end.saturating_sub(start));
                flushed |= task.kind == shim_task::FLUSH;
            }
            if flushed {
                costs.write(tr);
            }
        }
        BUSY.store(false, Ordering::SeqCst);
    }
}

/// A periodic task of this thread: `run(tracker, due, now)` does the work that was due at
/// `due` and returns when it is due next.
struct Task {
    /// [`shim_task`]: what its cost is counted as.
    kind: u8,
    due: u64,
    run: Box<TaskFn>,
}

/// What this thread's work has cost, by [`shim_task`]: runs and CPU time since it started,
/// written as a [`ShimCost`] at each periodic flush and at the sampler's last look, so that
/// the report can say what the profiler's own thread took from the machine.
#[derive(Default)]
struct Costs {
    /// Runs and CPU ns, indexed by task code.
    by_task: [(u64, u64); 5],
}

impl Costs {
    /// Runs `f` as one run of work of kind `task`, adding its CPU time.
    fn timed<R>(&mut self, task: u8, f: impl FnOnce() -> R) -> R {
        let start = thread_cpu_ns();
        let r = f();
        self.add(task, thread_cpu_ns().saturating_sub(start));
        r
    }

    /// One run of work of kind `task` that took `cpu_ns`.
    fn add(&mut self, task: u8, cpu_ns: u64) {
        if let Some(c) = self.by_task.get_mut(usize::from(task)) {
            c.0 += 1;
            c.1 += cpu_ns;
        }
    }

    fn record(&self, ns: u64, thread_cpu_ns: u64) -> ShimCost {
        ShimCost {
            ns,
            thread_cpu_ns,
            tasks: self
                .by_task
                .iter()
                .enumerate()
                .filter(|(_, &(runs, _))| runs > 0)
                .map(|(task, &(runs, cpu_ns))| TaskCost {
                    task: task as u8,
                    runs,
                    cpu_ns,
                })
                .collect(),
        }
    }

    fn write(&self, tr: &Tracker) {
        tr.log.write(&self.record(now_ns(), thread_cpu_ns()).into());
    }
}

/// `run(tracker, due, now, start_cpu_ns)`, with this thread's CPU clock as the run starts:
/// when the task is due next, and the CPU clock as it ended if the task read it (the loop reads
/// it otherwise), so that a run is timed with two readings of the clock, a system call.
type TaskFn = dyn FnMut(&Tracker, u64, u64, u64) -> (u64, Option<u64>);

/// What this thread does periodically, in this order when several are due at once: check the
/// policy file for changes, sample the threads' states (when the sampler is on), and flush the
/// counters (then look for a hang). Returns the tasks, the index of the flush and the sampler
/// (shared with its task: the process's end asks it for a last look).
fn periodic_tasks() -> (Vec<Task>, usize, Option<SharedSampler>) {
    let start = now_ns();
    let mut tasks = Vec::with_capacity(3);
    tasks.push(Task {
        kind: shim_task::POLICY_RELOAD,
        due: start + RELOAD_CHECK_NS,
        run: Box::new(|tr, _, now, _| {
            crate::policy::reload_if_changed(&tr.log);
            (now + RELOAD_CHECK_NS, None)
        }),
    });
    let sampler = tracker().and_then(|_| {
        crate::sampler::Sampler::new(
            crate::sampler::interval(),
            SERVICE_TID.load(Ordering::Relaxed),
        )
    });
    let sampler = sampler.map(|s| std::rc::Rc::new(std::cell::RefCell::new(s)));
    if let Some(s) = sampler.clone() {
        tasks.push(Task {
            kind: shim_task::SAMPLER,
            due: start,
            run: Box::new(move |tr, due, now, start_cpu| {
                let mut s = s.borrow_mut();
                s.sample(tr);
                let end = thread_cpu_ns();
                let interval = s.paced(end.saturating_sub(start_cpu));
                // The next look one interval after this one was due, not after it ended: the
                // interval holds on average, unless the sampler falls behind.
                ((due + interval).max(now), Some(end))
            }),
        });
    }
    let mut hang_seen = Vec::new();
    tasks.push(Task {
        kind: shim_task::FLUSH,
        due: start + FLUSH_EVERY_NS,
        run: Box::new(move |tr, _, now, _| {
            crate::confinement::refresh_tracer();
            tr.flush_periodic();
            crate::policy::write_stats(&tr.log, false);
            look_for_hang(tr, &mut hang_seen, now);
            (now + FLUSH_EVERY_NS, None)
        }),
    });
    let flush = tasks.len() - 1;
    (tasks, flush, sampler)
}

type SharedSampler = std::rc::Rc<std::cell::RefCell<crate::sampler::Sampler>>;

/// Serves what was asked of this thread since it last looked: complete flushes (for a thread
/// that must not allocate) and data requests. Whether it wrote everything.
/// Whether a flush or a snapshot was asked for and not served yet (two atomic loads each).
fn requests_pending(tr: &Tracker) -> bool {
    FLUSHES_ASKED.load(Ordering::Acquire) != FLUSHES_DONE.load(Ordering::Relaxed)
        || REQUESTS.load(Ordering::Acquire) != SERVED.load(Ordering::Relaxed)
        || mailbox_requests(tr) != SERVED_MAILBOX.load(Ordering::Relaxed)
}

fn mailbox_requests(tr: &Tracker) -> u16 {
    mailbox::requests(tr.log.mailbox().load(Ordering::Acquire))
}

fn serve_requests(tr: &Tracker) -> bool {
    let mut wrote = false;
    let asked = FLUSHES_ASKED.load(Ordering::Acquire);
    if asked != FLUSHES_DONE.load(Ordering::Relaxed) {
        tr.flush_all();
        crate::policy::write_stats(&tr.log, true);
        FLUSHES_DONE.store(asked, Ordering::Release);
        wrote = true;
    }
    let asked = mailbox_requests(tr);
    if asked != SERVED_MAILBOX.load(Ordering::Relaxed) {
        SERVED_MAILBOX.store(asked, Ordering::Relaxed);
        snapshot(tr, snapshot_source::REQUEST, 0);
        wrote = true;
    }
    let pending = REQUESTS.load(Ordering::Acquire);
    if pending != SERVED.load(Ordering::Relaxed) {
        SERVED.store(pending, Ordering::Relaxed);
        snapshot(
            tr,
            snapshot_source::SIGNAL,
            REQUESTER.load(Ordering::Relaxed),
        );
        wrote = true;
    }
    wrote
}

#[cfg(not(test))]
fn program_handles_asynchronous_signals() -> bool {
    crate::interpose::signal::asynchronous_handlers()
}

/// Unit tests run without the interposed functions.
#[cfg(test)]
fn program_handles_asynchronous_signals() -> bool {
    false
}

/// The every-thread-waits check ([`crate::track::deadlock::look_for_hang`]), with what it needs
/// to know of the process: its task count, which memory is shared (read only when every thread
/// has waited unchanged since the last look) and the program's signal handlers.
fn look_for_hang(tr: &Tracker, last: &mut Vec<(u32, u64)>, now: u64) {
    let maps = std::cell::OnceCell::new();
    let tasks = || std::fs::read_dir("/proc/self/task").map_or(usize::MAX, |d| d.count());
    let shared = |addr: usize| {
        crate::procmaps::is_shared(maps.get_or_init(crate::procmaps::read), addr as u64)
    };
    let around = crate::track::deadlock::Surroundings {
        own_tid: SERVICE_TID.load(Ordering::Relaxed),
        tasks: &tasks,
        shared: &shared,
        async_handlers: program_handles_asynchronous_signals(),
    };
    crate::track::deadlock::look_for_hang(tr, &around, last, now);
}

/// Serves a data request on the calling thread: every counter and pending record reaches the
/// log, then a [`Snapshot`] record says so. Returns the snapshot's number.
pub fn snapshot(tr: &Tracker, source: u8, requester: u32) -> u64 {
    let _in = InShim::enter();
    tr.flush_all();
    crate::policy::write_stats(&tr.log, true);
    let seq = SNAPSHOTS.fetch_add(1, Ordering::AcqRel) + 1;
    tr.log.write(
        &Snapshot {
            seq,
            ns: now_ns(),
            source,
            requester_pid: requester,
        }
        .into(),
    );
    seq
}

/// Asks this thread for a complete flush and waits for it, at most `timeout_ns`: for a thread
/// that must not allocate itself (`_exit` in a signal handler). Async-signal-safe. False when
/// there is no such thread or it did not finish in time.
pub fn flush_by_service(timeout_ns: u64) -> bool {
    if STATE.load(Ordering::Acquire) != RUNNING || STOP.load(Ordering::Acquire) {
        return false;
    }
    let target = FLUSHES_ASKED.fetch_add(1, Ordering::AcqRel) + 1;
    wake();
    let start = now_ns();
    while FLUSHES_DONE.load(Ordering::Acquire) < target {
        if now_ns().saturating_sub(start) > timeout_ns {
            return false;
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: nanosleep with a valid relative time; async-signal-safe.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
    true
}

/// The program could not create a thread or process for lack of tasks (`EAGAIN`: its
/// `RLIMIT_NPROC`, a container's pids limit), and the shim's thread counts among its tasks: the
/// thread ends, so that the program gets the task it would have had natively, and the shim runs
/// on without it (no sampling, periodic flushes or data requests from then on; every counter
/// still reaches the log at the end). Waits until the thread's task is gone. True if the thread
/// stepped back, so that the caller tries again; false if there was none to end.
pub fn step_back_for_tasks() -> bool {
    if STATE
        .compare_exchange(RUNNING, STEPPED_BACK, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    wake();
    // SAFETY: plain system call.
    let pid = unsafe { libc::getpid() };
    let start = now_ns();
    // A thread created but not yet run has not said its tid: it will, then see it is to end.
    let mut tid = SERVICE_TID.load(Ordering::Acquire);
    while tid == 0 && now_ns().saturating_sub(start) < 5_000_000_000 {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000,
        };
        // SAFETY: nanosleep with a valid relative time.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
        tid = SERVICE_TID.load(Ordering::Acquire);
    }
    // Gone once the kernel no longer finds it: it released its task (and the count) by then.
    // On a loaded machine the thread may take a while to be scheduled and end: up to 5 s, the
    // program's pthread_create waiting meanwhile (it would fail otherwise).
    while tid != 0 && now_ns().saturating_sub(start) < 5_000_000_000 {
        // SAFETY: signal 0 to a thread of this process only asks whether it exists.
        let r = unsafe {
            crate::sys::call6(libc::SYS_tgkill, [pid as usize, tid as usize, 0, 0, 0, 0])
        };
        if r == -(libc::ESRCH as isize) {
            break;
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000,
        };
        // SAFETY: nanosleep with a valid relative time.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
    if let Some(tr) = tracker() {
        let _in = InShim::enter();
        crate::diag::say(
            &tr.log,
            "the program ran out of tasks (RLIMIT_NPROC or a pids limit): the shim's thread \
             ended to give it one; no sampling, periodic flushes or data requests from here on",
        );
    }
    true
}

/// The process ends: the thread must not touch the log from now on. Waits (briefly) for work in
/// progress.
pub fn stop() {
    last_look();
    STOP.store(true, Ordering::SeqCst);
    if SERVICE_TID.load(Ordering::Acquire) == gettid() {
        return;
    }
    let start = now_ns();
    while BUSY.load(Ordering::SeqCst) && now_ns().saturating_sub(start) < 500_000_000 {
        crate::sys::sched_yield();
    }
}

/// Asks this thread for its last figures and waits for them, at most [`LAST_LOOK_WAIT_NS`]:
/// the sampler's last look (when the sampler is on) and what the thread cost ([`ShimCost`]).
/// Nothing when this is the shim's thread. Async-signal-safe.
fn last_look() {
    let me = gettid();
    if tracker().is_none()
        || STATE.load(Ordering::Acquire) != RUNNING
        || STOP.load(Ordering::Acquire)
        || SERVICE_TID.load(Ordering::Acquire) == me
    {
        return;
    }
    LAST_LOOK_DONE.store(false, Ordering::Release);
    LAST_LOOK_BY.store(me, Ordering::Release);
    wake();
    let start = now_ns();
    while !LAST_LOOK_DONE.load(Ordering::Acquire)
        && now_ns().saturating_sub(start) < LAST_LOOK_WAIT_NS
    {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 500_000,
        };
        // SAFETY: nanosleep with a valid relative time; async-signal-safe.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
}

/// In a forked child: the parent's thread did not come along.
pub fn after_fork_child() {
    crate::fdtable::after_fork_child();
    SERVED_MAILBOX.store(0, Ordering::Relaxed);
    REQUESTS.store(0, Ordering::Relaxed);
    SERVED.store(0, Ordering::Relaxed);
    SNAPSHOTS.store(0, Ordering::Relaxed);
    SERVICE_TID.store(0, Ordering::Relaxed);
    BUSY.store(false, Ordering::Relaxed);
    STOP.store(false, Ordering::Relaxed);
    LAST_LOOK_BY.store(0, Ordering::Relaxed);
    STATE.store(NOT_STARTED, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_list_each_kind_of_work_that_ran_with_its_runs_and_cpu_time() {
        let mut c = Costs::default();
        c.add(shim_task::SAMPLER, 40_000);
        c.add(shim_task::SAMPLER, 60_000);
        c.add(shim_task::FLUSH, 5_000);
        c.add(99, 1); // not a kind: ignored, never a panic
        let r = c.record(7, 200_000);
        assert_eq!((r.ns, r.thread_cpu_ns), (7, 200_000));
        assert_eq!(
            r.tasks,
            vec![
                TaskCost {
                    task: shim_task::SAMPLER,
                    runs: 2,
                    cpu_ns: 100_000
                },
                TaskCost {
                    task: shim_task::FLUSH,
                    runs: 1,
                    cpu_ns: 5_000
                },
            ]
        );
    }

    #[test]
    fn timed_work_is_charged_the_threads_own_cpu_time() {
        let mut c = Costs::default();
        let before = thread_cpu_ns();
        let spun = c.timed(shim_task::SAMPLER, || {
            // Busy for at least 2 ms of this thread's CPU time.
            let start = thread_cpu_ns();
            let mut n = 0u64;
            while thread_cpu_ns() - start < 2_000_000 {
                n = std::hint::black_box(n + 1);
            }
            n
        });
        let after = thread_cpu_ns();
        assert!(spun > 0);
        let (runs, cpu) = c.by_task[usize::from(shim_task::SAMPLER)];
        assert_eq!(runs, 1);
        assert!(cpu >= 2_000_000 && cpu <= after - before, "{cpu} ns");
    }
}
