//! Reading a policy file: JSON into a `serde_json::Value`, then a walk by hand so that every
//! problem is reported with the path of the field it is in.

use std::fmt;

use serde_json::{Map, Value};

use crate::signal;
use waitshim_format::record::action;

use crate::{
    kind_from_name, Criteria, Glob, ObjectKind, Policy, Rule, Selectors, ACTIONS, MAX_RULES,
    RESOURCE_KINDS, RTMAX, RTMIN,
};

/// Most addresses one `object_addr` may list.
pub const MAX_ADDRS: usize = 1024;

/// Why a policy file was refused: the field (`rules[0].when.min_wait`; empty for a file that is
/// not JSON at all) and what is wrong with it. Displayed as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", one_line(&self.path))?;
        }
        f.write_str(&one_line(&self.message))
    }
}

impl std::error::Error for PolicyError {}

/// Control characters (a newline inside a quoted value) escaped, so a message stays on one line.
fn one_line(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn err(path: &str, message: impl Into<String>) -> PolicyError {
    PolicyError {
        path: path.to_string(),
        message: message.into(),
    }
}

const TOP: &str = "top level";
const TOP_FIELDS: &[&str] = &["rules", "stack_signal", "events", "sample"];
const RULE_FIELDS: &[&str] = &["name", "match", "when", "actions"];
const MATCH_FIELDS: &[&str] = &[
    "kind",
    "object_addr",
    "object_name",
    "creation_site",
    "thread_name",
    "thread_group",
    "resource",
    "resource_name",
];
const WHEN_FIELDS: &[&str] = &[
    "min_waiters",
    "max_waiters",
    "granularity",
    "every_nth",
    "min_wait",
    "min_stack_depth",
];
const DURATION_HINT: &str = "use e.g. 500us, 2ms, 1s";

/// Reads a policy file's text. Never panics; the error names the field and the problem.
pub fn parse(text: &str) -> Result<Policy, PolicyError> {
    if text.trim().is_empty() {
        return Err(err(
            "",
            "empty file; expected a JSON object with a \"rules\" list",
        ));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let what = full.strip_suffix(&suffix).unwrap_or(&full);
        err(
            "",
            format!(
                "invalid JSON at line {}, column {}: {what}",
                e.line(),
                e.column()
            ),
        )
    })?;
    policy(&value)
}

fn policy(value: &Value) -> Result<Policy, PolicyError> {
    let Value::Object(top) = value else {
        return Err(err(
            TOP,
            format!(
                "expected an object with a \"rules\" list, found {}",
                describe(value)
            ),
        ));
    };
    known_fields(top, TOP, TOP_FIELDS)?;
    let list = match top.get("rules") {
        None => {
            return Err(err(
                TOP,
                "missing field \"rules\" (a list of rules; [] collects nothing expensive)",
            ))
        }
        Some(Value::Array(list)) => list,
        Some(v) => {
            return Err(err(
                "rules",
                format!("expected a list of rules, found {}", describe(v)),
            ))
        }
    };
    if list.len() > MAX_RULES {
        return Err(err(
            "rules",
            format!("{} rules; at most {MAX_RULES}", list.len()),
        ));
    }
    let mut rules: Vec<Rule> = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let path = format!("rules[{i}]");
        let r = rule(v, &path)?;
        if let Some(name) = &r.name {
            if let Some(first) = rules.iter().position(|p| p.name == r.name) {
                return Err(err(
                    &format!("{path}.name"),
                    format!("{} is already the name of rules[{first}]", quote(name)),
                ));
            }
        }
        rules.push(r);
    }
    let stack_signal = match top.get("stack_signal") {
        None => None,
        Some(Value::String(s)) => {
            signal::parse(s, RTMIN, RTMAX).map_err(|e| err("stack_signal", e))?;
            Some(s.clone())
        }
        Some(v) => {
            return Err(err(
                "stack_signal",
                format!(
                    "expected a signal such as \"SIGRTMAX-4\", found {}",
                    describe(v)
                ),
            ))
        }
    };
    let events = setting(
        top,
        "events",
        "\"all\", \"off\" or \"ring:DURATION\"",
        crate::events::parse,
    )?;
    let sample_ns = setting(
        top,
        "sample",
        "\"off\" or an interval such as \"10ms\"",
        crate::sample::parse,
    )?;
    Ok(Policy {
        rules,
        stack_signal,
        events,
        sample_ns,
    })
}

/// A top-level setting written as a string (`events`, `sample`): absent, or what `parse` makes
/// of it; anything but a string is refused, saying what was `expected`.
fn setting<T>(
    top: &Map<String, Value>,
    name: &str,
    expected: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, PolicyError> {
    match top.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => parse(s).map(Some).map_err(|e| err(name, e)),
        Some(v) => Err(err(
            name,
            format!("expected {expected}, found {}", describe(v)),
        )),
    }
}

fn rule(value: &Value, path: &str) -> Result<Rule, PolicyError> {
    let map = object(value, path, "a rule")?;
    known_fields(map, path, RULE_FIELDS)?;
    let name = match map.get("name") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => {
            return Err(err(
                &format!("{path}.name"),
                "is empty (omit it for an unnamed rule)",
            ))
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(err(
                &format!("{path}.name"),
                format!("expected a string, found {}", describe(v)),
            ))
        }
    };
    let select = match map.get("match") {
        None => Selectors::default(),
        Some(v) => selectors(v, &format!("{path}.match"))?,
    };
    let when = match map.get("when") {
        None => Criteria::default(),
        Some(v) => criteria(v, &format!("{path}.when"))?,
    };
    let actions = match map.get("actions") {
        None => {
            return Err(err(
                path,
                format!(
                    "missing field \"actions\" (one or more of {})",
                    action_list()
                ),
            ))
        }
        Some(v) => actions(v, &format!("{path}.actions"))?,
    };
    if select.is_resource_rule() {
        resource_rule(&select, &when, actions, path)?;
    }
    Ok(Rule {
        name,
        select,
        when,
        actions,
    })
}

/// What a resource rule may say: the sampler sees a blocked thread from outside, so it knows
/// the thread, the resource and how long the thread has waited so far, and can take the
/// thread's chain from its stack; nothing about an object, its waiters or its holder.
fn resource_rule(
    select: &Selectors,
    when: &Criteria,
    actions: u32,
    path: &str,
) -> Result<(), PolicyError> {
    if select.has_object_selectors() {
        return Err(err(
            &format!("{path}.match"),
            "\"resource\" and \"resource_name\" select waits outside sync objects, \"kind\", \"object_addr\", \"object_name\" and \"creation_site\" waits on them: a rule takes one or the other",
        ));
    }
    let only_min_wait = Criteria {
        min_wait_ns: when.min_wait_ns,
        ..Criteria::default()
    };
    if *when != only_min_wait {
        return Err(err(
            &format!("{path}.when"),
            "a rule with \"resource\" or \"resource_name\" takes only min_wait (the others count waiters and requests of a sync object)",
        ));
    }
    let allowed = action::COUNT | action::WAITER_CHAIN;
    if actions & !allowed != 0 {
        let extra: Vec<&str> = ACTIONS
            .iter()
            .filter(|(_, bit)| actions & bit & !allowed != 0)
            .map(|(n, _)| *n)
            .collect();
        return Err(err(
            &format!("{path}.actions"),
            format!(
                "{} not for a rule with \"resource\" or \"resource_name\": it collects count and waiter_chain (the blocked thread's chain, read from its stack)",
                extra.join(", ")
            ),
        ));
    }
    Ok(())
}

fn selectors(value: &Value, path: &str) -> Result<Selectors, PolicyError> {
    let map = object(value, path, "selectors")?;
    known_fields(map, path, MATCH_FIELDS)?;
    let field = |name: &str| (map.get(name), format!("{path}.{name}"));
    let glob = |name: &str| -> Result<Option<Glob>, PolicyError> {
        let (v, path) = field(name);
        v.map(|v| glob(v, &path)).transpose()
    };
    let kinds = match field("kind") {
        (None, _) => None,
        (Some(v), path) => Some(one_or_many(v, &path, "a kind name", kind)?),
    };
    let object_addr = match field("object_addr") {
        (None, _) => None,
        (Some(v), path) => {
            let addrs = one_or_many(v, &path, "an address", address)?;
            if addrs.len() > MAX_ADDRS {
                return Err(err(
                    &path,
                    format!("{} addresses; at most {MAX_ADDRS}", addrs.len()),
                ));
            }
            Some(addrs)
        }
    };
    let resources = match field("resource") {
        (None, _) => None,
        // "any": every kind, so that a rule can select every blocked thread.
        (Some(Value::String(s)), _) if s == "any" => Some(RESOURCE_KINDS.to_vec()),
        (Some(v), path) => Some(one_or_many(v, &path, "a resource kind", resource_kind)?),
    };
    Ok(Selectors {
        resources,
        resource_name: glob("resource_name")?,
        kinds,
        object_addr,
        object_name: glob("object_name")?,
        creation_site: glob("creation_site")?,
        thread_name: glob("thread_name")?,
        thread_group: glob("thread_group")?,
    })
}

fn criteria(value: &Value, path: &str) -> Result<Criteria, PolicyError> {
    let map = object(value, path, "criteria")?;
    known_fields(map, path, WHEN_FIELDS)?;
    let field = |name: &str| (map.get(name), format!("{path}.{name}"));
    let count = |name: &str| -> Result<Option<u32>, PolicyError> {
        let (v, path) = field(name);
        v.map(|v| integer(v, &path, u64::from(u32::MAX)).map(|n| n as u32))
            .transpose()
    };
    let min_waiters = count("min_waiters")?.unwrap_or(0);
    let max_waiters = count("max_waiters")?;
    if let Some(n @ (0 | 1)) = max_waiters {
        return Err(err(
            &format!("{path}.max_waiters"),
            format!(
                "{n} would suppress every wait (the waiting thread counts as one); use 2 or more"
            ),
        ));
    }
    let granularity = count("granularity")?;
    if granularity == Some(0) {
        return Err(err(
            &format!("{path}.granularity"),
            "must be at least 1 (act each time the count has grown by this much)",
        ));
    }
    let every_nth = match field("every_nth") {
        (None, _) => None,
        (Some(v), p) => match integer(v, &p, u64::MAX)? {
            0 => return Err(err(&p, "must be at least 1 (1 = every request)")),
            n => Some(n),
        },
    };
    let min_wait_ns = match field("min_wait") {
        (None, _) => None,
        (Some(v), p) => Some(wait(v, &p)?),
    };
    let min_stack_depth = count("min_stack_depth")?;
    if let Some(max) = max_waiters {
        if min_waiters >= max {
            return Err(err(
                path,
                format!("min_waiters {min_waiters} is not below max_waiters {max}, so the rule could never act"),
            ));
        }
        if let Some(g) = granularity.filter(|&g| g >= max) {
            return Err(err(
                path,
                format!("granularity {g} first acts at {g} waiters, but max_waiters {max} suppresses from {max} on, so the rule could never act"),
            ));
        }
    }
    Ok(Criteria {
        min_waiters,
        max_waiters,
        granularity,
        every_nth,
        min_wait_ns,
        min_stack_depth,
    })
}

fn actions(value: &Value, path: &str) -> Result<u32, PolicyError> {
    let names = one_or_many(value, path, "an action name", |v, path| {
        let Value::String(s) = v else {
            return Err(err(
                path,
                format!("expected an action name, found {}", describe(v)),
            ));
        };
        ACTIONS
            .iter()
            .find(|(n, _)| n == s)
            .map(|&(_, bit)| bit)
            .ok_or_else(|| {
                err(
                    path,
                    format!("unknown action {}; valid: {}", quote(s), action_list()),
                )
            })
    })?;
    Ok(names.into_iter().fold(0, |bits, b| bits | b))
}

fn action_list() -> String {
    ACTIONS.map(|(n, _)| n).join(", ")
}

fn kind(v: &Value, path: &str) -> Result<ObjectKind, PolicyError> {
    let Value::String(s) = v else {
        return Err(err(
            path,
            format!("expected a kind name, found {}", describe(v)),
        ));
    };
    kind_from_name(s).ok_or_else(|| {
        err(
            path,
            format!(
                "unknown kind {}; valid: mutex, rwlock, cond, semaphore (sem), spinlock (spin), barrier, thread (join), futex",
                quote(s)
            ),
        )
    })
}

fn resource_kind(v: &Value, path: &str) -> Result<&'static str, PolicyError> {
    let Value::String(s) = v else {
        return Err(err(
            path,
            format!("expected a resource kind, found {}", describe(v)),
        ));
    };
    RESOURCE_KINDS
        .iter()
        .find(|k| **k == s.as_str())
        .copied()
        .ok_or_else(|| {
            err(
                path,
                format!(
                    "unknown resource kind {}; valid: any, {}",
                    quote(s),
                    RESOURCE_KINDS.join(", ")
                ),
            )
        })
}

fn address(v: &Value, path: &str) -> Result<u64, PolicyError> {
    let addr = match v {
        Value::String(s) => {
            let t = s.trim();
            let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) else {
                return Err(err(
                    path,
                    format!(
                        "{} needs a 0x prefix (or write the address as an integer)",
                        quote(s)
                    ),
                ));
            };
            if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err(
                    path,
                    format!(
                        "{} is not an address (write it as \"0x7f12ab340000\" or as an integer)",
                        quote(s)
                    ),
                ));
            }
            u64::from_str_radix(hex, 16)
                .map_err(|_| err(path, format!("{} does not fit in 64 bits", quote(s))))?
        }
        Value::Number(_) => integer(v, path, u64::MAX)?,
        _ => {
            return Err(err(
                path,
                format!(
                    "expected an address (\"0x…\" or an integer), found {}",
                    describe(v)
                ),
            ))
        }
    };
    if addr == 0 {
        return Err(err(path, "address 0 is never an object's"));
    }
    Ok(addr)
}

fn glob(v: &Value, path: &str) -> Result<Glob, PolicyError> {
    match v {
        Value::String(s) => Glob::new(s).map_err(|e| err(path, format!("{}: {e}", quote(s)))),
        _ => Err(err(
            path,
            format!("expected a pattern string, found {}", describe(v)),
        )),
    }
}

/// `min_wait`: a duration string, or an integer of microseconds.
fn wait(v: &Value, path: &str) -> Result<u64, PolicyError> {
    match v {
        Value::String(s) => duration(s).map_err(|e| err(path, e)),
        Value::Number(n) => {
            if n.is_u64() {
                let us = integer(v, path, u64::MAX / 1000)?;
                Ok(us * 1000)
            } else if n.is_i64() {
                Err(err(path, format!("{n} is negative")))
            } else {
                Err(err(
                    path,
                    format!("{n}: an unquoted number is whole microseconds; for fractions write a string ({DURATION_HINT})"),
                ))
            }
        }
        _ => Err(err(
            path,
            format!(
                "expected a duration such as \"2ms\" or an integer of microseconds, found {}",
                describe(v)
            ),
        )),
    }
}

/// `"1.5ms"` → 1 500 000 (nanoseconds).
pub(crate) fn duration(s: &str) -> Result<u64, String> {
    let bad = || format!("{} is not a duration ({DURATION_HINT})", quote(s));
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim_start());
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(bad());
    }
    let scale: u64 = match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "" => {
            return Err(format!(
                "{} has no unit (ns, us, ms or s); an unquoted integer means microseconds",
                quote(s)
            ))
        }
        _ => return Err(bad()),
    };
    let too_long = || format!("{} is too long (at most about 584 years)", quote(s));
    let mut ns: u64 = 0;
    for d in whole.bytes() {
        ns = ns
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or_else(too_long)?;
    }
    ns = ns.checked_mul(scale).ok_or_else(too_long)?;
    let mut place = scale;
    for d in frac.bytes() {
        let d = u64::from(d - b'0');
        if place == 1 {
            if d != 0 {
                return Err(format!("{} is finer than a nanosecond", quote(s)));
            }
            continue;
        }
        place /= 10;
        ns = ns.checked_add(d * place).ok_or_else(too_long)?;
    }
    Ok(ns)
}

/// A value or a non-empty list of them, each read by `one`.
fn one_or_many<T: PartialEq>(
    v: &Value,
    path: &str,
    what: &str,
    one: impl Fn(&Value, &str) -> Result<T, PolicyError>,
) -> Result<Vec<T>, PolicyError> {
    match v {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(err(
                    path,
                    format!("is an empty list; give at least {what}, or omit the field"),
                ));
            }
            let mut out: Vec<T> = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let x = one(item, &format!("{path}[{i}]"))?;
                if !out.contains(&x) {
                    out.push(x);
                }
            }
            Ok(out)
        }
        _ => Ok(vec![one(v, path)?]),
    }
}

/// A non-negative integer no larger than `max`.
fn integer(v: &Value, path: &str, max: u64) -> Result<u64, PolicyError> {
    let Value::Number(n) = v else {
        return Err(err(
            path,
            format!("expected an integer, found {}", describe(v)),
        ));
    };
    match n.as_u64() {
        Some(u) if u <= max => Ok(u),
        Some(u) => Err(err(path, format!("{u} is too large (at most {max})"))),
        None if n.is_i64() => Err(err(path, format!("{n} is negative"))),
        None => Err(err(path, format!("expected an integer, found {n}"))),
    }
}

fn object<'a>(v: &'a Value, path: &str, what: &str) -> Result<&'a Map<String, Value>, PolicyError> {
    match v {
        Value::Object(map) => Ok(map),
        _ => Err(err(
            path,
            format!("expected an object of {what}, found {}", describe(v)),
        )),
    }
}

/// Refuses the first unknown field (in sorted order, so the message does not depend on how the
/// JSON library orders maps).
fn known_fields(map: &Map<String, Value>, path: &str, valid: &[&str]) -> Result<(), PolicyError> {
    let unknown = map.keys().filter(|k| !valid.contains(&k.as_str())).min();
    match unknown {
        None => Ok(()),
        Some(k) => Err(err(
            path,
            format!("unknown field {}; valid: {}", quote(k), valid.join(", ")),
        )),
    }
}

fn quote(s: &str) -> String {
    const SHOWN: usize = 60;
    match s.char_indices().nth(SHOWN) {
        None => serde_json::to_string(s).unwrap_or_default(),
        Some((cut, _)) => {
            let q = serde_json::to_string(&s[..cut]).unwrap_or_default();
            format!("{}…\"", &q[..q.len() - 1])
        }
    }
}

/// A JSON value as an error message mentions it.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string {}", quote(s)),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitshim_format::record::action;

    /// The error `text` gives, as displayed.
    fn error(text: &str) -> String {
        match parse(text) {
            Ok(p) => panic!("{text} parsed: {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// The error of a policy with one rule whose `field` object is `body`.
    fn rule_error(field: &str, body: &str) -> String {
        error(&format!(
            r#"{{"rules": [{{"{field}": {body}, "actions": ["record"]}}]}}"#
        ))
    }

    #[test]
    fn the_full_example() {
        let p = parse(
            r#"{ "stack_signal": "SIGRTMAX-4",
  "rules": [
    { "name": "db locks",
      "match": { "kind": ["mutex", "rwlock"], "creation_site": "db_*", "thread_name": "worker-*", "thread_group": "worker_main", "object_name": "queue*", "object_addr": "0x5555dead0000" },
      "when":  { "min_waiters": 3, "max_waiters": 20, "granularity": 10, "every_nth": 10, "min_wait": "2ms", "min_stack_depth": 4 },
      "actions": ["record", "waiter_chain", "all_waiters", "holder_chain", "holder_live_stack", "count"] } ] }"#,
        )
        .unwrap();
        assert_eq!(p.stack_signal.as_deref(), Some("SIGRTMAX-4"));
        let r = &p.rules[0];
        assert_eq!(r.name.as_deref(), Some("db locks"));
        assert_eq!(
            r.select.kinds,
            Some(vec![ObjectKind::Mutex, ObjectKind::RwLock])
        );
        assert_eq!(r.select.object_addr, Some(vec![0x5555_dead_0000]));
        assert_eq!(r.select.creation_site.as_ref().unwrap().as_str(), "db_*");
        assert_eq!(r.select.thread_name.as_ref().unwrap().as_str(), "worker-*");
        assert_eq!(
            r.select.thread_group.as_ref().unwrap().as_str(),
            "worker_main"
        );
        assert_eq!(r.select.object_name.as_ref().unwrap().as_str(), "queue*");
        assert_eq!(
            r.when,
            Criteria {
                min_waiters: 3,
                max_waiters: Some(20),
                granularity: Some(10),
                every_nth: Some(10),
                min_wait_ns: Some(2_000_000),
                min_stack_depth: Some(4),
            }
        );
        assert_eq!(r.actions, 63);
    }

    #[test]
    fn minimal_forms() {
        let p = parse(r#"{"rules": []}"#).unwrap();
        assert!(p.rules.is_empty());
        assert_eq!(p.stack_signal, None);
        let p = parse(r#"{"rules": [{"actions": "waiter_chain"}]}"#).unwrap();
        assert_eq!(p.rules[0].actions, action::WAITER_CHAIN);
        assert!(p.rules[0].select.is_empty() && p.rules[0].when.is_empty());
        let p = parse(r#"{"rules": [{"match": {}, "when": {}, "actions": ["count", "count"]}]}"#)
            .unwrap();
        assert_eq!(p.rules[0].actions, action::COUNT);
    }

    #[test]
    fn kinds_addresses_and_aliases() {
        let p = parse(
            r#"{"rules": [{"match": {"kind": ["sem", "spin", "join", "semaphore"],
                "object_addr": ["0X10", 32, " 0xfF "]}, "actions": ["count"]}]}"#,
        )
        .unwrap();
        let s = &p.rules[0].select;
        assert_eq!(
            s.kinds,
            Some(vec![
                ObjectKind::Semaphore,
                ObjectKind::Spin,
                ObjectKind::Thread
            ])
        );
        assert_eq!(s.object_addr, Some(vec![16, 32, 255]));
        let p = parse(
            r#"{"rules": [{"match": {"kind": "cond", "object_addr": 4096}, "actions": "count"}]}"#,
        )
        .unwrap();
        assert_eq!(p.rules[0].select.kinds, Some(vec![ObjectKind::Cond]));
        assert_eq!(p.rules[0].select.object_addr, Some(vec![4096]));
    }

    #[test]
    fn durations() {
        assert_eq!(duration("500us"), Ok(500_000));
        assert_eq!(duration("500µs"), Ok(500_000));
        assert_eq!(duration("2ms"), Ok(2_000_000));
        assert_eq!(duration("2 ms"), Ok(2_000_000));
        assert_eq!(duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(duration(".5ms"), Ok(500_000));
        assert_eq!(duration("3.ms"), Ok(3_000_000));
        assert_eq!(duration("100ns"), Ok(100));
        assert_eq!(duration("0ms"), Ok(0));
        assert_eq!(duration("1.000000000s"), Ok(1_000_000_000));
        assert_eq!(
            duration("1.0000000001s").unwrap_err(),
            "\"1.0000000001s\" is finer than a nanosecond"
        );
        assert_eq!(
            duration("1.5ns").unwrap_err(),
            "\"1.5ns\" is finer than a nanosecond"
        );
        assert_eq!(
            duration("5 parsecs").unwrap_err(),
            "\"5 parsecs\" is not a duration (use e.g. 500us, 2ms, 1s)"
        );
        for bad in ["", "ms", ".ms", "1..2ms", "-5ms", "1e3us", "2mss", "1.2.3s"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert_eq!(
            duration("5").unwrap_err(),
            "\"5\" has no unit (ns, us, ms or s); an unquoted integer means microseconds"
        );
        assert_eq!(
            duration("99999999999s").unwrap_err(),
            "\"99999999999s\" is too long (at most about 584 years)"
        );
        assert!(duration("99999999999999999999999ns").is_err());
        let p = parse(r#"{"rules": [{"when": {"min_wait": 250}, "actions": "record"}]}"#).unwrap();
        assert_eq!(p.rules[0].when.min_wait_ns, Some(250_000));
    }

    #[test]
    fn syntax_errors_give_line_and_column() {
        assert_eq!(
            error("{\n  \"rules\": [,]\n}"),
            "invalid JSON at line 2, column 13: expected value"
        );
        assert_eq!(
            error("{\"rules\": []"),
            "invalid JSON at line 1, column 12: EOF while parsing an object"
        );
        assert_eq!(
            error("   \n "),
            "empty file; expected a JSON object with a \"rules\" list"
        );
        assert_eq!(
            error("{\"rules\": []} x"),
            "invalid JSON at line 1, column 15: trailing characters"
        );
    }

    #[test]
    fn top_level_errors() {
        assert_eq!(
            error("[]"),
            "top level: expected an object with a \"rules\" list, found a list"
        );
        assert_eq!(
            error("{}"),
            "top level: missing field \"rules\" (a list of rules; [] collects nothing expensive)"
        );
        assert_eq!(
            error(r#"{"rules": [], "rule": []}"#),
            "top level: unknown field \"rule\"; valid: rules, stack_signal, events, sample"
        );
        assert_eq!(
            error(r#"{"rules": {}}"#),
            "rules: expected a list of rules, found an object"
        );
        let many = vec![r#"{"actions": "count"}"#; 65].join(",");
        assert_eq!(
            error(&format!(r#"{{"rules": [{many}]}}"#)),
            "rules: 65 rules; at most 64"
        );
        let enough = vec![r#"{"actions": "count"}"#; 64].join(",");
        assert_eq!(
            parse(&format!(r#"{{"rules": [{enough}]}}"#))
                .unwrap()
                .rules
                .len(),
            64
        );
    }

    #[test]
    fn rule_errors() {
        assert_eq!(
            error(r#"{"rules": [3]}"#),
            "rules[0]: expected an object of a rule, found 3"
        );
        assert_eq!(
            error(r#"{"rules": [{"actions": "count"}, {"name": "x"}]}"#),
            "rules[1]: missing field \"actions\" (one or more of count, record, waiter_chain, all_waiters, holder_chain, holder_live_stack)"
        );
        assert_eq!(
            error(r#"{"rules": [{"actions": "count", "acts": 1, "matches": 2}]}"#),
            "rules[0]: unknown field \"acts\"; valid: name, match, when, actions"
        );
        assert_eq!(
            error(r#"{"rules": [{"actions": []}]}"#),
            "rules[0].actions: is an empty list; give at least an action name, or omit the field"
        );
        assert_eq!(
            error(r#"{"rules": [{"actions": ["record", "recrd"]}]}"#),
            "rules[0].actions[1]: unknown action \"recrd\"; valid: count, record, waiter_chain, all_waiters, holder_chain, holder_live_stack"
        );
        assert_eq!(
            error(r#"{"rules": [{"actions": [true]}]}"#),
            "rules[0].actions[0]: expected an action name, found true"
        );
        assert_eq!(
            error(r#"{"rules": [{"name": 5, "actions": "count"}]}"#),
            "rules[0].name: expected a string, found 5"
        );
        assert_eq!(
            error(r#"{"rules": [{"name": "", "actions": "count"}]}"#),
            "rules[0].name: is empty (omit it for an unnamed rule)"
        );
        assert_eq!(
            error(
                r#"{"rules": [{"name": "db", "actions": "count"}, {"actions": "count"}, {"name": "db", "actions": "count"}]}"#
            ),
            "rules[2].name: \"db\" is already the name of rules[0]"
        );
        assert_eq!(
            rule_error("match", "[]"),
            "rules[0].match: expected an object of selectors, found a list"
        );
        assert_eq!(
            rule_error("when", "null"),
            "rules[0].when: expected an object of criteria, found null"
        );
    }

    #[test]
    fn selector_errors() {
        assert_eq!(
            rule_error("match", r#"{"kinds": "mutex"}"#),
            "rules[0].match: unknown field \"kinds\"; valid: kind, object_addr, object_name, creation_site, thread_name, thread_group, resource, resource_name"
        );
        assert_eq!(
            rule_error("match", r#"{"kind": ["mutex", "mutx"]}"#),
            "rules[0].match.kind[1]: unknown kind \"mutx\"; valid: mutex, rwlock, cond, semaphore (sem), spinlock (spin), barrier, thread (join), futex"
        );
        assert_eq!(
            rule_error("match", r#"{"kind": []}"#),
            "rules[0].match.kind: is an empty list; give at least a kind name, or omit the field"
        );
        assert_eq!(
            rule_error("match", r#"{"kind": {"a": 1}}"#),
            "rules[0].match.kind: expected a kind name, found an object"
        );
        assert_eq!(
            rule_error("match", r#"{"object_addr": "5555dead0000"}"#),
            "rules[0].match.object_addr: \"5555dead0000\" needs a 0x prefix (or write the address as an integer)"
        );
        assert_eq!(
            rule_error("match", r#"{"object_addr": ["0x10", "0xg"]}"#),
            "rules[0].match.object_addr[1]: \"0xg\" is not an address (write it as \"0x7f12ab340000\" or as an integer)"
        );
        assert_eq!(
            rule_error("match", r#"{"object_addr": "0x10000000000000000"}"#),
            "rules[0].match.object_addr: \"0x10000000000000000\" does not fit in 64 bits"
        );
        assert_eq!(
            rule_error("match", r#"{"object_addr": -16}"#),
            "rules[0].match.object_addr: -16 is negative"
        );
        assert_eq!(
            rule_error("match", r#"{"object_addr": 0}"#),
            "rules[0].match.object_addr: address 0 is never an object's"
        );
        assert_eq!(
            rule_error("match", r#"{"object_addr": 1.5}"#),
            "rules[0].match.object_addr: expected an integer, found 1.5"
        );
        assert_eq!(
            rule_error("match", r#"{"object_addr": null}"#),
            "rules[0].match.object_addr: expected an address (\"0x…\" or an integer), found null"
        );
        let many: Vec<String> = (1..=1025).map(|i| i.to_string()).collect();
        assert_eq!(
            rule_error(
                "match",
                &format!(r#"{{"object_addr": [{}]}}"#, many.join(","))
            ),
            "rules[0].match.object_addr: 1025 addresses; at most 1024"
        );
        assert_eq!(
            rule_error("match", r#"{"creation_site": "db_["}"#),
            "rules[0].match.creation_site: \"db_[\": unclosed [ (write \\[ for a literal bracket)"
        );
        assert_eq!(
            rule_error("match", r#"{"thread_name": ""}"#),
            "rules[0].match.thread_name: \"\": empty pattern (use \"*\" to match every name)"
        );
        assert_eq!(
            rule_error("match", r#"{"thread_group": ["main"]}"#),
            "rules[0].match.thread_group: expected a pattern string, found a list"
        );
        assert_eq!(
            rule_error("match", r#"{"object_name": "[z-a]"}"#),
            "rules[0].match.object_name: \"[z-a]\": range [z-a] is empty (write it as [a-z])"
        );
    }

    #[test]
    fn criteria_errors() {
        assert_eq!(
            error(r#"{"rules": [{"actions": "count"}, {"when": {"min_waiter": 3}, "actions": "count"}]}"#),
            "rules[1].when: unknown field \"min_waiter\"; valid: min_waiters, max_waiters, granularity, every_nth, min_wait, min_stack_depth"
        );
        assert_eq!(
            rule_error("when", r#"{"min_wait": "5 parsecs"}"#),
            "rules[0].when.min_wait: \"5 parsecs\" is not a duration (use e.g. 500us, 2ms, 1s)"
        );
        assert_eq!(
            rule_error("when", r#"{"min_wait": -3}"#),
            "rules[0].when.min_wait: -3 is negative"
        );
        assert_eq!(
            rule_error("when", r#"{"min_wait": 2.5}"#),
            "rules[0].when.min_wait: 2.5: an unquoted number is whole microseconds; for fractions write a string (use e.g. 500us, 2ms, 1s)"
        );
        assert_eq!(
            rule_error("when", r#"{"min_wait": true}"#),
            "rules[0].when.min_wait: expected a duration such as \"2ms\" or an integer of microseconds, found true"
        );
        assert_eq!(
            rule_error("when", r#"{"min_wait": 18446744073709552}"#),
            "rules[0].when.min_wait: 18446744073709552 is too large (at most 18446744073709551)"
        );
        assert_eq!(
            rule_error("when", r#"{"min_waiters": "3"}"#),
            "rules[0].when.min_waiters: expected an integer, found the string \"3\""
        );
        assert_eq!(
            rule_error("when", r#"{"min_waiters": -1}"#),
            "rules[0].when.min_waiters: -1 is negative"
        );
        assert_eq!(
            rule_error("when", r#"{"min_waiters": 3.5}"#),
            "rules[0].when.min_waiters: expected an integer, found 3.5"
        );
        assert_eq!(
            rule_error("when", r#"{"min_stack_depth": 4294967296}"#),
            "rules[0].when.min_stack_depth: 4294967296 is too large (at most 4294967295)"
        );
        assert_eq!(
            rule_error("when", r#"{"every_nth": 0}"#),
            "rules[0].when.every_nth: must be at least 1 (1 = every request)"
        );
        assert_eq!(
            rule_error("when", r#"{"granularity": 0}"#),
            "rules[0].when.granularity: must be at least 1 (act each time the count has grown by this much)"
        );
        assert_eq!(
            rule_error("when", r#"{"max_waiters": 1}"#),
            "rules[0].when.max_waiters: 1 would suppress every wait (the waiting thread counts as one); use 2 or more"
        );
        assert_eq!(
            rule_error("when", r#"{"min_waiters": 5, "max_waiters": 4}"#),
            "rules[0].when: min_waiters 5 is not below max_waiters 4, so the rule could never act"
        );
        assert_eq!(
            rule_error("when", r#"{"min_waiters": 4, "max_waiters": 4}"#),
            "rules[0].when: min_waiters 4 is not below max_waiters 4, so the rule could never act"
        );
        assert_eq!(
            rule_error("when", r#"{"granularity": 30, "max_waiters": 20}"#),
            "rules[0].when: granularity 30 first acts at 30 waiters, but max_waiters 20 suppresses from 20 on, so the rule could never act"
        );
        assert!(parse(r#"{"rules": [{"when": {"min_waiters": 3, "max_waiters": 4, "granularity": 3}, "actions": "count"}]}"#).is_ok());
    }

    #[test]
    fn signal_errors() {
        assert_eq!(
            error(r#"{"rules": [], "stack_signal": "9"}"#),
            "stack_signal: `9` (signal 9) means something to the program or its environment; choose SIGUSR1, SIGUSR2 or a real-time signal (SIGRTMIN+N, SIGRTMAX-N)"
        );
        assert!(error(r#"{"rules": [], "stack_signal": "SIGTERM"}"#).contains("SIGUSR1, SIGUSR2"));
        assert_eq!(
            error(r#"{"rules": [], "stack_signal": "SIGBOGUS"}"#),
            "stack_signal: `SIGBOGUS` is not a signal (use a number, a name such as SIGUSR2, SIGRTMIN+N, SIGRTMAX-N, or none)"
        );
        assert_eq!(
            error(r#"{"rules": [], "stack_signal": 12}"#),
            "stack_signal: expected a signal such as \"SIGRTMAX-4\", found 12"
        );
        // Without a signal, holders blocked in a system call still have their stacks scanned.
        assert!(parse(
            r#"{"rules": [{"actions": ["holder_live_stack"]}], "stack_signal": "none"}"#
        )
        .is_ok());
        let p = parse(r#"{"rules": [{"actions": "count"}], "stack_signal": "none"}"#).unwrap();
        assert_eq!(p.stack_signal.as_deref(), Some("none"));
        let p = parse(r#"{"rules": [], "stack_signal": "SIGUSR2"}"#).unwrap();
        assert_eq!(p.stack_signal_spec(), "SIGUSR2");
    }

    #[test]
    fn events_take_what_waitshim_events_takes() {
        use crate::EventsMode;
        let p = parse(r#"{"events": "ring:30s", "rules": []}"#).unwrap();
        assert_eq!(
            p.events,
            Some(EventsMode::Ring {
                keep_ns: 30_000_000_000
            })
        );
        assert_eq!(crate::to_json(&p), r#"{"events":"ring:30s","rules":[]}"#);
        assert_eq!(parse(&crate::to_json(&p)).unwrap(), p);
        assert_eq!(
            parse(r#"{"events": "OFF", "rules": []}"#).unwrap().events,
            Some(EventsMode::Off)
        );
        assert_eq!(parse(r#"{"rules": []}"#).unwrap().events, None);
        assert_eq!(
            error(r#"{"rules": [], "events": "sometimes"}"#),
            "events: \"sometimes\" is not all, off or ring:DURATION (such as ring:30s)"
        );
        assert_eq!(
            error(r#"{"rules": [], "events": false}"#),
            "events: expected \"all\", \"off\" or \"ring:DURATION\", found false"
        );
    }

    #[test]
    fn messages_stay_on_one_line() {
        let e = error("{\"rules\": [], \"stack_signal\": \"x\\ny\"}");
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.starts_with("stack_signal: `x\\ny` is not a signal"),
            "{e}"
        );
        let e = error("{\"rules\": [], \"a\\nb\": 1}");
        assert_eq!(
            e,
            "top level: unknown field \"a\\nb\"; valid: rules, stack_signal, events, sample"
        );
        let long = "x".repeat(200);
        let e = rule_error("match", &format!(r#"{{"kind": "{long}"}}"#));
        assert!(e.contains(&format!("\"{}…\"", "x".repeat(60))), "{e}");
    }

    #[test]
    fn resource_rules_take_only_what_the_sampler_can_know() {
        let p = parse(r#"{"rules": [{"match": {"resource": "any"}, "actions": "waiter_chain"}]}"#)
            .unwrap();
        assert_eq!(
            p.rules[0].select.resources.as_ref().map(Vec::len),
            Some(RESOURCE_KINDS.len())
        );
        assert_eq!(
            rule_error("match", r#"{"resource": "disk"}"#),
            format!(
                "rules[0].match.resource: unknown resource kind \"disk\"; valid: any, {}",
                RESOURCE_KINDS.join(", ")
            )
        );
        assert_eq!(
            rule_error("match", r#"{"resource": "pipe", "kind": "mutex"}"#),
            "rules[0].match: \"resource\" and \"resource_name\" select waits outside sync objects, \"kind\", \"object_addr\", \"object_name\" and \"creation_site\" waits on them: a rule takes one or the other"
        );
        assert_eq!(
            error(r#"{"rules": [{"match": {"resource_name": "/var/*"}, "when": {"min_waiters": 2}, "actions": "count"}]}"#),
            "rules[0].when: a rule with \"resource\" or \"resource_name\" takes only min_wait (the others count waiters and requests of a sync object)"
        );
        assert_eq!(
            error(r#"{"rules": [{"match": {"resource": "socket"}, "actions": ["waiter_chain", "holder_chain", "record"]}]}"#),
            "rules[0].actions: record, holder_chain not for a rule with \"resource\" or \"resource_name\": it collects count and waiter_chain (the blocked thread's chain, read from its stack)"
        );
        assert_eq!(
            error(r#"{"sample": "100us", "rules": []}"#),
            "sample: 100us is outside 1ms..10s"
        );
        assert_eq!(
            error(r#"{"sample": 10, "rules": []}"#),
            "sample: expected \"off\" or an interval such as \"10ms\", found 10"
        );
    }
}
