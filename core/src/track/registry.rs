//! The registry of live sync objects, by address: a hash map split into shards, each behind its
//! own lock (a futex, never a pthread mutex: the shim interposes those).
//!
//! No order is needed (objects are found by address, a flush visits all of them), and a shard's
//! lock is taken only on the slow paths (an object's creation, first use by a thread, destruction)
//! for a hash probe: a program that keeps a million mutexes (locked in turn, so that every lock
//! misses the thread's small cache) pays a few tens of ns there, where the concurrent skiplist
//! this replaces cost 20–270 ns per lookup and a hundred bytes per object. A forked child builds
//! a registry of its own, so a shard held by a thread that did not come along is never waited for.
//!
//! The tables hold only the objects' references: an object knows its own address ([`Keyed`]),
//! so a bucket is 8 bytes and a control byte (9 to 20 bytes per object with the table's load),
//! where an (address, reference) pair took 17 to 39. The probe reads the object to compare
//! addresses; its caller reads the object next anyway.

use hashbrown::HashTable;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;

const PAGE_MIX: u64 = 0x9E37_79B9_7F4A_7C15;
const TAG_MIX: u64 = 0xC2B2_AE3D_27D4_EB4F;
const IN_PAGE: u64 = 511;
const BELOW_TAG: u64 = (1 << 57) - 1;

fn page_mix(addr: usize) -> u64 {
    ((addr as u64) >> 12).wrapping_mul(PAGE_MIX)
}

/// Hashes an address so that the objects of one 4 KiB page stay together in their shard's
/// table: a program that walks an array of mutexes (a lock per row, per bucket) then finds
/// them in neighbouring buckets, where a hash that scatters every address made each lookup
/// cache and TLB misses (a million-mutex program ran 2.4 times longer under the shim).
///
/// The table takes its bucket from the low bits of the hash and a tag byte from the top seven.
/// So: the low 9 bits are the object's place in its page (its address in 8-byte words), XORed
/// with bits of the page's own mix so that objects at the same place in many pages do not
/// collide in a small table; the bits above come from the page's mix, so pages scatter; the top
/// seven from a mix of the whole address, so that the keys of one page carry different tags.
pub fn addr_hash(addr: usize) -> u64 {
    let page = page_mix(addr);
    let word = (addr as u64) >> 3;
    let low = (word ^ (page >> 20)) & IN_PAGE;
    let mid = (page >> 11) & BELOW_TAG & !IN_PAGE;
    let tag = ((addr as u64) >> 3).wrapping_mul(TAG_MIX) & !BELOW_TAG;
    tag | mid | low
}

/// The shard of an address: the objects of one page share a shard (see [`addr_hash`]), taken
/// from the top bits of the page's mix.
fn shard_of(addr: usize) -> usize {
    // The top bits of a multiplicative mix depend on every bit of the page number (the low
    // ones only on its low bits); the table's buckets use them only beyond 2^46 buckets.
    (page_mix(addr) >> (64 - SHARDS.trailing_zeros())) as usize
}

/// What the registry files an object under: its address, which does not change while it is
/// registered (an entry serves another address only once it is out of the registry).
pub trait Keyed {
    fn key(&self) -> usize;
}

type Shard<T> = Mutex<HashTable<&'static T>>;

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

fn rehash<T: Keyed>(o: &&'static T) -> u64 {
    addr_hash(o.key())
}

impl<T: Keyed + 'static> Registry<T> {
    fn shard(&self, addr: usize) -> std::sync::MutexGuard<'_, HashTable<&'static T>> {
        self.shards[shard_of(addr)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The object registered at `addr`.
    pub fn get(&self, addr: usize) -> Option<&'static T> {
        self.shard(addr)
            .find(addr_hash(addr), |o| o.key() == addr)
            .copied()
    }

    /// The object at `addr`, registering `fresh` (whose key is `addr`) there if there is none;
    /// which one is there.
    pub fn get_or_insert(&self, addr: usize, fresh: &'static T) -> &'static T {
        debug_assert_eq!(fresh.key(), addr);
        let mut s = self.shard(addr);
        let hash = addr_hash(addr);
        if let Some(&there) = s.find(hash, |o| o.key() == addr) {
            return there;
        }
        s.insert_unique(hash, fresh, rehash);
        self.len.fetch_add(1, Ordering::Relaxed);
        fresh
    }

    /// Registers `obj` (whose key is `addr`) at `addr`, in place of what was there (returned).
    pub fn insert(&self, addr: usize, obj: &'static T) -> Option<&'static T> {
        debug_assert_eq!(obj.key(), addr);
        let mut s = self.shard(addr);
        let hash = addr_hash(addr);
        if let Some(there) = s.find_mut(hash, |o| o.key() == addr) {
            return Some(std::mem::replace(there, obj));
        }
        s.insert_unique(hash, obj, rehash);
        self.len.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Unregisters `obj` from `addr`, if it is what is registered there (not a newer object
    /// at the same address).
    pub fn remove(&self, addr: usize, obj: &T) -> bool {
        let mut s = self.shard(addr);
        match s.find_entry(addr_hash(addr), |o| std::ptr::eq(*o, obj)) {
            Ok(there) => {
                there.remove();
                self.len.fetch_sub(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
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
                    .iter()
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

    /// An object filed at `addr`, carrying `v`.
    struct Obj {
        addr: usize,
        v: u32,
    }

    impl Keyed for Obj {
        fn key(&self) -> usize {
            self.addr
        }
    }

    fn leak(addr: usize, v: u32) -> &'static Obj {
        Box::leak(Box::new(Obj { addr, v }))
    }

    #[test]
    fn an_object_is_found_by_its_address_until_it_is_removed() {
        let r = Registry::default();
        let a = leak(0x1000, 1);
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
        let (a, b) = (leak(0x40, 1), leak(0x40, 2));
        assert!(std::ptr::eq(r.get_or_insert(0x40, a), a));
        assert!(std::ptr::eq(r.get_or_insert(0x40, b), a));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_new_generation_replaces_the_old_and_the_old_ones_removal_leaves_it() {
        let r = Registry::default();
        let (old, new) = (leak(0x80, 1), leak(0x80, 2));
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
            tags[shard_of(addr)].insert(addr_hash(addr) >> 57);
        }
        for (i, t) in tags.iter().enumerate() {
            assert!(t.len() >= 100, "shard {i}: only {} tags", t.len());
        }
    }

    #[test]
    fn the_objects_of_one_page_share_a_shard_and_a_block_of_neighbouring_buckets() {
        // An array of 40-byte mutexes: those in one page land in one shard, and in one block of
        // 512 buckets of any table of at least that size.
        let base = 0x7f00_0000_0000usize;
        for i in 0..100 {
            let addr = base + i * 40;
            assert_eq!(shard_of(addr), shard_of(base));
            assert_eq!(
                addr_hash(addr) & !IN_PAGE & BELOW_TAG,
                addr_hash(base) & !IN_PAGE & BELOW_TAG
            );
        }
        // Distinct addresses of a page: distinct buckets.
        let low: std::collections::HashSet<u64> = (0..512)
            .map(|i| addr_hash(base + i * 8) & IN_PAGE)
            .collect();
        assert_eq!(low.len(), 512);
    }

    #[test]
    fn objects_at_the_same_place_in_many_pages_spread_over_a_small_table() {
        // A mutex at offset 0 of 4 KiB structures: in a 64-bucket table they must not all
        // take one bucket.
        let mut buckets = std::collections::HashMap::new();
        for i in 0..10_000usize {
            let addr = 0x5555_0000_0000 + i * 4096;
            *buckets.entry(addr_hash(addr) & 63).or_insert(0u32) += 1;
        }
        assert_eq!(buckets.len(), 64);
        assert!(
            buckets.values().all(|&n| n < 10_000 / 64 * 2),
            "{buckets:?}"
        );
        // And over the shards.
        let shards: std::collections::HashSet<usize> = (0..10_000usize)
            .map(|i| shard_of(0x5555_0000_0000 + i * 4096))
            .collect();
        assert_eq!(shards.len(), SHARDS);
    }

    #[test]
    fn every_object_is_visited_once_and_the_visit_may_change_the_registry() {
        let r = Registry::default();
        let objs: Vec<&'static Obj> = (0..10_000)
            .map(|i| leak(0x1000 + i * 64, i as u32))
            .collect();
        for &o in &objs {
            assert!(r.insert(o.addr, o).is_none());
        }
        let mut sum = 0u64;
        let mut n = 0;
        r.for_each(|o| {
            sum += u64::from(o.v);
            n += 1;
            // Destroying objects while visiting takes the shard's lock: no deadlock.
            assert!(r.remove(o.addr, o));
        });
        assert_eq!(n, 10_000);
        assert_eq!(sum, (0..10_000u64).sum::<u64>());
        assert!(r.is_empty());
    }
}
