//! Tracking state: the tracker (log, object and thread skiplists, interned chains, highwater
//! mark). Its life cycle (start, fork, exit) is in `lifecycle`, the thread registry in
//! `thread_registry`, objects' registration, reuse and ids in `object_life`, objects that never
//! mattered on their own in `churn`, the per-thread chain caches in `chain_cache` and the
//! writing of counters in `flush`.
//!
//! The interposed functions translate their calls into `engage` (acquire, wait, release, and
//! the calls that wait for nothing, in `no_wait`) and, for families whose calls mean more than
//! that, into `semaphore`, `rwlock`, `cond`, `barrier`, `futex` and `joins`, handing them the
//! real functions to call.

pub mod barrier;
mod chain_cache;
mod churn;
pub mod collect;
pub mod cond;
pub mod deadlock;
pub mod delayed;
mod drive;
pub mod engage;
pub mod events;
mod flush;
pub mod futex;
mod handler_counts;
mod highwater;
mod holder;
pub mod hooks;
pub mod joins;
mod lifecycle;
mod lockgraph;
mod lockorder;
mod object_life;
mod objects;
pub mod owned;
pub mod progress;
mod registry;
pub mod rwlock;
pub mod semaphore;
mod thread_registry;
// Left out of unit-test builds: it defines `__cxa_thread_atexit_impl` for the whole test program.
mod no_wait;
pub mod threads;
#[cfg(not(test))]
mod tls_dtors;
mod waits;

pub use lifecycle::{
    before_exec, confining, exec_failed, finish, finish_by_signal, init, library_loaded, log_fault,
};
pub use thread_registry::{
    adopt_current_thread, creating, register_thread, thread_exited, thread_named, thread_started,
    Birth,
};

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
use churn::{Churn, QuietSum};
use objects::{ObjEntry, Padded};
use threads::{InShim, ThreadRec, ThreadRef};

pub struct Tracker {
    pub log: Log,
    pub config: Config,
    pub(crate) pid: u32,
    pub(crate) objects: registry::Registry<ObjEntry>,
    pub(crate) threads: SkipMap<u32, ThreadRef>,
    /// Live threads by `pthread_t` (tid; 0 while a created thread has not run yet), for joins.
    pub(crate) by_pthread: SkipMap<usize, u32>,
    /// The `pthread_create` chain of each joinable thread not joined yet, by `pthread_t`: where
    /// its thread object (made when a join first waits for it) was created. Removed by the join
    /// (not at the thread's exit, which a join already under way may not have seen yet), replaced
    /// when a new thread gets the descriptor.
    pub(crate) create_chains: SkipMap<usize, u32>,
    /// Direct-mapped index of `threads` by tid, for the contended path (a skiplist lookup costs
    /// up to a few hundred ns); a miss falls back to the skiplist.
    by_tid: Box<[AtomicPtr<ThreadRec>; TID_INDEX]>,
    pub chains: Chains,
    pub(crate) modules: Modules,
    /// The global highwater mark: most threads ever seen waiting at once on one engaged object.
    pub(crate) highwater: AtomicU32,
    /// Threads alive, and threads blocked in a wait the shim sees (not ready to run). `blocked`
    /// changes at every wait: on a cache line of its own, away from the fields every wait reads.
    pub(crate) live: AtomicI32,
    /// A thread other than the main one registered at some point.
    pub(crate) threaded: AtomicBool,
    pub(crate) blocked: Padded<AtomicI32>,
    /// Threads the sampler last saw blocked in a system call outside the waits the shim tracks
    /// (a `read`, an `accept`, a sleep): not ready to run either. Up to one sampling interval
    /// old; 0 with the sampler off ([`Tracker::set_blocked_elsewhere`]).
    pub(crate) blocked_elsewhere: AtomicI32,
    next_object: AtomicU64,
    pub(crate) next_record: AtomicU64,
    last_flush: AtomicU64,
    flushing: AtomicBool,
    finished: AtomicBool,
    pub(crate) deadlocks: Mutex<Vec<Vec<(u32, u64)>>>,
    /// The lock-order graph of the live objects.
    pub(crate) lock_graph: Mutex<lockgraph::Graph<lockorder::EdgeData>>,
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
    /// The program's progress points (C API).
    pub progress: progress::Points,
}

impl Tracker {
    /// The threads the shim counts as live now (it moves when one starts or ends).
    pub fn live_threads(&self) -> i32 {
        self.live.load(Ordering::Relaxed)
    }

    /// The sampler's last count of tracked threads blocked in a system call outside the waits
    /// the shim tracks.
    pub fn set_blocked_elsewhere(&self, n: usize) {
        self.blocked_elsewhere
            .store(n.min(i32::MAX as usize) as i32, Ordering::Relaxed);
    }
}

/// Object kinds are below this (`ObjectKind as usize`).
const KINDS: usize = 9;

const UNINIT: u8 = 0;
const STARTING: u8 = 1;
const READY: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static TRACKER: AtomicPtr<Tracker> = AtomicPtr::new(std::ptr::null_mut());
/// Status passed to `exit()`, when the program called it explicitly.
pub static EXIT_STATUS: AtomicI64 = AtomicI64::new(-1);

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
