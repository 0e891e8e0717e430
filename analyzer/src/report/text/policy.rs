//! The policy in force and what its rules collected.

use super::*;

/// The policies in force, when a policy file was used: each version, from when, its rules and
/// how often each acted.
pub(super) fn policy_section(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let p = &m.policy;
    if !p.has_user_policy() {
        return;
    }
    let n = p.versions.len();
    let _ = writeln!(
        out,
        "\nPOLICY ({n} {}; rule counts are cumulative, as last written to the log)",
        if n == 1 { "version" } else { "versions" }
    );
    let described: HashSet<(u32, u32)> = p
        .versions
        .iter()
        .filter(|v| !v.source.is_empty())
        .flat_map(|v| (0..v.rules.len()).map(move |i| (v.version, i)))
        .filter_map(|(version, i)| Some((version, u32::try_from(i).ok()?)))
        .collect();
    let skipped = n.saturating_sub(MAX_VERSIONS_SHOWN);
    if skipped > 0 {
        let _ = writeln!(
            out,
            "  ... {skipped} earlier versions not shown (all are in the JSON report)"
        );
    }
    for v in p.versions.iter().skip(skipped) {
        let at = fmt_ns(m.rel(v.ns));
        if v.source.is_empty() {
            let _ = writeln!(
                out,
                "  version {} from {at}: built-in (waiter chains on every contended wait)",
                v.version
            );
            continue;
        }
        let rules = v.rules.len();
        let _ = writeln!(
            out,
            "  version {} from {at}: {}, {rules} {}",
            v.version,
            v.source,
            if rules == 1 { "rule" } else { "rules" }
        );
        for (i, summary) in v.rules.iter().enumerate().take(MAX_RULES_SHOWN) {
            let rule = u32::try_from(i).unwrap_or(u32::MAX);
            let _ = writeln!(out, "    rule {}: {summary}", i + 1);
            match p.rule_stats.get(&(v.version, rule)) {
                Some(r) => {
                    let _ = writeln!(
                        out,
                        "      requests {}, acted {}, max_waiters suppressed {}",
                        r.requests, r.acted, r.suppressed
                    );
                }
                None => {
                    let _ = writeln!(out, "      no requests recorded");
                }
            }
        }
        if rules > MAX_RULES_SHOWN {
            let _ = writeln!(
                out,
                "    ... {} more rules (all are in the JSON report)",
                rules - MAX_RULES_SHOWN
            );
        }
    }
    let orphans: Vec<_> = p
        .rule_stats
        .values()
        .filter(|r| !described.contains(&(r.version, r.rule)))
        .collect();
    if !orphans.is_empty() {
        let _ = writeln!(out, "  statistics of rules the log does not describe:");
        for r in orphans.iter().take(MAX_ORPHAN_RULES_SHOWN) {
            let _ = writeln!(
                out,
                "    version {} rule {}: requests {}, acted {}, max_waiters suppressed {}",
                r.version,
                u64::from(r.rule) + 1,
                r.requests,
                r.acted,
                r.suppressed
            );
        }
        if orphans.len() > MAX_ORPHAN_RULES_SHOWN {
            let _ = writeln!(
                out,
                "    ... {} more (all are in the JSON report)",
                orphans.len() - MAX_ORPHAN_RULES_SHOWN
            );
        }
    }
}

/// `version 2 rule 1`: rules are numbered from 1 in the text report, as `policy check` does.
pub(super) fn rule_name(version: u32, rule: u32) -> String {
    format!("version {version} rule {}", u64::from(rule) + 1)
}

/// The waits the policy rules selected, by object: how many, how long and how they ended per
/// rule; the holders that made them wait, with their stacks; the threads waiting together.
pub(super) fn collected(ctx: &mut Ctx<'_>, out: &mut String) {
    let m = ctx.model;
    let p = &m.policy;
    if !p.has_collected() {
        return;
    }
    let objects = crate::findings::collected_by_object(m);

    let mut head = format!(
        "\nSELECTED WAITS (collected by policy rules, by object: {}, {}, {}",
        count(p.wait_events_total, "wait event", "wait events"),
        count(p.holder_stacks_total, "holder stack", "holder stacks"),
        count(
            p.waiter_chains_total,
            "waiter-chain record",
            "waiter-chain records"
        )
    );
    let listed = (p.holder_stacks.len() as u64) < p.holder_stacks_total
        || (p.waiter_chains.len() as u64) < p.waiter_chains_total;
    if listed {
        let _ = write!(
            head,
            "; the first {} holder stacks and {} waiter-chain records are shown",
            p.holder_stacks.len(),
            p.waiter_chains.len()
        );
    }
    head.push(')');
    let _ = writeln!(out, "{head}");
    let total = objects.len();
    for (object_id, c) in objects.iter().take(MAX_COLLECTED_OBJECTS) {
        collected_object(ctx, *object_id, c, out);
    }
    if total > MAX_COLLECTED_OBJECTS {
        let _ = writeln!(
            out,
            "\n  ... {} more objects with collected data (all are in the JSON report)",
            total - MAX_COLLECTED_OBJECTS
        );
    }
}

pub(super) fn collected_object(
    ctx: &mut Ctx<'_>,
    object_id: u64,
    c: &crate::findings::Collected,
    out: &mut String,
) {
    let m = ctx.model;
    let label = ctx.object_label(object_id);
    let _ = writeln!(out, "\n  {label}");
    if !c.groups.is_empty() {
        let _ = writeln!(out, "    selected waits:");
        for ((version, rule), g) in &c.groups {
            let mut line = format!(
                "      {}: {} {}, total {}, max {}",
                rule_name(*version, *rule),
                g.count,
                if g.count == 1 { "wait" } else { "waits" },
                fmt_ns(g.wait_total_ns),
                fmt_ns(g.wait_max_ns)
            );
            if !g.reasons.is_empty() {
                let list: Vec<String> = g
                    .reasons
                    .iter()
                    .map(|&(code, n)| format!("{} {n}", reason_text(code)))
                    .collect();
                let _ = write!(line, "; ended: {}", list.join(", "));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    if !c.holders.is_empty() {
        let _ = writeln!(out, "    holder stacks ({}):", c.holder_stacks);
        for g in c.holders.iter().take(MAX_HOLDER_STACKS) {
            let waiters: Vec<String> = g.waiters.iter().map(|&t| ctx.thread_label(t)).collect();
            let holder = ctx.thread_label(g.holder_tid);
            let rules: Vec<String> = g.rules.iter().map(|&(v, r)| rule_name(v, r)).collect();
            let what = match g.live {
                holder_stack::ACQUIRED => "where it acquired the object",
                holder_stack::BY_SIGNAL => "its live stack (what it was doing when asked)",
                _ => "its stack while blocked in a system call (scanned for return addresses)",
            };
            let _ = writeln!(
                out,
                "      {} waited behind holder {holder} (first at {}, {}); {what}:",
                waiters.join(", "),
                fmt_ns(m.rel(g.first_ns)),
                rules.join(", ")
            );
            chain_with(ctx, g.chain_id, "        ", true, out);
        }
        if c.holders.len() > MAX_HOLDER_STACKS {
            let _ = writeln!(
                out,
                "      ... {} more distinct holder stacks",
                c.holders.len() - MAX_HOLDER_STACKS
            );
        }
    }
    if !c.waiter_sets.is_empty() {
        let _ = writeln!(out, "    waiter chains ({}):", c.waiter_sets.len());
        for &i in c.waiter_sets.iter().take(MAX_WAITER_SETS) {
            let Some(w) = m.policy.waiter_chains.get(i) else {
                continue;
            };
            let n = w.waiters.len();
            let _ = writeln!(
                out,
                "      at {} ({}): {n} {} waiting",
                fmt_ns(m.rel(w.ns)),
                rule_name(w.version, w.rule),
                if n == 1 { "thread" } else { "threads" }
            );
            for r in w.waiters.iter().take(MAX_WAITERS_SHOWN) {
                let who = ctx.thread_label(r.tid);
                let site = if r.chain_id == 0 {
                    "(no call chain recorded)".to_string()
                } else {
                    ctx.sym.site(m, r.chain_id).map_or_else(
                        || format!("(chain {} is not in the log)", r.chain_id),
                        |f| format!("at {}", f.site()),
                    )
                };
                let _ = writeln!(out, "        {who} waiting {} {site}", fmt_ns(r.wait_ns));
            }
            if n > MAX_WAITERS_SHOWN {
                let _ = writeln!(out, "        ... {} more threads", n - MAX_WAITERS_SHOWN);
            }
        }
        if c.waiter_sets.len() > MAX_WAITER_SETS {
            let _ = writeln!(
                out,
                "      ... {} more waiter-chain records on this object",
                c.waiter_sets.len() - MAX_WAITER_SETS
            );
        }
    }
}
