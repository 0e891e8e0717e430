//! `WAITSHIM_DELAY`: critical sections lengthened on purpose, to measure how the run time moves
//! with them (the slope `waitshim-analyze whatif --delayed` checks its estimates against).
//!
//! `WAITSHIM_DELAY='SITE=DURATION[;SITE=DURATION...]'`, rules separated by `;` (a `,` belongs to
//! C++ argument lists, which a SITE may contain). SITE selects locks (mutexes, rwlocks,
//! spinlocks) as a policy rule's `object_name` and `creation_site` do:
//! - `name:GLOB`: the name given through `waitshim_name_object`;
//! - `site:GLOB`: a function of the object's creation (or first-use) chain, its symbol or its
//!   demangled name;
//! - `GLOB` alone: either.
//!
//! DURATION is a number and `ns`, `us` (or `µs`) or `ms`; a bare number is microseconds; from
//! 1 ns to 1 s. `file:line` is not accepted: the shim does not read line tables.

use crate::duration::{ns, DurationError};
use crate::Glob;

/// What a rule's SITE is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against {
    Name,
    CreationSite,
    Either,
}

/// One `SITE=DURATION`.
#[derive(Clone, PartialEq, Eq)]
pub struct DelayRule {
    /// SITE as written.
    pub site: String,
    pub against: Against,
    pub glob: Glob,
    pub delay_ns: u64,
}

impl std::fmt::Debug for DelayRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}ns", self.site, self.delay_ns)
    }
}

impl DelayRule {
    /// Whether the object with this C-API name and these creation-chain functions is selected.
    pub fn matches<'a>(
        &self,
        name: Option<&str>,
        mut creation_symbols: impl Iterator<Item = &'a str>,
    ) -> bool {
        let by_name = || name.is_some_and(|n| self.glob.matches(n));
        match self.against {
            Against::Name => by_name(),
            Against::CreationSite => creation_symbols.any(|s| self.glob.matches(s)),
            Against::Either => by_name() || creation_symbols.any(|s| self.glob.matches(s)),
        }
    }
}

/// Rules in one value at most (each costs a glob match per object, once).
pub const MAX_RULES: usize = 16;
/// Longest delay accepted.
pub const MAX_DELAY_NS: u64 = 1_000_000_000;

const UNITS: &[(&str, f64)] = &[
    ("", 1e3),
    ("ns", 1.0),
    ("us", 1e3),
    ("µs", 1e3),
    ("ms", 1e6),
];

/// The forms that work, for error messages.
pub const FORMS: &str = "SITE=DURATION[;SITE=DURATION...], SITE a glob on the lock's \
    waitshim_name_object name ('name:GLOB'), on a function of its creation chain \
    ('site:GLOB'), or either ('GLOB'); DURATION such as 20us, 500ns, 1ms";

/// Reads a `WAITSHIM_DELAY` value; the error says what is wrong and which forms work.
pub fn parse(text: &str) -> Result<Vec<DelayRule>, String> {
    let mut rules = Vec::new();
    for part in text.split(';') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        rules.push(rule(part)?);
    }
    if rules.is_empty() {
        return Err(format!("no rule; expected {FORMS}"));
    }
    if rules.len() > MAX_RULES {
        return Err(format!("{} rules; at most {MAX_RULES}", rules.len()));
    }
    Ok(rules)
}

fn rule(part: &str) -> Result<DelayRule, String> {
    // The duration never holds '=', a demangled `operator=` may.
    let (site, dur) = part
        .rsplit_once('=')
        .ok_or_else(|| format!("{part:?}: no '=DURATION'; expected {FORMS}"))?;
    let site = site.trim();
    let (against, pattern) = if let Some(p) = site.strip_prefix("name:") {
        (Against::Name, p)
    } else if let Some(p) = site.strip_prefix("site:") {
        (Against::CreationSite, p)
    } else {
        (Against::Either, site)
    };
    if pattern.is_empty() {
        return Err(format!("{part:?}: no SITE before '='; expected {FORMS}"));
    }
    if looks_like_file_line(pattern) {
        return Err(format!(
            "{part:?}: file:line is not supported (the shim reads no line tables); give a \
             function of the lock's creation chain or its name instead: {FORMS}"
        ));
    }
    let glob = Glob::new(pattern).map_err(|e| format!("{part:?}: {e}"))?;
    let dur = dur.trim();
    let delay = ns(dur, UNITS).map_err(|e| match e {
        DurationError::Unit(u) => {
            format!("{part:?}: unit {u:?} unknown; DURATION is a number and ns, us or ms")
        }
        DurationError::Number => format!("{part:?}: DURATION {dur:?} is not a number"),
    })?;
    if !(1.0..=MAX_DELAY_NS as f64).contains(&delay) {
        return Err(format!(
            "{part:?}: DURATION must be from 1ns to 1s (a delay never shortens anything)"
        ));
    }
    Ok(DelayRule {
        site: site.to_string(),
        against,
        glob,
        delay_ns: delay as u64,
    })
}

/// `queue.c:41`, `src/queue.c:41`: a file name with an extension, then a line number.
fn looks_like_file_line(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((file, line)) => {
            !line.is_empty()
                && line.bytes().all(|b| b.is_ascii_digit())
                && file.rsplit('/').next().is_some_and(|f| f.contains('.'))
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_a_glob_and_a_duration_in_microseconds() {
        let r = parse("table_init*=20us").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].site, "table_init*");
        assert_eq!(r[0].against, Against::Either);
        assert_eq!(r[0].delay_ns, 20_000);
        assert!(r[0].matches(None, ["main", "table_init_all"].into_iter()));
        assert!(r[0].matches(Some("table_init"), std::iter::empty()));
        assert!(!r[0].matches(Some("queue"), ["main"].into_iter()));
    }

    #[test]
    fn several_rules_by_semicolons_with_units_and_prefixes() {
        let r = parse(" name:queue = 500ns ; site:db::Pool::Pool(int, int)*=1ms;x=3 ;").unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].against, r[0].delay_ns), (Against::Name, 500));
        assert!(r[0].matches(Some("queue"), ["queue"].into_iter()));
        assert!(!r[0].matches(None, ["queue"].into_iter()), "name: only");
        assert_eq!(
            (r[1].against, r[1].delay_ns),
            (Against::CreationSite, 1_000_000)
        );
        assert!(r[1].matches(None, ["db::Pool::Pool(int, int)"].into_iter()));
        assert!(!r[1].matches(Some("db::Pool::Pool(int, int)"), std::iter::empty()));
        assert_eq!(r[2].delay_ns, 3_000, "a bare number is microseconds");
        assert_eq!(parse("a=2µs").unwrap()[0].delay_ns, 2_000);
    }

    #[test]
    fn an_operator_with_an_equals_sign_keeps_it_in_the_site() {
        let r = parse("site:Foo::operator=*=10us").unwrap();
        assert_eq!(r[0].site, "site:Foo::operator=*");
        assert_eq!(r[0].delay_ns, 10_000);
    }

    #[test]
    fn bad_values_say_what_is_wrong_and_which_forms_work() {
        for (bad, says) in [
            ("", "no rule"),
            ("   ;  ", "no rule"),
            ("table", "no '=DURATION'"),
            ("=20us", "no SITE"),
            ("name:=20us", "no SITE"),
            ("x=20", ""),
            ("x=20h", "unit \"h\""),
            ("x=fast", "unknown"),
            ("x=.us", "not a number"),
            ("x=0us", "from 1ns to 1s"),
            ("x=2s", "unit"),
            ("x=2000ms", "from 1ns to 1s"),
            ("queue.c:41=20us", "file:line is not supported"),
            ("site:src/queue.c:41=20us", "file:line is not supported"),
            ("x[=1us", "x["),
        ] {
            let r = parse(bad);
            if says.is_empty() {
                assert!(r.is_ok(), "{bad}");
                continue;
            }
            let e = r.expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        // The file:line message names the forms that work.
        assert!(parse("queue.c:41=20us").unwrap_err().contains("name:GLOB"));
        // A C++ scope is not a file and a line.
        assert!(parse("ns::f=1us").is_ok());
        let many = vec!["a=1us"; MAX_RULES + 1].join(";");
        assert!(parse(&many).unwrap_err().contains("at most"));
    }
}
