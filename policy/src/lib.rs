//! The collection policy of waitshim: which waits deserve the expensive data (call chains, holder
//! stacks, per-event records). Read by the shim from `WAITSHIM_POLICY` and by
//! `waitshim-analyze policy check`; one parser so that both agree on what a file means.
//!
//! Cheap counters are kept on every object whatever the policy says. A policy is an ordered list of
//! rules; for each wait the rules are tried in order and the **first rule whose selectors match**
//! decides. Its criteria then say whether it acts on this wait; if they do not hold, nothing more is
//! collected for that wait (the wait does not fall through to a later rule). A wait no rule selects
//! keeps only the counters.
//!
//! # The file
//!
//! One JSON object:
//!
//! ```json
//! { "stack_signal": "SIGRTMAX-4",
//!   "rules": [
//!     { "name": "db locks",
//!       "match": { "kind": ["mutex", "rwlock"], "creation_site": "db_*" },
//!       "when":  { "min_waiters": 3, "max_waiters": 20 },
//!       "actions": ["record", "waiter_chain", "holder_chain"] },
//!     { "name": "slow waits of the workers",
//!       "match": { "thread_name": "worker-*" },
//!       "when":  { "min_wait": "2ms" },
//!       "actions": ["waiter_chain", "holder_live_stack"] } ] }
//! ```
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `rules` | list, required, at most 64 | tried in order; `[]` collects nothing expensive |
//! | `stack_signal` | string | signal used to ask a holder for its live stack: a number, a name (`SIGUSR2`), `SIGRTMIN+N`, `SIGRTMAX-N`, or `none`; default [`signal::DEFAULT_STACK`] |
//! | `events` | string | per-wait events, as `WAITSHIM_EVENTS` takes them: `all`, `ring:DURATION` (the last 30 s: `ring:30s`), or `off`; read when the program starts, and `WAITSHIM_EVENTS` wins over it (see [`events`]) |
//! | `sample` | string | the sampler's interval, as `WAITSHIM_SAMPLE` takes it: `"10ms"` (1 ms to 10 s) or `"off"`; read when the program starts, and `WAITSHIM_SAMPLE` wins over it (see [`sample`]) |
//! | `rules[i].name` | string | shown in reports; unique within the file |
//! | `rules[i].match` | object | selectors, all of which must match; absent or `{}` = every wait |
//! | `rules[i].when` | object | criteria, all of which must hold; absent or `{}` = every selected wait |
//! | `rules[i].actions` | string or non-empty list, required | what to collect when the rule acts |
//!
//! Selectors (`match`):
//!
//! | field | value | selects |
//! |---|---|---|
//! | `kind` | string or list of `mutex`, `rwlock`, `cond`, `semaphore` (`sem`), `spinlock` (`spin`), `barrier`, `thread` (`join`: waits in `pthread_join`), `futex` (waits in `syscall(SYS_futex, ...)`) | objects of these kinds |
//! | `object_addr` | `"0x…"` string, integer, or a list of them | objects at these addresses |
//! | `object_name` | glob | objects named so through `waitshim_name_object` |
//! | `creation_site` | glob | objects whose creation (or first-use) call chain has a frame whose function matches, by its symbol or by its demangled name as reports show it, e.g. `"db_*"`, `"db::Pool::*"` |
//! | `thread_name` | glob | waits by threads with this name (`pthread_setname_np`, `waitshim_name_thread`) |
//! | `thread_group` | glob | waits by threads whose start routine matches, by its symbol or its demangled name (`"db::Pool::worker*"`; `"main"` for the main thread) |
//! | `resource` | string or list of [`RESOURCE_KINDS`], or `"any"` | waits *outside* the sync objects the sampler finds a thread blocked in, on a resource of these kinds (a file, a pipe, a socket, an epoll set, a sleep, an untracked futex, a child, ...) |
//! | `resource_name` | glob | such waits on a resource named so as the report shows it: a path, `pipe:[123]`, `socket:[456] tcp 127.0.0.1:41234 -> 127.0.0.1:5432`, `child 42` |
//!
//! A rule with `resource` or `resource_name` is a *resource rule*: it never applies to a wait on
//! a sync object, and the other rules never to a wait outside them. It may also select by
//! `thread_name` and `thread_group`, takes only `min_wait` (the thread has been seen blocked in
//! the same call that long, at the sampler's looks) and collects only `count` and
//! `waiter_chain` (the blocked thread's chain, scanned from its stack without stopping it).
//!
//! Globs: `*`, `?`, `[abc]`, `[a-z]`, `[!x]`, `\` escapes; case-sensitive; see [`Glob`].
//!
//! Criteria (`when`); "waiters" counts the threads waiting on the object, the one now asking
//! included, the holder not:
//!
//! | field | value | the rule acts only when |
//! |---|---|---|
//! | `min_waiters` | integer ≥ 0 | at least N threads wait (0 and 1 mean any wait) |
//! | `max_waiters` | integer ≥ 2 | fewer than N wait; from N on the rule is *suppressed* until the count falls below N |
//! | `granularity` | integer ≥ 1 | the count has grown by N over the largest count the rule last acted on for this object (first at N, then N more, …) |
//! | `every_nth` | integer ≥ 1 | this is the Nth, 2Nth, 3Nth… request (wait) on the object |
//! | `min_wait` | `"100ns"`, `"500us"` (or `µs`), `"2ms"`, `"1.5s"`, or an integer of microseconds | the wait lasted at least this long |
//! | `min_stack_depth` | integer ≥ 0 | the waiting thread's call chain has at least N frames |
//!
//! Actions: `count` (count how often the rule acted), `record` (an event record per wait it acts
//! on), `waiter_chain` (the waiting thread's call chain), `all_waiters` (the chains of every thread
//! waiting at that moment), `holder_chain` (where the holder took the object), `holder_live_stack`
//! (what the holder is doing now, asked of it through `stack_signal`).
//!
//! Unknown fields, wrong types, and values that could never make sense are errors: [`parse`] says
//! which field and what is wrong on one line, e.g.
//! `rules[1].when: unknown field "min_waiter"; valid: min_waiters, max_waiters, granularity, every_nth, min_wait, min_stack_depth`.
//!
//! With no policy file the shim uses [`builtin`]: every wait it sees counted, with the waiter's
//! call chain, and the chain of every thread the sampler finds blocked outside the sync objects.
//!
//! A policy that records one named queue's every wait, and otherwise only convoys of 4 or more:
//!
//! ```
//! let policy = waitshim_policy::parse(r#"{ "rules": [
//!     { "name": "queue", "match": { "object_name": "jobs" }, "actions": ["record", "waiter_chain"] },
//!     { "name": "convoys", "when": { "min_waiters": 4, "granularity": 4 },
//!       "actions": ["all_waiters", "holder_chain"] } ] }"#).unwrap();
//! assert_eq!(policy.rules.len(), 2);
//! assert_eq!(policy.rules[1].summary(), r#""convoys": any wait when ≥4 waiters, each +4 waiters → all_waiters, holder_chain"#);
//! assert_eq!(waitshim_policy::parse(&waitshim_policy::to_json(&policy)).unwrap(), policy);
//! ```

pub mod delay;
pub mod duration;
pub mod events;
mod glob;
mod parse;
pub mod sample;
pub mod signal;
mod text;

pub use events::EventsMode;
pub use glob::{Glob, MAX_LEN as MAX_PATTERN_LEN};
pub use parse::{parse, PolicyError, MAX_ADDRS};
pub use text::{explain, to_json};
pub use waitshim_format::syscalls::RESOURCE_KINDS;
pub use waitshim_format::ObjectKind;

use waitshim_format::record::action;

/// Most rules a policy may have.
pub const MAX_RULES: usize = 64;
/// `SIGRTMIN`/`SIGRTMAX` of glibc on Linux, used to validate `stack_signal` when parsing; the shim
/// resolves the spec again with the process's real values when it installs the handler.
pub const RTMIN: i32 = 34;
pub const RTMAX: i32 = 64;

/// A parsed policy. Equal policies mean the same thing; [`to_json`] writes one that [`parse`]
/// reads back equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Tried in order; at most [`MAX_RULES`].
    pub rules: Vec<Rule>,
    /// The `stack_signal` spec as written (validated by [`parse`]); `None` = [`signal::DEFAULT_STACK`].
    pub stack_signal: Option<String>,
    /// Per-wait events (`events`); `None`: the file does not say.
    pub events: Option<EventsMode>,
    /// The sampler's interval in ns (`sample`), 0 for off; `None`: the file does not say.
    pub sample_ns: Option<u64>,
}

/// One rule: which waits it applies to, when it acts, and what it collects then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: Option<String>,
    pub select: Selectors,
    pub when: Criteria,
    /// Bits of [`waitshim_format::record::action`].
    pub actions: u32,
}

/// Which waits a rule applies to. Every selector given must match; none given selects every wait.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    pub kinds: Option<Vec<ObjectKind>>,
    pub object_addr: Option<Vec<u64>>,
    /// The name given through `waitshim_name_object`; an unnamed object never matches.
    pub object_name: Option<Glob>,
    /// Matched against the function symbol of every frame of the object's creation chain; the
    /// object matches if any frame does. Unsymbolized frames never match.
    pub creation_site: Option<Glob>,
    /// The waiting thread's name; an unnamed thread never matches.
    pub thread_name: Option<Glob>,
    /// The symbol of the waiting thread's start routine; `main` for the main thread.
    pub thread_group: Option<Glob>,
    /// Kinds of resource ([`RESOURCE_KINDS`]) a thread blocked outside the sync objects waits
    /// on. A rule with `resource` or `resource_name` is a *resource rule*: it applies to the
    /// waits the sampler finds threads blocked in (`read`, `accept`, `epoll_wait`, a sleep, an
    /// untracked futex, ...) and never to a wait on a sync object; the other rules never apply
    /// to those.
    pub resources: Option<Vec<&'static str>>,
    /// Matched against what the resource is, as the report shows it: a file's path,
    /// `pipe:[123]`, `socket:[456] tcp 127.0.0.1:41234 -> 127.0.0.1:8080`,
    /// `anon_inode:[eventpoll] watching fds 4,5`, `child 42`, `untracked futex word 0x...`.
    pub resource_name: Option<Glob>,
}

/// When a selected wait is acted on. Every criterion given must hold; the default acts on every
/// selected wait. See [`Criteria::on_request`] for the exact order of evaluation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Criteria {
    /// Waiters (the requesting thread included, the holder not) needed to act; 0 and 1 = any.
    pub min_waiters: u32,
    /// At this many waiters or more the rule is suppressed. At least 2, above `min_waiters`.
    pub max_waiters: Option<u32>,
    /// Act when waiters ≥ the largest count last acted on (for this object) + N; first at N.
    pub granularity: Option<u32>,
    /// Act on requests number N, 2N, 3N… of the object (counted from 1).
    pub every_nth: Option<u64>,
    /// Act only on waits that lasted at least this many nanoseconds (known when the wait ends).
    pub min_wait_ns: Option<u64>,
    /// Act only when the waiting thread's call chain has at least this many frames.
    pub min_stack_depth: Option<u32>,
}

/// What [`Criteria::on_request`] says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The waiter-count and request-count criteria hold: act, subject to the `min_wait` and
    /// `min_stack_depth` checks the caller makes once it knows those facts.
    Act,
    /// A criterion does not hold; nothing to collect.
    Skip,
    /// `max_waiters` is reached: nothing to collect, and the rule's `suppressed` count grows.
    Suppressed,
}

impl Selectors {
    /// Whether any selector is about the object (kind, address, name, creation site): these can be
    /// decided once per object and cached on it.
    pub fn has_object_selectors(&self) -> bool {
        self.kinds.is_some()
            || self.object_addr.is_some()
            || self.object_name.is_some()
            || self.creation_site.is_some()
    }

    /// Whether any selector is about the waiting thread (name, group): these depend on who waits,
    /// so a decision cached on the object must be refined per thread.
    pub fn has_thread_selectors(&self) -> bool {
        self.thread_name.is_some() || self.thread_group.is_some()
    }

    /// Whether this selects every wait on a sync object.
    pub fn is_empty(&self) -> bool {
        !self.has_object_selectors() && !self.has_thread_selectors() && !self.is_resource_rule()
    }

    /// Whether the rule is about waits outside sync objects (see [`Selectors::resources`]).
    pub fn is_resource_rule(&self) -> bool {
        self.resources.is_some() || self.resource_name.is_some()
    }

    /// A resource rule's selectors against a blocked thread's resource: its kind (one of
    /// [`RESOURCE_KINDS`]) and what it is. Always false for a rule about sync objects.
    pub fn matches_resource(&self, kind: &str, what: &str) -> bool {
        if !self.is_resource_rule() {
            return false;
        }
        if let Some(kinds) = &self.resources {
            if !kinds.contains(&kind) {
                return false;
            }
        }
        if let Some(g) = &self.resource_name {
            if !g.matches(what) {
                return false;
            }
        }
        true
    }

    /// The object selectors against one object. `creation_symbols` are the function symbols of
    /// its creation chain's frames (innermost first, any order works).
    pub fn matches_object<'a>(
        &self,
        kind: ObjectKind,
        addr: u64,
        name: Option<&str>,
        creation_symbols: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        if self.is_resource_rule() {
            return false;
        }
        if let Some(kinds) = &self.kinds {
            if !kinds.contains(&kind) {
                return false;
            }
        }
        if let Some(addrs) = &self.object_addr {
            if !addrs.contains(&addr) {
                return false;
            }
        }
        if let Some(g) = &self.object_name {
            if !name.is_some_and(|n| g.matches(n)) {
                return false;
            }
        }
        if let Some(g) = &self.creation_site {
            if !creation_symbols.into_iter().any(|s| g.matches(s)) {
                return false;
            }
        }
        true
    }

    /// The thread selectors against the waiting thread.
    pub fn matches_thread(&self, thread_name: Option<&str>, start_routine: Option<&str>) -> bool {
        let ok = |g: &Option<Glob>, v: Option<&str>| match g {
            None => true,
            Some(g) => v.is_some_and(|v| g.matches(v)),
        };
        ok(&self.thread_name, thread_name) && ok(&self.thread_group, start_routine)
    }
}

impl Criteria {
    /// Whether no criterion is set (the rule acts on every wait it selects).
    pub fn is_empty(&self) -> bool {
        *self == Criteria::default()
    }

    /// The criteria known when a wait begins, in this order: `max_waiters` (→ `Suppressed`), then
    /// `min_waiters`, `every_nth` and `granularity` (→ `Skip`).
    ///
    /// - `waiters`: threads waiting on the object now, the requesting one included.
    /// - `request`: this request's number on the object, counted from 1 over every request the
    ///   rule sees on it (also those skipped or suppressed).
    /// - `acted_max`: the largest `waiters` this rule acted on for the object so far (0 at first);
    ///   the caller raises it to `waiters` when it acts.
    pub fn on_request(&self, waiters: u32, request: u64, acted_max: u32) -> Verdict {
        if self.max_waiters.is_some_and(|max| waiters >= max) {
            return Verdict::Suppressed;
        }
        if waiters < self.min_waiters {
            return Verdict::Skip;
        }
        if let Some(n) = self.every_nth {
            if n > 0 && !request.is_multiple_of(n) {
                return Verdict::Skip;
            }
        }
        if let Some(g) = self.granularity {
            if u64::from(waiters) < u64::from(acted_max) + u64::from(g) {
                return Verdict::Skip;
            }
        }
        Verdict::Act
    }

    /// The `min_wait` criterion, once the wait's length is known.
    pub fn wait_qualifies(&self, wait_ns: u64) -> bool {
        self.min_wait_ns.is_none_or(|min| wait_ns >= min)
    }

    /// The `min_stack_depth` criterion, once the waiter's chain is captured.
    pub fn stack_qualifies(&self, depth: u32) -> bool {
        self.min_stack_depth.is_none_or(|min| depth >= min)
    }
}

impl Rule {
    /// Whether the rule collects live holder stacks (the shim then needs `stack_signal`).
    pub fn wants_live_stack(&self) -> bool {
        self.actions & action::HOLDER_LIVE_STACK != 0
    }
}

impl Policy {
    /// Whether any rule collects live holder stacks.
    pub fn wants_live_stack(&self) -> bool {
        self.rules.iter().any(Rule::wants_live_stack)
    }

    /// The signal spec to resolve for live holder stacks: the file's, or the default.
    pub fn stack_signal_spec(&self) -> &str {
        self.stack_signal
            .as_deref()
            .unwrap_or(signal::DEFAULT_STACK)
    }

    /// One numbered line per rule (`#1 "db": …`), as the log's policy record carries them.
    pub fn summaries(&self) -> Vec<String> {
        self.rules
            .iter()
            .enumerate()
            .map(|(i, r)| format!("#{} {}", i + 1, r.summary()))
            .collect()
    }
}

/// The policy in force when none is given: one rule selecting every wait on a sync object,
/// acting always, counting and taking the waiter's call chain; and one taking the chain of
/// every thread the sampler finds blocked outside the sync objects, once per wait.
pub fn builtin() -> Policy {
    Policy {
        rules: vec![
            Rule {
                name: None,
                select: Selectors::default(),
                when: Criteria::default(),
                actions: action::COUNT | action::WAITER_CHAIN,
            },
            Rule {
                name: None,
                select: Selectors {
                    resources: Some(RESOURCE_KINDS.to_vec()),
                    ..Selectors::default()
                },
                when: Criteria::default(),
                actions: action::WAITER_CHAIN,
            },
        ],
        stack_signal: None,
        events: None,
        sample_ns: None,
    }
}

/// Every action, with its name in policy files, in bit order.
pub const ACTIONS: [(&str, u32); 6] = [
    ("count", action::COUNT),
    ("record", action::RECORD),
    ("waiter_chain", action::WAITER_CHAIN),
    ("all_waiters", action::ALL_WAITERS),
    ("holder_chain", action::HOLDER_CHAIN),
    ("holder_live_stack", action::HOLDER_LIVE_STACK),
];

/// The names of the actions set in `bits`, in bit order (unknown bits are left out).
pub fn action_names(bits: u32) -> Vec<&'static str> {
    ACTIONS
        .iter()
        .filter(|(_, b)| bits & b != 0)
        .map(|(n, _)| *n)
        .collect()
}

/// Every kind, as written in policy files (the canonical names are [`ObjectKind::name`]).
pub const KINDS: [ObjectKind; 8] = [
    ObjectKind::Mutex,
    ObjectKind::RwLock,
    ObjectKind::Cond,
    ObjectKind::Semaphore,
    ObjectKind::Spin,
    ObjectKind::Barrier,
    ObjectKind::Thread,
    ObjectKind::Futex,
];

/// The kind a policy file names, by canonical name or alias (`sem`, `spin`, `join`).
pub fn kind_from_name(name: &str) -> Option<ObjectKind> {
    match name {
        "sem" => Some(ObjectKind::Semaphore),
        "spin" => Some(ObjectKind::Spin),
        "join" => Some(ObjectKind::Thread),
        n => KINDS.into_iter().find(|k| k.name() == n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_in_bit_order() {
        assert_eq!(
            action_names(action::HOLDER_LIVE_STACK | action::COUNT | action::RECORD),
            ["count", "record", "holder_live_stack"]
        );
        assert_eq!(action_names(0), Vec::<&str>::new());
        assert_eq!(action_names(u32::MAX).len(), 6);
        assert_eq!(action_names(1 << 20), Vec::<&str>::new());
    }

    #[test]
    fn kinds_and_aliases() {
        assert_eq!(kind_from_name("mutex"), Some(ObjectKind::Mutex));
        assert_eq!(kind_from_name("spinlock"), Some(ObjectKind::Spin));
        assert_eq!(kind_from_name("spin"), Some(ObjectKind::Spin));
        assert_eq!(kind_from_name("sem"), Some(ObjectKind::Semaphore));
        assert_eq!(kind_from_name("semaphore"), Some(ObjectKind::Semaphore));
        assert_eq!(kind_from_name("join"), Some(ObjectKind::Thread));
        assert_eq!(kind_from_name("Mutex"), None);
        for k in KINDS {
            assert_eq!(kind_from_name(k.name()), Some(k));
        }
    }

    #[test]
    fn builtin_counts_and_takes_waiter_chains_everywhere() {
        let p = builtin();
        assert_eq!(p.rules.len(), 2);
        assert!(p.rules[1].select.is_resource_rule());
        assert!(p.rules[1].select.matches_resource("pipe", "pipe:[7]"));
        assert!(!p.rules[1]
            .select
            .matches_object(ObjectKind::Mutex, 0x10, None, []));
        assert!(!p.rules[0].select.matches_resource("pipe", "pipe:[7]"));
        assert!(p.rules[0].select.is_empty());
        assert!(p.rules[0].when.is_empty());
        assert_eq!(p.rules[0].actions, action::COUNT | action::WAITER_CHAIN);
        assert_eq!(p.stack_signal, None);
        assert_eq!(p.stack_signal_spec(), signal::DEFAULT_STACK);
        assert!(!p.wants_live_stack());
    }

    fn criteria(f: impl FnOnce(&mut Criteria)) -> Criteria {
        let mut c = Criteria::default();
        f(&mut c);
        c
    }

    #[test]
    fn convoy_of_8_with_min_waiters_3_acts_from_the_third_waiter() {
        let c = criteria(|c| c.min_waiters = 3);
        let v: Vec<Verdict> = (1..=7).map(|w| c.on_request(w, w as u64, 0)).collect();
        use Verdict::*;
        assert_eq!(v, [Skip, Skip, Act, Act, Act, Act, Act]);
    }

    #[test]
    fn max_waiters_suppresses_from_n_and_resumes_below() {
        let c = criteria(|c| c.max_waiters = Some(5));
        use Verdict::*;
        let counts = [1, 4, 5, 9, 5, 4, 2];
        let v: Vec<Verdict> = counts.iter().map(|&w| c.on_request(w, 1, 0)).collect();
        assert_eq!(v, [Act, Act, Suppressed, Suppressed, Suppressed, Act, Act]);
    }

    /// 40 threads pile up on one lock (39 wait, one holds): granularity 10 acts at 10, 20, 30.
    #[test]
    fn granularity_acts_at_each_step_over_the_last_acted_on_count() {
        let c = criteria(|c| c.granularity = Some(10));
        let mut acted_max = 0;
        let mut acted = Vec::new();
        for w in 1..=39 {
            if c.on_request(w, w as u64, acted_max) == Verdict::Act {
                acted.push(w);
                acted_max = w;
            }
        }
        assert_eq!(acted, [10, 20, 30]);
        // A jump past a step counts from where it acted.
        assert_eq!(c.on_request(12, 1, 0), Verdict::Act);
        assert_eq!(c.on_request(21, 1, 12), Verdict::Skip);
        assert_eq!(c.on_request(22, 1, 12), Verdict::Act);
        assert_eq!(c.on_request(u32::MAX, 1, u32::MAX - 1), Verdict::Skip);
    }

    #[test]
    fn every_nth_request_is_the_nth_2nth_and_so_on() {
        let c = criteria(|c| c.every_nth = Some(10));
        let acted: Vec<u64> = (1..=35)
            .filter(|&r| c.on_request(2, r, 0) == Verdict::Act)
            .collect();
        assert_eq!(acted, [10, 20, 30]);
    }

    #[test]
    fn wait_and_stack_criteria() {
        let c = criteria(|c| {
            c.min_wait_ns = Some(2_000_000);
            c.min_stack_depth = Some(4);
        });
        assert!(!c.wait_qualifies(1_999_999));
        assert!(c.wait_qualifies(2_000_000));
        assert!(!c.stack_qualifies(3));
        assert!(c.stack_qualifies(4));
        let none = Criteria::default();
        assert!(none.wait_qualifies(0) && none.stack_qualifies(0));
        assert_eq!(none.on_request(1, 1, 0), Verdict::Act);
    }

    /// A small deterministic generator for the robustness test (no test-only dependencies).
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const SEEDS: &[&str] = &[
        r#"{"stack_signal": "SIGRTMAX-4", "rules": [{"name": "db locks", "match": {"kind": ["mutex", "rwlock"], "creation_site": "db_*", "thread_name": "worker-[0-9]", "thread_group": "worker_main", "object_name": "queue*", "object_addr": ["0x5555dead0000", 4096]}, "when": {"min_waiters": 3, "max_waiters": 20, "granularity": 10, "every_nth": 10, "min_wait": "1.5ms", "min_stack_depth": 4}, "actions": ["record", "waiter_chain", "all_waiters", "holder_chain", "holder_live_stack", "count"]}]}"#,
        r#"{"rules": [{"actions": "count"}, {"match": {"kind": "sem"}, "when": {"min_wait": 250}, "actions": ["record"]}]}"#,
        r#"{"rules": []}"#,
    ];

    /// Pieces spliced into the seeds: tokens that push the parser down its error paths.
    const PIECES: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "null",
        "true",
        "-1",
        "0",
        "1e999",
        "18446744073709551616",
        "3.5",
        "\"\\u0000\"",
        "\"[\"",
        "\"*?[!a-z]\"",
        "\"5 parsecs\"",
        "\"0x\"",
        "\"none\"",
        "é",
        "\n",
        "\"min_waiters\"",
        "\"actions\"",
        "\"rules\"",
        "\"kind\"",
        "\"max_waiters\": 1",
    ];

    fn mutate(rng: &mut XorShift, text: &str) -> Vec<u8> {
        let mut bytes = text.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(5) {
                0 if !bytes.is_empty() => {
                    let at = at.min(bytes.len() - 1);
                    bytes[at] = rng.next() as u8;
                }
                1 if at < bytes.len() => {
                    let end = (at + 1 + rng.below(8)).min(bytes.len());
                    bytes.drain(at..end);
                }
                2 => bytes.truncate(at),
                _ => {
                    let piece = PIECES[rng.below(PIECES.len())].as_bytes();
                    bytes.splice(at..at, piece.iter().copied());
                }
            }
        }
        bytes
    }

    /// Whatever the input, parse returns: a policy that survives the round trip and explains
    /// itself, or a one-line error.
    #[test]
    fn never_panics_on_damaged_or_random_input() {
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        let (mut accepted, mut refused) = (0, 0);
        for i in 0..30_000 {
            let bytes = if i % 10 == 0 {
                (0..rng.below(64)).map(|_| rng.next() as u8).collect()
            } else {
                let seed = SEEDS[rng.below(SEEDS.len())];
                mutate(&mut rng, seed)
            };
            let text = String::from_utf8_lossy(&bytes);
            match parse(&text) {
                Ok(p) => {
                    accepted += 1;
                    assert_eq!(parse(&to_json(&p)).as_ref(), Ok(&p), "{text}");
                    assert!(!explain(&p).is_empty());
                    for r in &p.rules {
                        assert!(!r.summary().contains('\n'), "{text}");
                    }
                }
                Err(e) => {
                    refused += 1;
                    let line = e.to_string();
                    assert!(!line.contains('\n') && !line.is_empty(), "{text}: {line}");
                }
            }
        }
        // Both paths were exercised, not just the syntax errors.
        assert!(
            accepted > 100 && refused > 10_000,
            "{accepted} accepted, {refused} refused"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(&deep).is_err());
        let deep = format!(
            r#"{{"rules": [{{"actions": {}"count"{}}}]}}"#,
            "[".repeat(5000),
            "]".repeat(5000)
        );
        assert!(parse(&deep).is_err());
    }

    #[test]
    fn selectors_match_objects_and_threads() {
        let s = Selectors {
            kinds: Some(vec![ObjectKind::Mutex, ObjectKind::RwLock]),
            creation_site: Some(Glob::new("db_*").unwrap()),
            ..Selectors::default()
        };
        assert!(s.has_object_selectors() && !s.has_thread_selectors());
        assert!(s.matches_object(
            ObjectKind::Mutex,
            1,
            None,
            ["pthread_mutex_init", "db_open"]
        ));
        assert!(!s.matches_object(ObjectKind::Mutex, 1, None, ["main"]));
        assert!(!s.matches_object(ObjectKind::Cond, 1, None, ["db_open"]));
        assert!(!s.matches_object(ObjectKind::Mutex, 1, None, []));
        assert!(s.matches_thread(None, None));

        let t = Selectors {
            object_addr: Some(vec![0x1000]),
            object_name: Some(Glob::new("queue*").unwrap()),
            thread_name: Some(Glob::new("worker-*").unwrap()),
            thread_group: Some(Glob::new("worker_main").unwrap()),
            ..Selectors::default()
        };
        assert!(t.has_object_selectors() && t.has_thread_selectors());
        assert!(t.matches_object(ObjectKind::Spin, 0x1000, Some("queue_in"), []));
        assert!(!t.matches_object(ObjectKind::Spin, 0x1000, None, []));
        assert!(!t.matches_object(ObjectKind::Spin, 0x2000, Some("queue_in"), []));
        assert!(t.matches_thread(Some("worker-1"), Some("worker_main")));
        assert!(!t.matches_thread(Some("worker-1"), Some("main")));
        assert!(!t.matches_thread(None, Some("worker_main")));
        assert!(Selectors::default().is_empty());
    }
}
