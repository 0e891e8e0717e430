//! Tracking state: the tracker (log, object and thread skiplists, interned chains, highwater
//! mark), its life cycle (start, fork, exit) and the periodic flush of counters.

pub mod deadlock;
pub mod drive;
pub mod engage;
pub mod handler_counts;
pub mod highwater;
pub mod lockgraph;
pub mod lockorder;
pub mod objects;
pub mod registry;
pub mod threads;
pub mod waits;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering,
};
use std::sync::Mutex;

use crossbeam_skiplist::SkipMap;
use waitshim_format::{
    end_reason, note_level, origin, CounterValue, Note, ObjectCreate, ObjectDestroy, ObjectKind,
    ObjectName, ObjectsChurned, RunEnd, RunStart, ThreadExit, ThreadName, ThreadStart,
};

use crate::chain::{self, Chains};
use crate::clock::now_ns;
use crate::config::Config;
use crate::log::Log;
use crate::modules::Modules;
use objects::{ObjEntry, Padded};
use threads::{Inside, ThreadRec, ThreadRef, EXIT_HOOK};

pub struct Tracker {
    pub log: Log,
    pub config: Config,
    pub pid: u32,
    pub objects: registry::Registry<ObjEntry>,
    pub threads: SkipMap<u32, ThreadRef>,
    /// Live threads by `pthread_t` (tid; 0 while a created thread has not run yet), for joins.
    pub by_pthread: SkipMap<usize, u32>,
    /// The `pthread_create` chain of each joinable thread not joined yet, by `pthread_t`: where
    /// its thread object (made when a join first waits for it) was created. Removed by the join
    /// (not at the thread's exit, which a join already under way may not have seen yet), replaced
    /// when a new thread gets the descriptor.
    pub create_chains: SkipMap<usize, u32>,
    /// Direct-mapped index of `threads` by tid, for the contended path (a skiplist lookup costs
    /// up to a few hundred ns); a miss falls back to the skiplist.
    by_tid: Box<[AtomicPtr<ThreadRec>; TID_INDEX]>,
    pub chains: Chains,
    pub modules: Modules,
    /// The global highwater mark: most threads ever seen waiting at once on one engaged object.
    pub highwater: AtomicU32,
    /// Threads alive, and threads blocked in a wait the shim sees (not ready to run). `blocked`
    /// changes at every wait: on a cache line of its own, away from the fields every wait reads.
    pub live: AtomicI32,
    pub blocked: Padded<AtomicI32>,
    /// Threads the sampler last saw blocked in a system call outside the waits the shim tracks
    /// (a `read`, an `accept`, a sleep): not ready to run either. Up to one sampling interval
    /// old; 0 with the sampler off.
    pub blocked_elsewhere: AtomicI32,
    next_object: AtomicU64,
    pub next_record: AtomicU64,
    last_flush: AtomicU64,
    flushing: AtomicBool,
    finished: AtomicBool,
    pub deadlocks: Mutex<Vec<Vec<(u32, u64)>>>,
    /// The lock-order graph of the live objects.
    pub lock_graph: Mutex<lockgraph::Graph<lockorder::EdgeData>>,
    /// Names given through the C API to objects not tracked yet.
    pending_names: Mutex<HashMap<usize, String>>,
    has_pending_names: AtomicBool,
    /// Entries of destroyed objects that may serve new objects, per kind, with when they were
    /// destroyed (see [`Tracker::new_object`]).
    spare: [Mutex<VecDeque<(u64, &'static ObjEntry)>>; KINDS],
    /// Objects destroyed before they were ever written to the log, per (kind, creation chain).
    churned: Mutex<HashMap<(u8, u32), Churn>>,
    churn_changed: AtomicBool,
    /// Quiet objects written one by one so far (see [`QUIET_WRITTEN_MAX`]).
    quiet_written: AtomicU64,
    /// The sums of quiet objects last written, per (kind, creation chain).
    quiet_sums: Mutex<HashMap<(u8, u32), QuietSum>>,
    /// The last flush found contended waits in progress (and wrote them).
    waits_were_open: AtomicBool,
}

/// Live objects that never mattered on their own (never contended, named, or in a written
/// lock-order edge) are written one by one, at a flush, up to this many; further ones are
/// summed per kind and creation chain (`ObjectsQuiet`), so that the log does not grow with
/// the number of idle objects a program keeps.
const QUIET_WRITTEN_MAX: u64 = 4096;

/// What an `ObjectsQuiet` record says.
#[derive(Default, Clone, PartialEq, Eq)]
struct QuietSum {
    count: u64,
    acquisitions: u64,
    owner_changes: u64,
    counters: Vec<(u16, u64)>,
}

/// One line of `Tracker::churned`: what an `ObjectsChurned` record says, and whether it changed
/// since it was last written.
#[derive(Default)]
struct Churn {
    count: u64,
    acquisitions: u64,
    lifetime_total: u64,
    lifetime_max: u64,
    /// Kind-specific counts (posts, read acquisitions, signals, broadcasts), summed.
    counters: Vec<(u16, u64)>,
    changed: bool,
}

/// Object kinds are below this (`ObjectKind as usize`).
const KINDS: usize = 9;
/// A destroyed object's entry serves a new object only this long after, so that a thread still
/// in the middle of a call that found it before it was destroyed (a program that destroys an
/// object in use) is done with it. Threads' caches that point at it are no concern: they check
/// the address. Short, because the entries of a program that creates and destroys objects in a
/// loop wait here meanwhile: 10 ms of a million a second is 10 000 entries, 6 MB.
const REUSE_AFTER_NS: u64 = 10_000_000;
/// Spare entries kept per kind; more are left to the threads' caches that may point at them
/// (entries are never freed).
const SPARE_MAX: usize = 1 << 16;
/// (kind, creation chain) pairs summed in `churned`; the objects of further creation chains
/// are summed under chain 0.
const CHURN_KEYS: usize = 4096;

const UNINIT: u8 = 0;
const STARTING: u8 = 1;
const READY: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static TRACKER: AtomicPtr<Tracker> = AtomicPtr::new(std::ptr::null_mut());
/// Status passed to `exit()`, when the program called it explicitly.
pub static EXIT_STATUS: AtomicI64 = AtomicI64::new(-1);

const FLUSH_EVERY_NS: u64 = 250_000_000;
const TID_INDEX: usize = 4096;

/// The tracker, while tracking is on.
#[inline]
pub fn tracker() -> Option<&'static Tracker> {
    if STATE.load(Ordering::Acquire) != READY {
        return None;
    }
    let p = TRACKER.load(Ordering::Acquire);
    // SAFETY: the tracker is leaked once built and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn getpid() -> u32 {
    // SAFETY: plain system call.
    unsafe { libc::getpid() as u32 }
}

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

fn build(config: Config, ppid: u32) -> Result<&'static Tracker, String> {
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
    }));
    tr.modules.scan(&tr.log);
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
    let _in = Inside::enter();
    crate::diag::init();
    // Resolved even when tracing is off: the wrappers still forward, and no forward may reach
    // `dlsym` later (in a signal handler).
    crate::real::resolve_all();
    let config = Config::from_env();
    if config.disabled {
        STATE.store(OFF, Ordering::Release);
        return;
    }
    crate::real::init_single_threaded();
    threads::check_tid_offset();
    chain::init();
    // SAFETY: plain system call.
    let ppid = unsafe { libc::getppid() } as u32;
    match build(config, ppid) {
        Ok(tr) => {
            TRACKER.store(tr as *const Tracker as *mut Tracker, Ordering::Release);
            register_thread(tr, None);
            crate::policy::init(tr, tr.config.policy.as_deref());
            crate::service::init(tr, tr.config.signal.as_deref());
            #[cfg(not(test))]
            crate::interpose::signal::watch_fatal_signals();
            // SAFETY: registering a plain function as the fork child handler.
            unsafe { libc::pthread_atfork(None, None, Some(fork_child)) };
            STATE.store(READY, Ordering::Release);
        }
        Err(msg) => {
            crate::diag::line(&format!("{msg}; the program runs untraced"));
            STATE.store(OFF, Ordering::Release);
        }
    }
}

/// Where an interposed function was called from: the return address into the program and the
/// caller's stack pointer, passed by the function's entry trampoline (0 when unknown).
#[derive(Clone, Copy, Default)]
pub struct CallSite {
    pub ret: usize,
    pub sp: usize,
}

impl CallSite {
    /// The call site of a function whose stack pointer at entry (before it pushed anything) was
    /// `entry_sp`: the return address is there, and the caller's stack pointer just above it.
    ///
    /// # Safety
    /// `entry_sp` is the entry stack pointer of a function that has not returned yet.
    pub unsafe fn at_entry(entry_sp: usize) -> CallSite {
        CallSite {
            // SAFETY: per the contract, the return address is still there.
            ret: unsafe { *(entry_sp as *const usize) },
            sp: entry_sp + 8,
        }
    }
}

/// How a thread came to be, when the shim saw it created.
pub struct Birth {
    pub parent: u32,
    pub routine: u64,
    pub chain: u32,
    pub created_ns: u64,
}

/// Records of threads that ended, with when: reused for new threads once nothing can still be
/// looking at them (a wait-for walk, a flush, a live-stack question that started before the
/// exit), so that a program that runs millions of short threads keeps as many records as it had
/// threads at once, not as it ever had.
static RETIRED: Mutex<std::collections::VecDeque<(u64, ThreadRef)>> =
    Mutex::new(std::collections::VecDeque::new());
const QUARANTINE_NS: u64 = 1_000_000_000;

fn retired_record(now: u64) -> Option<&'static ThreadRec> {
    // try_lock: in a forked child the lock may be held by a thread that did not come along.
    let mut r = RETIRED.try_lock().ok()?;
    if r.front()?.0.saturating_add(QUARANTINE_NS) > now {
        return None;
    }
    let rec = r.pop_front()?.1 .0;
    drop(r);
    // SAFETY: its thread ended a second ago and no thread owns it.
    unsafe { rec.reset() };
    Some(rec)
}

fn retire_record(rec: &'static ThreadRec, now: u64) {
    if let Ok(mut r) = RETIRED.try_lock() {
        r.push_back((now, ThreadRef(rec)));
    }
}

/// Registers the calling thread and points its thread-local at its record (a new one, or one a
/// thread that ended left).
pub fn register_thread(tr: &Tracker, birth: Option<Birth>) -> &'static ThreadRec {
    crate::stack::roomy(|| register_thread_here(tr, birth))
}

#[inline(always)]
fn register_thread_here(tr: &Tracker, birth: Option<Birth>) -> &'static ThreadRec {
    let rec: &'static ThreadRec =
        retired_record(now_ns()).unwrap_or_else(|| Box::leak(Box::new(ThreadRec::new())));
    attach_thread(tr, rec, birth);
    rec
}

fn attach_thread(tr: &Tracker, rec: &'static ThreadRec, birth: Option<Birth>) {
    let tid = threads::gettid();
    rec.tid.store(tid, Ordering::Relaxed);
    rec.named.store(false, Ordering::Relaxed);
    rec.policy
        .routine
        .store(birth.as_ref().map_or(0, |b| b.routine), Ordering::Relaxed);
    // SAFETY: plain library call.
    rec.pthread
        .store(unsafe { libc::pthread_self() } as usize, Ordering::Relaxed);
    threads::set_record(rec);
    // Touching the hook registers its destructor: it runs when this thread ends.
    EXIT_HOOK.with(|_| ());
    tr.threads.insert(tid, ThreadRef(rec));
    let pthread = rec.pthread.load(Ordering::Relaxed);
    tr.by_pthread.insert(pthread, tid);
    // A join that began before this thread ran made its thread object without knowing the tid:
    // it is this thread's (the joiner looks at `by_pthread` again after making it).
    std::sync::atomic::fence(Ordering::SeqCst);
    if let Some(obj) = tr.objects.get(pthread) {
        if obj.kind == ObjectKind::Thread {
            let _ = obj
                .owner
                .last
                .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
    tr.by_tid[tid as usize % TID_INDEX]
        .store(rec as *const ThreadRec as *mut ThreadRec, Ordering::Release);
    tr.live.fetch_add(1, Ordering::Relaxed);
    let b = birth.unwrap_or(Birth {
        parent: 0,
        routine: 0,
        chain: 0,
        created_ns: now_ns(),
    });
    tr.log.write(
        &ThreadStart {
            tid,
            parent_tid: b.parent,
            ns: b.created_ns,
            start_routine: b.routine,
            chain_id: b.chain,
            is_main: u8::from(tid == getpid()),
        }
        .into(),
    );
}

/// A thread the shim has not seen start (the main thread before the constructor, threads made
/// without `pthread_create`) calls an interposed function.
#[cold]
pub fn adopt_current_thread() -> Option<&'static ThreadRec> {
    if STATE.load(Ordering::Acquire) == UNINIT {
        init();
        let p = threads::own_record();
        if !p.is_null() {
            // SAFETY: records are leaked.
            return Some(unsafe { &*p });
        }
    }
    let tr = tracker()?;
    let _in = Inside::enter();
    Some(register_thread(tr, None))
}

/// The calling thread ends: add its counts, record its name and exit, and stop tracking it.
pub fn thread_exited() {
    crate::stack::roomy(thread_exited_here)
}

#[inline(always)]
fn thread_exited_here() {
    let p = threads::own_record();
    if p.is_null() {
        threads::mark_exited();
        return;
    }
    threads::set_record(std::ptr::null());
    let _in = Inside::enter();
    // SAFETY: records are leaked; this is the owning thread.
    let rec = unsafe { &*p };
    rec.fold_all();
    if let Some(tr) = tracker() {
        // A thread cancelled in a wait (a cancellation point such as sem_wait) never returned
        // from it: it no longer waits.
        let waited = rec.waiting_on.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !waited.is_null() {
            // SAFETY: tracking entries are leaked and never freed.
            unsafe { &*waited }.waiter_left(false, 0);
            tr.blocked.fetch_sub(1, Ordering::Relaxed);
        }
        let tid = rec.tid();
        let now = now_ns();
        // Names set with prctl(PR_SET_NAME) bypass pthread_setname_np: read the final one.
        let named = rec.named.load(Ordering::Relaxed);
        if let Some(comm) = (!named).then(threads::own_kernel_name).flatten() {
            tr.log.write(
                &ThreadName {
                    tid,
                    ns: now,
                    name: comm.trim_end().into(),
                }
                .into(),
            );
        }
        // A thread being joined: its exit ends the join's episode, as the one the joiner waited
        // for. Where it "released" is always the thread's exit, so no chain is unwound for it.
        let pthread = rec.pthread.load(Ordering::Relaxed);
        if let Some(obj) = tr.objects.get(pthread) {
            if obj.kind == ObjectKind::Thread
                && obj.owner.last.load(Ordering::Relaxed) == tid
                && obj.flags() & objects::EPISODE != 0
            {
                highwater::on_release(tr, tid, obj, now, 0);
            }
        }
        crate::sampler::thread_ending(tr, tid);
        tr.log.write(&ThreadExit { tid, ns: now }.into());
        tr.threads.remove(&tid);
        if tr
            .by_pthread
            .get(&pthread)
            .is_some_and(|e| *e.value() == tid)
        {
            tr.by_pthread.remove(&pthread);
        }
        let _ = tr.by_tid[tid as usize % TID_INDEX].compare_exchange(
            p as *mut ThreadRec,
            std::ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        tr.live.fetch_sub(1, Ordering::Relaxed);
        tr.maybe_flush(now);
        retire_record(rec, now);
    }
    drop(_in);
    threads::mark_exited();
}

extern "C" fn fork_child() {
    let Some(old) = tracker() else { return };
    STATE.store(STARTING, Ordering::Release);
    let _in = Inside::enter();
    old.log.abandon();
    match build(old.config.clone(), old.pid) {
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
                // SAFETY: as above. The parent's objects are not this log's: forget them.
                *unsafe { rec.held_locks() } = lockorder::Held::default();
                rec.waiting_on
                    .store(std::ptr::null_mut(), Ordering::Relaxed);
                attach_thread(tr, rec, None);
            }
            crate::service::after_fork_child();
            crate::sampler::after_fork_child();
            crate::policy::after_fork_child(tr);
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
        crate::stack::roomy(|| finish_here(reason))
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
    let _in = Inside::enter();
    crate::service::stop();
    tr.flush_all();
    crate::policy::write_stats(tr, true);
    end_log(tr, reason);
    if !tr.config.quiet {
        let how = if reason == end_reason::UNDERSCORE_EXIT {
            " (at _exit)"
        } else {
            ""
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
    let _in = Inside::enter();
    let empty = tr.objects.is_empty()
        && tr.live.load(Ordering::Relaxed) <= 1
        && tr.next_record.load(Ordering::Relaxed) == 1;
    if !empty {
        tr.flush_all();
        crate::policy::write_stats(tr, false);
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
    let _in = Inside::enter();
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
    crate::service::flush_by_service(300_000_000);
    crate::service::stop();
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

impl Tracker {
    /// The live thread `tid`, if the shim knows it.
    pub fn thread(&self, tid: u32) -> Option<&'static ThreadRec> {
        if tid == 0 {
            return None;
        }
        let p = self.by_tid[tid as usize % TID_INDEX].load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: records are leaked and never freed.
            let rec: &'static ThreadRec = unsafe { &*p };
            if rec.tid() == tid {
                return Some(rec);
            }
        }
        self.threads.get(&tid).map(|e| e.value().0)
    }

    /// As [`Tracker::chain`], reusing the chain last captured at the same call site and stack
    /// depth (a thread waiting again where it waited before), which saves the unwinding: the
    /// dearest part of a contended wait. Two call paths that reach one call site at the same
    /// stack depth in one thread would share a chain; that is rare and only mislabels a wait.
    pub fn chain_at(&self, t: &ThreadRec, site: CallSite) -> u32 {
        if site.ret == 0 {
            return self.chain(t);
        }
        let i = (site.ret ^ site.sp.rotate_left(20)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        // SAFETY: called by the owning thread from inside the shim, so not re-entered.
        let cached = unsafe { t.local() }.site_cache[i];
        if cached.0 == site.ret && cached.1 == site.sp && cached.2 != 0 {
            return cached.2;
        }
        let id = self.chain(t);
        // SAFETY: as above; the borrow taken by `chain` has ended.
        unsafe { t.local() }.site_cache[i] = (site.ret, site.sp, id);
        id
    }

    /// Id of the calling thread's current call chain (0 when chains are unavailable).
    pub fn chain(&self, t: &ThreadRec) -> u32 {
        let mut frames = [0u64; chain::MAX_DEPTH];
        let n = chain::capture(self.config.depth, &mut frames);
        if n == 0 {
            return 0;
        }
        let h = chain::hash(&frames[..n]);
        // SAFETY: called by the owning thread from inside the shim, so not re-entered.
        let local = unsafe { t.local() };
        let slot = &mut local.chain_cache[(h as usize) & 31];
        if slot.0 == h {
            return slot.1;
        }
        let id = self.chains.intern(&frames[..n], &self.log);
        *slot = (h, id);
        id
    }

    /// A fresh entry for an object at `addr`: the oldest spare entry of its kind if it was
    /// destroyed long enough ago, else a new one.
    fn new_object(&self, addr: usize, kind: ObjectKind) -> &'static ObjEntry {
        if let Some(q) = self.spare.get(kind as usize) {
            let now = crate::clock::coarse_ns();
            // try_lock: in a forked child the lock may be held by a thread that did not come along.
            if let Ok(mut q) = q.try_lock() {
                if q.front().is_some_and(|&(at, _)| at + REUSE_AFTER_NS <= now) {
                    if let Some((_, obj)) = q.pop_front() {
                        drop(q);
                        obj.reuse(addr);
                        return obj;
                    }
                }
            }
        }
        objects::leak_entry(ObjEntry::new(addr, kind))
    }

    /// Keeps what the creation record of an object about to enter the registry will say (it
    /// is written when the object is first written to the log, see [`Tracker::id_of`]). `site`
    /// is the creating call, if known: its chain is then usually cached.
    fn register(&self, t: &ThreadRec, obj: &ObjEntry, subtype: u32, how: u8, site: CallSite) {
        obj.create_chain
            .store(self.chain_at(t, site), Ordering::Relaxed);
        obj.subtype.store(subtype, Ordering::Relaxed);
        obj.origin.store(how, Ordering::Relaxed);
        obj.created_ns.store(now_ns(), Ordering::Relaxed);
        obj.created_tid.store(t.tid(), Ordering::Relaxed);
    }

    /// A name given through the C API before the object was tracked goes to it now that it is
    /// in the registry (by the thread that put it there).
    fn apply_pending_name(&self, obj: &ObjEntry) {
        if !self.has_pending_names.load(Ordering::Relaxed) {
            return;
        }
        let name = self
            .pending_names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&obj.addr());
        if let Some(name) = name {
            crate::policy::object_named(obj, &name);
            self.log.write(
                &ObjectName {
                    object_id: self.id_of(obj),
                    name,
                }
                .into(),
            );
        }
    }

    /// The object's id in the log, writing its creation record first if it has none yet.
    #[inline]
    pub fn id_of(&self, obj: &ObjEntry) -> u64 {
        match obj.id.load(Ordering::Acquire) {
            0 => self.publish(obj).unwrap_or(objects::CHURNED),
            id => id,
        }
    }

    /// As [`Tracker::id_of`], None for an object its destroy has just counted with the
    /// short-lived ones (a flush that found it alive a moment before must not write it).
    pub fn try_id_of(&self, obj: &ObjEntry) -> Option<u64> {
        match obj.id.load(Ordering::Acquire) {
            0 => self.publish(obj),
            objects::CHURNED => None,
            id => Some(id),
        }
    }

    #[cold]
    #[inline(never)]
    fn publish(&self, obj: &ObjEntry) -> Option<u64> {
        let id = self.next_object.fetch_add(1, Ordering::Relaxed);
        if let Err(theirs) = obj
            .id
            .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
        {
            // Another thread wrote it first (its record may still be on its way), or its
            // destroy counted it with the short-lived objects.
            return (theirs != objects::CHURNED).then_some(theirs);
        }
        self.log.write(
            &ObjectCreate {
                object_id: id,
                addr: obj.addr() as u64,
                kind: obj.kind as u8,
                subtype: obj.subtype.load(Ordering::Relaxed),
                origin: obj.origin.load(Ordering::Relaxed),
                ns: obj.created_ns.load(Ordering::Relaxed),
                tid: obj.created_tid.load(Ordering::Relaxed),
                chain_id: obj.create_chain.load(Ordering::Relaxed),
            }
            .into(),
        );
        Some(id)
    }

    /// The live object at `addr`, registering it on first use (static initializers, objects
    /// initialised before the shim started). Caches it for the thread.
    pub fn object(
        &self,
        t: &ThreadRec,
        addr: usize,
        kind: ObjectKind,
        subtype: u32,
    ) -> &'static ObjEntry {
        if let Some((_, obj)) = t.cached(addr) {
            return obj;
        }
        crate::stack::roomy(|| self.object_uncached(t, addr, kind, subtype))
    }

    fn object_uncached(
        &self,
        t: &ThreadRec,
        addr: usize,
        kind: ObjectKind,
        subtype: u32,
    ) -> &'static ObjEntry {
        let obj = match self.objects.get(addr) {
            Some(obj) => obj,
            None => {
                let fresh = self.new_object(addr, kind);
                self.register(t, fresh, subtype, origin::FIRST_USE, CallSite::default());
                let won = self.objects.get_or_insert(addr, fresh);
                if std::ptr::eq(won, fresh) {
                    self.apply_pending_name(fresh);
                } else {
                    // Another thread registered it first: its entry wins, ours was never seen.
                    fresh.set_flag(objects::DEAD);
                    self.spare_entry(fresh);
                }
                won
            }
        };
        t.install(obj);
        obj
    }

    /// An init function called from `site` succeeded at `addr`: a new generation, whatever was
    /// there before.
    pub fn object_initialised(
        &self,
        t: &ThreadRec,
        addr: usize,
        kind: ObjectKind,
        subtype: u32,
        site: CallSite,
    ) {
        if let Some(old) = self.objects.get(addr) {
            self.retire(t, old);
        }
        let obj = self.new_object(addr, kind);
        self.register(t, obj, subtype, origin::INIT, site);
        self.objects.insert(addr, obj);
        self.apply_pending_name(obj);
        t.install(obj);
    }

    /// A destroy function succeeded at `addr`.
    pub fn object_destroyed(&self, t: &ThreadRec, addr: usize) {
        if let Some(obj) = self.objects.get(addr) {
            self.retire(t, obj);
        }
    }

    fn retire(&self, t: &ThreadRec, obj: &'static ObjEntry) {
        // Once: two threads destroying one object at once (glibc lets both succeed) must not
        // end it twice, nor offer its entry twice.
        if obj.flags.fetch_or(objects::DEAD, Ordering::AcqRel) & objects::DEAD != 0 {
            return;
        }
        if let Some(s) = t.slot_of(obj) {
            t.forget(s);
        }
        // Its lock-order edges go with it (a flush writing them waits for this, or skips them).
        self.lock_graph
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove_node(lockorder::node(obj));
        // This entry, not whatever a new generation at the address has put there meanwhile.
        self.objects.remove(obj.addr(), obj);
        let now = now_ns();
        // Only uncontended events (acquisitions, posts, read acquisitions, signals: none bumps
        // the version) and never written: summed with the others of its creation chain, unless
        // a flush writes it first.
        let plain = obj.flags() & objects::CONTENDED == 0 && obj.untouched();
        let churned = plain
            && obj
                .id
                .compare_exchange(0, objects::CHURNED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if churned {
            self.churn(obj, now);
        } else {
            self.retire_written(t, obj, now);
        }
        if obj.reusable() {
            self.spare_entry(obj);
        }
    }

    /// Offers a dead entry for reuse.
    fn spare_entry(&self, obj: &'static ObjEntry) {
        if let Some(q) = self.spare.get(obj.kind as usize) {
            let now = crate::clock::coarse_ns();
            let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() < SPARE_MAX {
                q.push_back((now, obj));
            }
        }
    }

    /// Counts an object destroyed before it was ever written to the log with the others of its
    /// kind and creation chain.
    fn churn(&self, obj: &ObjEntry, now: u64) {
        let mut map = self.churned.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = (obj.kind as u8, obj.create_chain.load(Ordering::Relaxed));
        if map.len() >= CHURN_KEYS && !map.contains_key(&key) {
            key.1 = 0;
        }
        let c = map.entry(key).or_default();
        let lifetime = now.saturating_sub(obj.created_ns.load(Ordering::Relaxed));
        c.count += 1;
        c.acquisitions += obj.acquisitions.load(Ordering::Relaxed);
        c.lifetime_total = c.lifetime_total.saturating_add(lifetime);
        c.lifetime_max = c.lifetime_max.max(lifetime);
        for (key, v) in obj.extra_counts() {
            match c.counters.iter_mut().find(|x| x.0 == key) {
                Some(x) => x.1 += v,
                None => c.counters.push((key, v)),
            }
        }
        c.changed = true;
        self.churn_changed.store(true, Ordering::Relaxed);
    }

    /// Writes the contended waits in progress, with who holds what they wait for, when there
    /// are some or were some at the last flush: a program that hangs (a lost wake-up, a mutex
    /// shared with a process that stopped) is killed with its threads still waiting, and the
    /// log must say for what, and since when.
    /// Whether the thread `tid` registered with the shim (counted in `live`).
    pub fn is_registered(&self, tid: u32) -> bool {
        self.threads.contains_key(&tid)
    }

    /// The wait the shim tracks that thread `tid` is in now, if any: (its object's kind as u8
    /// plus 1, the object's id in the log or 0), for the sampler.
    pub fn tracked_wait_of(&self, tid: u32) -> Option<(u8, u64)> {
        let e = self.threads.get(&tid)?;
        let p = e.value().0.waiting_on.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: tracking entries are leaked and never freed.
        let obj: &ObjEntry = unsafe { &*p };
        Some((obj.kind as u8 + 1, self.try_id_of(obj).unwrap_or(0)))
    }

    fn write_open_waits(&self, now: u64) {
        let mut waits = Vec::new();
        for e in self.threads.iter() {
            let t = e.value().0;
            let p = t.waiting_on.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: tracking entries are leaked and never freed.
            let obj: &ObjEntry = unsafe { &*p };
            let Some(object_id) = self.try_id_of(obj) else {
                continue;
            };
            waits.push(waitshim_format::OpenWait {
                tid: t.tid(),
                object_id,
                since_ns: t.wait_start.load(Ordering::Relaxed),
                chain_id: t.wait_chain.load(Ordering::Relaxed),
                holder_tid: obj.holder(true),
            });
        }
        let open = !waits.is_empty();
        if open || self.waits_were_open.load(Ordering::Relaxed) {
            self.log
                .write(&waitshim_format::OpenWaits { ns: now, waits }.into());
        }
        self.waits_were_open.store(open, Ordering::Relaxed);
    }

    /// Writes the sums of quiet objects (see [`QUIET_WRITTEN_MAX`]) that changed since they were
    /// last written, and a count of 0 for those none of which is left.
    fn write_quiet(&self, now_sums: HashMap<(u8, u32), QuietSum>, now: u64) {
        let mut last = self.quiet_sums.lock().unwrap_or_else(|e| e.into_inner());
        if now_sums.is_empty() && last.is_empty() {
            return;
        }
        let gone: Vec<(u8, u32)> = last
            .keys()
            .filter(|k| !now_sums.contains_key(k))
            .copied()
            .collect();
        let changed = now_sums
            .iter()
            .filter(|(k, v)| last.get(k) != Some(v))
            .map(|(&k, v)| (k, v.clone()))
            .chain(gone.into_iter().map(|k| (k, QuietSum::default())));
        for ((kind, chain_id), mut sum) in changed {
            sum.counters.sort_unstable();
            self.log.write(
                &waitshim_format::ObjectsQuiet {
                    kind,
                    chain_id,
                    ns: now,
                    count: sum.count,
                    acquisitions: sum.acquisitions,
                    owner_changes: sum.owner_changes,
                    counters: sum
                        .counters
                        .iter()
                        .map(|&(key, value)| CounterValue { key, value })
                        .collect(),
                }
                .into(),
            );
        }
        *last = now_sums;
    }

    /// Writes the sums of destroyed objects that changed since they were last written.
    fn write_churned(&self, now: u64) {
        if !self.churn_changed.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut map = self.churned.lock().unwrap_or_else(|e| e.into_inner());
        for (&(kind, chain_id), c) in map.iter_mut().filter(|(_, c)| c.changed) {
            c.changed = false;
            self.log.write(
                &ObjectsChurned {
                    kind,
                    chain_id,
                    ns: now,
                    count: c.count,
                    acquisitions: c.acquisitions,
                    lifetime_total_ns: c.lifetime_total,
                    lifetime_max_ns: c.lifetime_max,
                    counters: c
                        .counters
                        .iter()
                        .map(|&(key, value)| CounterValue { key, value })
                        .collect(),
                }
                .into(),
            );
        }
    }

    /// The end of an object written to the log: its last counters, and its destruction.
    fn retire_written(&self, t: &ThreadRec, obj: &ObjEntry, now: u64) {
        // Its waits still in threads' cells go into its last counters: those cells are added
        // to a dead entry later, which is not written again.
        let mut waits = HashMap::new();
        if obj.flags() & objects::CONTENDED != 0 {
            for e in self.threads.iter() {
                e.value().0.waits.gather(&mut waits);
            }
        }
        let key = obj as *const ObjEntry as usize;
        self.write_counters(obj, now, 0, waits.get(&key), true);
        self.log.write(
            &ObjectDestroy {
                object_id: self.id_of(obj),
                ns: now,
                tid: t.tid(),
            }
            .into(),
        );
    }

    pub fn name_object(&self, addr: usize, name: String) {
        match self.objects.get(addr) {
            Some(obj) => {
                crate::policy::object_named(obj, &name);
                self.log.write(
                    &ObjectName {
                        object_id: self.id_of(obj),
                        name,
                    }
                    .into(),
                )
            }
            None => {
                self.pending_names
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(addr, name);
                self.has_pending_names.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Writes an object's counters and kind counters; with `details`, also its wait sites
    /// (they change only with contended activity). `extra` acquisitions and `pending` waits
    /// are still in threads' caches.
    fn write_counters(
        &self,
        obj: &ObjEntry,
        now: u64,
        extra: u64,
        pending: Option<&waits::Pending>,
        details: bool,
    ) {
        let Some(id) = self.try_id_of(obj) else {
            return;
        };
        // Written: from now on the flush compares what it wrote with what there is.
        let b = obj.busy();
        let v = b.version.load(Ordering::Relaxed);
        let counters = obj.counters(id, now, extra, pending);
        b.flushed_quiet.store(
            counters.acquisitions
                + b.quiet.load(Ordering::Relaxed)
                + pending.map_or(0, |p| p.quiet),
            Ordering::Relaxed,
        );
        b.flushed_waits
            .store(pending.map_or(0, |p| p.waits), Ordering::Relaxed);
        self.log.write(&counters.into());
        if let Some(k) = obj.kind_counters(id, now, pending) {
            self.log.write(&k.into());
        }
        if details {
            for site in obj.wait_sites(id, pending) {
                self.log.write(&site.into());
            }
        }
        b.flushed.store(v, Ordering::Relaxed);
    }

    /// Writes the counters of the objects that changed since the last flush, unless a flush is
    /// in progress on another thread.
    pub fn flush(&self) {
        if self.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.flush_locked(false);
    }

    /// A complete flush, waiting (briefly) for a flush in progress on another thread rather than
    /// skipping: for exit and data requests.
    pub fn flush_all(&self) {
        self.flush_waiting(true);
    }

    /// The shim thread's periodic flush: as [`Tracker::flush`], waiting for a flush in progress.
    pub fn flush_periodic(&self) {
        self.flush_waiting(false);
    }

    fn flush_waiting(&self, complete: bool) {
        let start = now_ns();
        while self.flushing.swap(true, Ordering::AcqRel) {
            if now_ns().saturating_sub(start) > 500_000_000 {
                return;
            }
            // SAFETY: plain system call.
            unsafe { libc::sched_yield() };
        }
        self.flush_locked(complete);
    }

    /// Acquisitions, kind-specific counts and waits still counted in threads' caches, by
    /// object (read, not taken: only their threads change them).
    fn pending_counts(&self) -> (HashMap<usize, u64>, HashMap<usize, waits::Pending>) {
        let mut pending: HashMap<usize, u64> = HashMap::new();
        let mut waits: HashMap<usize, waits::Pending> = HashMap::new();
        for e in self.threads.iter() {
            let t = e.value().0;
            for s in &t.slots {
                let n = s.pending.load(Ordering::Relaxed);
                let aux = s.aux.each_ref().map(|a| a.load(Ordering::Relaxed));
                if n == 0 && aux == [0, 0] {
                    continue;
                }
                let Some(obj) = s.entry() else { continue };
                let key = obj as *const ObjEntry as usize;
                if n > 0 {
                    *pending.entry(key).or_default() += n;
                }
                for (i, &v) in aux.iter().enumerate() {
                    if let (Some(k), true) = (obj.aux_key(i), v > 0) {
                        waits.entry(key).or_default().add_quiet(k, u64::from(v));
                    }
                }
            }
            t.waits.gather(&mut waits);
        }
        (pending, waits)
    }

    /// Posts made in signal handlers on semaphores their thread had not cached
    /// ([`handler_counts::HANDLER_POSTS`]) go to their semaphores; those not registered yet wait
    /// for a later flush. Posts the full table could not keep are said in a note.
    fn place_handler_posts(&self, now: u64) {
        handler_counts::HANDLER_POSTS.drain(|addr, n| match self.objects.get(addr) {
            Some(obj) if obj.kind == ObjectKind::Semaphore && obj.flags() & objects::DEAD == 0 => {
                obj.add(waitshim_format::counter::POSTS, n);
                0
            }
            _ => n,
        });
        let lost = handler_counts::HANDLER_POSTS.take_lost();
        if lost > 0 {
            self.log.write(
                &Note {
                    ns: now,
                    level: note_level::WARNING,
                    text: format!(
                        "{lost} sem_post calls from signal handlers were not counted: more than \
                         256 semaphores were posted from handlers on threads that had not used them"
                    ),
                }
                .into(),
            );
        }
    }

    /// Objects whose counters changed through contended activity are written in full. Objects
    /// whose only change is uncontended acquisitions (counted, or still in threads' caches) are
    /// written
    /// (their counters only) at most once per `gap`, which doubles from 1 s to 5 min per object:
    /// a killed run keeps them, and the log does not grow with uncontended traffic. `complete`
    /// writes every change (exit, data requests).
    fn flush_locked(&self, complete: bool) {
        let p = threads::own_record();
        if !p.is_null() {
            // SAFETY: our own record; folding touches only atomics.
            unsafe { &*p }.fold_all();
        }
        let now = now_ns();
        self.place_handler_posts(now);
        // Edges first: the objects they name are written with them, and are no longer quiet.
        lockorder::write_edges(
            self,
            &mut self.lock_graph.lock().unwrap_or_else(|e| e.into_inner()),
        );
        let (pending, waits) = self.pending_counts();
        let mut quiet: HashMap<(u8, u32), QuietSum> = HashMap::new();
        self.objects.for_each(|obj| {
            if obj.flags() & objects::DEAD != 0 {
                // Being destroyed: its last counters are written by the destroy.
                return;
            }
            let key = obj as *const ObjEntry as usize;
            let extra = pending.get(&key).copied().unwrap_or(0);
            let waiting = waits.get(&key);
            let unwritten_quiet = obj.id.load(Ordering::Acquire) == 0
                && obj.flags() & objects::CONTENDED == 0
                && obj.untouched()
                && waiting.is_none();
            if unwritten_quiet && self.quiet_written.load(Ordering::Relaxed) >= QUIET_WRITTEN_MAX {
                let sum = quiet
                    .entry((obj.kind as u8, obj.create_chain.load(Ordering::Relaxed)))
                    .or_default();
                sum.count += 1;
                sum.acquisitions += obj.acquisitions.load(Ordering::Relaxed) + extra;
                sum.owner_changes += obj.owner_changes();
                for (k, v) in obj.extra_counts() {
                    match sum.counters.iter_mut().find(|c| c.0 == k) {
                        Some(c) => c.1 += v,
                        None => sum.counters.push((k, v)),
                    }
                }
                return;
            }
            if unwritten_quiet {
                self.quiet_written.fetch_add(1, Ordering::Relaxed);
            }
            // An object never written has no busy part yet: its version is 1, nothing flushed.
            let l = |f: fn(&objects::Busy) -> &AtomicU64, none: u64| {
                obj.busy_if().map_or(none, |b| f(b).load(Ordering::Relaxed))
            };
            if l(|b| &b.version, 1) != l(|b| &b.flushed, 0)
                || waiting.map_or(0, |w| w.waits) != l(|b| &b.flushed_waits, 0)
            {
                self.write_counters(obj, now, extra, waiting, true);
            } else if obj.acquisitions.load(Ordering::Relaxed)
                + extra
                + l(|b| &b.quiet, 0)
                + waiting.map_or(0, |w| w.quiet)
                != l(|b| &b.flushed_quiet, 0)
                && (complete || now >= l(|b| &b.quiet_until, 0))
            {
                self.write_counters(obj, now, extra, waiting, false);
                let b = obj.busy();
                let gap =
                    (b.quiet_gap.load(Ordering::Relaxed) * 2).clamp(1_000_000_000, 300_000_000_000);
                b.quiet_gap.store(gap, Ordering::Relaxed);
                b.quiet_until.store(now + gap, Ordering::Relaxed);
            }
        });
        self.write_churned(now);
        self.write_quiet(quiet, now);
        self.write_open_waits(now);
        self.last_flush.store(now, Ordering::Relaxed);
        self.flushing.store(false, Ordering::Release);
    }

    /// Flushes if the last flush is old: counters reach the log while the run goes, so a killed
    /// run still has them.
    pub fn maybe_flush(&self, now: u64) {
        if now.saturating_sub(self.last_flush.load(Ordering::Relaxed)) >= FLUSH_EVERY_NS {
            self.flush();
        }
    }
}
