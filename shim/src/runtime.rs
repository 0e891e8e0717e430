//! The layer above the tracking core that owns the rest of the shim: it registers with the core
//! what the core needs from the policy, the live-stack code and the shim's own thread
//! ([`crate::track::hooks`]), so that the core never names them.

use crate::policy_api::StackBox;
use crate::track::threads::own_record;
use crate::track::{hooks::Hooks, Tracker};

pub static HOOKS: Hooks = Hooks {
    selective: crate::policy::selective,
    decide: crate::policy::decide,
    live_stack: crate::livestack::ask,
    started,
    forked_child,
    ending,
    thread_ending: crate::sampler::thread_ending,
    flushed,
    delay: crate::delay::decide,
};

/// Registers the layers above the core and starts tracking (the library constructor).
pub fn start() {
    #[cfg(not(test))]
    crate::interpose::settle();
    crate::track::hooks::register(&HOOKS);
    crate::track::init();
}

fn started(tr: &Tracker) {
    if let Some(line) = crate::confinement::look_at_start() {
        crate::diag::say(&tr.log, &line);
    }
    crate::livestack::set_mailbox_of_caller(own_mailbox);
    crate::policy::init(&tr.log, tr.config.policy.as_deref());
    crate::delay::init(&tr.log, tr.config.delay.as_deref());
    settle_events(tr);
    settle_sample(tr);
    crate::service::init(tr, tr.config.signal.as_deref());
    // The log is finished and the program's handler run on a fatal signal.
    #[cfg(not(test))]
    crate::interpose::signal::watch_fatal_signals();
}

/// Per-wait events: `WAITSHIM_EVENTS` if set (already in force, and said to win when the
/// policy file asks for something else), else the policy file's `events`, else all.
fn settle_events(tr: &Tracker) {
    let Some(file) = crate::policy::events_setting() else {
        return;
    };
    match tr.config.events {
        None => crate::track::events::set_mode(file),
        Some(env) if env != file => crate::diag::say(
            &tr.log,
            &format!("WAITSHIM_EVENTS={env} wins over the policy's \"events\": \"{file}\""),
        ),
        Some(_) => {}
    }
}

/// The sampler's interval: `WAITSHIM_SAMPLE` if set (and said to win when the policy file asks
/// for another), else the policy file's `sample`, else 10 ms.
fn settle_sample(tr: &Tracker) {
    let file = crate::policy::sample_setting();
    let ns = match (tr.config.sample_ns, file) {
        (Some(env), Some(file)) if env != file => {
            crate::diag::say(
                &tr.log,
                &format!(
                    "WAITSHIM_SAMPLE={} wins over the policy's \"sample\": \"{}\"",
                    crate::sampler::interval_text(env),
                    crate::sampler::interval_text(file)
                ),
            );
            env
        }
        (Some(env), _) => env,
        (None, Some(file)) => file,
        (None, None) => crate::config::DEFAULT_SAMPLE_NS,
    };
    crate::sampler::set_interval(ns);
}

/// The calling thread's live-stack mailbox (null for a thread the shim does not track): called
/// in a signal handler, so one thread-local load.
fn own_mailbox() -> *const StackBox {
    let p = own_record();
    if p.is_null() {
        return std::ptr::null();
    }
    // SAFETY: thread records are leaked and never freed.
    unsafe { &(*p).stack }
}

fn forked_child(tr: &Tracker) {
    // The sampler first: it asks whether the parent's shim thread had a table of its own.
    crate::sampler::after_fork_child();
    crate::service::after_fork_child();
    crate::policy::after_fork_child(&tr.log);
    crate::delay::write_rules(&tr.log);
}

fn ending(_tr: &Tracker, in_handler: bool) {
    if in_handler {
        crate::service::flush_by_service(300_000_000);
    }
    crate::service::stop();
}

fn flushed(tr: &Tracker, all: bool) {
    crate::policy::write_stats(&tr.log, all);
}
