//! The collection policy in force (`WAITSHIM_POLICY`, hot-reloaded) and its evaluation at each
//! contended wait.
//!
//! Versions are published through one atomic pointer and never freed: each keeps the statistics
//! of its rules until exit, and a reload is rare, so a version costs a few hundred bytes for the
//! life of the process. (The spec names `arc-swap`; a leaked version needs no reference counting,
//! and the contended path then reads the policy with one plain load.)
//!
//! Which rules select an object is decided once per object and policy version and cached on the
//! object's tracking entry (a version number and a bit per rule); the same for the waiting
//! thread. Objects no rule selects pay the cached check and nothing else.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use waitshim_format::{
    action, HolderStack, PolicyVersion, RuleStats, WaitEvent, WaiterChains, WaiterRef,
};
use waitshim_policy::{Policy, Rule, Verdict};

use crate::clock::now_ns;
use crate::track::objects::{ObjEntry, HOLDER_CHAINS};
use crate::track::threads::ThreadRec;
use crate::track::{CallSite, Tracker};

/// One version of the policy.
pub struct Active {
    pub version: u32,
    pub policy: Policy,
    /// A user's policy (false: the built-in default, which collects every waiter chain and is
    /// not evaluated per wait).
    pub user: bool,
    pub counters: Box<[RuleCounters]>,
}

#[derive(Default)]
pub struct RuleCounters {
    pub requests: AtomicU64,
    pub acted: AtomicU64,
    pub suppressed: AtomicU64,
    /// `requests + acted + suppressed` when last written, to skip unchanged rules.
    written: AtomicU64,
}

static ACTIVE: AtomicPtr<Active> = AtomicPtr::new(std::ptr::null_mut());
static VERSIONS: Mutex<Vec<&'static Active>> = Mutex::new(Vec::new());
/// The policy file, and what it looked like when last read.
static SOURCE: Mutex<Option<(String, Stamp)>> = Mutex::new(None);

#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct Stamp {
    mtime_ns: i128,
    size: u64,
    ino: u64,
}

fn stamp(path: &str) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        size: m.size(),
        ino: m.ino(),
    })
}

/// The version in force.
#[inline]
pub fn active() -> Option<&'static Active> {
    let p = ACTIVE.load(Ordering::Acquire);
    // SAFETY: versions are leaked and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Per-object policy state: which rules select it (cached per version) and the criteria state.
#[derive(Default)]
pub struct ObjPolicy {
    version: AtomicU32,
    mask: AtomicU64,
    /// Requests the rules saw on it, for `every_nth`.
    requests: AtomicU64,
    /// The largest waiter count acted on, for `granularity`.
    last_acted: AtomicU32,
    /// Where the current holder acquired the object (rules with `holder_chain`).
    pub holder_tid: AtomicU32,
    pub holder_chain: AtomicU32,
    /// The name given through the C API.
    name: Mutex<Option<String>>,
}

/// Per-thread policy state.
#[derive(Default)]
pub struct ThreadPolicy {
    version: AtomicU32,
    mask: AtomicU64,
    /// Bumped when the thread is (re)named; the cached mask is for `seen_names`.
    names: AtomicU32,
    seen_names: AtomicU32,
    name: Mutex<Option<String>>,
    /// The start routine (0 for the main thread and threads the shim did not see created).
    pub routine: AtomicU64,
}

impl ThreadPolicy {
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

fn obj_policy(obj: &ObjEntry) -> &ObjPolicy {
    obj.busy().policy.get_or_init(Box::default)
}

/// An object was named through the C API.
pub fn object_named(obj: &ObjEntry, name: &str) {
    *obj_policy(obj)
        .name
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(name.into());
    // Re-evaluate the object's selectors.
    obj_policy(obj).version.store(0, Ordering::Release);
}

/// Reads `WAITSHIM_POLICY` (None: the built-in default) and puts it in force. An invalid file
/// leaves the default in force, says why on stderr and in the log, and is read again when it
/// changes.
pub fn init(tr: &Tracker, path: Option<&str>) {
    let Some(path) = path else {
        activate(tr, waitshim_policy::builtin(), "", false);
        return;
    };
    *SOURCE.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((path.to_string(), stamp(path).unwrap_or_default()));
    match read(path) {
        Ok(p) => {
            activate(tr, p, path, true);
        }
        Err(e) => {
            crate::service::say(
                tr,
                &format!("WAITSHIM_POLICY={path}: {e}; collecting with the built-in policy"),
            );
            activate(tr, waitshim_policy::builtin(), "", false);
        }
    }
}

fn read(path: &str) -> Result<Policy, String> {
    let text = crate::config::read_small_file(path, POLICY_MAX_BYTES)?;
    waitshim_policy::parse(&text).map_err(|e| e.to_string())
}

/// A policy file larger than this is refused (real ones are a few hundred bytes).
const POLICY_MAX_BYTES: u64 = 1 << 20;

fn activate(tr: &Tracker, policy: Policy, source: &str, user: bool) -> u32 {
    let mut versions = VERSIONS.lock().unwrap_or_else(|e| e.into_inner());
    let version = versions.len() as u32 + 1;
    let counters = policy
        .rules
        .iter()
        .map(|_| RuleCounters::default())
        .collect();
    let a: &'static Active = Box::leak(Box::new(Active {
        version,
        policy,
        user,
        counters,
    }));
    versions.push(a);
    write_version(tr, a, source);
    if a.policy.wants_live_stack() {
        crate::livestack::setup(tr, a.policy.stack_signal_spec());
    }
    // Under the lock: two reloads at once publish in the order they are numbered.
    ACTIVE.store(a as *const Active as *mut Active, Ordering::Release);
    drop(versions);
    version
}

fn write_version(tr: &Tracker, a: &Active, source: &str) {
    tr.log.write(
        &PolicyVersion {
            version: a.version,
            ns: now_ns(),
            source: source.into(),
            text: waitshim_policy::to_json(&a.policy),
            rules: a.policy.rules.iter().map(Rule::summary).collect(),
        }
        .into(),
    );
}

/// Reads the policy file again (the C API's `waitshim_policy_reload`, or a change noticed by
/// the shim's thread). Returns the new version; an invalid file keeps the old one.
pub fn reload(tr: &Tracker) -> Result<u32, String> {
    let path = source_path()?;
    let now = stamp(&path).unwrap_or_default();
    if let Ok(mut src) = SOURCE.try_lock() {
        if let Some((_, s)) = &mut *src {
            *s = now;
        }
    }
    match read(&path) {
        Ok(p) => Ok(activate(tr, p, &path, true)),
        Err(e) => {
            let keep = active().map_or(0, |a| a.version);
            let msg = format!("policy reload from {path}: {e}; keeping policy version {keep}");
            crate::service::say(tr, &msg);
            Err(msg)
        }
    }
}

/// The policy file's path. The lock is only tried: in a forked child it may be held for ever
/// by a thread that did not come along (it is held only while a path is copied).
fn source_path() -> Result<String, String> {
    let src = SOURCE
        .try_lock()
        .map_err(|_| "the policy is being reloaded".to_string())?;
    match &*src {
        Some((p, _)) => Ok(p.clone()),
        None => Err("no policy file (WAITSHIM_POLICY is not set)".into()),
    }
}

/// Reloads when the policy file changed since it was last read.
pub fn reload_if_changed(tr: &Tracker) {
    let (Ok(path), Ok(seen)) = (
        source_path(),
        SOURCE
            .try_lock()
            .map(|s| s.as_ref().map(|(_, st)| *st).unwrap_or_default()),
    ) else {
        return;
    };
    if stamp(&path).is_some_and(|now| now != seen) {
        let _ = reload(tr);
    }
}

/// Writes the statistics of every rule that changed since they were last written (`all`:
/// every rule that ever saw a request).
pub fn write_stats(tr: &Tracker, all: bool) {
    // try_lock: this also runs at `_exit`, which a signal handler may call while the
    // interrupted code holds the lock; statistics are then left as last written.
    let Ok(versions) = VERSIONS.try_lock().map(|v| v.clone()) else {
        return;
    };
    let ns = now_ns();
    for a in versions.into_iter().filter(|a| a.user) {
        for (i, c) in a.counters.iter().enumerate() {
            let (q, d, s) = (
                c.requests.load(Ordering::Relaxed),
                c.acted.load(Ordering::Relaxed),
                c.suppressed.load(Ordering::Relaxed),
            );
            let sum = q + d + s;
            if sum == 0 || (!all && c.written.swap(sum, Ordering::Relaxed) == sum) {
                continue;
            }
            c.written.store(sum, Ordering::Relaxed);
            tr.log.write(
                &RuleStats {
                    version: a.version,
                    rule: i as u32,
                    ns,
                    requests: q,
                    acted: d,
                    suppressed: s,
                }
                .into(),
            );
        }
    }
}

/// The function names of an object's creation chain (only when a selector looks at them): each
/// as its symbol is written (mangled) and, when that differs, demangled as reports show it
/// (`db::Pool::create()`), so that a glob copied from a report matches.
fn creation_symbols(tr: &Tracker, obj: &ObjEntry) -> Vec<Box<str>> {
    let chain = obj.create_chain.load(Ordering::Relaxed);
    tr.chains.frames(chain).map_or_else(Vec::new, |frames| {
        let maps = crate::procmaps::read();
        let mut names = Vec::new();
        for &f in frames.iter() {
            if let Some(name) = crate::symbols::function_at(&maps, f.saturating_sub(1)) {
                let readable = waitshim_elfsym::demangle(&name);
                if readable != *name {
                    names.push(readable.into_boxed_str());
                }
                names.push(name);
            }
        }
        names
    })
}

fn object_matches(tr: &Tracker, r: &Rule, obj: &ObjEntry, st: &ObjPolicy) -> bool {
    let sel = &r.select;
    let name = if sel.object_name.is_some() {
        st.name.lock().unwrap_or_else(|e| e.into_inner()).clone()
    } else {
        None
    };
    let symbols = if sel.creation_site.is_some() {
        creation_symbols(tr, obj)
    } else {
        Vec::new()
    };
    sel.matches_object(
        obj.kind,
        obj.addr() as u64,
        name.as_deref(),
        symbols.iter().map(|s| &**s),
    )
}

/// The thread's group: the symbol of its start routine, `main` for the main thread; as the
/// symbol is written (mangled) and, when that differs, demangled as reports show it, so that a
/// glob copied from a report (`db::Pool::worker*`) matches. Empty when unknown.
fn thread_groups(t: &ThreadRec) -> Vec<Box<str>> {
    let name = match t.policy.routine.load(Ordering::Relaxed) {
        0 if t.tid() == std::process::id() => Some("main".into()),
        0 => None,
        routine => crate::symbols::function_at(&crate::procmaps::read(), routine),
    };
    let Some(name) = name else {
        return Vec::new();
    };
    let readable = waitshim_elfsym::demangle(&name);
    if readable != *name {
        vec![name, readable.into_boxed_str()]
    } else {
        vec![name]
    }
}

fn object_mask(tr: &Tracker, a: &Active, obj: &ObjEntry) -> u64 {
    let st = obj_policy(obj);
    if st.version.load(Ordering::Acquire) == a.version {
        return st.mask.load(Ordering::Relaxed);
    }
    if st.version.load(Ordering::Acquire) != 0 {
        // A new policy version: its criteria count from zero.
        st.requests.store(0, Ordering::Relaxed);
        st.last_acted.store(0, Ordering::Relaxed);
    }
    let mut mask = 0u64;
    let mut holder_chains = false;
    for (i, r) in a.policy.rules.iter().enumerate().take(64) {
        if object_matches(tr, r, obj, st) {
            mask |= 1 << i;
            holder_chains |= r.actions & action::HOLDER_CHAIN != 0;
        }
    }
    if holder_chains {
        obj.set_flag(HOLDER_CHAINS);
    } else if obj.flags() & HOLDER_CHAINS != 0 {
        obj.clear_flag(HOLDER_CHAINS);
    }
    st.mask.store(mask, Ordering::Relaxed);
    st.version.store(a.version, Ordering::Release);
    mask
}

fn thread_name(t: &ThreadRec) -> Option<String> {
    if let Some(n) = t
        .policy
        .name
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
    {
        return Some(n);
    }
    // This runs on the waiting thread: its own kernel name.
    crate::track::threads::own_kernel_name()
}

fn thread_mask(a: &Active, t: &ThreadRec) -> u64 {
    let p = &t.policy;
    let names = p.names.load(Ordering::Acquire);
    if p.version.load(Ordering::Acquire) == a.version
        && p.seen_names.load(Ordering::Relaxed) == names
    {
        return p.mask.load(Ordering::Relaxed);
    }
    let rules = &a.policy.rules;
    let name = if rules.iter().any(|r| r.select.thread_name.is_some()) {
        thread_name(t)
    } else {
        None
    };
    let groups = if rules.iter().any(|r| r.select.thread_group.is_some()) {
        thread_groups(t)
    } else {
        Vec::new()
    };
    let mut mask = 0u64;
    for (i, r) in rules.iter().enumerate().take(64) {
        let matches = if groups.is_empty() {
            r.select.matches_thread(name.as_deref(), None)
        } else {
            groups
                .iter()
                .any(|g| r.select.matches_thread(name.as_deref(), Some(g)))
        };
        if matches {
            mask |= 1 << i;
        }
    }
    p.mask.store(mask, Ordering::Relaxed);
    p.seen_names.store(names, Ordering::Relaxed);
    p.version.store(a.version, Ordering::Release);
    mask
}

/// What the policy decided for one wait.
#[derive(Clone, Copy)]
pub struct Act {
    active: &'static Active,
    rule: u32,
    actions: u32,
    /// Waiters on the object when the rule was asked (this one included).
    waiters: u32,
    chain: u32,
    site: CallSite,
    /// The criteria held (false while a `min_wait` is still to be reached).
    acted: bool,
    min_wait: u64,
}

impl Act {
    /// When a `min_wait` still to be reached will be (monotonic ns), for a wait begun at `start`.
    pub fn due(&self, start: u64) -> Option<u64> {
        (!self.acted && self.min_wait > 0).then(|| start.saturating_add(self.min_wait))
    }
}

/// The policy's answer at the start of a contended wait: the waiter chain to record (0: none)
/// and the rule that applies, if any.
pub struct Pick {
    pub chain: u32,
    pub act: Option<Act>,
}

/// A thread starts waiting on `obj`, which has `n` waiters now (this one included).
pub fn on_wait(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    n: u32,
    site: CallSite,
) -> Pick {
    let none = Pick {
        chain: 0,
        act: None,
    };
    let Some(a) = active().filter(|a| a.user) else {
        return Pick {
            chain: tr.chain_at(t, site),
            act: None,
        };
    };
    let m = object_mask(tr, a, obj);
    if m == 0 {
        return none;
    }
    let m = m & thread_mask(a, t);
    if m == 0 {
        return none;
    }
    let i = m.trailing_zeros() as usize;
    let r = &a.policy.rules[i];
    let c = &a.counters[i];
    c.requests.fetch_add(1, Ordering::Relaxed);
    let st = obj_policy(obj);
    let w = &r.when;
    // With all_waiters, any waiter may be listed when the rule acts for another: every wait on
    // the objects the rule selects keeps its chain.
    let none = if r.actions & action::ALL_WAITERS != 0 {
        Pick {
            chain: tr.chain_at(t, site),
            act: None,
        }
    } else {
        none
    };
    let request = st.requests.fetch_add(1, Ordering::Relaxed) + 1;
    match w.on_request(n, request, st.last_acted.load(Ordering::Relaxed)) {
        Verdict::Suppressed => {
            c.suppressed.fetch_add(1, Ordering::Relaxed);
            return none;
        }
        Verdict::Skip => return none,
        Verdict::Act => {}
    }
    let mut act = Act {
        active: a,
        rule: i as u32,
        actions: r.actions,
        waiters: n,
        chain: none.chain,
        site,
        acted: false,
        min_wait: w.min_wait_ns.unwrap_or(0),
    };
    if w.min_stack_depth.is_some() {
        act.chain = tr.chain_at(t, site);
        let depth = tr.chains.frames(act.chain).map_or(0, |f| f.len());
        if !w.stack_qualifies(depth as u32) {
            return none;
        }
    }
    // Raised only by a wait that acts (a min_wait still to come counts as acting now).
    let before = st.last_acted.fetch_max(n, Ordering::AcqRel);
    if let Some(g) = w.granularity {
        // Two waiters that passed the check together: only the first acts.
        if before.saturating_add(g) > n {
            return none;
        }
    }
    if act.min_wait == 0 {
        fire(tr, t, obj, &mut act, now_ns());
    }
    Pick {
        chain: if act.actions & (action::WAITER_CHAIN | action::ALL_WAITERS) != 0 {
            act.chain
        } else {
            0
        },
        act: Some(act),
    }
}

/// The criteria held: count it and collect what the rule asks for while the thread waits.
fn fire(tr: &Tracker, t: &ThreadRec, obj: &'static ObjEntry, act: &mut Act, now: u64) {
    act.acted = true;
    act.active.counters[act.rule as usize]
        .acted
        .fetch_add(1, Ordering::Relaxed);
    if act.chain == 0 && act.actions & (action::WAITER_CHAIN | action::ALL_WAITERS) != 0 {
        act.chain = tr.chain_at(t, act.site);
    }
    let (version, rule) = (act.active.version, act.rule);
    if act.actions & action::ALL_WAITERS != 0 {
        let waiters = waiting_threads(tr, t, obj, act);
        tr.log.write(
            &WaiterChains {
                object_id: tr.id_of(obj),
                ns: now,
                version,
                rule,
                waiters,
            }
            .into(),
        );
    }
    if act.actions & (action::HOLDER_CHAIN | action::HOLDER_LIVE_STACK) == 0 {
        return;
    }
    let holder = obj.holder(false);
    if holder == 0 || holder == t.tid() {
        return;
    }
    let write = |live: u8, chain_id: u32| {
        tr.log.write(
            &HolderStack {
                object_id: tr.id_of(obj),
                ns: now,
                holder_tid: holder,
                waiter_tid: t.tid(),
                version,
                rule,
                live,
                chain_id,
            }
            .into(),
        )
    };
    if act.actions & action::HOLDER_CHAIN != 0 {
        let st = obj_policy(obj);
        if st.holder_tid.load(Ordering::Acquire) == holder {
            write(0, st.holder_chain.load(Ordering::Relaxed));
        }
    }
    if act.actions & action::HOLDER_LIVE_STACK != 0 {
        if let Some((chain, how)) = crate::livestack::ask(tr, holder) {
            write(how, chain);
        }
    }
}

/// The threads waiting on `obj` now, this one first. A waiter counts itself before it
/// publishes that it waits (`waiting_on`, after its chain): those that were counted are given a
/// few milliseconds to show up.
fn waiting_threads(tr: &Tracker, t: &ThreadRec, obj: &ObjEntry, act: &Act) -> Vec<WaiterRef> {
    let me = t.tid();
    let mut waiters = Vec::new();
    for attempt in 0..20 {
        let now = now_ns();
        waiters.clear();
        waiters.push(WaiterRef {
            tid: me,
            chain_id: act.chain,
            wait_ns: 0,
        });
        for e in tr.threads.iter() {
            let other = e.value().0;
            if other.tid() != me && std::ptr::eq(other.waiting_on.load(Ordering::Acquire), obj) {
                waiters.push(WaiterRef {
                    tid: other.tid(),
                    chain_id: other.wait_chain.load(Ordering::Relaxed),
                    wait_ns: now.saturating_sub(other.wait_start.load(Ordering::Relaxed)),
                });
            }
        }
        if waiters.len() >= act.waiters as usize || attempt == 19 {
            break;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 250_000,
        };
        // SAFETY: plain system call with a valid timespec.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
    waiters
}

/// A wait slice expired (the thread waits on): a `min_wait` may have been reached.
pub fn on_wait_check(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    act: &mut Act,
    start: u64,
) {
    let now = now_ns();
    if !act.acted && now.saturating_sub(start) >= act.min_wait {
        fire(tr, t, obj, act, now);
    }
}

/// The wait ended after `waited` ns with the reason `reason` (a `counter::ENDED_*` key).
/// Returns the waiter chain to count the wait under.
pub fn on_wait_end(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    act: &mut Act,
    start: u64,
    waited: u64,
    reason: u16,
) -> Ended {
    if !act.acted {
        if !act.active.policy.rules[act.rule as usize]
            .when
            .wait_qualifies(waited)
        {
            return Ended::default();
        }
        // Reached its minimum as it ended: the holder has let go, only the waiter's side is left.
        act.actions &= !(action::HOLDER_CHAIN | action::HOLDER_LIVE_STACK);
        fire(tr, t, obj, act, start + waited);
    }
    if act.actions & action::RECORD != 0 {
        tr.log.write(
            &WaitEvent {
                object_id: tr.id_of(obj),
                tid: t.tid(),
                ns: start,
                wait_ns: waited,
                waiters: act.waiters,
                reason,
                version: act.active.version,
                rule: act.rule,
                chain_id: if act.actions & action::WAITER_CHAIN != 0 {
                    act.chain
                } else {
                    0
                },
            }
            .into(),
        );
    }
    Ended {
        chain: if act.actions & action::WAITER_CHAIN != 0 {
            act.chain
        } else {
            0
        },
        event: (act.actions & action::RECORD != 0).then_some((act.active.version, act.rule)),
    }
}

/// What a rule did at the end of a wait it selected.
#[derive(Clone, Copy, Default)]
pub struct Ended {
    /// The waiter's chain, if the rule collects it (else 0).
    pub chain: u32,
    /// (policy version, rule) of the [`WaitEvent`] it wrote, if it wrote one.
    pub event: Option<(u32, u32)>,
}

/// `t` acquired `obj`, which a rule with `holder_chain` selects: remember where.
#[cold]
pub fn holder_took(tr: &Tracker, t: &ThreadRec, obj: &ObjEntry) {
    let chain = tr.chain(t);
    let st = obj_policy(obj);
    st.holder_chain.store(chain, Ordering::Relaxed);
    st.holder_tid.store(t.tid(), Ordering::Release);
}

/// In a forked child nothing of the parent's versions is in its log yet: write the one in force.
/// The version in force keeps its number (cached rule masks refer to it); its rule counts start
/// again from zero for the child's own log. A lock held at the fork by a thread that did not
/// come along stays held in the child: only `try_lock` here.
pub fn after_fork_child(tr: &Tracker) {
    if let Ok(v) = VERSIONS.try_lock() {
        for c in v.iter().flat_map(|a| a.counters.iter()) {
            for x in [&c.requests, &c.acted, &c.suppressed, &c.written] {
                x.store(0, Ordering::Relaxed);
            }
        }
    }
    if let Some(a) = active() {
        let source = SOURCE
            .try_lock()
            .ok()
            .and_then(|s| s.as_ref().map(|(p, _)| p.clone()))
            .filter(|_| a.user)
            .unwrap_or_default();
        write_version(tr, a, &source);
    }
}

/// The tracking entries' lazily made policy state.
pub type Lazy<T> = OnceLock<Box<T>>;
