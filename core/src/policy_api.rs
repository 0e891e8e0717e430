//! What to collect for a contended wait: the contract between the tracking core (`track`) and
//! the policy (`policy`, `livestack`). The core hands the policy a [`WaitContext`] (and answers
//! the dearer questions through [`Facts`] only when a selector asks them); the policy answers
//! with a [`Decision`] (what to collect, as `waitshim_format::action` bits); collecting
//! (unwinding, writing records) is the core's job. The state the policy keeps per object and
//! per thread lives in the core's entries as the plain cells below, whose meaning only the
//! policy knows. Neither side names the other's types: both name these.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use waitshim_format::ObjectKind;

use crate::chain::MAX_DEPTH;

/// A contended wait as the policy sees it when it begins.
pub struct WaitContext<'a> {
    pub kind: ObjectKind,
    pub addr: u64,
    /// Threads waiting on the object now, this one included.
    pub waiters: u32,
    /// The policy's cell on the object (its name given through the C API is there).
    pub object: &'a ObjectCell,
    /// The policy's cell on the waiting thread.
    pub thread: &'a ThreadCell,
}

/// What the policy may ask about a wait beyond its [`WaitContext`]: dearer to find out, asked
/// only when a selector of the policy looks at it and its cached answer is stale.
pub trait Facts {
    /// The function names of the object's creation chain, innermost first: each as its symbol
    /// is written (mangled) and, when that differs, demangled as reports show it.
    fn creation_site(&mut self) -> Vec<Box<str>>;
    /// The waiting thread's name.
    fn thread_name(&mut self) -> Option<String>;
    /// The waiting thread's group (its start routine's symbol, `main` for the main thread), as
    /// written and, when that differs, demangled; empty when unknown.
    fn thread_group(&mut self) -> Vec<Box<str>>;
    /// The depth of the waiter's call chain (the core captures it, and keeps it for the wait).
    fn stack_depth(&mut self) -> u32;
}

/// A rule acts on a wait: now, or once the wait has lasted `min_wait_ns`.
#[derive(Clone, Copy)]
pub struct Act {
    /// (policy version, rule) that acts.
    pub version: u32,
    pub rule: u32,
    /// What to collect: `waitshim_format::action` bits.
    pub collect: u32,
    /// Waiters on the object when the rule was asked (this one included).
    pub waiters: u32,
    /// 0: the rule acts now.
    pub min_wait_ns: u64,
    /// The rule's count of the waits it acted on: bumped by the core when it collects.
    pub acted: &'static AtomicU64,
}

/// The policy's answer at the start of a contended wait.
#[derive(Clone, Copy)]
pub enum Decision {
    /// No rule acts; the waiter's chain is collected when `waiter_chain` (the built-in policy,
    /// or a rule listing all waiters that selects the object).
    Pass {
        waiter_chain: bool,
    },
    Act(Act),
}

/// A [`Decision`], and when the policy looked at the object's selectors again, whether a rule
/// that selects it collects holder chains (the core then notes where the object is acquired).
#[derive(Clone, Copy)]
pub struct Answer {
    pub decision: Decision,
    pub holder_chains: Option<bool>,
}

/// The policy's state on an object: which rules select it (for one policy version), the
/// criteria's state, and what a name given through the C API and holder chains need.
#[derive(Default)]
pub struct ObjectCell {
    pub version: AtomicU32,
    pub mask: AtomicU64,
    /// Requests the rules saw on it, for `every_nth`.
    pub requests: AtomicU64,
    /// The largest waiter count acted on, for `granularity`.
    pub last_acted: AtomicU32,
    /// Where the current holder acquired the object (rules with `holder_chain`).
    pub holder_tid: AtomicU32,
    pub holder_chain: AtomicU32,
    /// The name given through the C API.
    pub name: Mutex<Option<String>>,
}

impl ObjectCell {
    /// The object was named through the C API: its selectors are looked at again.
    pub fn set_name(&self, name: &str) {
        *self.name.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.into());
        self.version.store(0, Ordering::Release);
    }
}

/// The policy's state on a thread: which rules select it (for one policy version and name).
#[derive(Default)]
pub struct ThreadCell {
    pub version: AtomicU32,
    pub mask: AtomicU64,
    /// Bumped when the thread is (re)named; the cached mask is for `seen_names`.
    pub names: AtomicU32,
    pub seen_names: AtomicU32,
    pub name: Mutex<Option<String>>,
    /// The start routine (0 for the main thread and threads the shim did not see created).
    pub routine: AtomicU64,
}

impl ThreadCell {
    /// For a new thread reusing the record of one that ended.
    pub fn reset(&self) {
        *self.name.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.names.fetch_add(1, Ordering::Release);
        self.version.store(0, Ordering::Release);
        self.routine.store(0, Ordering::Relaxed);
    }

    pub fn set_name(&self, name: &str) {
        *self.name.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.into());
        self.names.fetch_add(1, Ordering::Release);
    }
}

/// A thread's mailbox for live stack requests (`livestack`): the asker sets `state`, the
/// thread's signal handler fills in the frames. Only atomics: the handler touches it.
pub struct StackBox {
    pub state: AtomicU32,
    pub len: AtomicU32,
    pub frames: [AtomicU64; MAX_DEPTH],
}

/// [`StackBox::state`]: no question pending.
pub const STACK_IDLE: u32 = 0;

impl Default for StackBox {
    fn default() -> Self {
        StackBox {
            state: AtomicU32::new(STACK_IDLE),
            len: AtomicU32::new(0),
            frames: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl StackBox {
    /// For a new thread reusing the record of one that ended.
    pub fn reset(&self) {
        self.state.store(STACK_IDLE, Ordering::Release);
        self.len.store(0, Ordering::Relaxed);
    }
}
