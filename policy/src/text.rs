//! A policy written out: as normalised JSON (for the log), as one line per rule (for reports) and
//! as plain sentences (for `waitshim-analyze policy check`).

use waitshim_format::record::action;

use crate::{
    action_names, signal, Criteria, EventsMode, Glob, ObjectKind, Policy, Rule, Selectors, KINDS,
    RESOURCE_KINDS, RTMAX, RTMIN,
};

/// The policy as compact JSON with a fixed field order, defaults left out, kinds under their
/// canonical names, addresses in hex and durations in the largest exact unit. [`crate::parse`]
/// reads it back to an equal policy.
pub fn to_json(policy: &Policy) -> String {
    let mut out = String::from("{");
    if let Some(s) = &policy.stack_signal {
        out += &format!("\"stack_signal\":{},", json_string(s));
    }
    if let Some(e) = policy.events {
        out += &format!("\"events\":{},", json_string(&e.to_string()));
    }
    if let Some(ns) = policy.sample_ns {
        out += &format!("\"sample\":{},", json_string(&sample_words(ns)));
    }
    out += "\"rules\":[";
    for (i, rule) in policy.rules.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        rule_json(rule, &mut out);
    }
    out += "]}";
    out
}

fn rule_json(rule: &Rule, out: &mut String) {
    let mut fields = Vec::new();
    if let Some(n) = &rule.name {
        fields.push(format!("\"name\":{}", json_string(n)));
    }
    let s = &rule.select;
    let mut sel = Vec::new();
    if let Some(kinds) = &s.kinds {
        let names: Vec<String> = kinds.iter().map(|k| json_string(k.name())).collect();
        sel.push(format!("\"kind\":[{}]", names.join(",")));
    }
    if let Some(addrs) = &s.object_addr {
        let hex: Vec<String> = addrs.iter().map(|a| format!("\"{a:#x}\"")).collect();
        sel.push(format!("\"object_addr\":[{}]", hex.join(",")));
    }
    match &s.resources {
        Some(kinds) if kinds.len() == RESOURCE_KINDS.len() => {
            sel.push("\"resource\":\"any\"".to_string())
        }
        Some(kinds) => {
            let names: Vec<String> = kinds.iter().map(|k| json_string(k)).collect();
            sel.push(format!("\"resource\":[{}]", names.join(",")));
        }
        None => {}
    }
    for (key, glob) in [
        ("resource_name", &s.resource_name),
        ("object_name", &s.object_name),
        ("creation_site", &s.creation_site),
        ("thread_name", &s.thread_name),
        ("thread_group", &s.thread_group),
    ] {
        if let Some(g) = glob {
            sel.push(format!("\"{key}\":{}", json_string(g.as_str())));
        }
    }
    if !sel.is_empty() {
        fields.push(format!("\"match\":{{{}}}", sel.join(",")));
    }
    let c = &rule.when;
    let mut when = Vec::new();
    if c.min_waiters != 0 {
        when.push(format!("\"min_waiters\":{}", c.min_waiters));
    }
    let numbers = [
        ("max_waiters", c.max_waiters.map(u64::from)),
        ("granularity", c.granularity.map(u64::from)),
        ("every_nth", c.every_nth),
    ];
    for (key, v) in numbers {
        if let Some(v) = v {
            when.push(format!("\"{key}\":{v}"));
        }
    }
    if let Some(ns) = c.min_wait_ns {
        when.push(format!("\"min_wait\":\"{}\"", duration(ns)));
    }
    if let Some(d) = c.min_stack_depth {
        when.push(format!("\"min_stack_depth\":{d}"));
    }
    if !when.is_empty() {
        fields.push(format!("\"when\":{{{}}}", when.join(",")));
    }
    let actions: Vec<String> = action_names(rule.actions)
        .into_iter()
        .map(json_string)
        .collect();
    fields.push(format!("\"actions\":[{}]", actions.join(",")));
    out.push('{');
    out.push_str(&fields.join(","));
    out.push('}');
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Nanoseconds in the largest unit that keeps them exact: `2ms`, `1.5s`, `250us`, `7ns`.
pub(crate) fn duration(ns: u64) -> String {
    let (unit, name, digits) = match ns {
        1_000_000_000.. => (1_000_000_000, "s", 9),
        1_000_000.. => (1_000_000, "ms", 6),
        1_000.. => (1_000, "us", 3),
        _ => return format!("{ns}ns"),
    };
    let (whole, frac) = (ns / unit, ns % unit);
    if frac == 0 {
        format!("{whole}{name}")
    } else {
        let frac = format!("{frac:0digits$}");
        format!("{whole}.{}{name}", frac.trim_end_matches('0'))
    }
}

/// A name or pattern as text shows it: quoted, control characters escaped.
fn shown(s: &str) -> String {
    json_string(s)
}

fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// `a`, `a or b`, `a, b or c` (with `and` when `word` says so).
fn join_words(items: &[String], word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} {word} {last}", init.join(", ")),
    }
}

fn addresses(addrs: &[u64]) -> String {
    const SHOWN: usize = 3;
    let mut parts: Vec<String> = addrs
        .iter()
        .take(SHOWN)
        .map(|a| format!("{a:#x}"))
        .collect();
    if addrs.len() > SHOWN {
        parts.push(format!("{} more", addrs.len() - SHOWN));
    }
    join_words(&parts, "or")
}

impl Rule {
    /// One short line: name, what it selects, when it acts, what it collects, e.g.
    /// `"db": mutex created in "db_*" when ≥3 waiters → record, waiter_chain`. The number of the
    /// rule is not part of it ([`Policy::summaries`] adds it).
    pub fn summary(&self) -> String {
        let mut out = String::new();
        if let Some(n) = &self.name {
            out += &format!("{}: ", shown(n));
        }
        out += &selection_short(&self.select);
        let when = criteria_short(&self.when);
        if !when.is_empty() {
            out += " when ";
            out += &when.join(", ");
        }
        out += " → ";
        let actions = action_names(self.actions);
        out += &if actions.is_empty() {
            "nothing".to_string()
        } else {
            actions.join(", ")
        };
        out
    }
}

/// The sampler's interval as a policy writes it: `off`, or a duration.
fn sample_words(ns: u64) -> String {
    if ns == 0 {
        "off".to_string()
    } else {
        duration(ns)
    }
}

fn selection_short(s: &Selectors) -> String {
    let mut parts = Vec::new();
    if s.is_resource_rule() {
        match &s.resources {
            Some(kinds) if kinds.len() < RESOURCE_KINDS.len() => {
                let names: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
                parts.push(format!("blocked on {}", join_words(&names, "or")));
            }
            _ => parts.push("blocked on any resource".to_string()),
        }
        if let Some(g) = &s.resource_name {
            parts.push(format!("named {}", shown(g.as_str())));
        }
    }
    match &s.kinds {
        _ if s.is_resource_rule() => {}
        Some(kinds) => {
            let names: Vec<String> = kinds.iter().map(|k| k.name().to_string()).collect();
            parts.push(join_words(&names, "or"));
        }
        None if s.is_empty() => parts.push("any wait".to_string()),
        None if s.has_object_selectors() => parts.push("object".to_string()),
        None => parts.push("any object".to_string()),
    }
    if let Some(g) = &s.object_name {
        parts.push(format!("named {}", shown(g.as_str())));
    }
    if let Some(g) = &s.creation_site {
        parts.push(format!("created in {}", shown(g.as_str())));
    }
    if let Some(a) = &s.object_addr {
        parts.push(format!("at {}", addresses(a)));
    }
    if let Some(g) = &s.thread_name {
        parts.push(format!("by threads named {}", shown(g.as_str())));
    }
    if let Some(g) = &s.thread_group {
        let by = if s.thread_name.is_some() {
            ""
        } else {
            "by threads "
        };
        parts.push(format!("{by}started in {}", shown(g.as_str())));
    }
    parts.join(" ")
}

fn criteria_short(c: &Criteria) -> Vec<String> {
    let mut parts = Vec::new();
    if c.min_waiters > 1 {
        parts.push(format!("≥{} waiters", c.min_waiters));
    }
    if let Some(n) = c.max_waiters {
        parts.push(format!("<{n} waiters"));
    }
    if let Some(n) = c.granularity {
        parts.push(format!("each +{n} waiters"));
    }
    match c.every_nth {
        Some(1) => parts.push("every request".to_string()),
        Some(n) => parts.push(format!("every {} request", ordinal(n))),
        None => {}
    }
    if let Some(ns) = c.min_wait_ns.filter(|&ns| ns > 0) {
        parts.push(format!("wait ≥{}", duration(ns)));
    }
    if let Some(d) = c.min_stack_depth.filter(|&d| d > 0) {
        parts.push(format!("stack depth ≥{d}"));
    }
    parts
}

const COUNTERS: &str = "Always kept, whatever the policy: each object's counters (acquisitions, contended acquisitions, owner changes, total and longest wait and hold, most waiters at once).";

/// The policy in plain sentences, several lines: what is always kept, then per rule what it
/// applies to, when it acts and what it collects, then what happens to everything else.
pub fn explain(policy: &Policy) -> String {
    let mut lines = vec![COUNTERS.to_string()];
    if let Some(e) = policy.events {
        lines.push(events_words(e));
    }
    if let Some(ns) = policy.sample_ns {
        lines.push(if ns == 0 {
            "The sampler is off (sample): no thread states, waits outside the sync objects or idle CPUs are seen. Taken from the file as it is when the program starts; WAITSHIM_SAMPLE, if set, wins.".to_string()
        } else {
            format!("The sampler looks at the threads every {} (sample). Taken from the file as it is when the program starts; WAITSHIM_SAMPLE, if set, wins.", duration(ns))
        });
    }
    if policy.rules.is_empty() {
        lines.push(
            "No rules: nothing expensive is collected; every object keeps only the always-on counters."
                .to_string(),
        );
        return lines.join("\n") + "\n";
    }
    let n = policy.rules.len();
    lines.push(format!(
        "{n} rule{}. For each wait the rules are tried in order and the first one whose selectors match decides; \
         if its conditions do not hold, nothing more is collected for that wait (it does not fall through to a later rule).",
        if n == 1 { "" } else { "s" }
    ));
    let catch_all = policy.rules.iter().position(|r| r.select.is_empty());
    for (i, rule) in policy.rules.iter().enumerate() {
        lines.push(String::new());
        let name = rule
            .name
            .as_ref()
            .map(|n| format!(" {}", shown(n)))
            .unwrap_or_default();
        lines.push(format!("Rule {}{name}:", i + 1));
        if let Some(first) = catch_all.filter(|&c| c < i && !rule.select.is_resource_rule()) {
            lines.push(format!(
                "  never used: rule {} has no selectors, so it decides every wait before this rule is tried.",
                first + 1
            ));
        }
        lines.push(format!("  applies to: {}.", selection_words(&rule.select)));
        if rule.select.is_resource_rule() {
            lines.push(format!("  acts: {}.", resource_criteria_words(&rule.when)));
            lines.push(format!(
                "  collects: {}.",
                resource_actions_words(rule.actions)
            ));
        } else {
            lines.push(format!("  acts: {}.", criteria_words(&rule.when)));
            lines.push(format!(
                "  collects: {}.",
                actions_words(policy, rule.actions)
            ));
        }
    }
    lines.push(String::new());
    match catch_all {
        Some(c) => lines.push(format!(
            "Rule {} selects every wait on a sync object, so no such wait falls outside the rules; waits on which the deciding rule does not act keep only the always-on counters.",
            c + 1
        )),
        None => lines.push(
            "Objects and threads no rule selects keep only the always-on counters, as do waits on which the deciding rule does not act."
                .to_string(),
        ),
    }
    if !policy.rules.iter().any(|r| r.select.is_resource_rule()) {
        lines.push(
            "No rule has \"resource\" or \"resource_name\": the sampler still names what blocked threads wait on, but takes no call chain of theirs."
                .to_string(),
        );
    }
    if policy.wants_live_stack() {
        let spec = policy.stack_signal_spec();
        let number = match signal::parse(spec, RTMIN, RTMAX) {
            // Real-time signals are numbered relative to the C library's SIGRTMIN/SIGRTMAX.
            Ok(signal::SignalSpec::Number(n)) if spec.to_ascii_uppercase().contains("RTM") => {
                format!(" (signal {n} with glibc's usual SIGRTMIN/SIGRTMAX)")
            }
            Ok(signal::SignalSpec::Number(n)) if spec.trim().parse::<i32>().is_err() => {
                format!(" (signal {n})")
            }
            _ => String::new(),
        };
        let origin = if policy.stack_signal.is_some() {
            "set by stack_signal"
        } else {
            "the default; change it with stack_signal"
        };
        lines.push(if spec.trim().eq_ignore_ascii_case("none") {
            "Live holder stacks: a holder blocked in a system call has its stack scanned; a running holder is not asked (stack_signal is none).".to_string()
        } else {
            format!(
                "Live holder stacks are asked for with {spec}{number}, {origin}; a holder blocked in a system call is not signalled (its stack is scanned instead); if the program has its own handler for that signal (or ignores it) the shim leaves it alone and running holders get no stack."
            )
        });
    }
    lines.join("\n") + "\n"
}

/// What the `events` field asks of the shim, and when it holds.
fn events_words(e: EventsMode) -> String {
    let what = match e {
        EventsMode::All => "every blocked wait is written as an event (begin, end, object, reason, who woke it)".to_string(),
        EventsMode::Off => "no per-wait events are written (the counters stay exact)".to_string(),
        EventsMode::Ring { .. } => format!(
            "a flight recorder keeps the events of the waits that ended in the last {} (written at exit or on a data request)",
            &e.to_string()["ring:".len()..]
        ),
    };
    format!(
        "Per-wait events ({e}): {what}. Taken from the file as it is when the program starts; a change to it on reload is not applied, and WAITSHIM_EVENTS, if set, wins."
    )
}

fn kind_plural(k: ObjectKind) -> &'static str {
    match k {
        ObjectKind::Mutex => "mutexes",
        ObjectKind::RwLock => "rwlocks",
        ObjectKind::Cond => "condition variables",
        ObjectKind::Semaphore => "semaphores",
        ObjectKind::Spin => "spinlocks",
        ObjectKind::Barrier => "barriers",
        ObjectKind::Thread => "thread joins",
        ObjectKind::Futex => "futexes",
    }
}

/// `named "jobs"`, or `with a name matching "queue*"` for a pattern with wildcards.
fn name_words(g: &Glob) -> String {
    if g.is_literal() {
        format!("named {}", shown(g.as_str()))
    } else {
        format!("with a name matching {}", shown(g.as_str()))
    }
}

fn selection_words(s: &Selectors) -> String {
    if s.is_empty() {
        return "every wait, on every object, by every thread".to_string();
    }
    let mut out = match &s.kinds {
        _ if s.is_resource_rule() => {
            let mut out = match &s.resources {
                Some(kinds) if kinds.len() < RESOURCE_KINDS.len() => {
                    let names: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
                    format!(
                        "threads blocked outside the sync objects on a {} (seen by the sampler)",
                        join_words(&names, "or")
                    )
                }
                _ => "threads blocked outside the sync objects, on any resource (seen by the sampler)".to_string(),
            };
            if let Some(g) = &s.resource_name {
                out += &format!(
                    " whose name as the report shows it matches {}",
                    shown(g.as_str())
                );
            }
            out
        }
        Some(kinds) if kinds.len() == KINDS.len() => "waits on objects of every kind".to_string(),
        Some(kinds) => {
            let names: Vec<String> = kinds.iter().map(|&k| kind_plural(k).to_string()).collect();
            format!("waits on {}", join_words(&names, "and"))
        }
        None => "waits on any object".to_string(),
    };
    let mut objects = Vec::new();
    if let Some(g) = &s.object_name {
        objects.push(format!(
            "{} (given with waitshim_name_object)",
            name_words(g)
        ));
    }
    if let Some(g) = &s.creation_site {
        objects.push(format!(
            "created in a function {} (any frame of the creation call chain)",
            if g.is_literal() {
                format!("named {}", shown(g.as_str()))
            } else {
                format!("matching {}", shown(g.as_str()))
            }
        ));
    }
    if let Some(a) = &s.object_addr {
        let word = if a.len() == 1 { "address" } else { "addresses" };
        objects.push(format!("at {word} {}", addresses(a)));
    }
    if !objects.is_empty() {
        out += " ";
        out += &join_words(&objects, "and");
    }
    let mut threads = Vec::new();
    if let Some(g) = &s.thread_name {
        threads.push(name_words(g));
    }
    if let Some(g) = &s.thread_group {
        threads.push(format!(
            "whose start routine is {}",
            if g.is_literal() {
                shown(g.as_str())
            } else {
                format!("a function matching {}", shown(g.as_str()))
            }
        ));
    }
    if !threads.is_empty() {
        out += ", by threads ";
        out += &join_words(&threads, "and");
    }
    out
}

fn resource_criteria_words(c: &Criteria) -> String {
    match c.min_wait_ns.filter(|&ns| ns > 0) {
        Some(ns) => format!(
            "once the thread has been seen blocked in the same call for {} or longer (at the sampler's looks)",
            duration(ns)
        ),
        None => "on every such wait the sampler sees".to_string(),
    }
}

fn resource_actions_words(bits: u32) -> String {
    let mut parts = Vec::new();
    if bits & action::COUNT != 0 {
        parts.push("a count of the waits it acted on".to_string());
    }
    if bits & action::WAITER_CHAIN != 0 {
        parts.push("the blocked thread's call chain, once per wait, read from its stack without stopping or signalling it".to_string());
    }
    if parts.is_empty() {
        "nothing".to_string()
    } else {
        parts.join("; ")
    }
}

fn criteria_words(c: &Criteria) -> String {
    let mut parts = Vec::new();
    if c.min_waiters > 1 {
        parts.push(format!(
            "only when at least {} threads wait on the object (the waiting one included)",
            c.min_waiters
        ));
    }
    if let Some(n) = c.max_waiters {
        parts.push(format!(
            "not while {n} or more wait (suppressed until fewer than {n} do)"
        ));
    }
    if let Some(n) = c.granularity {
        parts.push(format!(
            "each time the number of waiters reaches {n} more than the count it last acted on for that object (first at {n})"
        ));
    }
    match c.every_nth {
        Some(1) => {}
        Some(n) => parts.push(format!(
            "on every {} request of an object (its {}, {}, … wait)",
            ordinal(n),
            ordinal(n),
            ordinal(n.saturating_mul(2))
        )),
        None => {}
    }
    if let Some(ns) = c.min_wait_ns.filter(|&ns| ns > 0) {
        parts.push(format!(
            "only on waits that last {} or longer (decided when the wait ends)",
            duration(ns)
        ));
    }
    if let Some(d) = c.min_stack_depth.filter(|&d| d > 0) {
        parts.push(format!(
            "only when the waiting thread's call chain is at least {d} frames deep"
        ));
    }
    if parts.is_empty() {
        "on every wait it applies to".to_string()
    } else {
        parts.join("; ")
    }
}

fn actions_words(policy: &Policy, bits: u32) -> String {
    let mut parts = Vec::new();
    if bits & action::COUNT != 0 {
        parts.push("a count of the waits it acted on".to_string());
    }
    if bits & action::RECORD != 0 {
        parts.push(
            "an event record per wait it acts on (when, how long, how many waited, how it ended)"
                .to_string(),
        );
    }
    if bits & action::WAITER_CHAIN != 0 {
        parts.push("the waiting thread's call chain".to_string());
    }
    if bits & action::ALL_WAITERS != 0 {
        parts.push(
            "the call chains of every thread waiting on the object at that moment".to_string(),
        );
    }
    if bits & action::HOLDER_CHAIN != 0 {
        parts.push("where the holder took the object (its call chain then)".to_string());
    }
    if bits & action::HOLDER_LIVE_STACK != 0 {
        parts.push(format!(
            "what the holder is doing right now (its live stack, asked for with {})",
            policy.stack_signal_spec()
        ));
    }
    if parts.is_empty() {
        "nothing".to_string()
    } else {
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{builtin, parse};

    const FULL: &str = r#"{ "stack_signal": "SIGRTMAX-4",
      "rules": [
        { "name": "db locks",
          "match": { "kind": ["mutex", "rwlock"], "creation_site": "db_*", "thread_name": "worker-*", "thread_group": "worker_main", "object_name": "queue*", "object_addr": "0x5555dead0000" },
          "when":  { "min_waiters": 3, "max_waiters": 20, "granularity": 10, "every_nth": 10, "min_wait": "2ms", "min_stack_depth": 4 },
          "actions": ["record", "waiter_chain", "all_waiters", "holder_chain", "holder_live_stack", "count"] } ] }"#;

    #[test]
    fn durations_are_exact_in_the_largest_unit() {
        assert_eq!(duration(0), "0ns");
        assert_eq!(duration(7), "7ns");
        assert_eq!(duration(250_000), "250us");
        assert_eq!(duration(2_000_000), "2ms");
        assert_eq!(duration(1_500_000_000), "1.5s");
        assert_eq!(duration(1_234_567_891), "1.234567891s");
        assert_eq!(duration(1_000_001), "1.000001ms");
        for ns in [
            0,
            1,
            999,
            1000,
            1001,
            123_456_789,
            u64::MAX,
            u64::MAX / 1000 * 1000,
        ] {
            assert_eq!(crate::parse::duration(&duration(ns)), Ok(ns), "{ns}");
        }
    }

    #[test]
    fn normalised_json() {
        let p = parse(FULL).unwrap();
        assert_eq!(
            to_json(&p),
            r#"{"stack_signal":"SIGRTMAX-4","rules":[{"name":"db locks","match":{"kind":["mutex","rwlock"],"object_addr":["0x5555dead0000"],"object_name":"queue*","creation_site":"db_*","thread_name":"worker-*","thread_group":"worker_main"},"when":{"min_waiters":3,"max_waiters":20,"granularity":10,"every_nth":10,"min_wait":"2ms","min_stack_depth":4},"actions":["count","record","waiter_chain","all_waiters","holder_chain","holder_live_stack"]}]}"#
        );
        assert_eq!(parse(&to_json(&p)).unwrap(), p);
        assert_eq!(
            to_json(&builtin()),
            r#"{"rules":[{"actions":["count","waiter_chain"]},{"match":{"resource":"any"},"actions":["waiter_chain"]}]}"#
        );
        assert_eq!(parse(&to_json(&builtin())).unwrap(), builtin());
        let odd = parse(
            r#"{"rules": [{"name": "a\"b\n", "match": {"kind": "spin", "thread_name": "x\\*"},
               "when": {"min_wait": "1.25ms", "min_waiters": 1}, "actions": "record"}]}"#,
        )
        .unwrap();
        assert_eq!(parse(&to_json(&odd)).unwrap(), odd);
        assert!(to_json(&odd).contains(r#""kind":["spinlock"]"#));
    }

    #[test]
    fn summaries() {
        let p = parse(FULL).unwrap();
        assert_eq!(
            p.rules[0].summary(),
            r#""db locks": mutex or rwlock named "queue*" created in "db_*" at 0x5555dead0000 by threads named "worker-*" started in "worker_main" when ≥3 waiters, <20 waiters, each +10 waiters, every 10th request, wait ≥2ms, stack depth ≥4 → count, record, waiter_chain, all_waiters, holder_chain, holder_live_stack"#
        );
        assert_eq!(
            builtin().rules[0].summary(),
            "any wait → count, waiter_chain"
        );
        assert_eq!(
            builtin().summaries(),
            [
                "#1 any wait → count, waiter_chain",
                "#2 blocked on any resource → waiter_chain"
            ]
        );
        let p = parse(
            r#"{"rules": [
              {"name": "db", "match": {"kind": "mutex", "creation_site": "db_*"}, "when": {"min_waiters": 3}, "actions": ["record", "waiter_chain"]},
              {"match": {"thread_group": "main"}, "when": {"every_nth": 1}, "actions": "count"},
              {"match": {"object_addr": [1, 2, 3, 4, 5]}, "when": {"every_nth": 22, "min_wait": 0}, "actions": "count"}]}"#,
        )
        .unwrap();
        assert_eq!(
            p.summaries(),
            [
                r#"#1 "db": mutex created in "db_*" when ≥3 waiters → record, waiter_chain"#,
                r#"#2 any object by threads started in "main" when every request → count"#,
                r#"#3 object at 0x1, 0x2, 0x3 or 2 more when every 22nd request → count"#,
            ]
        );
    }

    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd",
                "101st", "111th", "112th"
            ]
        );
    }

    #[test]
    fn explains_the_full_example() {
        let text = explain(&parse(FULL).unwrap());
        let expected = [
            COUNTERS,
            "1 rule. For each wait the rules are tried in order and the first one whose selectors match decides; if its conditions do not hold, nothing more is collected for that wait (it does not fall through to a later rule).",
            "",
            "Rule 1 \"db locks\":",
            "  applies to: waits on mutexes and rwlocks with a name matching \"queue*\" (given with waitshim_name_object), created in a function matching \"db_*\" (any frame of the creation call chain) and at address 0x5555dead0000, by threads with a name matching \"worker-*\" and whose start routine is \"worker_main\".",
            "  acts: only when at least 3 threads wait on the object (the waiting one included); not while 20 or more wait (suppressed until fewer than 20 do); each time the number of waiters reaches 10 more than the count it last acted on for that object (first at 10); on every 10th request of an object (its 10th, 20th, … wait); only on waits that last 2ms or longer (decided when the wait ends); only when the waiting thread's call chain is at least 4 frames deep.",
            "  collects: a count of the waits it acted on; an event record per wait it acts on (when, how long, how many waited, how it ended); the waiting thread's call chain; the call chains of every thread waiting on the object at that moment; where the holder took the object (its call chain then); what the holder is doing right now (its live stack, asked for with SIGRTMAX-4).",
            "",
            "Objects and threads no rule selects keep only the always-on counters, as do waits on which the deciding rule does not act.",
            "No rule has \"resource\" or \"resource_name\": the sampler still names what blocked threads wait on, but takes no call chain of theirs.",
            "Live holder stacks are asked for with SIGRTMAX-4 (signal 60 with glibc's usual SIGRTMIN/SIGRTMAX), set by stack_signal; a holder blocked in a system call is not signalled (its stack is scanned instead); if the program has its own handler for that signal (or ignores it) the shim leaves it alone and running holders get no stack.",
        ]
        .join("\n")
            + "\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn explains_the_builtin_policy() {
        let text = explain(&builtin());
        assert!(text.contains("2 rules. "), "{text}");
        assert!(text.contains("Rule 1:\n  applies to: every wait, on every object, by every thread.\n  acts: on every wait it applies to.\n  collects: a count of the waits it acted on; the waiting thread's call chain.\n"), "{text}");
        assert!(text.contains("Rule 2:\n  applies to: threads blocked outside the sync objects, on any resource (seen by the sampler).\n  acts: on every such wait the sampler sees.\n  collects: the blocked thread's call chain, once per wait, read from its stack without stopping or signalling it.\n"), "{text}");
        assert!(
            text.contains("Rule 1 selects every wait on a sync object, so no such wait falls outside the rules"),
            "{text}"
        );
        assert!(!text.contains("never used"), "{text}");
        assert!(!text.contains("No rule has \"resource\""), "{text}");
        assert!(!text.contains("Live holder stacks"), "{text}");
    }

    #[test]
    fn explains_an_empty_policy() {
        assert_eq!(
            explain(&parse(r#"{"rules": []}"#).unwrap()),
            format!("{COUNTERS}\nNo rules: nothing expensive is collected; every object keeps only the always-on counters.\n")
        );
    }

    #[test]
    fn explains_shadowed_rules_and_the_default_signal() {
        let p = parse(
            r#"{"rules": [
              {"name": "named", "match": {"object_name": "jobs", "thread_name": "io"}, "actions": "record"},
              {"name": "all", "when": {"min_waiters": 4}, "actions": "holder_live_stack"},
              {"name": "late", "match": {"kind": ["cond", "sem", "barrier", "join", "spin", "mutex", "rwlock", "futex"]}, "actions": "count"}]}"#,
        )
        .unwrap();
        let text = explain(&p);
        assert!(text.contains("3 rules. "), "{text}");
        assert!(text.contains("applies to: waits on any object named \"jobs\" (given with waitshim_name_object), by threads named \"io\"."), "{text}");
        assert!(text.contains("Rule 3 \"late\":\n  never used: rule 2 has no selectors, so it decides every wait before this rule is tried.\n  applies to: waits on objects of every kind.\n"), "{text}");
        assert!(!text.contains("Rule 2 \"all\":\n  never used"), "{text}");
        assert!(text.contains("Rule 2 selects every wait"), "{text}");
        assert!(
            text.contains("its live stack, asked for with SIGRTMAX-4)"),
            "{text}"
        );
        assert!(text.contains("Live holder stacks are asked for with SIGRTMAX-4 (signal 60 with glibc's usual SIGRTMIN/SIGRTMAX), the default; change it with stack_signal;"), "{text}");
        assert!(text.lines().all(|l| !l.contains('\r')));
    }

    #[test]
    fn explains_kinds_and_thread_groups_in_words() {
        for (spec, shown) in [
            (
                "SIGUSR2",
                "asked for with SIGUSR2 (signal 12), set by stack_signal;",
            ),
            ("40", "asked for with 40, set by stack_signal;"),
            (
                "rtmin+2",
                "asked for with rtmin+2 (signal 36 with glibc's usual SIGRTMIN/SIGRTMAX), set",
            ),
        ] {
            let p = parse(&format!(
                r#"{{"stack_signal": "{spec}", "rules": [{{"actions": "holder_live_stack"}}]}}"#
            ))
            .unwrap();
            let text = explain(&p);
            assert!(text.contains(shown), "{text}");
        }
        let p = parse(
            r#"{"rules": [{"match": {"kind": ["join", "cond", "semaphore"], "thread_group": "worker_*", "creation_site": "make_pool"}, "actions": "count"}]}"#,
        )
        .unwrap();
        let text = explain(&p);
        assert!(text.contains("applies to: waits on thread joins, condition variables and semaphores created in a function named \"make_pool\" (any frame of the creation call chain), by threads whose start routine is a function matching \"worker_*\"."), "{text}");
    }

    #[test]
    fn explains_a_resource_rule_and_the_sample_interval() {
        let p = parse(
            r#"{"sample": "20ms", "rules": [
                {"name": "slow reads", "match": {"resource": ["pipe", "socket"], "resource_name": "*127.0.0.1:5432*", "thread_name": "db-*"},
                 "when": {"min_wait": "50ms"}, "actions": ["count", "waiter_chain"]},
                {"match": {"kind": "mutex"}, "actions": "waiter_chain"}]}"#,
        )
        .unwrap();
        assert_eq!(p.sample_ns, Some(20_000_000));
        assert_eq!(
            p.summaries(),
            [
                "#1 \"slow reads\": blocked on pipe or socket named \"*127.0.0.1:5432*\" by threads named \"db-*\" when wait ≥50ms → count, waiter_chain",
                "#2 mutex → waiter_chain"
            ]
        );
        let text = explain(&p);
        assert!(
            text.contains("The sampler looks at the threads every 20ms (sample)."),
            "{text}"
        );
        assert!(text.contains("  applies to: threads blocked outside the sync objects on a pipe or socket (seen by the sampler) whose name as the report shows it matches \"*127.0.0.1:5432*\", by threads with a name matching \"db-*\".\n  acts: once the thread has been seen blocked in the same call for 50ms or longer (at the sampler's looks).\n"), "{text}");
        assert!(!text.contains("No rule has"), "{text}");
        let json = to_json(&p);
        assert!(json.starts_with(r#"{"sample":"20ms","rules":[{"name":"slow reads","match":{"resource":["pipe","socket"],"resource_name":"*127.0.0.1:5432*","thread_name":"db-*"}"#), "{json}");
        assert_eq!(parse(&json).unwrap(), p);
        let off = parse(r#"{"sample": "off", "rules": []}"#).unwrap();
        assert_eq!(off.sample_ns, Some(0));
        assert_eq!(parse(&to_json(&off)).unwrap(), off);
        assert!(explain(&off).contains("The sampler is off (sample)"));
    }
}
