//! What the core needs from the layers above it, registered once at start by the runtime
//! (`runtime.rs`, from the library constructor): the policy's decision for a contended
//! wait, live holder stacks, and the steps of the life cycle that belong to the shim's own
//! thread and to the policy. The core names none of those layers: it calls what is registered
//! here (one atomic load; async-signal-safe), and without it tracks as with the built-in policy.

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use super::Tracker;
use crate::policy_api::{Answer, Facts, StackBox, WaitContext};

pub struct Hooks {
    /// Whether a user's policy is in force (else every waiter's chain is collected and the
    /// policy is not asked per wait).
    pub selective: fn() -> bool,
    /// The policy's decision for a contended wait that begins.
    pub decide: fn(&WaitContext, &mut dyn Facts) -> Answer,
    /// The frames of what thread `holder` (whose mailbox is given) of process `pid` is doing
    /// now, at most `depth`, and how they were taken (`HolderStack::live`).
    pub live_stack: LiveStack,
    /// Tracking started (before any program thread is tracked, unless another library's
    /// constructor called in first): the policy, data requests.
    pub started: fn(&Tracker),
    /// In a forked child, once the child's tracker is built.
    pub forked_child: fn(&Tracker),
    /// The process ends: the shim's thread must stop touching the log. `in_handler`: in a
    /// signal handler, where this thread may neither allocate nor lock, so the shim's thread is
    /// asked for a complete flush first.
    pub ending: fn(&Tracker, in_handler: bool),
    /// A tracked thread ends (on that thread, before its exit record): what the layers above
    /// can learn only from the thread itself (the sampler's last figures of it).
    pub thread_ending: fn(&Tracker, tid: u32),
    /// Every counter was just written (exit, exec): what the layers above keep reaches the log
    /// too (`all`: also what did not change since it was last written).
    pub flushed: fn(&Tracker, all: bool),
    /// `WAITSHIM_DELAY`'s decision for a lock, asked once per object while a delay is armed
    /// (`super::delayed`): its rule and busy delay per critical section, None for no delay.
    /// Given the object's C-API name and, when a rule asks, its creation chain's functions.
    pub delay: DelayFor,
}

/// See [`Hooks::delay`].
pub type DelayFor =
    fn(name: Option<&str>, creation: &mut dyn FnMut() -> Vec<Box<str>>) -> Option<(u32, u64)>;

/// See [`Hooks::live_stack`]: (frames, how they were taken).
pub type LiveStack =
    fn(pid: u32, holder: u32, mailbox: &StackBox, depth: usize) -> Option<(Vec<u64>, u8)>;

static HOOKS: AtomicPtr<Hooks> = AtomicPtr::new(std::ptr::null_mut());
/// The `started` hook ran for this process.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Registers the layers above the core (once, from the library constructor). If tracking
/// started already (another library's constructor called an interposed function first), they
/// start now.
pub fn register(hooks: &'static Hooks) {
    HOOKS.store(hooks as *const Hooks as *mut Hooks, Ordering::SeqCst);
    // Paired with the fence in `init` after tracking is on: one of the two sees the other.
    std::sync::atomic::fence(Ordering::SeqCst);
    if let Some(tr) = super::tracker() {
        start(tr);
    }
}

#[inline]
pub fn get() -> Option<&'static Hooks> {
    let p = HOOKS.load(Ordering::SeqCst);
    // SAFETY: registered from a `&'static Hooks`.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Runs the `started` hook once, if registered.
pub(super) fn start(tr: &Tracker) {
    if let Some(h) = get() {
        if !STARTED.swap(true, Ordering::AcqRel) {
            // What they call goes straight to the real functions, also when they start late
            // (from the constructor, after another library's constructor started tracking).
            let _in = super::threads::InShim::enter();
            (h.started)(tr);
        }
    }
}
