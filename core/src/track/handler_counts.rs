//! Counts made where the shim may not allocate, lock or look anything up: a `sem_post` from a
//! signal handler on a thread that does not have the semaphore in its cache. The handler adds
//! one to a fixed table keyed by address (lock-free, no allocation); the next flush, on an
//! ordinary thread, moves each count to the object registered at that address.
//!
//! Slots are claimed for good (an address is never removed: removing would race with a handler
//! adding to it). When every slot holds another address, the count goes to `lost`, which the
//! flush reports, so nothing is dropped silently.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub struct Entry {
    addr: AtomicUsize,
    count: AtomicU64,
}

impl Entry {
    const fn new() -> Entry {
        Entry {
            addr: AtomicUsize::new(0),
            count: AtomicU64::new(0),
        }
    }
}

pub struct PendingCounts<const N: usize> {
    entries: [Entry; N],
    lost: AtomicU64,
}

impl<const N: usize> PendingCounts<N> {
    pub const fn new() -> Self {
        PendingCounts {
            entries: [const { Entry::new() }; N],
            lost: AtomicU64::new(0),
        }
    }

    /// Counts one event of the object at `addr` (non-zero). Async-signal-safe: atomics only.
    pub fn record(&self, addr: usize) {
        let start = (addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15_usize) % N;
        for i in 0..N {
            let e = &self.entries[(start + i) % N];
            let mut at = e.addr.load(Ordering::Acquire);
            if at == 0 {
                at = match e
                    .addr
                    .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => addr,
                    Err(other) => other,
                };
            }
            if at == addr {
                e.count.fetch_add(1, Ordering::AcqRel);
                return;
            }
        }
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// Hands each address's counts since the last drain to `f`; `f` returns the part it could
    /// not place (its object is not registered yet), kept for the next drain.
    pub fn drain(&self, mut f: impl FnMut(usize, u64) -> u64) {
        for e in &self.entries {
            let addr = e.addr.load(Ordering::Acquire);
            if addr == 0 || e.count.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let n = e.count.swap(0, Ordering::AcqRel);
            let kept = f(addr, n).min(n);
            if kept > 0 {
                e.count.fetch_add(kept, Ordering::AcqRel);
            }
        }
    }

    /// Events that found the table full, since the last call.
    pub fn take_lost(&self) -> u64 {
        self.lost.swap(0, Ordering::Relaxed)
    }
}

/// Posts from signal handlers on semaphores not in the posting thread's cache.
pub static HANDLER_POSTS: PendingCounts<256> = PendingCounts::new();

#[cfg(test)]
mod tests {
    use super::*;

    fn drained<const N: usize>(t: &PendingCounts<N>) -> Vec<(usize, u64)> {
        let mut v = Vec::new();
        t.drain(|a, n| {
            v.push((a, n));
            0
        });
        v.sort_unstable();
        v
    }

    #[test]
    fn counts_per_address_reach_the_next_drain_once() {
        let t = PendingCounts::<8>::new();
        for _ in 0..3 {
            t.record(0x1000);
        }
        t.record(0x2000);
        assert_eq!(drained(&t), vec![(0x1000, 3), (0x2000, 1)]);
        assert_eq!(drained(&t), vec![]);
        t.record(0x2000);
        assert_eq!(drained(&t), vec![(0x2000, 1)]);
    }

    #[test]
    fn a_count_whose_object_is_not_known_yet_waits_for_the_next_drain() {
        let t = PendingCounts::<8>::new();
        t.record(0x1000);
        t.record(0x1000);
        t.drain(|_, n| n);
        t.record(0x1000);
        assert_eq!(drained(&t), vec![(0x1000, 3)]);
    }

    #[test]
    fn a_full_table_counts_what_it_could_not_keep() {
        let t = PendingCounts::<2>::new();
        t.record(0x1000);
        t.record(0x2000);
        t.record(0x3000);
        t.record(0x3000);
        t.record(0x1000);
        assert_eq!(t.take_lost(), 2);
        assert_eq!(t.take_lost(), 0);
        assert_eq!(drained(&t), vec![(0x1000, 2), (0x2000, 1)]);
    }

    #[test]
    fn threads_counting_at_once_lose_nothing() {
        let t = std::sync::Arc::new(PendingCounts::<16>::new());
        let workers: Vec<_> = (0..4)
            .map(|k| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000usize {
                        t.record(0x1000 + ((i + k) % 3) * 0x40);
                    }
                })
            })
            .collect();
        let mut total = 0;
        while workers.iter().any(|w| !w.is_finished()) {
            t.drain(|_, n| {
                total += n;
                0
            });
        }
        for w in workers {
            w.join().expect("worker");
        }
        t.drain(|_, n| {
            total += n;
            0
        });
        assert_eq!(total, 40_000);
        assert_eq!(t.take_lost(), 0);
    }
}
