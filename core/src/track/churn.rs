//! Objects that never mattered on their own: destroyed before they were written (churned), or
//! quiet beyond the number written one by one; summed per kind and creation chain.

use super::*;

/// Live objects that never mattered on their own (never contended, named, or in a written
/// lock-order edge) are written one by one, at a flush, up to this many; further ones are
/// summed per kind and creation chain (`ObjectsQuiet`), so that the log does not grow with
/// the number of idle objects a program keeps.
pub(super) const QUIET_WRITTEN_MAX: u64 = 4096;

/// What an `ObjectsQuiet` record says.
#[derive(Default, Clone, PartialEq, Eq)]
pub(super) struct QuietSum {
    pub(super) count: u64,
    pub(super) acquisitions: u64,
    pub(super) owner_changes: u64,
    pub(super) counters: Vec<(u16, u64)>,
}

/// One line of `Tracker::churned`: what an `ObjectsChurned` record says, and whether it changed
/// since it was last written.
#[derive(Default)]
pub(super) struct Churn {
    pub(super) count: u64,
    pub(super) acquisitions: u64,
    pub(super) lifetime_total: u64,
    pub(super) lifetime_max: u64,
    /// Kind-specific counts (posts, read acquisitions, signals, broadcasts), summed.
    pub(super) counters: Vec<(u16, u64)>,
    pub(super) changed: bool,
}

/// (kind, creation chain) pairs summed in `churned`; the objects of further creation chains
/// are summed under chain 0.
const CHURN_KEYS: usize = 4096;

impl Tracker {
    /// Counts an object destroyed before it was ever written to the log with the others of its
    /// kind and creation chain.
    pub(super) fn churn(&self, obj: &ObjEntry, now: u64) {
        let mut map = self.churned.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = (obj.kind as u8, obj.create_chain.load(Ordering::Relaxed));
        if map.len() >= CHURN_KEYS && !map.contains_key(&key) {
            key.1 = 0;
        }
        let c = map.entry(key).or_default();
        let lifetime = now.saturating_sub(obj.created_ns.load(Ordering::Relaxed));
        c.count += 1;
        c.acquisitions += obj.acquisitions.load(Ordering::Relaxed);
        c.lifetime_total = c.lifetime_total.saturating_add(lifetime);
        c.lifetime_max = c.lifetime_max.max(lifetime);
        for (key, v) in obj.extra_counts() {
            match c.counters.iter_mut().find(|x| x.0 == key) {
                Some(x) => x.1 += v,
                None => c.counters.push((key, v)),
            }
        }
        c.changed = true;
        self.churn_changed.store(true, Ordering::Relaxed);
    }

    /// Writes the sums of quiet objects (see [`QUIET_WRITTEN_MAX`]) that changed since they were
    /// last written, and a count of 0 for those none of which is left.
    pub(super) fn write_quiet(&self, now_sums: HashMap<(u8, u32), QuietSum>, now: u64) {
        let mut last = self.quiet_sums.lock().unwrap_or_else(|e| e.into_inner());
        if now_sums.is_empty() && last.is_empty() {
            return;
        }
        let gone: Vec<(u8, u32)> = last
            .keys()
            .filter(|k| !now_sums.contains_key(k))
            .copied()
            .collect();
        let changed = now_sums
            .iter()
            .filter(|(k, v)| last.get(k) != Some(v))
            .map(|(&k, v)| (k, v.clone()))
            .chain(gone.into_iter().map(|k| (k, QuietSum::default())));
        for ((kind, chain_id), mut sum) in changed {
            sum.counters.sort_unstable();
            self.log.write(
                &waitshim_format::ObjectsQuiet {
                    kind,
                    chain_id,
                    ns: now,
                    count: sum.count,
                    acquisitions: sum.acquisitions,
                    owner_changes: sum.owner_changes,
                    counters: sum
                        .counters
                        .iter()
                        .map(|&(key, value)| CounterValue { key, value })
                        .collect(),
                }
                .into(),
            );
        }
        *last = now_sums;
    }

    /// Writes the sums of destroyed objects that changed since they were last written.
    pub(super) fn write_churned(&self, now: u64) {
        if !self.churn_changed.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut map = self.churned.lock().unwrap_or_else(|e| e.into_inner());
        for (&(kind, chain_id), c) in map.iter_mut().filter(|(_, c)| c.changed) {
            c.changed = false;
            self.log.write(
                &ObjectsChurned {
                    kind,
                    chain_id,
                    ns: now,
                    count: c.count,
                    acquisitions: c.acquisitions,
                    lifetime_total_ns: c.lifetime_total,
                    lifetime_max_ns: c.lifetime_max,
                    counters: c
                        .counters
                        .iter()
                        .map(|&(key, value)| CounterValue { key, value })
                        .collect(),
                }
                .into(),
            );
        }
    }
}
