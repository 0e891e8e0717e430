//! Every record the shim writes. Times are `CLOCK_MONOTONIC` nanoseconds (the run's start is in
//! [`RunStart`]), thread ids are kernel tids, chain ids refer to [`Chain`] records (0 = none),
//! object ids to [`ObjectCreate`] records.

use crate::wire::{Cursor, Field, Sink};
use crate::{wire_struct, DecodeError};

/// What kind of sync object a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ObjectKind {
    Mutex = 1,
    RwLock = 2,
    Cond = 3,
    Semaphore = 4,
    Spin = 5,
    Barrier = 6,
    Thread = 7,
    /// A futex word the program waits on through `syscall(SYS_futex, ...)` (Rust's `std::sync`,
    /// libstdc++'s atomic waits, hand-written futexes): no owner the shim can see.
    Futex = 8,
}

impl ObjectKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Mutex,
            2 => Self::RwLock,
            3 => Self::Cond,
            4 => Self::Semaphore,
            5 => Self::Spin,
            6 => Self::Barrier,
            7 => Self::Thread,
            8 => Self::Futex,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::RwLock => "rwlock",
            Self::Cond => "cond",
            Self::Semaphore => "semaphore",
            Self::Spin => "spinlock",
            Self::Barrier => "barrier",
            Self::Thread => "thread",
            Self::Futex => "futex",
        }
    }
}

/// How the shim came to know an object.
pub mod origin {
    /// Passed to an init function.
    pub const INIT: u8 = 1;
    /// First seen in a lock call (static initializer, or initialised before the shim was ready).
    pub const FIRST_USE: u8 = 2;
}

/// Mutex subtype bits, as glibc stores them in `__data.__kind`.
pub mod mutex_kind {
    pub const TYPE_MASK: u32 = 3;
    pub const NORMAL: u32 = 0;
    pub const RECURSIVE: u32 = 1;
    pub const ERRORCHECK: u32 = 2;
    pub const ADAPTIVE: u32 = 3;
    pub const ROBUST: u32 = 16;
    pub const PRIO_INHERIT: u32 = 32;
    pub const PRIO_PROTECT: u32 = 64;
    pub const PSHARED: u32 = 128;
}

/// Why a contention record was opened.
pub mod contention_reason {
    /// The waiter count on the object rose above the global highwater mark.
    pub const EXCEEDED: u8 = 1;
    /// The waiter count reached the highwater mark while every thread but the holder (every
    /// thread, on an object nobody holds) was blocked, as the shim counted them.
    pub const SERIALISED: u8 = 2;
    /// The object's waiter count reached its own highest so far (below the global mark).
    pub const OBJECT_PEAK: u8 = 3;

    /// The name readers show for a reason (as in the JSON report); None for a code this
    /// version does not know.
    pub fn name(reason: u8) -> Option<&'static str> {
        match reason {
            EXCEEDED => Some("exceeded"),
            SERIALISED => Some("serialised"),
            OBJECT_PEAK => Some("object_peak"),
            _ => None,
        }
    }
}

/// Keys of [`KindCounters`] values: counters that only some kinds of object have, and the
/// reasons waits ended. New keys may appear; readers show the ones they know.
pub mod counter {
    // How waits ended (reason codes).
    /// The object was acquired (mutex, rwlock, semaphore, spinlock, join).
    pub const ENDED_ACQUIRED: u16 = 1;
    /// A condition variable wait ended after `pthread_cond_signal`; a futex wait was woken.
    pub const ENDED_SIGNALLED: u16 = 2;
    /// A condition variable wait ended after `pthread_cond_broadcast`.
    pub const ENDED_BROADCAST: u16 = 3;
    pub const ENDED_TIMED_OUT: u16 = 4;
    /// EINTR (semaphores).
    pub const ENDED_INTERRUPTED: u16 = 5;
    /// A condition variable wait returned with no signal or broadcast since it began.
    pub const ENDED_SPURIOUS: u16 = 6;
    /// Any other error return; by errno in the keys from [`ENDED_ERRNO_BASE`].
    pub const ENDED_ERROR: u16 = 7;
    /// EOWNERDEAD: acquired, the previous owner died holding it.
    pub const ENDED_OWNER_DIED: u16 = 8;
    /// A barrier wait ended (all threads arrived).
    pub const ENDED_RELEASED: u16 = 9;
    /// Acquired within a short back-off after finding the object busy, without blocking: a
    /// contended acquisition that takes no part in waiter counts or the highwater mark.
    pub const ENDED_BRIEF: u16 = 10;

    /// Waits that ended in error, by errno: key `ENDED_ERRNO_BASE + errno` (errno 1 to
    /// [`MAX_ERRNO`]). They add up to [`ENDED_ERROR`], or less when an object saw more distinct
    /// errnos than the shim keeps apart.
    pub const ENDED_ERRNO_BASE: u16 = 1000;
    pub const MAX_ERRNO: u16 = 4095;

    /// The key counting waits that ended with `errno`, if it is one.
    pub fn ended_errno(errno: i32) -> Option<u16> {
        u16::try_from(errno)
            .ok()
            .filter(|e| (1..=MAX_ERRNO).contains(e))
            .map(|e| ENDED_ERRNO_BASE + e)
    }

    /// The errno a key from [`ENDED_ERRNO_BASE`] counts, if it is such a key.
    pub fn errno_of(key: u16) -> Option<u16> {
        key.checked_sub(ENDED_ERRNO_BASE)
            .filter(|e| (1..=MAX_ERRNO).contains(e))
    }

    // Condition variables.
    pub const SIGNALS: u16 = 20;
    pub const BROADCASTS: u16 = 21;
    /// Time from the wake-up (the last signal or broadcast) to the return of the wait: the
    /// re-acquisition of the mutex, where a thundering herd shows.
    pub const REACQUIRE_WAIT_TOTAL_NS: u16 = 22;
    pub const REACQUIRE_WAIT_MAX_NS: u16 = 23;

    // Semaphores.
    pub const POSTS: u16 = 30;

    // Read side of rwlocks (the write side is in [`super::Counters`]).
    pub const READ_ACQUISITIONS: u16 = 40;
    pub const READ_CONTENDED: u16 = 41;
    pub const READ_WAIT_TOTAL_NS: u16 = 42;
    pub const READ_WAIT_MAX_NS: u16 = 43;
    pub const READ_MAX_WAITERS: u16 = 44;

    // Barriers.
    /// Rounds completed (the last arriver released the others).
    pub const ROUNDS: u16 = 50;

    // Futexes.
    /// `FUTEX_WAKE` calls that woke at least one waiter.
    pub const WAKES: u16 = 60;

    // Holds that made others wait (mutexes, rwlocks for writing, spinlocks): each is measured
    // (the sampled holds of the common counters, which then leave these out, would miss most of
    // them): from its start when that was timed (the holder waited for it, or the hold was a
    // sampled one), else from the first waiter's arrival or the previous such hold's release,
    // whichever came later.
    /// How many such holds, and their durations summed.
    pub const HOLDS_WAITED_FOR: u16 = 61;
    pub const HOLDS_WAITED_FOR_TOTAL_NS: u16 = 62;
    /// Of those, the holds whose start was not timed: measured from the first waiter's arrival
    /// (or the previous release), their lengths are lower bounds. How many, and their sum.
    pub const HOLDS_WAITED_FOR_FROM_ARRIVAL: u16 = 63;
    pub const HOLDS_WAITED_FOR_FROM_ARRIVAL_NS: u16 = 64;

    /// Reason codes (how waits ended): the key, the JSON name, the text name.
    pub const ENDED: [(u16, &str, &str); 10] = [
        (ENDED_ACQUIRED, "acquired", "acquired"),
        (ENDED_BRIEF, "brief", "brief"),
        (ENDED_OWNER_DIED, "owner_died", "owner died"),
        (ENDED_SIGNALLED, "signalled", "signalled"),
        (ENDED_BROADCAST, "broadcast", "broadcast"),
        (ENDED_SPURIOUS, "spurious", "spurious"),
        (ENDED_RELEASED, "released", "released"),
        (ENDED_TIMED_OUT, "timed_out", "timed out"),
        (ENDED_INTERRUPTED, "interrupted", "interrupted"),
        (ENDED_ERROR, "error", "error"),
    ];
}

/// How a run ended.
pub mod end_reason {
    pub const EXIT: u8 = 1;
    pub const UNDERSCORE_EXIT: u8 = 2;
    /// The process replaced its program (`execve`): the new program writes a log of its own
    /// (an [`Exec`](super::Exec) record names it).
    pub const EXEC: u8 = 3;
    /// The process was killed by a signal whose default action ends it (SIGTERM, SIGINT,
    /// SIGSEGV, SIGABRT, SIGPIPE, ...) and that the program had no handler for: the shim's
    /// handler saw it, wrote this record, and let the signal's default action end the process.
    /// `exit_status` holds the signal's number. (A signal nothing can catch, SIGKILL, and a raw
    /// `exit_group` system call leave no end record at all.) Readers older than this value show
    /// it as an unknown reason.
    pub const SIGNAL: u8 = 4;
    /// The program confined itself with a seccomp filter (through `prctl` or `syscall`): the
    /// shim ended the log just before, since its own system calls might then be refused or kill
    /// the process. The program ran on, untraced. Readers older than this value show it as an
    /// unknown reason.
    pub const CONFINED: u8 = 5;

    /// The name readers show for how a run ended; `"unknown"` for a newer code.
    pub fn name(reason: u8) -> &'static str {
        match reason {
            EXIT => "exit",
            UNDERSCORE_EXIT => "_exit",
            EXEC => "exec",
            SIGNAL => "signal",
            CONFINED => "confined",
            _ => "unknown",
        }
    }
}

/// Severity of a [`Note`].
pub mod note_level {
    pub const INFO: u8 = 1;
    pub const WARNING: u8 = 2;
}

/// Where a data request (a [`Snapshot`]) came from.
pub mod snapshot_source {
    /// The request signal (`WAITSHIM_SIGNAL`, when set: sent with `kill`).
    pub const SIGNAL: u8 = 1;
    /// The program called `waitshim_snapshot()`.
    pub const API: u8 = 2;
    /// The shim's periodic flush (no request).
    pub const PERIODIC: u8 = 3;
    /// A request through the log's mailbox (`waitshim-analyze request PID`:
    /// [`crate::contract::mailbox`]).
    pub const REQUEST: u8 = 4;

    /// The name readers show for a source; `"unknown"` for a newer code.
    pub fn name(source: u8) -> &'static str {
        match source {
            SIGNAL => "signal",
            API => "api",
            PERIODIC => "periodic",
            REQUEST => "request",
            _ => "unknown",
        }
    }
}

/// [`TaskCost::task`]: the work of the shim's own thread, by kind.
pub mod shim_task {
    /// Checking the policy file for changes, and reloading it.
    pub const POLICY_RELOAD: u8 = 1;
    /// The sampler's looks at the threads and CPUs (its last look at the end included).
    pub const SAMPLER: u8 = 2;
    /// The periodic flush of counters and policy statistics, and the every-thread-waits check.
    pub const FLUSH: u8 = 3;
    /// Data requests and complete flushes asked by other threads.
    pub const REQUESTS: u8 = 4;

    /// The name readers show for a task; `"unknown"` for a newer code.
    pub fn name(task: u8) -> &'static str {
        match task {
            POLICY_RELOAD => "policy reload",
            SAMPLER => "sampler",
            FLUSH => "flush",
            REQUESTS => "requests",
            _ => "unknown",
        }
    }
}

/// Bits of [`PolicyVersion`]'s `actions` and of the `actions` a rule lists.
pub mod action {
    /// Count how often the rule's criteria held (always-on counters are kept anyway).
    pub const COUNT: u32 = 1;
    /// A [`super::WaitEvent`] record per selected wait.
    pub const RECORD: u32 = 2;
    /// The waiting thread's call chain.
    pub const WAITER_CHAIN: u32 = 4;
    /// The chains of every thread waiting on the object at that moment ([`super::WaiterChains`]).
    pub const ALL_WAITERS: u32 = 8;
    /// Where the holder acquired the object ([`super::HolderStack`] with `live` = 0).
    pub const HOLDER_CHAIN: u32 = 16;
    /// What the holder is doing now, asked of it through a signal ([`super::HolderStack`], `live` = 1).
    pub const HOLDER_LIVE_STACK: u32 = 32;
}

wire_struct! {
    /// First record of every log.
    pub struct RunStart {
        pub pid: u32,
        pub ppid: u32,
        pub realtime_ns: u64,
        pub mono_ns: u64,
        pub ncpus: u32,
        pub exe: String,
        pub cmdline: Vec<String>,
        pub shim_version: String,
    }
}

wire_struct! {
    /// One loadable segment of a module: the program header's `p_vaddr`/`p_memsz`.
    pub struct Segment {
        pub vaddr: u64,
        pub memsz: u64,
    }
}

wire_struct! {
    /// A loaded ELF object. A runtime address `a` lies in it when `a - base` is inside a segment.
    pub struct Module {
        pub module_id: u32,
        pub base: u64,
        pub build_id: Vec<u8>,
        pub path: String,
        pub segments: Vec<Segment>,
    }
}

wire_struct! {
    /// An interned call chain: return addresses, innermost first. Written once per distinct chain.
    pub struct Chain {
        pub chain_id: u32,
        pub frames: Vec<u64>,
    }
}

wire_struct! {
    pub struct ThreadStart {
        pub tid: u32,
        pub parent_tid: u32,
        pub ns: u64,
        pub start_routine: u64,
        pub chain_id: u32,
        pub is_main: u8,
    }
}

wire_struct! {
    pub struct ThreadName {
        pub tid: u32,
        pub ns: u64,
        pub name: String,
    }
}

wire_struct! {
    pub struct ThreadExit {
        pub tid: u32,
        pub ns: u64,
    }
}

wire_struct! {
    pub struct ObjectCreate {
        pub object_id: u64,
        pub addr: u64,
        /// [`ObjectKind`] as u8.
        pub kind: u8,
        /// Kind-specific subtype: for mutexes [`mutex_kind`] bits; rwlocks their preference
        /// kind (`PTHREAD_RWLOCK_PREFER_*`); barriers their count; threads (the object a join
        /// waits on, at the `pthread_t` value) the thread's tid, 0 if not known yet.
        pub subtype: u32,
        /// [`origin`].
        pub origin: u8,
        pub ns: u64,
        pub tid: u32,
        pub chain_id: u32,
    }
}

wire_struct! {
    pub struct ObjectName {
        pub object_id: u64,
        pub name: String,
    }
}

wire_struct! {
    pub struct ObjectDestroy {
        pub object_id: u64,
        pub ns: u64,
        pub tid: u32,
    }
}

wire_struct! {
    /// Always-on counters of one object, cumulative since its creation. A later record for the
    /// same object supersedes an earlier one.
    pub struct Counters {
        pub object_id: u64,
        pub ns: u64,
        pub acquisitions: u64,
        pub contended: u64,
        pub owner_changes: u64,
        /// Try-acquisitions that found the object busy.
        pub busy: u64,
        pub timeouts: u64,
        pub errors: u64,
        pub wait_total_ns: u64,
        pub wait_max_ns: u64,
        pub hold_total_ns: u64,
        pub hold_max_ns: u64,
        /// Number of holds whose duration is in `hold_total_ns` (holds are timed only on objects
        /// that have been contended).
        pub hold_samples: u64,
        pub max_waiters: u32,
    }
}

wire_struct! {
    /// Where threads waited on an object: cumulative per (object, waiter chain); later supersedes.
    pub struct WaitSite {
        pub object_id: u64,
        pub chain_id: u32,
        pub count: u64,
        pub wait_total_ns: u64,
        pub wait_max_ns: u64,
    }
}

wire_struct! {
    pub struct CounterValue {
        /// [`counter`] key.
        pub key: u16,
        pub value: u64,
    }
}

wire_struct! {
    /// Counters of one object beyond [`Counters`]: kind-specific ones and wait-ending reasons,
    /// cumulative; a later record for the same object supersedes an earlier one.
    pub struct KindCounters {
        pub object_id: u64,
        pub ns: u64,
        pub values: Vec<CounterValue>,
    }
}

wire_struct! {
    /// Lock order: `to_object` was acquired while `from_object` was held, by `tid`, at
    /// `chain_id`. Each distinct edge is written once per thread at most; a cycle of edges is a
    /// potential deadlock even if this run did not hang.
    pub struct LockOrder {
        pub from_object: u64,
        pub to_object: u64,
        pub tid: u32,
        pub chain_id: u32,
        pub ns: u64,
    }
}

wire_struct! {
    /// A high-contention episode began: the global highwater mark condition was reached on this
    /// object. Pending until the matching [`ContentionClose`].
    pub struct ContentionOpen {
        pub record_id: u64,
        pub object_id: u64,
        pub ns: u64,
        pub level: u32,
        /// [`contention_reason`].
        pub reason: u8,
        pub holder_tid: u32,
        pub waiter_tid: u32,
        pub waiter_chain: u32,
    }
}

wire_struct! {
    pub struct WaiterRef {
        pub tid: u32,
        pub chain_id: u32,
        pub wait_ns: u64,
    }
}

wire_struct! {
    /// A high-contention episode ended: the object was disengaged while at its level.
    pub struct ContentionClose {
        pub record_id: u64,
        pub object_id: u64,
        pub ns: u64,
        /// Highest number of simultaneous waiters during the episode.
        pub level: u32,
        /// The elapsed-time counter: from the wait that opened the episode to the disengagement
        /// that ended it (the level can rise in between).
        pub elapsed_ns: u64,
        /// Distinct threads that tried to engage the object during the episode (holder included).
        pub threads_tried: u32,
        pub holder_tid: u32,
        /// Where the holder released the object (who made the others wait).
        pub holder_chain: u32,
        /// The waiters of the episode (bounded; `waiters_total` counts them all).
        pub waiters: Vec<WaiterRef>,
        pub waiters_total: u32,
        /// Later episodes on the same object and level folded into this record because they
        /// followed it within the coalescing window.
        pub coalesced: u32,
    }
}

wire_struct! {
    /// The global highwater mark rose.
    pub struct Highwater {
        pub ns: u64,
        pub hwm: u32,
        pub object_id: u64,
        pub tid: u32,
    }
}

wire_struct! {
    /// One thread of a wait-for cycle: `tid` waits for `object_id`, held by `holder_tid`.
    pub struct DeadlockEdge {
        pub tid: u32,
        pub object_id: u64,
        pub wait_chain: u32,
        pub holder_tid: u32,
    }
}

/// Values of [`Deadlock::detected_by`] that are not a thread.
pub mod deadlock {
    /// Found by the shim's thread: every thread of the process waited, with no deadline, on
    /// objects of the process, and nothing changed between two looks a second apart. The edges
    /// are every thread's wait; an object nobody holds (a condition variable, a semaphore) has
    /// holder 0: no thread is left to signal or post it.
    pub const EVERY_THREAD_WAITS: u32 = 0;
}

wire_struct! {
    /// A wait closed a cycle in the wait-for graph: these threads can never proceed. (Or, found by
    /// [`deadlock::EVERY_THREAD_WAITS`], every thread of the process waits for the others.)
    pub struct Deadlock {
        pub ns: u64,
        pub detected_by: u32,
        pub cycle: Vec<DeadlockEdge>,
    }
}

wire_struct! {
    pub struct RunEnd {
        pub ns: u64,
        /// [`end_reason`].
        pub reason: u8,
        pub exit_status: i64,
        pub hwm: u32,
        /// Records the shim could not write (log full, or written while it was unavailable).
        pub dropped: u64,
    }
}

wire_struct! {
    /// Something the shim wants the reader of the report to know (configuration, degradation).
    pub struct Note {
        pub ns: u64,
        pub level: u8,
        pub text: String,
    }
}

wire_struct! {
    /// A policy came into force at `ns` (the first at start-up; later ones after a reload).
    /// `version` counts from 1 in each process; rule indexes in other records refer to the
    /// rules of the version in force when they were written.
    pub struct PolicyVersion {
        pub version: u32,
        pub ns: u64,
        /// The file it was read from; empty for the built-in default.
        pub source: String,
        /// The policy as the shim understood it (normalised JSON).
        pub text: String,
        /// One short description per rule, in order.
        pub rules: Vec<String>,
    }
}

wire_struct! {
    /// How often one rule of a policy version acted, cumulative; a later record for the same
    /// (version, rule) supersedes an earlier one.
    pub struct RuleStats {
        pub version: u32,
        pub rule: u32,
        pub ns: u64,
        /// Requests (waits) on objects and threads the rule selects.
        pub requests: u64,
        /// Requests on which the rule's criteria held and its actions ran.
        pub acted: u64,
        /// Requests skipped because `max_waiters` was reached (until the count fell below it).
        pub suppressed: u64,
    }
}

wire_struct! {
    /// One wait a policy rule selected with the `record` action.
    pub struct WaitEvent {
        pub object_id: u64,
        pub tid: u32,
        /// When the wait began.
        pub ns: u64,
        /// How long it lasted (0 if the record was written while it still went on).
        pub wait_ns: u64,
        /// Threads waiting on the object when the rule acted, this one included.
        pub waiters: u32,
        /// How the wait ended: a [`counter`] `ENDED_*` key, 0 if it had not ended yet.
        pub reason: u16,
        pub version: u32,
        pub rule: u32,
        /// The waiter's chain if the rule collects it, else 0.
        pub chain_id: u32,
    }
}

wire_struct! {
    /// The reason of a [`WaitEvent`] already written changed: a condition variable wait found
    /// spurious at its thread's next wait (`from` signalled or broadcast, `to`
    /// [`counter::ENDED_SPURIOUS`]). The event is the one with this object, thread, start,
    /// version and rule.
    pub struct WaitEventReason {
        pub object_id: u64,
        pub tid: u32,
        pub ns: u64,
        pub version: u32,
        pub rule: u32,
        pub from: u16,
        pub to: u16,
    }
}

wire_struct! {
    /// The threads waiting on an object when a rule with `all_waiters` acted.
    pub struct WaiterChains {
        pub object_id: u64,
        pub ns: u64,
        pub version: u32,
        pub rule: u32,
        pub waiters: Vec<WaiterRef>,
    }
}

wire_struct! {
    /// The holder of an object that made `waiter_tid` wait: where it acquired the object
    /// (`live` = 0) or what it was doing when asked: `live` = 1, unwound by the holder itself on
    /// a signal; `live` = 2, scanned from its stack pointer while it was blocked in a system call
    /// (the first frame is its program counter, the others return addresses found on its stack).
    pub struct HolderStack {
        pub object_id: u64,
        pub ns: u64,
        pub holder_tid: u32,
        pub waiter_tid: u32,
        pub version: u32,
        pub rule: u32,
        pub live: u8,
        pub chain_id: u32,
    }
}

wire_struct! {
    /// A data request was served: every counter and pending record up to `ns` is in the log
    /// before this record.
    pub struct Snapshot {
        pub seq: u64,
        pub ns: u64,
        /// [`snapshot_source`].
        pub source: u8,
        /// The process that sent the request signal, when known (0 otherwise).
        pub requester_pid: u32,
    }
}

wire_struct! {
    /// Objects created and destroyed without ever being written to the log on their own (never
    /// contended, named, part of a lock-order edge, nor alive at a flush that wrote counters):
    /// summed per kind and creation chain, so that a program that creates and destroys millions
    /// of objects gets a bounded log. Cumulative: the latest record of a (`kind`, `chain_id`)
    /// pair replaces the earlier ones.
    pub struct ObjectsChurned {
        /// [`ObjectKind`] as u8.
        pub kind: u8,
        /// Where they were created (their init call, or first use).
        pub chain_id: u32,
        pub ns: u64,
        /// Objects (generations) created and destroyed so.
        pub count: u64,
        /// Their acquisitions, summed (acquisitions still counted in other threads' caches when
        /// an object was destroyed are not in it).
        pub acquisitions: u64,
        /// Their lifetimes (creation to destruction), summed, and the longest.
        pub lifetime_total_ns: u64,
        pub lifetime_max_ns: u64,
        /// Their kind-specific counts ([`counter`] keys: posts, read acquisitions, signals,
        /// broadcasts), summed; only the non-zero ones.
        pub counters: Vec<CounterValue>,
    }
}

wire_struct! {
    /// A thread of a recorded wait-for cycle ([`Deadlock`], the one written at `deadlock_ns`)
    /// stopped waiting after all: its wait had a deadline and timed out, or it was interrupted
    /// or failed. The cycle was real while it lasted, but it did not hang the threads for good.
    pub struct DeadlockBroken {
        pub deadlock_ns: u64,
        pub tid: u32,
        pub ns: u64,
        /// How that wait ended ([`counter`] `ENDED_*` key).
        pub outcome: u16,
    }
}

wire_struct! {
    /// The process is about to replace its program with `path` (an `exec` call): the log ends
    /// here if it succeeds (a [`RunEnd`] follows), and goes on if it fails (a [`Note`] says so).
    pub struct Exec {
        pub ns: u64,
        pub path: String,
    }
}

wire_struct! {
    /// Live objects the shim did not write one by one: beyond the first few thousand, an object
    /// that never mattered on its own (never contended, named, or in a lock-order edge written
    /// to the log) is summed with the others of its kind and creation chain, so that a program
    /// with a million idle mutexes does not write a million records. A later record for the
    /// same (kind, chain) pair replaces the earlier one; `count` 0 says none is left.
    pub struct ObjectsQuiet {
        /// [`ObjectKind`] as u8.
        pub kind: u8,
        pub chain_id: u32,
        pub ns: u64,
        /// Objects alive and summed here at `ns`.
        pub count: u64,
        pub acquisitions: u64,
        pub owner_changes: u64,
        /// Their kind-specific counts ([`counter`] keys), summed; only the non-zero ones.
        pub counters: Vec<CounterValue>,
    }
}

wire_struct! {
    /// One wait in progress (see [`OpenWaits`]).
    pub struct OpenWait {
        pub tid: u32,
        pub object_id: u64,
        /// When the wait began.
        pub since_ns: u64,
        pub chain_id: u32,
        /// The thread holding the object then, 0 if none or unknown: for a mutex shared between
        /// processes, a thread of another process (kernel tids are unique across processes).
        pub holder_tid: u32,
    }
}

wire_struct! {
    /// The contended waits in progress at `ns` (written at each flush that finds some, or finds
    /// none after a record that listed some): the last one in a log says which threads were
    /// still waiting, and for what, when the log ended.
    pub struct OpenWaits {
        pub ns: u64,
        pub waits: Vec<OpenWait>,
    }
}

/// Thread states in [`ThreadState::state`], as the sampler saw each thread.
pub mod thread_state {
    /// Not blocked: on a CPU or ready for one (`ThreadState::on_cpu_ns` and `run_delay_ns`
    /// tell how the interval split).
    pub const RUNNING: u8 = 1;
    /// Blocked in a system call (`ThreadState::syscall`), or asleep outside one (`syscall`
    /// -1), and not in a wait the shim tracks.
    pub const BLOCKED: u8 = 2;
    /// In a wait the shim tracks (a pthread call or a futex word it follows):
    /// `ThreadState::waiting_kind` says on what kind of object.
    pub const TRACKED_WAIT: u8 = 3;
    /// Stopped (job control or a tracer).
    pub const STOPPED: u8 = 4;
}

wire_struct! {
    /// What one thread did since its previous [`ThreadSamples`] entry (its first: since it
    /// started), and the state it was in at the sample.
    pub struct ThreadState {
        pub tid: u32,
        /// [`thread_state`].
        pub state: u8,
        /// [`ObjectKind`] as u8 plus 1 in a tracked wait, else 0.
        pub waiting_kind: u8,
        /// Time on a CPU and time ready but waiting for one (the kernel's schedstat: exact),
        /// and the timeslices run, since the previous entry.
        pub on_cpu_ns: u64,
        pub run_delay_ns: u64,
        pub timeslices: u32,
        /// The system call it was blocked in (the machine's number), -1 when none.
        pub syscall: i32,
        /// Its first argument (a descriptor for `read`, `recvfrom`, `accept`, ...; the address
        /// for `futex`).
        pub arg0: u64,
        /// What it waits on (`pipe:[123]`, `socket:[456] tcp 127.0.0.1:80 listening`, a
        /// path, `child 42`), written when the thread entered the state; empty when unchanged
        /// or nothing more than the call can be said.
        pub what: String,
        /// In a tracked wait: the object's id in the log (0 if it has none).
        pub object_id: u64,
    }
}

wire_struct! {
    /// A sample of the program's threads, by the shim's thread (`WAITSHIM_SAMPLE`): one entry
    /// per thread that ran, waited for a CPU, or changed state since the previous sample.
    /// Threads not listed stayed as they were.
    pub struct ThreadSamples {
        pub ns: u64,
        /// The sampling interval.
        pub interval_ns: u64,
        pub threads: Vec<ThreadState>,
        /// Threads of the process the sampler does not follow (beyond its descriptor budget).
        pub unsampled: u32,
    }
}

wire_struct! {
    /// How long each CPU of the machine was idle since the previous sample (`/proc/stat`,
    /// in the kernel's clock ticks turned to ns): the machine's, not only this program's.
    pub struct CpuSample {
        pub ns: u64,
        pub idle_ns: Vec<u64>,
        pub iowait_ns: Vec<u64>,
    }
}

wire_struct! {
    /// A thread's scheduler totals since it started, written by the thread itself as it ends
    /// (the sampler's last look at it may be up to an interval old, and once it is gone its
    /// `/proc` files are too): time on a CPU, time ready for one, timeslices (its `schedstat`),
    /// and its voluntary and involuntary context switches. A thread the sampler followed
    /// without a kept descriptor writes its CPU clock instead, and 0 for the time ready and the
    /// timeslices (unknown: its samples' figures stand).
    pub struct ThreadTotals {
        pub tid: u32,
        pub ns: u64,
        pub on_cpu_ns: u64,
        pub run_delay_ns: u64,
        pub timeslices: u64,
        pub voluntary: u64,
        pub involuntary: u64,
    }
}

wire_struct! {
    /// One thread's context switches so far, and its longest timeslice seen, in
    /// [`ThreadSwitches`].
    pub struct SwitchCount {
        pub tid: u32,
        /// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of its `/proc` status:
        /// totals since it started.
        pub voluntary: u64,
        pub involuntary: u64,
        /// The longest timeslice seen so far, estimated: the largest, over the sampler's
        /// intervals, of the time on a CPU divided by the timeslices run in the interval (the
        /// kernel does not give single slices; a slice longer than the others in its interval
        /// shows as their mean).
        pub longest_slice_ns: u64,
    }
}

wire_struct! {
    /// Written with a [`ThreadSamples`] when the threads listed in it ran: their context
    /// switches (read only for threads whose `schedstat` moved).
    pub struct ThreadSwitches {
        pub ns: u64,
        pub threads: Vec<SwitchCount>,
    }
}

wire_struct! {
    /// One kind of work of the shim's own thread in [`ShimCost`]: totals since the thread
    /// started.
    pub struct TaskCost {
        /// [`shim_task`].
        pub task: u8,
        pub runs: u64,
        /// CPU time spent in it (the thread's own CPU clock around each run).
        pub cpu_ns: u64,
    }
}

wire_struct! {
    /// What the shim's own thread (the sampler, flushes, policy reloads, data requests) has cost
    /// so far: written at each periodic flush and at the end, totals since it started; the
    /// last one in a log is the run's.
    pub struct ShimCost {
        pub ns: u64,
        /// The thread's CPU time, all of its work (its idle waits cost none).
        pub thread_cpu_ns: u64,
        pub tasks: Vec<TaskCost>,
    }
}

wire_struct! {
    /// A batch of one thread's contended waits, each with its begin, its end, and the thread
    /// that ended it ("who woke whom"): see [`crate::events`] for the packed `events` and
    /// [`WaitEvents::waits`] to read them. Each batch decodes on its own (its
    /// deltas start from `base_ns` and zero), so a reader may keep the latest batches only.
    pub struct WaitEvents {
        pub tid: u32,
        /// The time the first event's begin is counted from.
        pub base_ns: u64,
        /// Events of this thread left out of the log before this batch (the flight recorder,
        /// `WAITSHIM_EVENTS=ring:N`, kept only the last N seconds): cumulative.
        pub dropped: u64,
        /// The flight recorder's window (`ring:N`): readers keep only the waits that ended in
        /// the last `keep_ns` of the run (a thread that ended early wrote its own then). 0:
        /// every event is kept.
        pub keep_ns: u64,
        /// How many events `events` holds.
        pub count: u32,
        /// The events, packed ([`crate::events::encode`]).
        pub events: Vec<u8>,
    }
}

wire_struct! {
    /// Where a thread blocked outside the waits the shim tracks (in `read`, `accept`,
    /// `epoll_wait`, a sleep, an untracked futex, ...) was in its code: the sampler found it
    /// blocked in system call `syscall` at the look at `ns`, and a policy rule (or the built-in
    /// policy, `version` of the built-in, `rule` 0) asked for the waiting thread's chain. The
    /// chain is scanned from the stack pointer the kernel shows for the thread, without
    /// stopping it (its first frame is the program counter, the others are return addresses
    /// found on its stack, as in a [`HolderStack`] with `live` = 2). The wait is the one the
    /// thread's latest [`ThreadState`] entry began; `since_ns` is the look that first saw it.
    pub struct BlockedChain {
        pub tid: u32,
        pub ns: u64,
        pub since_ns: u64,
        pub syscall: i32,
        pub arg0: u64,
        pub version: u32,
        pub rule: u32,
        pub chain_id: u32,
    }
}

wire_struct! {
    /// A progress point the program declared (`WAITSHIM_PROGRESS`, `WAITSHIM_BEGIN`,
    /// `WAITSHIM_END` in `include/waitshim.h`): written once, when the point is first reached.
    /// Its counts follow in [`ProgressCounts`].
    pub struct ProgressPoint {
        /// 1, 2, ... within the process.
        pub id: u32,
        pub ns: u64,
        pub name: String,
    }
}

wire_struct! {
    /// One progress point's totals since the process started, as of `ns`.
    pub struct ProgressCount {
        pub id: u32,
        /// Visits (`WAITSHIM_PROGRESS`, and every `WAITSHIM_END`).
        pub visits: u64,
        /// When the first and the latest visit happened (0: none yet).
        pub first_ns: u64,
        pub last_ns: u64,
        /// When the first transaction began (0: none yet).
        pub first_begin_ns: u64,
        /// Transactions begun (`WAITSHIM_BEGIN`) and ended (`WAITSHIM_END`).
        pub begins: u64,
        pub ends: u64,
        /// The sums of the begin and the end times, in ns since the run started, wrapping:
        /// `ends_sum - begins_sum + (begins - ends) * (ns - run start)` (wrapping) is the time
        /// all transactions spent between their begin and their end up to `ns`, exactly,
        /// whichever begin each end belongs to.
        pub begins_sum: u64,
        pub ends_sum: u64,
    }
}

wire_struct! {
    /// The totals of every progress point that changed since the last such record: written
    /// with the periodic flush, at data requests and at the end.
    pub struct ProgressCounts {
        pub ns: u64,
        pub points: Vec<ProgressCount>,
    }
}

wire_struct! {
    /// A `WAITSHIM_DELAY` rule in force: each critical section of the locks `site` selects
    /// (a glob on their C-API name or on a function of their creation chain) was lengthened
    /// by `delay_ns` of busy waiting before its release. A run with one is slowed on purpose.
    pub struct DelayRule {
        pub rule: u32,
        /// The rule as written (`name:`/`site:` prefix included, if given).
        pub site: String,
        pub delay_ns: u64,
    }
}

wire_struct! {
    /// The critical sections of one object that `WAITSHIM_DELAY`'s rule `rule` lengthened so
    /// far, and the busy time added to them in all: cumulative (the latest record counts).
    pub struct Delayed {
        pub object_id: u64,
        pub rule: u32,
        pub ns: u64,
        pub sections: u64,
        pub total_ns: u64,
    }
}

wire_struct! {
    /// One thread's calls of `sched_yield` since it started (cumulative: the largest count of
    /// a thread is its latest), in [`ThreadYields`].
    pub struct YieldCount {
        pub tid: u32,
        pub yields: u64,
    }
}

wire_struct! {
    /// One thread's calls of `sched_yield` from one call site (the return address into the
    /// caller) since it started, in [`ThreadYields`]. A thread's first [`YIELD_SITES`] sites
    /// are counted apart; `ret` 0 counts its calls from any other.
    pub struct YieldSite {
        pub tid: u32,
        pub ret: u64,
        pub yields: u64,
    }
}

/// Call sites of `sched_yield` counted apart per thread ([`YieldSite`]).
pub const YIELD_SITES: usize = 4;

wire_struct! {
    /// The yield counts of the threads that yielded since the previous such record (written at
    /// each flush, and by a thread as it ends): exact, counted by the shim's `sched_yield`;
    /// `sites` splits them by call site.
    pub struct ThreadYields {
        pub ns: u64,
        pub threads: Vec<YieldCount>,
        pub sites: Vec<YieldSite>,
    }
}

macro_rules! records {
    ($($variant:ident = $id:literal),* $(,)?) => {
        /// A decoded record. `Unknown` is a record type this version does not know: skipped.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Record {
            $($variant($variant),)*
            Unknown { ty: u16, len: usize },
        }

        impl Record {
            pub fn type_id(&self) -> u16 {
                match self {
                    $(Record::$variant(_) => $id,)*
                    Record::Unknown { ty, .. } => *ty,
                }
            }

            pub fn encode_body<S: Sink>(&self, s: &mut S) {
                match self {
                    $(Record::$variant(r) => r.encode(s),)*
                    Record::Unknown { .. } => {}
                }
            }

            pub fn decode_body(ty: u16, body: &[u8]) -> Result<Record, DecodeError> {
                let mut c = Cursor::new(body);
                Ok(match ty {
                    $($id => Record::$variant($variant::decode(&mut c)?),)*
                    _ => Record::Unknown { ty, len: body.len() },
                })
            }
        }

        $(impl From<$variant> for Record {
            fn from(r: $variant) -> Record { Record::$variant(r) }
        })*
    };
}

records! {
    RunStart = 1,
    Module = 2,
    Chain = 3,
    ThreadStart = 4,
    ThreadName = 5,
    ThreadExit = 6,
    ObjectCreate = 7,
    ObjectName = 8,
    ObjectDestroy = 9,
    Counters = 10,
    WaitSite = 11,
    ContentionOpen = 12,
    ContentionClose = 13,
    Highwater = 14,
    Deadlock = 15,
    RunEnd = 16,
    Note = 17,
    KindCounters = 18,
    LockOrder = 19,
    PolicyVersion = 20,
    RuleStats = 21,
    WaitEvent = 22,
    WaiterChains = 23,
    HolderStack = 24,
    Snapshot = 25,
    ObjectsChurned = 26,
    WaitEventReason = 27,
    DeadlockBroken = 28,
    Exec = 29,
    ObjectsQuiet = 30,
    OpenWaits = 31,
    ThreadSamples = 32,
    CpuSample = 33,
    WaitEvents = 34,
    ThreadTotals = 36,
    ThreadSwitches = 37,
    ShimCost = 38,
    BlockedChain = 39,
    ProgressPoint = 40,
    ProgressCounts = 41,
    DelayRule = 42,
    Delayed = 43,
    ThreadYields = 44,
}
