//! The text report, worst first: summary (with warnings on top), the policy in force, deadlocks,
//! lock contention records, what the policy rules collected (selected waits, holder stacks,
//! waiter chains), per-object table, short-lived objects by creation site, where threads wait,
//! threads.
//!
//! The sections live a group to a file (`summary`, `deadlocks`, `records`, `policy`, `objects`,
//! `waiting`, `threads`); this one renders them in order and keeps what they share: chains,
//! the limits of what a section shows, and number words.

use std::collections::{BTreeMap, HashSet};

use std::fmt::Write;
use waitshim_format::contract::holder_stack;

use waitshim_format::{
    counter, end_reason, Counters, Deadlock, DeadlockBroken, ObjectKind, YIELD_SITES,
};

use super::record_words::{self, WaitedFor};
use super::{fmt_ns, Ctx, SortKey};
use crate::lockorder::{PotentialDeadlock, Stopped, MAX_CYCLES, MAX_CYCLE_LEN};
use crate::model::{
    churn_kind_text, errno_name, kind_counter_json, reason_text, ContentionRecord, Object,
    ENDED_IN_TABLE, MAX_ENDED_ROWS,
};
use crate::plain::{escaped, quoted};
use crate::symbolize::Frame;

mod deadlocks;
mod objects;
mod policy;
mod records;
mod summary;
mod threads;
mod waiting;

use deadlocks::*;
use objects::*;
use policy::*;
use records::*;
use summary::*;
use threads::*;
use waiting::*;

/// Frames of a chain shown in the text report; the JSON report has them all.
pub(super) const MAX_FRAMES_SHOWN: usize = 16;
/// Distinct waiter chains shown per record.
pub(super) const MAX_WAITER_CHAINS: usize = 8;
/// Wait sites shown per object.
pub(super) const MAX_WAIT_SITES: usize = 10;
/// Policy versions shown (the latest), and rules shown per version.
pub(super) const MAX_VERSIONS_SHOWN: usize = 20;
pub(super) const MAX_RULES_SHOWN: usize = 50;
/// Objects shown in the section of what the policy collected (the JSON report has them all).
pub(super) const MAX_COLLECTED_OBJECTS: usize = 20;
/// Distinct (holder, stack) shown per object.
pub(super) const MAX_HOLDER_STACKS: usize = 8;
/// Waiter-chain records shown per object, and waiting threads shown per record.
pub(super) const MAX_WAITER_SETS: usize = 3;
pub(super) const MAX_WAITERS_SHOWN: usize = 16;
/// Rows of each per-object table, threads, objects in the wait-site section, deadlocks and
/// threads of a deadlock's cycle, and statistics of undescribed rules shown: the busiest first
/// where there is an order. The JSON report has them all; a text of a million rows is read by
/// nobody, and would cost memory in proportion.
pub(super) const MAX_ROWS_SHOWN: usize = 1000;
pub(super) const MAX_WAIT_SITE_OBJECTS: usize = 100;
pub(super) const MAX_DEADLOCKS_SHOWN: usize = 100;
pub(super) const MAX_CYCLE_SHOWN: usize = 64;
pub(super) const MAX_ORPHAN_RULES_SHOWN: usize = 50;
/// Records shown per commonality group (the highest first).
pub(super) const MAX_GROUP_RECORDS_SHOWN: usize = 10;
/// Rows of a section: `--top`, within what any section shows at most.
pub(super) fn shown_rows(ctx: &Ctx<'_>) -> usize {
    ctx.opts.top.clamp(1, MAX_ROWS_SHOWN)
}

/// How the first frame of the program's own code is marked in a holder's stack.
pub(super) const USER_MARK: &str = "   <- first frame of the program";

/// Renders the report of one log.
pub fn render(ctx: &mut Ctx<'_>) -> String {
    // The body is rendered first: symbolizing it finds the missing or rebuilt binaries that the
    // warnings at the top must mention.
    let mut body = String::new();
    // Objects that were all short-lived are in the churn sums only: the shim did see them.
    if ctx.model.objects.is_empty() && ctx.model.churned.is_empty() && ctx.model.quiet.is_empty() {
        // The shim wrote the log, so the program is dynamically linked: only its threads say
        // why nothing was seen.
        let seen = ctx.model.threads_seen();
        if seen <= 1 {
            body.push_str(
                "\nNo sync object was seen in this run: the program ran on one thread and made \
                 no pthread lock, condition variable, semaphore or barrier call, so no thread \
                 could wait for another.\n",
            );
        } else {
            let _ = writeln!(
                body,
                "\nNo sync object was seen in this run, though {seen} threads ran: they made no \
                 pthread lock calls and never slept in syscall(SYS_futex) through libc, so they \
                 synchronised by other means the shim's wrappers do not see (Go's runtime, \
                 futexes called by inline system calls, spinning)."
            );
        }
        if ctx.model.states.any() {
            body.push_str(
                "The sampler looked at the threads from outside: THREAD STATES below says what \
                 they waited in, such locks' futexes among them (\"untracked futex\").\n",
            );
        }
        progress(ctx, &mut body);
        thread_states(ctx, &mut body);
    } else {
        super::bottlenecks::render(ctx, &mut body);
        progress(ctx, &mut body);
        waiting_went(ctx, &mut body);
        deadlocks(ctx, &mut body);
        still_waiting(ctx, &mut body);
        thread_states(ctx, &mut body);
        cross_process(ctx, &mut body);
        potential_deadlocks(ctx, &mut body);
        records(ctx, &mut body);
        collected(ctx, &mut body);
        objects(ctx, &mut body);
        short_lived(ctx, &mut body);
        quiet_objects(ctx, &mut body);
        wait_sites(ctx, &mut body);
        woken_by(ctx, &mut body);
    }
    threads(ctx, &mut body);
    shim_cost(ctx, &mut body);
    let mut policy = String::new();
    policy_section(ctx, &mut policy);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "waitshim report: {}",
        escaped(&ctx.summary.path.display().to_string())
    );
    slowed_on_purpose(ctx, &mut out);
    for w in ctx.warnings() {
        let _ = writeln!(out, "WARNING: {}", w.message);
    }
    for (_, advice) in ctx.sym.debug_advice() {
        let _ = writeln!(out, "ADVICE: {advice}");
    }
    summary(ctx, &mut out);
    out.push_str(&policy);
    out.push_str(&body);
    out
}

pub(super) fn chain(ctx: &mut Ctx<'_>, chain_id: u32, indent: &str, out: &mut String) {
    chain_with(ctx, chain_id, indent, false, out);
}

/// A chain, one frame a line; with `mark_user`, the first frame of the program's own code is
/// marked (where the program's author made the call).
pub(super) fn chain_with(
    ctx: &mut Ctx<'_>,
    chain_id: u32,
    indent: &str,
    mark_user: bool,
    out: &mut String,
) {
    if chain_id == 0 {
        let _ = writeln!(out, "{indent}(no call chain recorded)");
        return;
    }
    let frames = ctx.sym.chain(ctx.model, chain_id);
    if frames.is_empty() {
        let why = if ctx.model.chains.contains_key(&chain_id) {
            "has only frames of the shim itself"
        } else {
            "is not in the log"
        };
        let _ = writeln!(out, "{indent}(chain {chain_id} {why})");
        return;
    }
    // The limit counts physical frames: the functions inlined into one are shown with it.
    let shown = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.inlined)
        .nth(MAX_FRAMES_SHOWN - 1)
        .map_or(frames.len(), |(i, _)| i + 1);
    let user = if mark_user {
        frames.iter().position(Frame::is_user)
    } else {
        None
    };
    for (i, f) in frames.iter().take(shown).enumerate() {
        let mark = if user == Some(i) { USER_MARK } else { "" };
        let _ = writeln!(out, "{indent}#{i} {}{mark}", f.describe());
    }
    if frames.len() > shown {
        let _ = writeln!(
            out,
            "{indent}... {} outer frames not shown",
            frames.len() - shown
        );
    }
}

/// A chain scanned from a blocked thread's stack, one frame a line: a frame whose call leads
/// elsewhere than the frame above it is marked, and what the mark means said once.
pub(super) fn scanned_chain(ctx: &mut Ctx<'_>, chain_id: u32, indent: &str, out: &mut String) {
    let frames = ctx.sym.scanned_chain(ctx.model, chain_id);
    if frames.is_empty() {
        chain(ctx, chain_id, indent, out);
        return;
    }
    let shown = frames
        .iter()
        .enumerate()
        .filter(|(_, (f, _))| !f.inlined)
        .nth(MAX_FRAMES_SHOWN - 1)
        .map_or(frames.len(), |(i, _)| i + 1);
    let mut marked = false;
    for (i, (f, doubtful)) in frames.iter().take(shown).enumerate() {
        let mark = if *doubtful { "? " } else { "" };
        marked |= doubtful;
        let _ = writeln!(out, "{indent}#{i} {mark}{}", f.describe());
    }
    if frames.len() > shown {
        let _ = writeln!(
            out,
            "{indent}... {} outer frames not shown",
            frames.len() - shown
        );
    }
    if marked {
        let _ = writeln!(
            out,
            "{indent}(? : the scan found this return address, but the call before it leads to \
             another function than the frame above: most likely left on the stack by an \
             earlier call, or the frame above was reached through a tail call)"
        );
    }
}

/// A share as a percentage, with a digit after the point below 10 %.
pub(super) fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p >= 10.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// What a thread blocked outside the shim's calls waited on: `read on pipe:[123]`; a futex word
/// that lies inside an object of the log is that object (`futex on mutex#3 @0x... created at
/// x.c:12, outside the shim's calls`), with the word's offset in it when not its first.
pub(super) fn blocked_label(ctx: &mut Ctx<'_>, syscall: i32, what: &str) -> String {
    if let Some((id, offset)) = ctx.model.states.futex_object(syscall, what) {
        let word = if offset == 0 {
            String::new()
        } else {
            format!("word +{offset} of ")
        };
        return format!(
            "futex on {word}{}, outside the shim's calls",
            ctx.object_label(id).replace("  ", " ")
        );
    }
    crate::states::blocked_text(&crate::states::BlockedIn {
        syscall,
        what: what.to_string(),
        ns: 0,
    })
}

/// `400 (40.0%)`: a count and its share of `of`.
pub(super) fn share(n: u64, of: u64) -> String {
    let pct = if of > 0 {
        (n as f64) * 100.0 / (of as f64)
    } else {
        0.0
    };
    format!("{n} ({pct:.1}%)")
}

/// `text` cut into lines of at most `width` characters at spaces (a longer word stays whole).
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `1 wait event`, `3 wait events`.
pub(super) fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
