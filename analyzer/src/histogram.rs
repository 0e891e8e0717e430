//! Wait-time distributions: log-scale buckets, four to each power of two (a bucket is at most a
//! quarter of its shortest wait wide), counted exactly from the per-wait events; the percentiles
//! they give are the upper bounds of the buckets they fall in, never above the longest wait,
//! which is exact.

/// Buckets of one distribution: how many waits lasted [lower(i), lower(i + 1)) ns, by i.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    pub waits: u64,
    pub max_ns: u64,
    pub total_ns: u64,
}

/// The bucket of a wait of `ns`: exact below 4 ns, then four to each power of two.
pub fn bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let octave = 63 - ns.leading_zeros() as usize;
    let sub = ((ns >> (octave - 2)) & 3) as usize;
    octave * 4 + sub - 4
}

/// The shortest wait of bucket `i` ([`bucket`]); `u64::MAX` past the last.
pub fn lower(i: usize) -> u64 {
    if i < 4 {
        return i as u64;
    }
    let (octave, sub) = ((i + 4) / 4, (i + 4) % 4);
    if octave > 63 {
        return u64::MAX;
    }
    (4 + sub as u64) << (octave - 2)
}

impl Histogram {
    pub fn add(&mut self, ns: u64) {
        let i = bucket(ns);
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.waits += 1;
        self.max_ns = self.max_ns.max(ns);
        self.total_ns = self.total_ns.saturating_add(ns);
    }

    /// Adds the waits of `other` (objects summed under one key, as `diff` matches them).
    pub fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.waits += other.waits;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
    }

    /// The wait time that `share` (0 to 1) of the waits did not exceed, as the upper bound of
    /// its bucket (at most the longest wait); None without waits.
    pub fn at_most(&self, share: f64) -> Option<u64> {
        if self.waits == 0 {
            return None;
        }
        let rank = ((share * self.waits as f64).ceil() as u64).clamp(1, self.waits);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(lower(i + 1).saturating_sub(1).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    /// The buckets that have waits: (shortest, longest it may hold, count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (lower(i), lower(i + 1).saturating_sub(1), n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_each_other_without_gaps_and_are_at_most_a_quarter_octave_wide() {
        for i in 0..251 {
            assert!(lower(i) < lower(i + 1), "{i}");
            assert_eq!(bucket(lower(i)), i);
            assert_eq!(bucket(lower(i + 1) - 1), i);
            if i >= 8 {
                assert!(lower(i + 1) - lower(i) <= lower(i) / 4, "{i}");
            }
        }
        assert_eq!(bucket(u64::MAX), 251);
        assert_eq!(lower(252), u64::MAX);
        // [2^20, 1.25 * 2^20) ns.
        assert_eq!(bucket(1_100_000), bucket(1_300_000));
        assert_ne!(bucket(1_100_000), bucket(1_400_000));
    }

    #[test]
    fn percentiles_are_the_bounds_of_their_buckets_and_never_above_the_longest_wait() {
        let mut h = Histogram::default();
        assert_eq!(h.at_most(0.5), None);
        // 20 waits of 2 ms and 3 of 150 ms (fixtures/wait_lengths.c's shape).
        for _ in 0..20 {
            h.add(2_000_000);
        }
        for ns in [150_000_000, 151_000_000, 152_000_000] {
            h.add(ns);
        }
        assert_eq!((h.waits, h.max_ns), (23, 152_000_000));
        let p50 = h.at_most(0.5).unwrap();
        assert!(
            (2_000_000..2_000_000 + 2_000_000 / 4).contains(&p50),
            "{p50}"
        );
        // 20 of 23 is 87 %: p90 is among the long ones, and p99 is the longest.
        assert!(h.at_most(0.9).unwrap() >= 150_000_000);
        assert_eq!(h.at_most(0.99), Some(152_000_000));
        assert_eq!(h.at_most(1.0), Some(152_000_000));
        let b: Vec<_> = h.buckets().collect();
        assert_eq!(b.len(), 2);
        assert_eq!(b.iter().map(|x| x.2).sum::<u64>(), 23);
        assert!(b[0].0 <= 2_000_000 && 2_000_000 <= b[0].1);
        // Two halves merged are the whole.
        let (mut x, mut y) = (Histogram::default(), Histogram::default());
        for _ in 0..20 {
            x.add(2_000_000);
        }
        for ns in [150_000_000, 151_000_000, 152_000_000] {
            y.add(ns);
        }
        x.merge(&y);
        assert_eq!(x, h);
    }
}
