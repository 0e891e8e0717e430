//! The registry of live sync objects, by address: a hash map split into shards, each behind its
//! own lock (a futex, never a pthread mutex: the shim interposes those).
//!
//! No order is needed (objects are found by address, a flush visits all of them), and a shard's
//! lock is taken only on the slow paths (an object's creation, first use by a thread, destruction)
//! for a hash probe: a program that keeps a million mutexes (locked in turn, so that every lock
//! misses the thread's small cache) pays a few tens of ns there, where the concurrent skiplist
//! this replaces cost 20–270 ns per lookup and a hundred bytes per object. A forked child builds
//! a registry of its own, so a shard held by a thread that did not come along is never waited for.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;

/// Hashes an address: objects are aligned, so the low bits carry nothing.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_usize(&mut self, addr: usize) {
        self.0 = ((addr as u64) >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The shard of an address: bits of the address's hash that the shard's own table does not use.
/// The table takes its bucket from the low bits and a tag byte from the top seven: a shard
/// chosen by the top bits gave every key of a shard the same tag, and each probe compared keys
/// one by one (a third of a million-mutex program's time went there).
fn shard_of(addr: usize) -> usize {
    let h = ((addr as u64) >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 40) as usize) % SHARDS
}

type Shard<T> = Mutex<HashMap<usize, &'static T, BuildHasherDefault<AddrHasher>>>;

pub struct Registry<T: 'static> {
    shards: Box<[Shard<T>]>,
    len: AtomicUsize,
}

impl<T: 'static> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            len: AtomicUsize::new(0),
        }
    }
}

impl<T: 'static> Registry<T> {
    fn shard(
        &self,
        addr: usize,
    ) -> std::sync::MutexGuard<'_, HashMap<usize, &'static T, BuildHasherDefault<AddrHasher>>> {
        self.shards[shard_of(addr)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The object registered at `addr`.
    pub fn get(&self, addr: usize) -> Option<&'static T> {
        self.shard(addr).get(&addr).copied()
    }

    /// The object at `addr`, registering `fresh` there if there is none; which one is there.
    pub fn get_or_insert(&self, addr: usize, fresh: &'static T) -> &'static T {
        let mut s = self.shard(addr);
        if let Some(&there) = s.get(&addr) {
            return there;
        }
        s.insert(addr, fresh);
        self.len.fetch_add(1, Ordering::Relaxed);
        fresh
    }

    /// Registers `obj` at `addr`, in place of what was there (returned).
    pub fn insert(&self, addr: usize, obj: &'static T) -> Option<&'static T> {
        let old = self.shard(addr).insert(addr, obj);
        if old.is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        old
    }

    /// Unregisters `obj` from `addr`, if it is what is registered there (not a newer object
    /// at the same address).
    pub fn remove(&self, addr: usize, obj: &T) -> bool {
        let mut s = self.shard(addr);
        if s.get(&addr).is_some_and(|&o| std::ptr::eq(o, obj)) {
            s.remove(&addr);
            self.len.fetch_sub(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` on every registered object, one shard at a time: each shard's objects are
    /// copied out first, so `f` runs with no lock held (it may register or destroy objects).
    pub fn for_each(&self, mut f: impl FnMut(&'static T)) {
        let mut batch: Vec<&'static T> = Vec::new();
        for shard in self.shards.iter() {
            batch.clear();
            batch.extend(
                shard
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .copied(),
            );
            for &o in &batch {
                f(o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(v: u32) -> &'static u32 {
        Box::leak(Box::new(v))
    }

    #[test]
    fn an_object_is_found_by_its_address_until_it_is_removed() {
        let r = Registry::default();
        let a = leak(1);
        assert!(r.get(0x1000).is_none());
        assert!(std::ptr::eq(r.get_or_insert(0x1000, a), a));
        assert!(std::ptr::eq(r.get(0x1000).unwrap(), a));
        assert_eq!(r.len(), 1);
        assert!(r.remove(0x1000, a));
        assert!(r.get(0x1000).is_none() && r.is_empty());
    }

    #[test]
    fn the_first_registration_at_an_address_wins() {
        let r = Registry::default();
        let (a, b) = (leak(1), leak(2));
        assert!(std::ptr::eq(r.get_or_insert(0x40, a), a));
        assert!(std::ptr::eq(r.get_or_insert(0x40, b), a));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_new_generation_replaces_the_old_and_the_old_ones_removal_leaves_it() {
        let r = Registry::default();
        let (old, new) = (leak(1), leak(2));
        r.insert(0x80, old);
        assert!(std::ptr::eq(r.insert(0x80, new).unwrap(), old));
        assert!(
            !r.remove(0x80, old),
            "the old generation's destroy must not remove the new"
        );
        assert!(std::ptr::eq(r.get(0x80).unwrap(), new));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn the_keys_of_one_shard_spread_over_the_tables_tags() {
        // The shard's table takes a tag from the top seven bits of the same hash: if the shard
        // were chosen from those bits, every key in it would carry one of two tags.
        let mut tags = vec![std::collections::HashSet::new(); SHARDS];
        for i in 0..100_000usize {
            let addr = 0x7f00_0000_0000 + i * 40;
            let h = ((addr as u64) >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            tags[shard_of(addr)].insert(h >> 57);
        }
        for (i, t) in tags.iter().enumerate() {
            assert!(t.len() >= 100, "shard {i}: only {} tags", t.len());
        }
    }

    #[test]
    fn every_object_is_visited_once_and_the_visit_may_change_the_registry() {
        let r = Registry::default();
        let objs: Vec<&'static u32> = (0..10_000).map(leak).collect();
        for (i, &o) in objs.iter().enumerate() {
            r.insert(0x1000 + i * 64, o);
        }
        let mut sum = 0u64;
        let mut n = 0;
        r.for_each(|o| {
            sum += u64::from(*o);
            n += 1;
            // Destroying objects while visiting takes the shard's lock: no deadlock.
            r.remove(0x1000 + *o as usize * 64, o);
        });
        assert_eq!(n, 10_000);
        assert_eq!(sum, (0..10_000u64).sum::<u64>());
        assert!(r.is_empty());
    }
}
