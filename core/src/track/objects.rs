//! Sync objects: one tracking entry per object generation, found by address in a concurrent
//! skiplist on the slow path and through each thread's small direct-mapped cache on the fast
//! path (a skiplist lookup costs 20–270 ns; the cache costs a multiply and a compare).
//!
//! Entries are never freed: other threads' caches may still point at an entry after its object
//! is destroyed, and they detect that through [`DEAD`]. The entry of an object destroyed without
//! ever being contended is reused for a new object of its kind once nothing can still be in
//! the middle of using it (see `Tracker::new_object`): a cache that still points at it then
//! finds another generation in it, or [`DEAD`] until it is ready.
//!
//! An object is written to the log (gets its id and its creation record) only when it first
//! matters: contended, named, part of a lock-order edge, or alive at a flush with counters to
//! write. One created and destroyed before any of that is only counted, per kind and creation
//! chain (`ObjectsChurned`), so that creating and destroying objects in a loop neither grows
//! the log nor the shim's memory.

use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Mutex, OnceLock};

use waitshim_format::{counter, CounterValue, Counters, KindCounters, ObjectKind, WaitSite};

use super::highwater::Episode;
use super::waits::Pending;

/// Counters of an object that has been waited for or written to the log (in [`Busy`]).
/// Acquisitions, which every object has, are in the entry itself ([`ObjEntry::acquisitions`]).
///
/// In this order: the ones every contended wait changes come last, so that they share one cache
/// line with `Busy::version` (which follows), and a wait moves that one line between threads
/// instead of two.
#[derive(Default)]
#[repr(C)]
pub struct Stats {
    pub busy: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub hold_total: AtomicU64,
    pub hold_max: AtomicU64,
    pub hold_samples: AtomicU64,
    pub contended: AtomicU64,
    pub wait_total: AtomicU64,
    pub wait_max: AtomicU64,
    pub max_waiters: AtomicU32,
}

/// Where threads waited on one object, per waiter chain; claimed without a lock.
pub struct Site {
    pub chain_id: AtomicU32,
    pub count: AtomicU64,
    pub total: AtomicU64,
    pub max: AtomicU64,
}

const SITE_EMPTY: u32 = u32::MAX;

/// State only touched on contended paths, under the object's lock.
#[derive(Default)]
pub struct Contention {
    pub episode: Option<Episode>,
}

/// How long the entry of a destroyed contended object waits before it serves another object
/// (see [`ObjEntry::reusable`]), unless many wait (`object_life::PRESSURE`).
pub const CONTENDED_REUSE_AFTER_NS: u64 = 1_000_000_000;

/// Distinct wait sites kept per object; further ones are counted under chain 0.
const MAX_SITES: usize = 64;

/// The object was destroyed: this entry is a past generation.
pub const DEAD: u8 = 1;
/// A thread has waited for it: from then on holds are timed (sampled).
pub const CONTENDED: u8 = 2;
/// A high-contention episode is open: the holder's release ends it.
pub const EPISODE: u8 = 4;
/// A policy rule with `holder_chain` selects it: acquisitions note where they happened.
pub const HOLDER_CHAINS: u8 = 8;
/// Its timed holds last [`TIME_ALL_HOLDS_NS`] or more on average: every hold is timed, since two
/// clock reads are then a negligible part of one (the 1-in-64 sampling is for short holds, which
/// they would lengthen).
pub const TIME_ALL: u8 = 32;
/// Mean timed hold from which every hold of an object is timed: two clock reads add well under
/// 1 % to it.
pub const TIME_ALL_HOLDS_NS: u64 = 20_000;

/// `ObjEntry::id` of an object destroyed before it was written to the log: counted with the
/// short-lived objects of its creation chain, never to be written on its own.
pub const CHURNED: u64 = u64::MAX;

/// The entry of one object: one cache line, all that an object nobody waited for needs (a
/// program with a million mutexes pays 64 bytes for each, plus its slot in the registry). What
/// waits, owner changes, errors, kind counters, the policy and the log's bookkeeping need is in
/// [`Busy`], allocated the first time any of it is.
#[repr(C, align(64))]
pub struct ObjEntry {
    // Read on every acquisition. The address changes only when the entry is reused, while it
    // is [`DEAD`].
    addr: AtomicUsize,
    /// The id in the log, 0 until the object is written there (`Tracker::id_of`).
    pub id: AtomicU64,
    /// Acquisitions, gathered per thread and added here in batches.
    pub acquisitions: AtomicU64,
    pub created_ns: AtomicU64,
    busy: AtomicPtr<Busy>,
    /// Who acquired it last (its holder while it is held). Written at every change of owner,
    /// on the line the fast path reads: a contended object moves the line anyway, through its
    /// lock word.
    pub owner: Owner,
    /// The chain of the call that created it (or first used it), for policy selectors.
    pub create_chain: AtomicU32,
    /// The rest of its creation record, written when the object is first written to the log:
    /// subtype, `origin`, when and by which thread.
    pub created_tid: AtomicU32,
    pub subtype: AtomicU32,
    pub kind: ObjectKind,
    /// [`DEAD`], [`CONTENDED`], [`EPISODE`]: one byte, read once per acquisition.
    pub flags: AtomicU8,
    pub origin: AtomicU8,
    /// Bumped each time the entry serves a new object: threads' caches keep the generation
    /// they cached, so that a cache that still points at the entry from an earlier object, at
    /// the same address or not, no longer matches.
    pub generation: AtomicU16,
    /// Whether a lock-order edge from or to this generation was ever put in the graph: a
    /// destroyed object without one leaves the graph's lock alone. Set under that lock, before
    /// the edge goes in; apart from the flags so that the fast paths' test stays one compare.
    pub in_graph: AtomicBool,
}

const _: () = assert!(std::mem::size_of::<ObjEntry>() == 64);

/// Entries are carved from blocks of this many (entries are never freed: see the module's
/// documentation), so that each costs its 64 bytes and no allocator header or alignment gap.
const SLAB: usize = 1024;

/// The block entries are being carved from: its next free entry and how many are left.
static SLAB_NEXT: Mutex<(usize, usize)> = Mutex::new((0, 0));

/// A new entry for the rest of the process's life, from the current block (a new block when it
/// is used up). The block's lock is only tried: a forked child may find it held by a thread that
/// did not come along, and a thread finding it busy takes a box of its own instead.
pub fn leak_entry(entry: ObjEntry) -> &'static ObjEntry {
    let slot = match SLAB_NEXT.try_lock() {
        Ok(mut slab) => {
            if slab.1 == 0 {
                let layout = std::alloc::Layout::array::<ObjEntry>(SLAB).expect("fixed size");
                // SAFETY: a non-zero size; the block is leaked on purpose.
                let block = unsafe { std::alloc::alloc(layout) } as usize;
                if block != 0 {
                    *slab = (block, SLAB);
                }
            }
            if slab.1 == 0 {
                None
            } else {
                let at = slab.0 as *mut ObjEntry;
                *slab = (slab.0 + std::mem::size_of::<ObjEntry>(), slab.1 - 1);
                Some(at)
            }
        }
        Err(_) => None,
    };
    match slot {
        Some(at) => {
            // SAFETY: an unused, aligned entry of a leaked block, handed out once.
            unsafe {
                at.write(entry);
                &*at
            }
        }
        None => Box::leak(Box::new(entry)),
    }
}

/// What an object needs once it has been waited for, has changed owner, has kind counters,
/// or is written to the log.
#[repr(C, align(64))]
pub struct Busy {
    // On a line of its own, so waiter counting does not slow the fields below.
    pub waiters: Padded<AtomicU32>,
    /// Owner changes after the first acquisition (see [`ObjEntry::owner_changes`]).
    pub owner_changes: AtomicU64,
    /// Locks: since when the current hold has made a thread wait (the first waiter's arrival,
    /// or the previous waited-for release if waiters were still there), 0 if it has not.
    pub waited_since: AtomicU64,
    /// Condition variables: when the last signal or broadcast that found waiters was sent
    /// (monotonic ns shifted left by one; low bit set for a broadcast), 0 if none was. A wait
    /// that returns judges by it whether it was woken, and how, and how long re-acquiring took.
    pub last_wake: AtomicU64,
    /// Condition variables: when the latest wait began (monotonic ns). A signal while
    /// `last_wake` is later than that wakes a waiter that began before the last stamp, which
    /// the stamp already covers: it is not stamped again (a clock read and a shared write).
    pub last_wait_start: AtomicU64,
    /// Condition variables, semaphores, barriers, futex words: the thread that last signalled,
    /// broadcast, posted, completed a round or woke the word while threads waited (who woke
    /// them), 0 if none did.
    pub last_waker: AtomicU32,
    pub stats: Stats,
    /// Bumped on every change of `stats`; compared with `flushed` to skip unchanged objects.
    pub version: AtomicU64,
    pub flushed: AtomicU64,
    /// Uncontended events added with `add_quiet`, all kinds together.
    pub quiet: AtomicU64,
    /// Acquisitions (counted and still cached by threads) plus `quiet` when the counters were
    /// last written.
    pub flushed_quiet: AtomicU64,
    /// Waits that were still in threads' cells when the counters were last written.
    pub flushed_waits: AtomicU64,
    /// Uncontended acquisitions alone are written again only after `quiet_until` (ns); the
    /// gap doubles each time (see `Tracker::flush_locked`).
    pub quiet_until: AtomicU64,
    pub quiet_gap: AtomicU64,
    pub contention: Mutex<Contention>,
    /// When the last episode ended, and how many later ones were folded into the next record
    /// (see `highwater`): atomics, so that a wait that opens no episode takes no lock.
    pub last_close_ns: AtomicU64,
    pub coalesced: AtomicU32,
    /// Wait sites, allocated at the first contended wait.
    pub sites: OnceLock<Box<[Site; MAX_SITES]>>,
    /// Kind-specific counters and wait-ending reasons, by `waitshim_format::counter` key; allocated on first use.
    pub extra: OnceLock<Box<[AtomicU64; EXTRA_KEYS]>>,
    /// Waits that ended in error, by errno: (errno, count), allocated at the first.
    pub errnos: OnceLock<Box<[(AtomicU32, AtomicU64); ERRNOS]>>,
    /// Policy state, made at the first contended wait a user's policy looks at.
    pub policy: OnceLock<Box<crate::policy_api::ObjectCell>>,
    /// `WAITSHIM_DELAY` (`super::delayed`): the decision for this object, cached (0: not
    /// made yet), its lengthened sections, the busy time added to them, and the sections when
    /// last written.
    pub delay: AtomicU64,
    pub delay_sections: AtomicU64,
    pub delay_total: AtomicU64,
    pub delay_written: AtomicU64,
}

impl Default for Busy {
    fn default() -> Busy {
        Busy {
            waiters: Default::default(),
            owner_changes: AtomicU64::new(0),
            waited_since: AtomicU64::new(0),
            last_wake: AtomicU64::new(0),
            last_wait_start: AtomicU64::new(0),
            last_waker: AtomicU32::new(0),
            stats: Stats::default(),
            version: AtomicU64::new(1),
            flushed: AtomicU64::new(0),
            quiet: AtomicU64::new(0),
            flushed_quiet: AtomicU64::new(0),
            flushed_waits: AtomicU64::new(0),
            quiet_until: AtomicU64::new(0),
            quiet_gap: AtomicU64::new(0),
            contention: Mutex::new(Contention::default()),
            last_close_ns: AtomicU64::new(0),
            coalesced: AtomicU32::new(0),
            sites: OnceLock::new(),
            extra: OnceLock::new(),
            errnos: OnceLock::new(),
            policy: OnceLock::new(),
            delay: AtomicU64::new(0),
            delay_sections: AtomicU64::new(0),
            delay_total: AtomicU64::new(0),
            delay_written: AtomicU64::new(0),
        }
    }
}

impl Busy {
    /// Every count back to zero, for an entry that serves a new object.
    fn clear(&self) {
        let s = &self.stats;
        for a in [
            &self.owner_changes,
            &self.waited_since,
            &self.last_wake,
            &self.last_wait_start,
            &s.busy,
            &s.timeouts,
            &s.errors,
            &s.hold_total,
            &s.hold_max,
            &s.hold_samples,
            &s.contended,
            &s.wait_total,
            &s.wait_max,
            &self.flushed,
            &self.quiet,
            &self.flushed_quiet,
            &self.flushed_waits,
            &self.quiet_until,
            &self.quiet_gap,
            &self.last_close_ns,
            &self.delay,
            &self.delay_sections,
            &self.delay_total,
            &self.delay_written,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        for a in [
            &*self.waiters,
            &s.max_waiters,
            &self.coalesced,
            &self.last_waker,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        self.version.store(1, Ordering::Relaxed);
        if let Some(errnos) = self.errnos.get() {
            for (e, n) in errnos.iter() {
                e.store(0, Ordering::Relaxed);
                n.store(0, Ordering::Relaxed);
            }
        }
        if let Some(extra) = self.extra.get() {
            for a in extra.iter() {
                a.store(0, Ordering::Relaxed);
            }
        }
        if let Some(sites) = self.sites.get() {
            for x in sites.iter() {
                for a in [&x.count, &x.total, &x.max] {
                    a.store(0, Ordering::Relaxed);
                }
                x.chain_id.store(SITE_EMPTY, Ordering::Release);
            }
        }
        self.contention
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .episode = None;
    }
}

/// Counter keys are below this.
pub const EXTRA_KEYS: usize = 72;
/// Distinct errnos counted apart per object (more are in the error total only).
pub const ERRNOS: usize = 4;

/// Which of a thread's kind-specific pending counts of an object (`Slot::aux`) counts what.
pub const AUX_POSTS: usize = 0;
pub const AUX_READS: usize = 0;
pub const AUX_SIGNALS: usize = 0;
pub const AUX_BROADCASTS: usize = 1;

/// The last thread to acquire an object (its holder while it is held).
#[derive(Default)]
pub struct Owner {
    pub last: AtomicU32,
}

/// A value alone on its cache line, so waiter counting does not slow the fast-path fields.
#[repr(align(64))]
#[derive(Default)]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl super::registry::Keyed for ObjEntry {
    fn key(&self) -> usize {
        self.addr()
    }
}

impl ObjEntry {
    pub fn new(addr: usize, kind: ObjectKind) -> ObjEntry {
        ObjEntry {
            addr: AtomicUsize::new(addr),
            id: AtomicU64::new(0),
            acquisitions: AtomicU64::new(0),
            created_ns: AtomicU64::new(0),
            busy: AtomicPtr::new(std::ptr::null_mut()),
            owner: Owner::default(),
            create_chain: AtomicU32::new(0),
            created_tid: AtomicU32::new(0),
            subtype: AtomicU32::new(0),
            kind,
            flags: AtomicU8::new(0),
            origin: AtomicU8::new(0),
            generation: AtomicU16::new(0),
            in_graph: AtomicBool::new(false),
        }
    }

    /// The object's address (the entry's current one, if it is reused).
    #[inline(always)]
    pub fn addr(&self) -> usize {
        self.addr.load(Ordering::Relaxed)
    }

    /// The object's busy part, if it has one yet. Never allocates: for readers, and for
    /// paths that may run in a signal handler.
    #[inline(always)]
    pub fn busy_if(&self) -> Option<&Busy> {
        let p = self.busy.load(Ordering::Acquire);
        // SAFETY: set once from a leaked box, never freed (entries live as long as the process).
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// The object's busy part, made now if it has none (one allocation, not in a signal
    /// handler: every path that may run in one finds it made by the wait it ends).
    #[inline]
    pub fn busy(&self) -> &Busy {
        match self.busy_if() {
            Some(b) => b,
            None => self.make_busy(),
        }
    }

    #[cold]
    #[inline(never)]
    fn make_busy(&self) -> &Busy {
        let fresh = Box::into_raw(Box::<Busy>::default());
        match self.busy.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: just leaked, now published.
            Ok(_) => unsafe { &*fresh },
            Err(there) => {
                // SAFETY: `fresh` is ours, never published.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: `there` is a `Busy` another thread leaked and published; published
                // ones are never freed.
                unsafe { &*there }
            }
        }
    }

    /// How many times the object changed owner, its first acquisition included (counted as
    /// the change from nobody, without making the busy part).
    pub fn owner_changes(&self) -> u64 {
        let first = u64::from(
            self.kind != ObjectKind::Thread && self.owner.last.load(Ordering::Relaxed) != 0,
        );
        first
            + self
                .busy_if()
                .map_or(0, |b| b.owner_changes.load(Ordering::Relaxed))
    }

    /// Whether nothing but uncontended events (acquisitions, posts, read acquisitions,
    /// signals) ever happened to it: its version was never bumped.
    pub fn untouched(&self) -> bool {
        self.busy_if()
            .is_none_or(|b| b.version.load(Ordering::Relaxed) == 1)
    }

    /// Waiters now (0 without a busy part).
    #[inline(always)]
    pub fn waiters_now(&self) -> u32 {
        self.busy_if()
            .map_or(0, |b| b.waiters.load(Ordering::Acquire))
    }

    /// Whether the entry may serve another object once this one is destroyed: no episode is
    /// open on it, no thread waits on it and no policy state was made for it. A contended one
    /// serves again only after [`CONTENDED_REUSE_AFTER_NS`]: threads' caches check the address
    /// and generation, waits left in threads' cells the generation (`waits`), and anything
    /// that found it during a wait (a wait-for walk, a live-stack question) is done by then.
    pub fn reusable(&self) -> bool {
        let flags = self.flags();
        flags & EPISODE == 0
            && self
                .busy_if()
                .is_none_or(|b| b.policy.get().is_none() && b.waiters.load(Ordering::Acquire) == 0)
    }

    /// Makes a destroyed, reusable entry the entry of a new object at `addr`, with every count
    /// at zero. The entry is [`DEAD`] until the last store, which makes it live: a thread whose
    /// cache still points at it sees either that or the new generation.
    pub fn reuse(&self, addr: usize) {
        debug_assert!(self.flags() & DEAD != 0);
        self.addr.store(addr, Ordering::Relaxed);
        self.id.store(0, Ordering::Relaxed);
        for a in [&self.acquisitions, &self.created_ns] {
            a.store(0, Ordering::Relaxed);
        }
        for a in [
            &self.owner.last,
            &self.create_chain,
            &self.subtype,
            &self.created_tid,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        self.origin.store(0, Ordering::Relaxed);
        self.in_graph.store(false, Ordering::Relaxed);
        if let Some(b) = self.busy_if() {
            b.clear();
        }
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.flags.store(0, Ordering::Release);
    }

    /// The non-zero kind-specific counters (`waitshim_format::counter` key, value).
    pub fn extra_counts(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.busy_if()
            .and_then(|b| b.extra.get())
            .into_iter()
            .flat_map(|t| t.iter().enumerate())
            .filter_map(|(key, v)| {
                let v = v.load(Ordering::Relaxed);
                (v != 0).then_some((key as u16, v))
            })
    }

    fn extra_slot(&self, key: u16) -> Option<&AtomicU64> {
        let table = self
            .busy()
            .extra
            .get_or_init(|| Box::new(std::array::from_fn(|_| AtomicU64::new(0))));
        table.get(key as usize)
    }

    /// Adds to a `waitshim_format::counter` of this object.
    pub fn add(&self, key: u16, v: u64) {
        if let Some(c) = self.extra_slot(key) {
            c.fetch_add(v, Ordering::Relaxed);
            self.touch();
        }
    }

    /// Counts a wait that ended with error `errno`.
    pub fn count_errno(&self, errno: i32) {
        if counter::ended_errno(errno).is_none() {
            return;
        }
        let want = errno as u32;
        let table = self.busy().errnos.get_or_init(|| {
            Box::new(std::array::from_fn(|_| {
                (AtomicU32::new(0), AtomicU64::new(0))
            }))
        });
        let slot = table.iter().find(|(e, _)| {
            let have = e.load(Ordering::Acquire);
            have == want
                || (have == 0
                    && match e.compare_exchange(0, want, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => true,
                        Err(now) => now == want,
                    })
        });
        if let Some((_, n)) = slot {
            n.fetch_add(1, Ordering::Relaxed);
            self.touch();
        }
    }

    /// Moves one count from counter `from` to counter `to` (a wait's reason found to be
    /// another after it was counted); nothing if `from` has none.
    pub fn move_count(&self, from: u16, to: u16) {
        let (Some(f), Some(t)) = (self.extra_slot(from), self.extra_slot(to)) else {
            return;
        };
        if f.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
            .is_ok()
        {
            t.fetch_add(1, Ordering::Relaxed);
            self.touch();
        }
    }

    /// As [`ObjEntry::add`], for counts of uncontended events (posts, read acquisitions,
    /// signals): written with the flush's backoff, like acquisitions, not at every flush.
    pub fn add_quiet(&self, key: u16, v: u64) {
        if let Some(c) = self.extra_slot(key) {
            c.fetch_add(v, Ordering::Relaxed);
            self.busy().quiet.fetch_add(v, Ordering::Relaxed);
        }
    }

    /// Raises a `waitshim_format::counter` of this object to at least `v`.
    pub fn raise(&self, key: u16, v: u64) {
        if let Some(c) = self.extra_slot(key) {
            if raise(c, v) {
                self.touch();
            }
        }
    }

    /// The counter that each of a thread's kind-specific pending counts of this object
    /// (`Slot::aux`, indices [`AUX_POSTS`] and so on) goes to.
    pub fn aux_key(&self, i: usize) -> Option<u16> {
        match (self.kind, i) {
            (ObjectKind::Semaphore, AUX_POSTS) => Some(counter::POSTS),
            (ObjectKind::RwLock, AUX_READS) => Some(counter::READ_ACQUISITIONS),
            (ObjectKind::Cond, AUX_SIGNALS) => Some(counter::SIGNALS),
            (ObjectKind::Cond, AUX_BROADCASTS) => Some(counter::BROADCASTS),
            _ => None,
        }
    }

    /// The non-zero kind-specific counters, if any were ever counted, with the waits still in
    /// threads' cells.
    pub fn kind_counters(
        &self,
        id: u64,
        now: u64,
        pending: Option<&Pending>,
    ) -> Option<KindCounters> {
        let busy = self.busy_if();
        let table = busy.and_then(|b| b.extra.get());
        let errnos = busy.and_then(|b| b.errnos.get());
        if table.is_none() && errnos.is_none() && pending.is_none_or(|p| p.added.is_empty()) {
            return None;
        }
        let mut values: Vec<CounterValue> = table
            .into_iter()
            .flat_map(|t| t.iter().enumerate())
            .filter_map(|(key, v)| {
                let value = v.load(Ordering::Relaxed);
                (value != 0).then_some(CounterValue {
                    key: key as u16,
                    value,
                })
            })
            .collect();
        for (e, n) in errnos.into_iter().flat_map(|t| t.iter()) {
            let (e, n) = (e.load(Ordering::Acquire), n.load(Ordering::Relaxed));
            if let (Some(key), 1..) = (counter::ended_errno(e as i32), n) {
                values.push(CounterValue { key, value: n });
            }
        }
        if let Some(p) = pending {
            let sums = p.added.iter().map(|&(k, v)| (k, v, false));
            for (key, v, is_max) in sums.chain(p.maxima.iter().map(|&(k, v)| (k, v, true))) {
                match values.iter_mut().find(|c| c.key == key) {
                    Some(c) if is_max => c.value = c.value.max(v),
                    Some(c) => c.value += v,
                    None if v != 0 => values.push(CounterValue { key, value: v }),
                    None => {}
                }
            }
        }
        // In key order, for readers that look for a key by bisection.
        values.sort_by_key(|c| c.key);
        Some(KindCounters {
            object_id: id,
            ns: now,
            values,
        })
    }

    #[inline(always)]
    pub fn flags(&self) -> u8 {
        self.flags.load(Ordering::Acquire)
    }

    pub fn set_flag(&self, f: u8) {
        self.flags.fetch_or(f, Ordering::AcqRel);
    }

    pub fn clear_flag(&self, f: u8) {
        self.flags.fetch_and(!f, Ordering::AcqRel);
    }

    pub fn contention(&self) -> std::sync::MutexGuard<'_, Contention> {
        self.busy()
            .contention
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn touch(&self) {
        self.busy().version.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds waits gathered at one call chain (see `waits`). The last slot gathers the chains
    /// that found the table full (reported under chain 0).
    pub fn site_add(&self, chain_id: u32, count: u64, total_ns: u64, max_ns: u64) {
        let sites = self.busy().sites.get_or_init(|| {
            Box::new(std::array::from_fn(|_| Site {
                chain_id: AtomicU32::new(SITE_EMPTY),
                count: AtomicU64::new(0),
                total: AtomicU64::new(0),
                max: AtomicU64::new(0),
            }))
        });
        let (rest, last) = (&sites[..MAX_SITES - 1], &sites[MAX_SITES - 1]);
        let site = rest
            .iter()
            .find(|x| {
                let c = x.chain_id.load(Ordering::Acquire);
                c == chain_id
                    || (c == SITE_EMPTY
                        && match x.chain_id.compare_exchange(
                            SITE_EMPTY,
                            chain_id,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        ) {
                            Ok(_) => true,
                            Err(now) => now == chain_id,
                        })
            })
            .unwrap_or_else(|| {
                last.chain_id.store(0, Ordering::Relaxed);
                last
            });
        site.count.fetch_add(count, Ordering::Relaxed);
        site.total.fetch_add(total_ns, Ordering::Relaxed);
        raise(&site.max, max_ns);
        self.touch();
    }

    /// Whether holds of this kind make waiters wait and are measured when they do.
    fn holds_measured(&self) -> bool {
        matches!(
            self.kind,
            ObjectKind::Mutex | ObjectKind::RwLock | ObjectKind::Spin
        )
    }

    /// A thread begins waiting for it at `now`, its waiter count already raised: the current
    /// hold makes a thread wait from now on, unless it already did. (The holder is told to look
    /// at its release by the caller: a flag in `flags` would be one more write to the line every
    /// acquisition reads, at every first waiter; it cost 4x on the contended bench.)
    pub fn waiter_came(&self, now: u64) {
        let b = self.busy();
        if self.holds_measured() && b.waited_since.load(Ordering::Relaxed) == 0 {
            let _ =
                b.waited_since
                    .compare_exchange(0, now.max(1), Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// A waiter leaves at `now` (0: unknown, in a signal handler); `acquired`: it took the
    /// object. Lowers the waiter count; when the last waiter took it, nobody has waited for the
    /// hold it begins. (Atomics only.)
    pub fn waiter_left(&self, acquired: bool, now: u64) {
        // The wait raised the count, which made the busy part.
        let Some(b) = self.busy_if() else { return };
        let left = b.waiters.fetch_sub(1, Ordering::AcqRel).wrapping_sub(1);
        if left != 0 || !acquired || !self.holds_measured() {
            return;
        }
        let since = b.waited_since.load(Ordering::Acquire);
        if since == 0
            || b.waited_since
                .compare_exchange(since, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // A waiter that came meanwhile found the mark taken: it waits for this hold from now.
        if b.waiters.load(Ordering::Acquire) != 0 && now != 0 {
            let _ = b
                .waited_since
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Whether the holder must look at its release: a thread waits or waited during the hold.
    pub fn waited_for(&self) -> bool {
        self.busy_if()
            .is_some_and(|b| b.waited_since.load(Ordering::Relaxed) != 0)
    }

    /// The holder releases it at `now`; `timed_since`: when the hold began, if that was timed.
    /// If a thread waited during the hold, measures the hold and returns (length, measured from
    /// the first waiter's arrival rather than from its start); waiters still there wait for the
    /// next hold from now. None when nobody waited: the caller counts a timed hold as a sample.
    pub fn waited_hold_released(&self, now: u64, timed_since: Option<u64>) -> Option<(u64, bool)> {
        let b = self.busy_if()?;
        if !self.holds_measured() || b.waited_since.load(Ordering::Acquire) == 0 {
            return None;
        }
        let since = b.waited_since.swap(0, Ordering::AcqRel);
        if since == 0 {
            return None;
        }
        if b.waiters.load(Ordering::Acquire) != 0 {
            let _ =
                b.waited_since
                    .compare_exchange(0, now.max(1), Ordering::AcqRel, Ordering::Relaxed);
        }
        let (ns, from_arrival) = match timed_since {
            Some(start) => (now.saturating_sub(start), false),
            None => (now.saturating_sub(since), true),
        };
        raise(&b.stats.hold_max, ns);
        self.add(counter::HOLDS_WAITED_FOR, 1);
        self.add(counter::HOLDS_WAITED_FOR_TOTAL_NS, ns);
        self.time_all_if_long();
        if from_arrival {
            self.add(counter::HOLDS_WAITED_FOR_FROM_ARRIVAL, 1);
            self.add(counter::HOLDS_WAITED_FOR_FROM_ARRIVAL_NS, ns);
        }
        Some((ns, from_arrival))
    }

    pub fn held(&self, hold_ns: u64) {
        let s = &self.busy().stats;
        s.hold_total.fetch_add(hold_ns, Ordering::Relaxed);
        raise(&s.hold_max, hold_ns);
        s.hold_samples.fetch_add(1, Ordering::Relaxed);
        self.time_all_if_long();
        self.touch();
    }

    /// Times every hold while the measured ones are long on average: the sampled holds and the
    /// holds that made a thread wait together. The waited-for ones count: a thread that takes
    /// the lock before anyone waits and holds it long (a producer working inside its queue's
    /// lock) is otherwise measured only from the waiter's arrival, while the short sampled holds
    /// of the others keep their mean low.
    fn time_all_if_long(&self) {
        let s = &self.busy().stats;
        let (mut total, mut n) = (
            s.hold_total.load(Ordering::Relaxed),
            s.hold_samples.load(Ordering::Relaxed),
        );
        let waited = |key| {
            self.extra_slot(key)
                .map_or(0, |c| c.load(Ordering::Relaxed))
        };
        total = total.saturating_add(waited(counter::HOLDS_WAITED_FOR_TOTAL_NS));
        n = n.saturating_add(waited(counter::HOLDS_WAITED_FOR));
        let long = n > 0 && total / n >= TIME_ALL_HOLDS_NS;
        if long != (self.flags() & TIME_ALL != 0) {
            if long {
                self.set_flag(TIME_ALL);
            } else {
                self.clear_flag(TIME_ALL);
            }
        }
    }

    /// Counters record of this object (logged as `id`); `extra_acquisitions` are per-thread counts not yet added,
    /// `pending` the waits still in threads' cells.
    pub fn counters(
        &self,
        id: u64,
        now: u64,
        extra_acquisitions: u64,
        pending: Option<&Pending>,
    ) -> Counters {
        let none = Stats::default();
        let s = self.busy_if().map_or(&none, |b| &b.stats);
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let p = |f: fn(&Pending) -> u64| pending.map_or(0, f);
        Counters {
            object_id: id,
            ns: now,
            acquisitions: l(&self.acquisitions) + extra_acquisitions,
            contended: l(&s.contended) + p(|p| p.contended),
            owner_changes: self.owner_changes(),
            busy: l(&s.busy),
            timeouts: l(&s.timeouts),
            errors: l(&s.errors),
            wait_total_ns: l(&s.wait_total) + p(|p| p.wait_total),
            wait_max_ns: l(&s.wait_max).max(p(|p| p.wait_max)),
            hold_total_ns: l(&s.hold_total),
            hold_max_ns: l(&s.hold_max),
            hold_samples: l(&s.hold_samples),
            max_waiters: s.max_waiters.load(Ordering::Relaxed),
        }
    }

    /// Where threads waited on it, with the waits still in threads' cells.
    pub fn wait_sites(&self, id: u64, pending: Option<&Pending>) -> Vec<WaitSite> {
        let mut out: Vec<WaitSite> = self
            .busy_if()
            .and_then(|b| b.sites.get())
            .into_iter()
            .flat_map(|sites| sites.iter())
            .filter(|s| {
                s.chain_id.load(Ordering::Acquire) != SITE_EMPTY
                    && s.count.load(Ordering::Relaxed) > 0
            })
            .map(|s| WaitSite {
                object_id: id,
                chain_id: s.chain_id.load(Ordering::Relaxed),
                count: s.count.load(Ordering::Relaxed),
                wait_total_ns: s.total.load(Ordering::Relaxed),
                wait_max_ns: s.max.load(Ordering::Relaxed),
            })
            .collect();
        for &(chain_id, count, total, max) in pending.map_or(&[][..], |p| &p.sites[..]) {
            match out.iter_mut().find(|w| w.chain_id == chain_id) {
                Some(w) => {
                    w.count += count;
                    w.wait_total_ns += total;
                    w.wait_max_ns = w.wait_max_ns.max(max);
                }
                None => out.push(WaitSite {
                    object_id: id,
                    chain_id,
                    count,
                    wait_total_ns: total,
                    wait_max_ns: max,
                }),
            }
        }
        out
    }
}

/// Raises a maximum to at least `v`; true if it changed. The read first spares the atomic
/// read-modify-write (and the exclusive ownership of the cache line it takes) when it would not.
pub fn raise<A: AtomicMax>(c: &A, v: A::Value) -> bool {
    c.at_least(v)
}

/// The maxima kept by [`raise`].
pub trait AtomicMax {
    type Value;
    fn at_least(&self, v: Self::Value) -> bool;
}

impl AtomicMax for AtomicU64 {
    type Value = u64;
    fn at_least(&self, v: u64) -> bool {
        v > self.load(Ordering::Relaxed) && self.fetch_max(v, Ordering::Relaxed) < v
    }
}

impl AtomicMax for AtomicU32 {
    type Value = u32;
    fn at_least(&self, v: u32) -> bool {
        v > self.load(Ordering::Relaxed) && self.fetch_max(v, Ordering::Relaxed) < v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> ObjEntry {
        ObjEntry::new(0x1000, ObjectKind::Mutex)
    }

    fn came(o: &ObjEntry, now: u64) {
        o.busy().waiters.fetch_add(1, Ordering::AcqRel);
        o.waiter_came(now);
    }

    fn waited_for(o: &ObjEntry) -> (u64, u64, u64) {
        let get = |key: u16| {
            o.extra_counts()
                .find(|&(k, _)| k == key)
                .map_or(0, |(_, v)| v)
        };
        (
            get(counter::HOLDS_WAITED_FOR),
            get(counter::HOLDS_WAITED_FOR_TOTAL_NS),
            get(counter::HOLDS_WAITED_FOR_FROM_ARRIVAL),
        )
    }

    #[test]
    fn a_hold_nobody_waited_for_is_left_to_the_samples() {
        let o = lock();
        assert_eq!(o.waited_hold_released(500, Some(100)), None);
        assert_eq!(waited_for(&o), (0, 0, 0));
    }

    #[test]
    fn a_timed_hold_that_made_a_thread_wait_is_measured_from_its_start() {
        let o = lock();
        came(&o, 300);
        assert!(o.waited_for(), "the holder must look at its release");
        assert_eq!(o.waited_hold_released(1000, Some(100)), Some((900, false)));
        assert_eq!(waited_for(&o), (1, 900, 0));
        assert_eq!(o.busy().stats.hold_max.load(Ordering::Relaxed), 900);
    }

    #[test]
    fn an_untimed_hold_is_measured_from_the_first_waiters_arrival() {
        let o = lock();
        came(&o, 300);
        came(&o, 600);
        assert_eq!(o.waited_hold_released(1000, None), Some((700, true)));
        assert_eq!(waited_for(&o), (1, 700, 1));
    }

    #[test]
    fn waiters_still_there_wait_for_the_next_hold_from_the_release() {
        let o = lock();
        came(&o, 300);
        came(&o, 400);
        assert!(o.waited_hold_released(1000, None).is_some());
        // One waiter gets it; the other waits on, for the hold that begins.
        o.waiter_left(true, 1010);
        assert_eq!(o.waiters_now(), 1);
        assert_eq!(o.waited_hold_released(1500, Some(1010)), Some((490, false)));
        // Another holder barged in before the last waiter: measured from the last release.
        assert_eq!(o.waited_hold_released(1800, None), Some((300, true)));
        assert_eq!(waited_for(&o), (3, 700 + 490 + 300, 2));
    }

    #[test]
    fn the_last_waiter_taking_the_lock_begins_a_hold_nobody_waits_for() {
        let o = lock();
        came(&o, 300);
        assert!(o.waited_hold_released(1000, None).is_some());
        o.waiter_left(true, 1005);
        assert!(!o.waited_for());
        assert_eq!(o.waited_hold_released(2000, Some(1005)), None);
    }

    #[test]
    fn a_waiter_that_gave_up_still_waited_for_the_hold() {
        let o = lock();
        came(&o, 300);
        o.waiter_left(false, 0);
        assert!(o.waited_for(), "the hold it gave up on still made it wait");
        assert_eq!(o.waited_hold_released(1000, None), Some((700, true)));
        assert_eq!(o.waited_hold_released(2000, None), None);
    }

    #[test]
    fn long_holds_that_made_threads_wait_count_towards_timing_every_hold() {
        let o = lock();
        // A short sampled hold (another thread's), then a long one measured from the arrival
        // of its waiter (its holder took the lock before anyone waited): mean 50.5 µs.
        o.held(1_000);
        came(&o, 300);
        let long = 5 * TIME_ALL_HOLDS_NS;
        assert_eq!(o.waited_hold_released(300 + long, None), Some((long, true)));
        assert_ne!(o.flags() & TIME_ALL, 0, "every hold timed from here");
        // Short holds bring the mean down again: sampling resumes.
        for _ in 0..10 {
            o.held(500);
        }
        assert_eq!(o.flags() & TIME_ALL, 0);
        // Short holds that made threads wait do not switch it on (a busy mutex's holds).
        let o = lock();
        for i in 0..10 {
            came(&o, 1000 * i);
            assert!(o.waited_hold_released(1000 * i + 400, None).is_some());
        }
        assert_eq!(o.flags() & TIME_ALL, 0);
    }

    #[test]
    fn every_hold_is_timed_while_the_timed_ones_are_long_on_average() {
        let o = lock();
        o.held(1_000);
        assert_eq!(o.flags() & TIME_ALL, 0, "short holds are sampled");
        o.held(2 * TIME_ALL_HOLDS_NS);
        assert_ne!(o.flags() & TIME_ALL, 0, "mean 20.5 µs");
        for _ in 0..10 {
            o.held(500);
        }
        assert_eq!(o.flags() & TIME_ALL, 0, "the mean fell below the mark");
    }

    #[test]
    fn objects_nobody_holds_are_not_measured() {
        for kind in [ObjectKind::Cond, ObjectKind::Semaphore, ObjectKind::Barrier] {
            let o = ObjEntry::new(0x1000, kind);
            came(&o, 300);
            assert!(!o.waited_for());
            assert_eq!(o.waited_hold_released(1000, None), None);
        }
    }
}
