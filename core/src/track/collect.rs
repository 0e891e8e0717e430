//! Collecting what the policy asks for a contended wait: the core hands the policy the wait's
//! context (`crate::policy_api`) through the registered [`hooks`], and collects what
//! the answer names (waiter chains, the list of all waiters, holder chains and live holder
//! stacks, wait events) while the thread waits and when the wait ends.

use std::sync::atomic::Ordering;

use waitshim_format::{action, HolderStack, WaitEvent, WaiterChains, WaiterRef};

use super::objects::{ObjEntry, HOLDER_CHAINS};
use super::threads::ThreadRec;
use super::{hooks, CallSite, Tracker};
use crate::clock::now_ns;
use crate::policy_api::{Act, Decision, Facts, ObjectCell, WaitContext};

/// Whether a user's policy is in force (the built-in one collects every waiter's chain).
#[inline]
pub fn selective() -> bool {
    hooks::get().is_some_and(|h| (h.selective)())
}

/// The policy's cell on an object, made at the first contended wait a user's policy looks at
/// (or when the object is named).
pub fn object_cell(obj: &ObjEntry) -> &ObjectCell {
    obj.busy().policy.get_or_init(Box::default)
}

/// A rule that acts on a wait in progress.
#[derive(Clone, Copy)]
pub struct Rule {
    act: Act,
    /// The waiter's chain, once captured.
    chain: u32,
    site: CallSite,
    /// The criteria held (false while a `min_wait` is still to be reached).
    acted: bool,
}

impl Rule {
    /// When a `min_wait` still to be reached will be (monotonic ns), for a wait begun at `start`.
    pub fn due(&self, start: u64) -> Option<u64> {
        (!self.acted && self.act.min_wait_ns > 0)
            .then(|| start.saturating_add(self.act.min_wait_ns))
    }
}

/// The answer at the start of a contended wait: the waiter chain to record (0: none) and the
/// rule that applies, if any.
pub struct Pick {
    pub chain: u32,
    pub rule: Option<Rule>,
}

/// What the policy may ask about a wait, found out by the core when asked.
struct WaitFacts<'a> {
    tr: &'a Tracker,
    t: &'a ThreadRec,
    obj: &'a ObjEntry,
    site: CallSite,
    /// The waiter's chain, if captured.
    chain: Option<u32>,
}

impl WaitFacts<'_> {
    fn chain(&mut self) -> u32 {
        let (tr, t, site) = (self.tr, self.t, self.site);
        *self.chain.get_or_insert_with(|| tr.chain_at(t, site))
    }
}

/// Thread `t`'s group as the policy's `thread_group` matches it: its start routine's symbol as
/// written and, when that differs, demangled (`main` for the main thread); empty when unknown.
pub fn thread_group(t: &ThreadRec) -> Vec<Box<str>> {
    let name = match t.policy.routine.load(Ordering::Relaxed) {
        0 if t.tid() == std::process::id() => Some("main".into()),
        0 => None,
        routine => crate::symbols::function_at(&crate::procmaps::read(), routine),
    };
    let mut groups = Vec::new();
    if let Some(name) = name {
        both_spellings(name, &mut groups);
        // As before: the symbol as written first.
        groups.reverse();
    }
    groups
}

/// A symbol as written and, when that differs, demangled as reports show it, so that a glob
/// copied from a report matches.
fn both_spellings(name: Box<str>, out: &mut Vec<Box<str>>) {
    let readable = waitshim_elfsym::demangle(&name);
    if readable != *name {
        out.push(readable.into_boxed_str());
    }
    out.push(name);
}

/// The function names of `obj`'s creation (or first-use) chain, innermost first, each as its
/// symbol is written and, when that differs, demangled: what `creation_site` selectors match.
pub fn creation_names(tr: &Tracker, obj: &ObjEntry) -> Vec<Box<str>> {
    let chain = obj.create_chain.load(Ordering::Relaxed);
    tr.chains.frames(chain).map_or_else(Vec::new, |frames| {
        let maps = crate::procmaps::read();
        let mut names = Vec::new();
        for &f in frames.iter() {
            if let Some(name) = crate::symbols::function_at(&maps, f.saturating_sub(1)) {
                both_spellings(name, &mut names);
            }
        }
        names
    })
}

impl Facts for WaitFacts<'_> {
    fn creation_site(&mut self) -> Vec<Box<str>> {
        creation_names(self.tr, self.obj)
    }

    fn thread_name(&mut self) -> Option<String> {
        let named = self
            .t
            .policy
            .name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // This runs on the waiting thread: its own kernel name.
        named.or_else(super::threads::own_kernel_name)
    }

    fn thread_group(&mut self) -> Vec<Box<str>> {
        thread_group(self.t)
    }

    fn stack_depth(&mut self) -> u32 {
        let chain = self.chain();
        self.tr.chains.frames(chain).map_or(0, |f| f.len()) as u32
    }
}

/// A thread starts waiting on `obj`, which has `n` waiters now (this one included).
///
/// # Safety
/// `obj` is the object `t`, the calling thread, waits on: live (a rule collecting the holder's
/// stack reads who holds it there).
pub unsafe fn on_wait(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    n: u32,
    site: CallSite,
) -> Pick {
    let Some(h) = hooks::get().filter(|h| (h.selective)()) else {
        return Pick {
            chain: tr.chain_at(t, site),
            rule: None,
        };
    };
    let ctx = WaitContext {
        kind: obj.kind,
        addr: obj.addr() as u64,
        waiters: n,
        object: object_cell(obj),
        thread: &t.policy,
    };
    let mut facts = WaitFacts {
        tr,
        t,
        obj,
        site,
        chain: None,
    };
    let answer = (h.decide)(&ctx, &mut facts);
    match answer.holder_chains {
        Some(true) => obj.set_flag(HOLDER_CHAINS),
        Some(false) if obj.flags() & HOLDER_CHAINS != 0 => obj.clear_flag(HOLDER_CHAINS),
        _ => {}
    }
    match answer.decision {
        Decision::Pass { waiter_chain } => Pick {
            chain: if waiter_chain { facts.chain() } else { 0 },
            rule: None,
        },
        Decision::Act(act) => {
            let chain = match facts.chain {
                Some(c) => c,
                None if act.collect & action::ALL_WAITERS != 0 => facts.chain(),
                None => 0,
            };
            let mut rule = Rule {
                act,
                chain,
                site,
                acted: false,
            };
            if act.min_wait_ns == 0 {
                // SAFETY: as the caller promises.
                unsafe { fire(tr, t, obj, &mut rule, now_ns()) };
            }
            Pick {
                chain: if act.collect & (action::WAITER_CHAIN | action::ALL_WAITERS) != 0 {
                    rule.chain
                } else {
                    0
                },
                rule: Some(rule),
            }
        }
    }
}

/// The criteria held: count it and collect what the rule asks for while the thread waits.
///
/// # Safety
/// As [`on_wait`].
unsafe fn fire(tr: &Tracker, t: &ThreadRec, obj: &'static ObjEntry, rule: &mut Rule, now: u64) {
    rule.acted = true;
    let act = rule.act;
    act.acted.fetch_add(1, Ordering::Relaxed);
    if rule.chain == 0 && act.collect & (action::WAITER_CHAIN | action::ALL_WAITERS) != 0 {
        rule.chain = tr.chain_at(t, rule.site);
    }
    let (version, rule_no) = (act.version, act.rule);
    if act.collect & action::ALL_WAITERS != 0 {
        let waiters = waiting_threads(tr, t, obj, rule);
        tr.log.write(
            &WaiterChains {
                object_id: tr.id_of(obj),
                ns: now,
                version,
                rule: rule_no,
                waiters,
            }
            .into(),
        );
    }
    if act.collect & (action::HOLDER_CHAIN | action::HOLDER_LIVE_STACK) == 0 {
        return;
    }
    // SAFETY: the object `t`, the calling thread, waits on: live (the caller's promise).
    let holder = unsafe { obj.holder() };
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
                rule: rule_no,
                live,
                chain_id,
            }
            .into(),
        )
    };
    if act.collect & action::HOLDER_CHAIN != 0 {
        let st = object_cell(obj);
        if st.holder_tid.load(Ordering::Acquire) == holder {
            write(0, st.holder_chain.load(Ordering::Relaxed));
        }
    }
    if act.collect & action::HOLDER_LIVE_STACK != 0 {
        if let (Some(h), Some(rec)) = (hooks::get(), tr.thread(holder)) {
            if let Some((frames, how)) = (h.live_stack)(tr.pid, holder, &rec.stack, tr.config.depth)
            {
                write(how, tr.chains.intern(&frames, &tr.log));
            }
        }
    }
}

/// The threads waiting on `obj` now, this one first. A waiter counts itself before it
/// publishes that it waits (`waiting_on`, after its chain): those that were counted are given a
/// few milliseconds to show up.
fn waiting_threads(tr: &Tracker, t: &ThreadRec, obj: &ObjEntry, rule: &Rule) -> Vec<WaiterRef> {
    let me = t.tid();
    let mut waiters = Vec::new();
    for attempt in 0..20 {
        let now = now_ns();
        waiters.clear();
        waiters.push(WaiterRef {
            tid: me,
            chain_id: rule.chain,
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
        if waiters.len() >= rule.act.waiters as usize || attempt == 19 {
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
///
/// # Safety
/// As [`on_wait`].
pub unsafe fn on_wait_check(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    rule: &mut Rule,
    start: u64,
) {
    let now = now_ns();
    if !rule.acted && now.saturating_sub(start) >= rule.act.min_wait_ns {
        // SAFETY: as the caller promises.
        unsafe { fire(tr, t, obj, rule, now) };
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

/// The wait ended after `waited` ns with the reason `reason` (a `counter::ENDED_*` key).
/// Returns the waiter chain to count the wait under.
///
/// # Safety
/// As [`on_wait`]: the wait on `obj` is ending, the call that waited has not returned.
pub unsafe fn on_wait_end(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    rule: &mut Rule,
    start: u64,
    waited: u64,
    reason: u16,
) -> Ended {
    if !rule.acted {
        // Not acted yet: a `min_wait` was to come.
        if waited < rule.act.min_wait_ns {
            return Ended::default();
        }
        // Reached its minimum as it ended: the holder has let go, only the waiter's side is left.
        rule.act.collect &= !(action::HOLDER_CHAIN | action::HOLDER_LIVE_STACK);
        // SAFETY: as the caller promises (the holder's stack is not collected here anyway).
        unsafe { fire(tr, t, obj, rule, start + waited) };
    }
    let act = rule.act;
    let chain = if act.collect & action::WAITER_CHAIN != 0 {
        rule.chain
    } else {
        0
    };
    if act.collect & action::RECORD != 0 {
        tr.log.write(
            &WaitEvent {
                object_id: tr.id_of(obj),
                tid: t.tid(),
                ns: start,
                wait_ns: waited,
                waiters: act.waiters,
                reason,
                version: act.version,
                rule: act.rule,
                chain_id: chain,
            }
            .into(),
        );
    }
    Ended {
        chain,
        event: (act.collect & action::RECORD != 0).then_some((act.version, act.rule)),
    }
}

/// `t` acquired `obj`, which a rule with `holder_chain` selects: remember where.
#[cold]
pub fn holder_took(tr: &Tracker, t: &ThreadRec, obj: &ObjEntry) {
    let chain = tr.chain(t);
    let st = object_cell(obj);
    st.holder_chain.store(chain, Ordering::Relaxed);
    st.holder_tid.store(t.tid(), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::both_spellings;

    #[test]
    fn a_cxx_symbol_is_handed_to_the_policy_as_reports_show_it_and_as_written() {
        let mut names = Vec::new();
        both_spellings("_ZN2db4PoolC2Ev".into(), &mut names);
        assert_eq!(
            names,
            ["db::Pool::Pool()".into(), "_ZN2db4PoolC2Ev".into()] as [Box<str>; 2]
        );
        let mut plain = Vec::new();
        both_spellings("db_open".into(), &mut plain);
        assert_eq!(plain, ["db_open".into()] as [Box<str>; 1]);
    }
}
