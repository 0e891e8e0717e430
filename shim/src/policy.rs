//! The collection policy in force (`WAITSHIM_POLICY`, hot-reloaded) and its decision at each
//! contended wait: from the context the core hands it ([`crate::policy_api`]), what to collect. The
//! core collects; this module never looks into the core's entries.
//!
//! Versions are published through one atomic pointer and never freed: each keeps the statistics
//! of its rules until exit, and a reload is rare, so a version costs a few hundred bytes for the
//! life of the process. (The spec names `arc-swap`; a leaked version needs no reference counting,
//! and the contended path then reads the policy with one plain load.)
//!
//! Which rules select an object is decided once per object and policy version and cached in the
//! object's policy cell (a version number and a bit per rule); the same for the waiting
//! thread. Objects no rule selects pay the cached check and nothing else.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use waitshim_format::{action, PolicyVersion, RuleStats};
use waitshim_policy::{Policy, Rule, Verdict};

use crate::clock::now_ns;
use crate::log::Log;
use crate::policy_api::{Act, Answer, Decision, Facts, ObjectCell, ThreadCell, WaitContext};

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

/// Reads `WAITSHIM_POLICY` (None: the built-in default) and puts it in force. An invalid file
/// leaves the default in force, says why on stderr and in the log, and is read again when it
/// changes.
pub fn init(log: &Log, path: Option<&str>) {
    let Some(path) = path else {
        activate(log, waitshim_policy::builtin(), "", false);
        return;
    };
    *SOURCE.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((path.to_string(), stamp(path).unwrap_or_default()));
    match read(path) {
        Ok(p) => {
            activate(log, p, path, true);
        }
        Err(e) => {
            crate::diag::say(
                log,
                &format!("WAITSHIM_POLICY={path}: {e}; collecting with the built-in policy"),
            );
            activate(log, waitshim_policy::builtin(), "", false);
        }
    }
}

fn read(path: &str) -> Result<Policy, String> {
    let text = crate::config::read_small_file(path, POLICY_MAX_BYTES)?;
    waitshim_policy::parse(&text).map_err(|e| e.to_string())
}

/// A policy file larger than this is refused (real ones are a few hundred bytes).
const POLICY_MAX_BYTES: u64 = 1 << 20;

fn activate(log: &Log, policy: Policy, source: &str, user: bool) -> u32 {
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
    write_version(log, a, source);
    if a.policy.wants_live_stack() {
        crate::livestack::setup(log, a.policy.stack_signal_spec());
    }
    // Under the lock: two reloads at once publish in the order they are numbered.
    ACTIVE.store(a as *const Active as *mut Active, Ordering::Release);
    drop(versions);
    version
}

fn write_version(log: &Log, a: &Active, source: &str) {
    log.write(
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
pub fn reload(log: &Log) -> Result<u32, String> {
    let path = source_path()?;
    let now = stamp(&path).unwrap_or_default();
    if let Ok(mut src) = SOURCE.try_lock() {
        if let Some((_, s)) = &mut *src {
            *s = now;
        }
    }
    match read(&path) {
        Ok(p) => {
            let before = active().filter(|a| a.user).and_then(|a| a.policy.events);
            if p.events != before {
                let now = p.events.map_or_else(
                    || "no \"events\"".to_string(),
                    |e| format!("\"events\": \"{e}\""),
                );
                crate::diag::say(
                    log,
                    &format!(
                        "policy reload from {path}: {now} is not applied (per-wait events are set when the program starts)"
                    ),
                );
            }
            let before = active().filter(|a| a.user).and_then(|a| a.policy.sample_ns);
            if p.sample_ns != before {
                let now = p.sample_ns.map_or_else(
                    || "no \"sample\"".to_string(),
                    |ns| format!("\"sample\": \"{}\"", crate::sampler::interval_text(ns)),
                );
                crate::diag::say(
                    log,
                    &format!(
                        "policy reload from {path}: {now} is not applied (the sampler's interval is set when the program starts)"
                    ),
                );
            }
            Ok(activate(log, p, &path, true))
        }
        Err(e) => {
            let keep = active().map_or(0, |a| a.version);
            let msg = format!("policy reload from {path}: {e}; keeping policy version {keep}");
            crate::diag::say(log, &msg);
            Err(msg)
        }
    }
}

/// The per-wait events the user's policy file asks for (`events`), if it does.
pub fn events_setting() -> Option<waitshim_policy::EventsMode> {
    active().filter(|a| a.user).and_then(|a| a.policy.events)
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
pub fn reload_if_changed(log: &Log) {
    let (Ok(path), Ok(seen)) = (
        source_path(),
        SOURCE
            .try_lock()
            .map(|s| s.as_ref().map(|(_, st)| *st).unwrap_or_default()),
    ) else {
        return;
    };
    if stamp(&path).is_some_and(|now| now != seen) {
        let _ = reload(log);
    }
}

/// Writes the statistics of every rule that changed since they were last written (`all`:
/// every rule that ever saw a request).
pub fn write_stats(log: &Log, all: bool) {
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
            log.write(
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

/// In a forked child nothing of the parent's versions is in its log yet: write the one in force.
/// The version in force keeps its number (cached rule masks refer to it); its rule counts start
/// again from zero for the child's own log. A lock held at the fork by a thread that did not
/// come along stays held in the child: only `try_lock` here.
pub fn after_fork_child(log: &Log) {
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
        write_version(log, a, &source);
    }
}

/// Whether a user's policy is in force (the built-in one collects every waiter's chain and is
/// not asked per wait).
pub fn selective() -> bool {
    active().is_some_and(|a| a.user)
}

/// The policy's decision for a contended wait that begins (a user's policy in force; the
/// built-in one collects the waiter's chain and nothing else).
pub fn decide(ctx: &WaitContext, facts: &mut dyn Facts) -> Answer {
    match active().filter(|a| a.user) {
        Some(a) => decide_with(a, ctx, facts),
        None => Answer {
            decision: Decision::Pass { waiter_chain: true },
            holder_chains: None,
        },
    }
}

fn decide_with(a: &'static Active, ctx: &WaitContext, facts: &mut dyn Facts) -> Answer {
    let (m, holder_chains) = object_mask(a, ctx, facts);
    let answer = |decision| Answer {
        decision,
        holder_chains,
    };
    let m = if m == 0 {
        0
    } else {
        m & thread_mask(a, ctx.thread, facts)
    };
    if m == 0 {
        return answer(Decision::Pass {
            waiter_chain: false,
        });
    }
    let i = m.trailing_zeros() as usize;
    let r = &a.policy.rules[i];
    let c = &a.counters[i];
    c.requests.fetch_add(1, Ordering::Relaxed);
    let st = ctx.object;
    let w = &r.when;
    let n = ctx.waiters;
    // With all_waiters, any waiter may be listed when the rule acts for another: every wait on
    // the objects the rule selects keeps its chain.
    let none = answer(Decision::Pass {
        waiter_chain: r.actions & action::ALL_WAITERS != 0,
    });
    let request = st.requests.fetch_add(1, Ordering::Relaxed) + 1;
    match w.on_request(n, request, st.last_acted.load(Ordering::Relaxed)) {
        Verdict::Suppressed => {
            c.suppressed.fetch_add(1, Ordering::Relaxed);
            return none;
        }
        Verdict::Skip => return none,
        Verdict::Act => {}
    }
    if w.min_stack_depth.is_some() && !w.stack_qualifies(facts.stack_depth()) {
        return none;
    }
    // Raised only by a wait that acts (a min_wait still to come counts as acting now).
    let before = st.last_acted.fetch_max(n, Ordering::AcqRel);
    if let Some(g) = w.granularity {
        // Two waiters that passed the check together: only the first acts.
        if before.saturating_add(g) > n {
            return none;
        }
    }
    answer(Decision::Act(Act {
        version: a.version,
        rule: i as u32,
        collect: r.actions,
        waiters: n,
        min_wait_ns: w.min_wait_ns.unwrap_or(0),
        acted: &c.acted,
    }))
}

/// A thread the sampler found blocked outside the sync objects, as the policy sees it.
pub struct BlockedWait<'a> {
    /// What it waits on: one of `waitshim_format::syscalls::RESOURCE_KINDS`.
    pub resource: &'a str,
    /// The resource as the report shows it (a path, `pipe:[123]`, a socket's addresses, ...).
    pub what: &'a str,
    /// The policy's cell on the thread (None: a thread the shim does not track).
    pub thread: Option<&'a ThreadCell>,
}

/// The policy's decision for a blocked wait the sampler has just seen begin: the first rule
/// with `resource` or `resource_name` whose selectors match acts, now or once the wait has
/// lasted its `min_wait` (the built-in policy's rule takes every such wait's chain). Asked once
/// per wait; counted as a request of the rule.
pub fn decide_blocked(w: &BlockedWait, facts: &mut dyn Facts) -> Option<Act> {
    decide_blocked_with(active()?, w, facts)
}

fn decide_blocked_with(a: &'static Active, w: &BlockedWait, facts: &mut dyn Facts) -> Option<Act> {
    let mut m = 0u64;
    for (i, r) in a.policy.rules.iter().enumerate().take(64) {
        if r.select.matches_resource(w.resource, w.what) {
            m |= 1 << i;
        }
    }
    if m == 0 {
        return None;
    }
    let scratch = ThreadCell::default();
    m &= thread_mask(a, w.thread.unwrap_or(&scratch), facts);
    if m == 0 {
        return None;
    }
    let i = m.trailing_zeros() as usize;
    let (r, c) = (&a.policy.rules[i], &a.counters[i]);
    c.requests.fetch_add(1, Ordering::Relaxed);
    Some(Act {
        version: a.version,
        rule: i as u32,
        collect: r.actions,
        waiters: 1,
        min_wait_ns: r.when.min_wait_ns.unwrap_or(0),
        acted: &c.acted,
    })
}

/// The sampler's interval the user's policy file asks for (`sample`), if it does.
pub fn sample_setting() -> Option<u64> {
    active().filter(|a| a.user).and_then(|a| a.policy.sample_ns)
}

/// Which rules select the object (cached per policy version), and, when that was worked out
/// again, whether one of them collects holder chains.
fn object_mask(a: &Active, ctx: &WaitContext, facts: &mut dyn Facts) -> (u64, Option<bool>) {
    let st = ctx.object;
    if st.version.load(Ordering::Acquire) == a.version {
        return (st.mask.load(Ordering::Relaxed), None);
    }
    if st.version.load(Ordering::Acquire) != 0 {
        // A new policy version: its criteria count from zero.
        st.requests.store(0, Ordering::Relaxed);
        st.last_acted.store(0, Ordering::Relaxed);
    }
    let mut name = None;
    let mut symbols = None;
    let mut mask = 0u64;
    let mut holder_chains = false;
    for (i, r) in a.policy.rules.iter().enumerate().take(64) {
        let sel = &r.select;
        if sel.object_name.is_some() && name.is_none() {
            name = Some(object_name(st));
        }
        if sel.creation_site.is_some() && symbols.is_none() {
            symbols = Some(facts.creation_site());
        }
        let matches = sel.matches_object(
            ctx.kind,
            ctx.addr,
            name.as_ref().and_then(|n| n.as_deref()),
            symbols.iter().flatten().map(|s| &**s),
        );
        if matches {
            mask |= 1 << i;
            holder_chains |= r.actions & action::HOLDER_CHAIN != 0;
        }
    }
    st.mask.store(mask, Ordering::Relaxed);
    st.version.store(a.version, Ordering::Release);
    (mask, Some(holder_chains))
}

fn object_name(st: &ObjectCell) -> Option<String> {
    st.name.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Which rules select the waiting thread (cached per policy version and thread name).
fn thread_mask(a: &Active, p: &ThreadCell, facts: &mut dyn Facts) -> u64 {
    let names = p.names.load(Ordering::Acquire);
    if p.version.load(Ordering::Acquire) == a.version
        && p.seen_names.load(Ordering::Relaxed) == names
    {
        return p.mask.load(Ordering::Relaxed);
    }
    let rules = &a.policy.rules;
    let name = if rules.iter().any(|r| r.select.thread_name.is_some()) {
        facts.thread_name()
    } else {
        None
    };
    let groups = if rules.iter().any(|r| r.select.thread_group.is_some()) {
        facts.thread_group()
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

#[cfg(test)]
mod tests {
    use super::*;
    use waitshim_format::ObjectKind;

    /// A wait's facts as plain data, as the core would find them.
    #[derive(Default)]
    struct Plain {
        creation_site: Vec<&'static str>,
        thread_name: Option<&'static str>,
        thread_group: Vec<&'static str>,
        depth: u32,
    }

    impl Facts for Plain {
        fn creation_site(&mut self) -> Vec<Box<str>> {
            self.creation_site.iter().map(|&s| s.into()).collect()
        }
        fn thread_name(&mut self) -> Option<String> {
            self.thread_name.map(String::from)
        }
        fn thread_group(&mut self) -> Vec<Box<str>> {
            self.thread_group.iter().map(|&s| s.into()).collect()
        }
        fn stack_depth(&mut self) -> u32 {
            self.depth
        }
    }

    fn version(json: &str) -> &'static Active {
        let policy = waitshim_policy::parse(json).expect("valid policy");
        let counters = policy
            .rules
            .iter()
            .map(|_| RuleCounters::default())
            .collect();
        Box::leak(Box::new(Active {
            version: 1,
            policy,
            user: true,
            counters,
        }))
    }

    /// A wait on a fresh mutex by a fresh thread, with `waiters` waiting (this one included).
    fn ask(a: &'static Active, waiters: u32, facts: &mut Plain) -> Answer {
        let (object, thread) = (ObjectCell::default(), ThreadCell::default());
        let ctx = WaitContext {
            kind: ObjectKind::Mutex,
            addr: 0x1000,
            waiters,
            object: &object,
            thread: &thread,
        };
        decide_with(a, &ctx, facts)
    }

    fn collects(answer: &Answer) -> Option<u32> {
        match answer.decision {
            Decision::Act(act) => Some(act.collect),
            Decision::Pass { .. } => None,
        }
    }

    #[test]
    fn a_rule_with_min_waiters_3_acts_on_the_third_waiter_not_the_second() {
        let a = version(r#"{"rules":[{"when":{"min_waiters":3},"actions":["waiter_chain"]}]}"#);
        let mut facts = Plain::default();
        let second = ask(a, 2, &mut facts);
        assert!(
            matches!(
                second.decision,
                Decision::Pass {
                    waiter_chain: false
                }
            ),
            "2 waiters: nothing collected"
        );
        assert_eq!(collects(&ask(a, 3, &mut facts)), Some(action::WAITER_CHAIN));
        assert_eq!(a.counters[0].requests.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_creation_site_glob_copied_from_a_report_matches_the_demangled_cxx_constructor() {
        let a = version(
            r#"{"rules":[{"match":{"creation_site":"db::Pool::Pool*"},"actions":["record","holder_chain"]}]}"#,
        );
        // As the core hands it: the demangled name, then the symbol as written.
        let mut pool = Plain {
            creation_site: vec!["db::Pool::Pool()", "_ZN2db4PoolC2Ev", "main"],
            ..Plain::default()
        };
        let answer = ask(a, 2, &mut pool);
        assert_eq!(
            collects(&answer),
            Some(action::RECORD | action::HOLDER_CHAIN)
        );
        assert_eq!(
            answer.holder_chains,
            Some(true),
            "the core must note where the object is acquired"
        );
        let mut other = Plain {
            creation_site: vec!["_ZN5cache4bumpEv", "cache::bump()", "main"],
            ..Plain::default()
        };
        assert_eq!(collects(&ask(a, 2, &mut other)), None);
    }

    #[test]
    fn a_thread_group_glob_selects_the_waits_of_pool_workers_only() {
        let a = version(
            r#"{"rules":[{"match":{"thread_group":"db::Pool::worker*"},"actions":["record"]}]}"#,
        );
        let mut worker = Plain {
            thread_group: vec!["_ZN2db4Pool6workerEPv", "db::Pool::worker(void*)"],
            ..Plain::default()
        };
        assert_eq!(collects(&ask(a, 2, &mut worker)), Some(action::RECORD));
        let mut main = Plain {
            thread_group: vec!["main"],
            ..Plain::default()
        };
        assert_eq!(collects(&ask(a, 2, &mut main)), None);
        let mut unknown = Plain::default();
        assert_eq!(collects(&ask(a, 2, &mut unknown)), None);
    }

    #[test]
    fn which_rules_select_an_object_is_worked_out_once_per_policy_version() {
        let a = version(r#"{"rules":[{"match":{"creation_site":"db_*"},"actions":["record"]}]}"#);
        let (object, thread) = (ObjectCell::default(), ThreadCell::default());
        let ctx = WaitContext {
            kind: ObjectKind::Mutex,
            addr: 0x1000,
            waiters: 2,
            object: &object,
            thread: &thread,
        };
        let mut db = Plain {
            creation_site: vec!["db_open"],
            ..Plain::default()
        };
        assert!(decide_with(a, &ctx, &mut db).holder_chains == Some(false));
        // Cached: the facts are not asked again.
        let mut elsewhere = Plain {
            creation_site: vec!["elsewhere"],
            ..Plain::default()
        };
        let again = decide_with(a, &ctx, &mut elsewhere);
        assert!(again.holder_chains.is_none());
        assert_eq!(collects(&again), Some(action::RECORD));
    }

    #[test]
    fn a_wait_shorter_than_min_wait_is_decided_later() {
        let a = version(r#"{"rules":[{"when":{"min_wait":"2ms"},"actions":["record"]}]}"#);
        match ask(a, 2, &mut Plain::default()).decision {
            Decision::Act(act) => assert_eq!(act.min_wait_ns, 2_000_000),
            Decision::Pass { .. } => panic!("the rule must act once the wait lasts 2 ms"),
        }
    }

    fn blocked(
        a: &'static Active,
        resource: &str,
        what: &str,
        name: Option<&'static str>,
    ) -> Option<Act> {
        let thread = ThreadCell::default();
        let wait = BlockedWait {
            resource,
            what,
            thread: Some(&thread),
        };
        let mut facts = Plain {
            thread_name: name,
            ..Plain::default()
        };
        decide_blocked_with(a, &wait, &mut facts)
    }

    #[test]
    fn a_resource_rule_decides_blocked_waits_and_never_sync_waits() {
        let a = version(
            r#"{"rules":[{"match":{"kind":"mutex"},"actions":["record"]},
                         {"match":{"resource":["socket"],"resource_name":"*:5432*","thread_name":"db-*"},"when":{"min_wait":"50ms"},"actions":["waiter_chain"]}]}"#,
        );
        let act = blocked(
            a,
            "socket",
            "socket:[7] tcp 127.0.0.1:40000 -> 127.0.0.1:5432",
            Some("db-1"),
        )
        .expect("the second rule selects the database socket");
        assert_eq!(
            (act.rule, act.collect, act.min_wait_ns),
            (1, action::WAITER_CHAIN, 50_000_000)
        );
        assert_eq!(a.counters[1].requests.load(Ordering::Relaxed), 1);
        assert!(blocked(
            a,
            "socket",
            "socket:[8] tcp 127.0.0.1:40001 -> 127.0.0.1:80",
            Some("db-1")
        )
        .is_none());
        assert!(blocked(a, "pipe", "pipe:[9]", Some("db-1")).is_none());
        assert!(blocked(
            a,
            "socket",
            "socket:[7] tcp 127.0.0.1:40000 -> 127.0.0.1:5432",
            Some("web-1")
        )
        .is_none());
        // A mutex wait is decided by the mutex rule; the resource rule is never asked.
        assert_eq!(
            collects(&ask(a, 2, &mut Plain::default())),
            Some(action::RECORD)
        );
        let only_resources =
            version(r#"{"rules":[{"match":{"resource":"any"},"actions":["waiter_chain"]}]}"#);
        assert_eq!(
            collects(&ask(only_resources, 2, &mut Plain::default())),
            None
        );
    }

    #[test]
    fn the_built_in_policy_takes_every_blocked_threads_chain() {
        let builtin: &'static Active = Box::leak(Box::new(Active {
            version: 1,
            policy: waitshim_policy::builtin(),
            user: false,
            counters: waitshim_policy::builtin()
                .rules
                .iter()
                .map(|_| RuleCounters::default())
                .collect(),
        }));
        let act = blocked(builtin, "sleep", "", None).expect("built-in: every blocked wait");
        assert_eq!((act.collect, act.min_wait_ns), (action::WAITER_CHAIN, 0));
        let user = version(r#"{"rules":[{"actions":["waiter_chain"]}]}"#);
        assert!(
            blocked(user, "sleep", "", None).is_none(),
            "a user's policy without a resource rule takes no chain of a blocked thread"
        );
    }
}
