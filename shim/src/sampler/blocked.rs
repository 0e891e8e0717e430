//! A blocked thread's chain: what the policy is handed about a thread the sampler saw blocked,
//! and the scan of its stack when the policy asks for it.

use super::*;

/// What the policy asked of a thread's blocked wait.
#[derive(Clone, Copy)]
pub(super) enum Ask {
    /// Not asked yet.
    Undecided,
    /// A rule acts once the wait has lasted its `min_wait`.
    Pending(Act),
    /// Acted on, or nothing to do.
    Done,
}

/// What the policy may ask of a thread the sampler sees: its name and its group.
pub(super) struct Sampled {
    pub(super) tid: u32,
    pub(super) rec: Option<&'static ThreadRec>,
}

impl Facts for Sampled {
    fn creation_site(&mut self) -> Vec<Box<str>> {
        Vec::new()
    }

    fn thread_name(&mut self) -> Option<String> {
        let named = self.rec.and_then(|r| {
            r.policy
                .name
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        });
        named.or_else(|| {
            let comm =
                std::fs::read_to_string(format!("/proc/self/task/{}/comm", self.tid)).ok()?;
            Some(comm.trim_end_matches('\n').to_string())
        })
    }

    fn thread_group(&mut self) -> Vec<Box<str>> {
        self.rec
            .map(crate::track::collect::thread_group)
            .unwrap_or_default()
    }

    fn stack_depth(&mut self) -> u32 {
        0
    }
}

/// The policy's part in one look at a thread blocked outside the sync objects (seed 004): asked
/// once per wait which rule acts, and when one does (at once, or once the wait has lasted its
/// `min_wait`), the thread's chain, scanned from its stack without stopping or signalling it.
/// `maps` is the process's memory map as last read ([`Maps`]); `scans` is what is left of the look's
/// [`SCANS_PER_LOOK`]: a wait whose chain must be scanned when none is left waits for a later
/// look (a thousand threads that block at once are scanned over many looks, not in one).
pub(super) fn blocked_chain(
    tr: &Tracker,
    f: &mut Followed,
    now: u64,
    maps: &mut Maps,
    scans: &mut u32,
    out: &mut Vec<BlockedChain>,
) {
    if f.last.0 != thread_state::BLOCKED {
        return;
    }
    let act = match f.ask {
        Ask::Done => return,
        Ask::Pending(act) => act,
        Ask::Undecided => {
            let rec = tr.thread(f.tid);
            let wait = BlockedWait {
                resource: resource_kind(f.last.2, &f.blocked_what),
                what: &f.blocked_what,
                thread: rec.map(|r| &r.policy),
            };
            let mut facts = Sampled { tid: f.tid, rec };
            match crate::policy::decide_blocked(&wait, &mut facts) {
                Some(act) => act,
                None => {
                    f.ask = Ask::Done;
                    return;
                }
            }
        }
    };
    if now.saturating_sub(f.blocked_since) < act.min_wait_ns {
        f.ask = Ask::Pending(act);
        return;
    }
    let (sp, pc) = f.sp_pc;
    let wants_chain = act.collect & action::WAITER_CHAIN != 0 && sp != 0;
    let cached = (sp, pc) == (f.last_chain.0, f.last_chain.1) && f.last_chain.2 != 0;
    if wants_chain && !cached && *scans == 0 {
        f.ask = Ask::Pending(act);
        return;
    }
    f.ask = Ask::Done;
    act.acted.fetch_add(1, Ordering::Relaxed);
    if !wants_chain {
        return;
    }
    let chain = if cached {
        f.last_chain.2
    } else {
        *scans -= 1;
        let frames = crate::livestack::scan_in(maps.around(sp, now), sp, pc, tr.config.depth);
        let id = tr.chains.intern(&frames, &tr.log);
        f.last_chain = (sp, pc, id);
        id
    };
    if chain != 0 {
        out.push(BlockedChain {
            tid: f.tid,
            ns: now,
            since_ns: f.blocked_since,
            syscall: f.last.2,
            arg0: f.last.3,
            version: act.version,
            rule: act.rule,
            chain_id: chain,
        });
    }
}
