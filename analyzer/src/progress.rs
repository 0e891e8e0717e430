//! The program's progress points (`ProgressPoint`, `ProgressCounts` records): its throughput
//! and its transactions' latency, and the phase they span, which the critical path and the
//! what-if estimates then measure instead of the whole run (a server that never ends is judged
//! by the work it did, not by how long it was left running).

use std::collections::BTreeMap;

use serde::Serialize;
use waitshim_format::{ProgressCount, ProgressCounts, ProgressPoint};

/// Points kept (the shim writes at most 64; a damaged log cannot make more).
const MAX_POINTS: usize = 256;

/// What the log says of one point: its name, and its latest totals.
#[derive(Debug, Clone, Default)]
pub struct Point {
    pub name: String,
    pub latest: Option<ProgressCount>,
    /// When `latest` was counted.
    pub as_of_ns: u64,
}

/// Every point of the log.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub points: BTreeMap<u32, Point>,
}

/// One point's figures, as reports show them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub id: u32,
    pub name: String,
    pub visits: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// When the first transaction began (0: none did).
    pub first_begin_ns: u64,
    /// Visits per second between the first and the last visit; None under two visits.
    pub per_second: Option<f64>,
    pub begins: u64,
    pub ends: u64,
    /// Begun and not ended when the totals were counted.
    pub in_flight: u64,
    /// Mean time from a begin to an end; None without ends.
    pub mean_latency_ns: Option<u64>,
    /// Exact when nothing was in flight at the end; otherwise the transactions still open
    /// are counted up to then, and the mean is an estimate.
    pub latency_exact: bool,
}

impl Progress {
    pub fn point(&mut self, p: ProgressPoint) {
        if self.points.len() >= MAX_POINTS && !self.points.contains_key(&p.id) {
            return;
        }
        self.points.entry(p.id).or_default().name = p.name;
    }

    pub fn counts(&mut self, c: ProgressCounts) {
        for pc in c.points {
            if self.points.len() >= MAX_POINTS && !self.points.contains_key(&pc.id) {
                continue;
            }
            let p = self.points.entry(pc.id).or_default();
            if p.latest.is_none() || c.ns >= p.as_of_ns {
                p.as_of_ns = c.ns;
                p.latest = Some(pc);
            }
        }
    }

    pub fn any(&self) -> bool {
        self.points.values().any(|p| p.latest.is_some())
    }

    /// Each point with counts, in the order the program first reached them.
    pub fn rows(&self) -> Vec<Row> {
        self.points
            .iter()
            .filter_map(|(&id, p)| {
                let c = p.latest.as_ref()?;
                let span = c.last_ns.saturating_sub(c.first_ns);
                let per_second =
                    (c.visits >= 2 && span > 0).then(|| (c.visits - 1) as f64 * 1e9 / span as f64);
                let in_flight = c.begins.saturating_sub(c.ends);
                // Whichever end closed whichever begin: the ends' times less the begins',
                // the open ones counted up to the totals' time.
                let total = c
                    .ends_sum
                    .wrapping_sub(c.begins_sum)
                    .wrapping_add(in_flight.wrapping_mul(p.as_of_ns));
                let mean_latency_ns = (c.ends > 0 && total < u64::MAX / 2).then(|| total / c.ends);
                Some(Row {
                    id,
                    name: if p.name.is_empty() {
                        format!("point {id}")
                    } else {
                        p.name.clone()
                    },
                    visits: c.visits,
                    first_ns: c.first_ns,
                    last_ns: c.last_ns,
                    first_begin_ns: c.first_begin_ns,
                    per_second,
                    begins: c.begins,
                    ends: c.ends,
                    in_flight,
                    mean_latency_ns,
                    latency_exact: in_flight == 0,
                })
            })
            .collect()
    }

    /// The phase the points span: from the first visit or begin of any point to the last
    /// visit of any; None without two distinct moments.
    pub fn phase(&self) -> Option<(u64, u64)> {
        let rows = self.rows();
        let start = rows
            .iter()
            .flat_map(|r| [r.first_ns, r.first_begin_ns])
            .filter(|&n| n > 0)
            .min()?;
        let end = rows.iter().map(|r| r.last_ns).max()?;
        (end > start).then_some((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(id: u32, visits: u64, first: u64, last: u64) -> ProgressCount {
        ProgressCount {
            id,
            visits,
            first_ns: first,
            last_ns: last,
            first_begin_ns: 0,
            begins: 0,
            ends: 0,
            begins_sum: 0,
            ends_sum: 0,
        }
    }

    #[test]
    fn throughput_counts_the_gaps_between_first_and_last_visit() {
        let mut p = Progress::default();
        p.point(ProgressPoint {
            id: 1,
            ns: 10,
            name: "served".into(),
        });
        p.counts(ProgressCounts {
            ns: 5_000_000_000,
            points: vec![count(1, 11, 1_000_000_000, 2_000_000_000)],
        });
        let r = &p.rows()[0];
        assert_eq!(r.name, "served");
        assert_eq!(r.per_second, Some(10.0));
        assert_eq!(p.phase(), Some((1_000_000_000, 2_000_000_000)));
    }

    #[test]
    fn the_latest_totals_win_whatever_order_they_come_in() {
        let mut p = Progress::default();
        p.counts(ProgressCounts {
            ns: 200,
            points: vec![count(1, 5, 1, 150)],
        });
        p.counts(ProgressCounts {
            ns: 100,
            points: vec![count(1, 3, 1, 90)],
        });
        assert_eq!(p.rows()[0].visits, 5);
    }

    #[test]
    fn open_transactions_are_counted_up_to_the_totals_time_and_say_so() {
        let mut p = Progress::default();
        // Begun at 100 and 200; one ended at 300; counted at 1000.
        let mut c = count(1, 1, 100, 300);
        c.begins = 2;
        c.ends = 1;
        c.begins_sum = 300;
        c.ends_sum = 300;
        p.counts(ProgressCounts {
            ns: 1000,
            points: vec![c],
        });
        let r = &p.rows()[0];
        // 300 - 300 + 1 * 1000: 200 for the ended one (or 100), 800 (or 900) for the open one.
        assert_eq!(r.mean_latency_ns, Some(1000));
        assert!(!r.latency_exact);
        assert_eq!(r.in_flight, 1);
    }

    #[test]
    fn damaged_sums_give_no_latency_rather_than_a_huge_one() {
        let mut p = Progress::default();
        let mut c = count(1, 1, 1, 2);
        c.begins = 1;
        c.ends = 1;
        c.begins_sum = 10;
        c.ends_sum = 5;
        p.counts(ProgressCounts {
            ns: 20,
            points: vec![c],
        });
        assert_eq!(p.rows()[0].mean_latency_ns, None);
    }
}
