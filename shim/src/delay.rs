//! `WAITSHIM_DELAY` (`SITE=DURATION[;...]`, read by `waitshim_policy::delay`): which locks get
//! their critical sections lengthened, and by how much. The core (`track::delayed`) spins and
//! counts; this layer reads the variable once at start, writes its rules to the log
//! (`DelayRule`) and answers, once per object, whether a rule selects it. A refused value says
//! why in one stderr line and the program runs on without any delay.

use std::sync::OnceLock;

use waitshim_format::DelayRule as RuleRecord;
use waitshim_policy::delay::{parse, Against, DelayRule};

use crate::log::Log;

static RULES: OnceLock<Vec<DelayRule>> = OnceLock::new();

/// Reads the variable's value (None: not set) and arms the delay if it is valid.
pub fn init(log: &Log, text: Option<&str>) {
    let Some(text) = text else { return };
    match parse(text) {
        Ok(rules) => {
            if RULES.set(rules).is_ok() {
                write_rules(log);
                crate::track::delayed::arm();
            }
        }
        Err(e) => crate::diag::say(
            log,
            &format!("WAITSHIM_DELAY={text}: {e}; running without any delay"),
        ),
    }
}

/// The rules in force, to the log (at start, and in a forked child's own log).
pub fn write_rules(log: &Log) {
    for (i, r) in RULES.get().into_iter().flatten().enumerate() {
        log.write(
            &RuleRecord {
                rule: i as u32,
                site: r.site.clone(),
                delay_ns: r.delay_ns,
            }
            .into(),
        );
    }
}

/// The first rule that selects the object with C-API name `name` and the creation chain
/// `creation` gives (asked only if a rule looks at it): (rule, delay in ns).
pub fn decide(
    name: Option<&str>,
    creation: &mut dyn FnMut() -> Vec<Box<str>>,
) -> Option<(u32, u64)> {
    let rules = RULES.get()?;
    let mut symbols: Option<Vec<Box<str>>> = None;
    for (i, r) in rules.iter().enumerate() {
        if r.against != Against::Name && symbols.is_none() {
            symbols = Some(creation());
        }
        let syms = symbols.iter().flatten().map(|s| &**s);
        if r.matches(name, syms) {
            return Some((i as u32, r.delay_ns));
        }
    }
    None
}
