//! Threads: one record per live thread, reached through a thread-local pointer on the fast path
//! and through the tracker's skiplist (by tid) from other threads (wait-for walks, naming).
//!
//! The record holds the thread's direct-mapped cache of objects with its not-yet-added
//! acquisition counts, so an uncontended acquisition writes only this thread's memory.

use std::cell::UnsafeCell;
use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use super::lockorder;
use super::objects::{ObjEntry, DEAD};
use crate::words as raw;

pub const SLOTS: usize = 64;
/// Read locks a thread is known to hold at once (more are not tracked: their writers' waits
/// then have fewer holders in wait-for walks).
pub const READS_HELD: usize = 4;
/// Acquisitions counted in a slot before they are added to the object.
const FOLD_EVERY: u64 = 1 << 16;
/// Kind-specific events counted in a slot (16-bit counts) before they are added.
const FOLD_AUX_AT: u16 = 1 << 15;

/// 32 bytes, aligned: a slot never straddles two cache lines.
#[repr(C, align(32))]
pub struct Slot {
    pub addr: AtomicUsize,
    pub obj: AtomicPtr<ObjEntry>,
    /// Acquisitions not yet added to the object's counter. Written only by the owning thread
    /// (plain load + store); read by the exit flush of another thread.
    pub pending: AtomicU64,
    /// Kind-specific counts not yet added to the object (which counter each is:
    /// `ObjEntry::aux_key`): a semaphore's posts, an rwlock's read acquisitions, a condition
    /// variable's signals and broadcasts. Changed only by the owning thread, like `pending`
    /// ([`ThreadRec::count_aux`]: a post may come from a signal handler on that thread), read
    /// by flushes on others.
    pub aux: [AtomicU16; 2],
    /// The entry's generation when it was cached (see `ObjEntry::generation`): a cache that
    /// still points at an entry serving another object since, at the same address or not,
    /// does not match.
    pub generation: AtomicU16,
    /// Bumped each time `pending` is emptied (a fold, an eviction, a destroy, a fork): with
    /// `pending`, it tells whether the thread acquired the object since an earlier look (see
    /// [`Slot::mark`]). Owning thread only.
    pub epoch: AtomicU16,
}

impl Slot {
    /// Where the slot's count of acquisitions stands: the same mark later means no acquisition
    /// of the cached object in between (0: the slot caches nothing).
    #[inline(always)]
    pub fn mark(&self) -> u64 {
        if self.obj.load(Ordering::Relaxed).is_null() {
            return 0;
        }
        let pending = self.pending.load(Ordering::Relaxed) & 0xFFFF_FFFF_FFFF;
        pending | u64::from(self.epoch.load(Ordering::Relaxed)) << 48 | 1 << 63
    }

    /// The entry the slot holds and whether it still serves the object it was cached for.
    #[inline(always)]
    pub fn held(&self) -> Option<(&'static ObjEntry, bool)> {
        let p = self.obj.load(Ordering::Relaxed);
        if p.is_null() {
            return None;
        }
        // SAFETY: slots only ever hold pointers to leaked (never freed) entries.
        let obj: &'static ObjEntry = unsafe { &*p };
        Some((obj, self.same_generation(obj)))
    }

    /// Whether `obj`, the entry this slot holds, still serves the object it was cached for.
    #[inline(always)]
    pub fn same_generation(&self, obj: &ObjEntry) -> bool {
        obj.generation.load(Ordering::Relaxed) == self.generation.load(Ordering::Relaxed)
    }

    /// The entry the slot points at, if it still serves the object the slot cached (an entry
    /// is reused for another object once its own is destroyed: counts cached for the old one
    /// go nowhere).
    pub fn entry(&self) -> Option<&'static ObjEntry> {
        self.held().and_then(|(obj, same)| same.then_some(obj))
    }
}

/// A held object whose hold time is being measured.
#[derive(Clone, Copy)]
pub struct Held {
    pub obj: *const ObjEntry,
    pub since: u64,
}

/// Holds being timed, at most [`Timed::CAPACITY`] at once: one more is not timed, so that timing
/// never allocates (malloc may lock). A fixed array, so that a release tells with one load
/// whether any hold is being timed.
pub struct Timed {
    list: [Held; Timed::CAPACITY],
    len: usize,
}

impl Timed {
    pub const CAPACITY: usize = 8;

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Starts timing `h`, unless the list is full.
    pub fn push(&mut self, h: Held) {
        if self.len < Self::CAPACITY {
            self.list[self.len] = h;
            self.len += 1;
        }
    }

    /// Whether a hold of `obj` is being timed.
    pub fn contains(&self, obj: *const ObjEntry) -> bool {
        self.list[..self.len]
            .iter()
            .any(|h| std::ptr::eq(h.obj, obj))
    }

    /// Stops timing the hold of `obj` (the latest one), returning it.
    pub fn take(&mut self, obj: *const ObjEntry) -> Option<Held> {
        let i = self.list[..self.len]
            .iter()
            .rposition(|h| std::ptr::eq(h.obj, obj))?;
        let h = self.list[i];
        self.list.copy_within(i + 1..self.len, i);
        self.len -= 1;
        Some(h)
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl Default for Timed {
    fn default() -> Self {
        Timed {
            list: [Held {
                obj: std::ptr::null(),
                since: 0,
            }; Timed::CAPACITY],
            len: 0,
        }
    }
}

/// One call site's `sched_yield` calls in a [`ThreadRec`], and the count last written.
#[derive(Default)]
pub struct YieldSiteCount {
    pub ret: AtomicUsize,
    pub yields: AtomicU64,
    pub written: AtomicU64,
}

pub struct ThreadRec {
    pub tid: AtomicU32,
    /// `pthread_self()` of the thread, to find it by `pthread_t`.
    pub pthread: AtomicUsize,
    pub slots: [Slot; SLOTS],
    /// What the thread is blocked on now (null when running), for wait-for walks.
    pub waiting_on: AtomicPtr<ObjEntry>,
    /// Incremented at each wait: a wait-for cycle seen twice with the same sequence numbers is
    /// the same, still-blocked cycle.
    pub wait_seq: AtomicU64,
    /// The wait in progress has no deadline: only another thread (or process, or a signal
    /// handler) can end it. Cleared when a wait begins, set by the wrapper that knows.
    pub wait_untimed: AtomicBool,
    pub wait_chain: AtomicU32,
    pub wait_start: AtomicU64,
    /// When the thread is part of a wait-for cycle recorded as a deadlock: that record's time
    /// (0: none). If its wait ends after all (a deadline), the log says so.
    pub in_deadlock: AtomicU64,
    /// Its calls of `sched_yield` (written only by the owning thread), and the count last
    /// written to the log.
    pub yields: AtomicU64,
    pub yields_written: AtomicU64,
    /// The same by call site: its first `YIELD_SITES` sites, then the rest (`ret` 0).
    pub yield_sites: [YieldSiteCount; waitshim_format::YIELD_SITES + 1],
    /// A name was given (API or pthread_setname_np): the kernel name read at exit must not
    /// replace it.
    pub named: AtomicBool,
    /// An object whose open episode this thread may have to end when it releases it (set by the
    /// waiter that opened the episode, or by this thread acquiring it during one). While null
    /// and no hold is being timed, a release needs no lookup at all.
    pub attention: AtomicPtr<ObjEntry>,
    /// Owner-only state.
    pub local: UnsafeCell<Local>,
    /// Owner-only: the exclusive locks held, for lock-order edges. Apart from `local` because
    /// recording an edge captures a chain, which uses `local`.
    pub held_locks: UnsafeCell<lockorder::Held>,
    /// Which policy rules select this thread, and what they look at (name, start routine).
    pub policy: crate::policy_api::ThreadCell,
    /// Mailbox for live stack requests (`holder_live_stack`).
    pub stack: crate::policy_api::StackBox,
    /// Finished contended waits not yet added to their objects.
    pub waits: super::waits::Cells,
    /// Its contended waits, packed, not yet written (`WAITSHIM_EVENTS`).
    pub events: super::events::Buf,
    /// The rwlocks this thread holds for reading, one entry per read acquisition (null: free):
    /// glibc keeps no list of readers, and a writer waiting on readers waits for each of them.
    /// Written only by the owning thread; read by wait-for walks.
    pub reads: [AtomicPtr<ObjEntry>; READS_HELD],
}

#[derive(Default)]
pub struct Local {
    pub held: Timed,
    /// (chain hash, chain id): saves the global intern table for repeated chains.
    pub chain_cache: [(u64, u32); 32],
    /// The chain last captured for a call site at a stack depth, reused without unwinding
    /// while the stack still holds it (`chain_cache`); made at the thread's first chain.
    pub site_cache: Option<Box<[super::chain_cache::SiteEntry; super::chain_cache::SITE_ENTRIES]>>,
    /// The last condition variable wait that returned woken, until the next one begins.
    pub woken: Option<super::waits::Woken>,
}

// SAFETY: fields read by other threads are atomics; `local` is only touched by the thread that
// owns the record (through its thread-local pointer).
unsafe impl Sync for ThreadRec {}
// SAFETY: as above.
unsafe impl Send for ThreadRec {}

impl ThreadRec {
    pub fn new() -> ThreadRec {
        ThreadRec {
            tid: AtomicU32::new(0),
            pthread: AtomicUsize::new(0),
            slots: std::array::from_fn(|_| Slot {
                addr: AtomicUsize::new(0),
                obj: AtomicPtr::new(std::ptr::null_mut()),
                pending: AtomicU64::new(0),
                aux: [AtomicU16::new(0), AtomicU16::new(0)],
                generation: AtomicU16::new(0),
                epoch: AtomicU16::new(0),
            }),
            waiting_on: AtomicPtr::new(std::ptr::null_mut()),
            wait_seq: AtomicU64::new(0),
            wait_untimed: AtomicBool::new(false),
            wait_chain: AtomicU32::new(0),
            wait_start: AtomicU64::new(0),
            in_deadlock: AtomicU64::new(0),
            yields: AtomicU64::new(0),
            yields_written: AtomicU64::new(0),
            yield_sites: Default::default(),
            named: AtomicBool::new(false),
            attention: AtomicPtr::new(std::ptr::null_mut()),
            local: UnsafeCell::new(Local::default()),
            held_locks: UnsafeCell::new(lockorder::Held::default()),
            policy: Default::default(),
            stack: Default::default(),
            waits: Default::default(),
            events: Default::default(),
            reads: Default::default(),
        }
    }

    #[inline(always)]
    pub fn tid(&self) -> u32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// # Safety
    /// Only the thread that owns this record may call it, and not re-entrantly.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local(&self) -> &mut Local {
        // SAFETY: per the contract, no other reference to `local` exists.
        unsafe { &mut *self.local.get() }
    }

    /// # Safety
    /// Only the thread that owns this record may call it, and not re-entrantly.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub unsafe fn held_locks(&self) -> &mut lockorder::Held {
        // SAFETY: per the contract, no other reference to `held_locks` exists.
        unsafe { &mut *self.held_locks.get() }
    }

    #[inline(always)]
    pub fn slot(&self, addr: usize) -> &Slot {
        let i = (addr >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.slots[i & (SLOTS - 1)]
    }

    /// The object cached for `addr`, if the cache has its live generation.
    #[inline(always)]
    pub fn cached(&self, addr: usize) -> Option<(&Slot, &'static ObjEntry)> {
        let s = self.slot(addr);
        if s.addr.load(Ordering::Relaxed) != addr {
            return None;
        }
        let (obj, same) = s.held()?;
        if obj.flags() & DEAD != 0 || !same {
            return None;
        }
        Some((s, obj))
    }

    /// Counts one acquisition in the slot (owner thread only); returns the slot's count so far.
    #[inline(always)]
    pub fn count(&self, s: &Slot) -> u64 {
        let n = s.pending.load(Ordering::Relaxed) + 1;
        s.pending.store(n, Ordering::Relaxed);
        if n == FOLD_EVERY {
            self.fold(s);
        }
        n
    }

    /// As [`ThreadRec::count`], when `ok` and the count `n` (the slot's count plus one) does
    /// not reach the fold: true, counted; false, nothing done.
    #[inline(always)]
    pub fn count_quick(&self, s: &Slot, n: u64, ok: bool) -> bool {
        if n == FOLD_EVERY || !ok {
            return false;
        }
        s.pending.store(n, Ordering::Relaxed);
        true
    }

    /// Counts one of the slot's kind-specific events (`Slot::aux[i]`), owning thread only. No
    /// allocation and no lock, so that a signal handler may count a post.
    ///
    /// One `add` instruction, without a lock prefix: a signal handler on this thread cannot come
    /// between its read and its write (signals are taken between instructions), no other thread
    /// writes the count, and the locked add it replaces took a third of `sem_post`'s time right
    /// after glibc's own locked instruction on the semaphore.
    #[inline(always)]
    pub fn count_aux(&self, s: &Slot, i: usize) {
        let p = s.aux[i].as_ptr();
        // SAFETY: `p` points to this thread's own aligned u16 count; other threads only load it
        // (an aligned 2-byte store is single-copy atomic on x86-64, so they see the old or the
        // new value).
        unsafe {
            std::arch::asm!("add word ptr [{p}], 1", p = in(reg) p, options(nostack));
        }
        if s.aux[i].load(Ordering::Relaxed) >= FOLD_AUX_AT {
            fold_aux(s);
        }
    }

    /// As [`ThreadRec::count_aux`] when the count does not reach its fold: true, counted;
    /// false, nothing done (the caller takes its general path).
    #[inline(always)]
    pub fn count_aux_quick(&self, s: &Slot, i: usize) -> bool {
        if s.aux[i].load(Ordering::Relaxed) + 1 >= FOLD_AUX_AT {
            return false;
        }
        let p = s.aux[i].as_ptr();
        // SAFETY: as in `count_aux`.
        unsafe {
            std::arch::asm!("add word ptr [{p}], 1", p = in(reg) p, options(nostack));
        }
        true
    }

    /// Adds a slot's pending counts to its object (owner thread only).
    pub fn fold(&self, s: &Slot) {
        let n = s.pending.swap(0, Ordering::Relaxed);
        s.epoch.store(
            s.epoch.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        if n > 0 {
            if let Some(obj) = s.entry() {
                // No `touch`: acquisitions alone are written with the flush's backoff.
                obj.acquisitions.fetch_add(n, Ordering::Relaxed);
            }
        }
        fold_aux(s);
    }

    pub fn fold_all(&self) {
        for s in &self.slots {
            self.fold(s);
        }
        self.waits.fold_all();
    }

    /// Points the slot for the object's address at `obj`, adding the evicted entry's count to
    /// its object.
    pub fn install(&self, obj: &'static ObjEntry) -> &Slot {
        let addr = obj.addr();
        let s = self.slot(addr);
        self.fold(s);
        s.obj
            .store(obj as *const ObjEntry as *mut ObjEntry, Ordering::Relaxed);
        s.generation
            .store(obj.generation.load(Ordering::Relaxed), Ordering::Relaxed);
        s.addr.store(addr, Ordering::Relaxed);
        s
    }

    /// Adds a slot's counts to its object and empties it (its object is being destroyed).
    pub fn forget(&self, s: &Slot) {
        self.fold(s);
        s.addr.store(0, Ordering::Relaxed);
        s.obj.store(std::ptr::null_mut(), Ordering::Relaxed);
    }

    /// The slot that caches `obj` (as the object it is now), if one does.
    pub fn slot_of(&self, obj: &ObjEntry) -> Option<&Slot> {
        let s = self.slot(obj.addr());
        s.entry().filter(|&e| std::ptr::eq(e, obj)).map(|_| s)
    }

    /// The owning thread called `sched_yield` from `ret` (one writer: no atomic add needed).
    #[inline(always)]
    pub fn count_yield(&self, ret: usize) {
        let bump = |a: &AtomicU64| a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        bump(&self.yields);
        let (sites, rest) = self.yield_sites.split_at(waitshim_format::YIELD_SITES);
        for c in sites {
            match c.ret.load(Ordering::Relaxed) {
                r if r == ret && ret != 0 => return bump(&c.yields),
                0 if ret != 0 => {
                    c.ret.store(ret, Ordering::Relaxed);
                    return bump(&c.yields);
                }
                _ => {}
            }
        }
        bump(&rest[0].yields);
    }

    /// Its yields if they changed since they were last written, marking them written.
    pub fn unwritten_yields(&self) -> Option<u64> {
        let n = self.yields.load(Ordering::Relaxed);
        (self.yields_written.swap(n, Ordering::Relaxed) != n).then_some(n)
    }

    /// Its yields by call site (return address, 0: the other sites) for the sites whose count
    /// changed since it was last written, marking them written.
    pub fn unwritten_yield_sites(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.yield_sites.iter().filter_map(|c| {
            let n = c.yields.load(Ordering::Relaxed);
            let ret = c.ret.load(Ordering::Relaxed);
            (c.written.swap(n, Ordering::Relaxed) != n).then_some((ret, n))
        })
    }

    /// Makes the record of a thread that ended fit for a new thread.
    ///
    /// # Safety
    /// The thread that owned the record has ended, and no thread owns it yet.
    pub unsafe fn reset(&self) {
        self.clear_cache();
        self.waiting_on
            .store(std::ptr::null_mut(), Ordering::Relaxed);
        self.wait_chain.store(0, Ordering::Relaxed);
        self.wait_start.store(0, Ordering::Relaxed);
        self.in_deadlock.store(0, Ordering::Relaxed);
        self.yields.store(0, Ordering::Relaxed);
        self.yields_written.store(0, Ordering::Relaxed);
        for c in &self.yield_sites {
            c.ret.store(0, Ordering::Relaxed);
            c.yields.store(0, Ordering::Relaxed);
            c.written.store(0, Ordering::Relaxed);
        }
        self.wait_untimed.store(false, Ordering::Relaxed);
        self.attention
            .store(std::ptr::null_mut(), Ordering::Relaxed);
        for r in &self.reads {
            r.store(std::ptr::null_mut(), Ordering::Relaxed);
        }
        // SAFETY: nobody owns the record (the caller's contract).
        unsafe {
            *self.local() = Local::default();
            *self.held_locks() = lockorder::Held::default();
        }
        self.policy.reset();
        self.stack.reset();
    }

    /// The thread took `obj` for reading (owning thread only).
    #[inline(always)]
    pub fn read_taken(&self, obj: &ObjEntry) {
        if let Some(r) = self
            .reads
            .iter()
            .find(|r| r.load(Ordering::Relaxed).is_null())
        {
            r.store(obj as *const ObjEntry as *mut ObjEntry, Ordering::Release);
        }
    }

    /// The thread releases one read hold of the rwlock at `addr` (owning thread only).
    #[inline(always)]
    pub fn read_left(&self, addr: usize) {
        let held = self.reads.iter().find(|r| {
            let p = r.load(Ordering::Relaxed);
            // SAFETY: tracking entries are never freed.
            !p.is_null() && unsafe { (*p).addr() } == addr
        });
        if let Some(r) = held {
            r.store(std::ptr::null_mut(), Ordering::Release);
        }
    }

    /// Whether the thread holds `obj` for reading.
    pub fn reads(&self, obj: &ObjEntry) -> bool {
        self.reads
            .iter()
            .any(|r| std::ptr::eq(r.load(Ordering::Acquire), obj))
    }

    /// Forgets every cached object (after fork: they belong to the parent's tracker).
    pub fn clear_cache(&self) {
        self.waits.clear();
        for s in &self.slots {
            s.addr.store(0, Ordering::Relaxed);
            s.obj.store(std::ptr::null_mut(), Ordering::Relaxed);
            s.pending.store(0, Ordering::Relaxed);
            s.epoch.store(
                s.epoch.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
            for a in &s.aux {
                a.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Adds a slot's kind-specific counts to its object (the owning thread, or anyone once it has
/// ended).
pub fn fold_aux(s: &Slot) {
    let Some(obj) = s.entry() else {
        for a in &s.aux {
            a.store(0, Ordering::Relaxed);
        }
        return;
    };
    for (i, a) in s.aux.iter().enumerate() {
        if a.load(Ordering::Relaxed) != 0 {
            let n = a.swap(0, Ordering::Relaxed);
            if let Some(key) = obj.aux_key(i) {
                obj.add_quiet(key, u64::from(n));
            }
        }
    }
}

#[derive(Clone, Copy)]
pub struct ThreadRef(pub &'static ThreadRec);

pub const MODE_NORMAL: usize = 0;
pub const MODE_INSIDE: usize = 1;
pub const MODE_EXITED: usize = 2;
/// Running one of the program's signal handlers (see `interpose::signal`).
pub const MODE_HANDLER: usize = 3;
/// Tracking is off for good in this process (no log could be made, or it was turned off):
/// the thread's calls go straight to the real functions without asking again.
pub const MODE_UNTRACKED: usize = 4;

/// The calling thread's record, whatever the mode (null before registration and after exit).
pub fn own_record() -> *const ThreadRec {
    raw::get(raw::REC) as *const ThreadRec
}

fn set_mode(mode: usize) {
    raw::set(raw::MODE, mode);
    let fast = if mode == MODE_NORMAL {
        raw::get(raw::REC)
    } else {
        0
    };
    raw::set(raw::FAST, fast);
}

/// Marks the forking thread as inside the shim from before a fork until after it, without
/// touching its cancellability (fork handlers run no cancellation point of the shim's);
/// returns the mode to give back to [`leave_after_fork`].
pub fn enter_for_fork() -> usize {
    let prev = raw::get(raw::MODE);
    set_mode(MODE_INSIDE);
    prev
}

pub fn leave_after_fork(prev: usize) {
    set_mode(prev);
}

/// Points the thread at `rec` (null: forget it), keeping the current mode.
pub fn set_record(rec: *const ThreadRec) {
    raw::set(raw::REC, rec as usize);
    set_mode(raw::get(raw::MODE));
}

pub fn mark_exited() {
    set_mode(MODE_EXITED);
}

/// The calling thread found tracking off for good: see [`MODE_UNTRACKED`].
pub fn mark_untracked() {
    set_mode(MODE_UNTRACKED);
}

/// The thread starts running a signal handler of the program: nothing is tracked until
/// [`leave_handler`]. Returns the mode to restore. Async-signal-safe (two TLS words).
pub fn enter_handler() -> usize {
    let prev = raw::get(raw::MODE);
    set_mode(MODE_HANDLER);
    prev
}

pub fn leave_handler(prev: usize) {
    set_mode(prev);
}

pub use crate::words::{
    set_stack_low, set_switched_from, set_tls_dtors, stack_low, switched_from, tls_dtors,
};

/// Whether the calling thread runs a signal handler of the program now.
pub fn in_handler() -> bool {
    raw::get(raw::MODE) == MODE_HANDLER
}

/// A jump (`siglongjmp`) out of a handler: the handler will not return to restore the mode.
/// Whatever the handler interrupted is left for good, shim frames included: the thread is
/// outside the shim from now on, with the program's own cancellability (an [`InShim`] the jump
/// skipped would otherwise leave cancellation disabled for ever). Async-signal-safe.
pub fn left_handler_by_jump() {
    if in_handler() {
        set_mode(MODE_NORMAL);
        restore_cancel();
    }
}

/// The pthread key whose destructor runs the thread-exit hook when a thread ends, however it
/// ends (return, `pthread_exit`, cancellation); `u32::MAX` until made. A key rather than a
/// Rust `thread_local!` with a destructor: registering one of those allocates from the
/// program's heap (`__cxa_thread_atexit_impl`), on the thread's first tracked call, which may be
/// inside the program's allocator.
static EXIT_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

extern "C" fn exit_hook(_: *mut libc::c_void) {
    super::thread_exited();
    // Where there is room: crossbeam's epoch handle, dropped here, hands its bag of deferred
    // frees on by value (2 KiB of stack; more once fat LTO inlines it), on whatever stack the
    // program gave the thread.
    #[cfg(not(test))]
    crate::stack::with_room(super::tls_dtors::run);
}

/// Makes the exit hook's key (at start, when few keys exist: the first 32 keys' values are
/// kept without allocating).
pub fn make_exit_key() {
    static MADE: std::sync::Once = std::sync::Once::new();
    MADE.call_once(make_key);
}

fn make_key() {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: creating a key with a plain function as its destructor.
    if unsafe { libc::pthread_key_create(&mut key, Some(exit_hook)) } == 0 {
        EXIT_KEY.store(key, Ordering::Relaxed);
    }
}

/// Arms the exit hook for the calling thread.
pub fn arm_exit_hook() {
    if EXIT_KEY.load(Ordering::Relaxed) == u32::MAX {
        make_exit_key();
    }
    let key = EXIT_KEY.load(Ordering::Relaxed);
    if key != u32::MAX {
        // SAFETY: our key; any non-null value makes glibc run the destructor at the thread's end.
        unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<libc::c_void>()) };
    }
}

/// glibc's cancellability switch (the `libc` crate does not declare it).
mod cancel {
    use libc::c_int;
    pub const ENABLE: c_int = 0;
    pub const DISABLE: c_int = 1;
    extern "C" {
        pub fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
    }
}

/// Marks the current thread as inside the shim until dropped: its own calls into interposed
/// functions (through malloc, the loader) then go straight to the real ones.
///
/// The first guard that finds cancellation still the program's (not an enclosing guard's) also
/// disables it until it is dropped, and restores the program's state then: the shim's own work
/// reaches cancellation points (`write`, `msync`, `open`, `nanosleep`), and a thread with a
/// cancel request pending must not be cancelled there. Natively it would go on to its next
/// cancellation point; cancelled inside the shim, it would die holding the mutex it just
/// acquired, or the shim's own locks. The real functions that are cancellation points themselves
/// run under [`InShim::cancellable`].
///
/// Deciding by the saved state rather than by nesting keeps a guard taken in a signal handler
/// that interrupted the shim's own work from saving "disabled" as the program's state (and
/// leaving cancellation disabled for good when the interrupted guard ends).
pub struct InShim {
    prev: usize,
    restores_cancel: bool,
}

impl InShim {
    pub fn enter() -> InShim {
        let prev = raw::get(raw::MODE);
        set_mode(MODE_INSIDE);
        let restores_cancel = raw::get(raw::CANCEL) == 0;
        if restores_cancel {
            let mut old: libc::c_int = cancel::ENABLE;
            // SAFETY: changes only the calling thread's own cancellability; glibc's version is
            // an atomic update of the thread's descriptor, safe in a signal handler too.
            unsafe { cancel::pthread_setcancelstate(cancel::DISABLE, &mut old) };
            raw::set(raw::CANCEL, old as usize + 1);
        }
        InShim {
            prev,
            restores_cancel,
        }
    }

    /// As [`InShim::enter`], for work that reaches no cancellation point (a registry lookup,
    /// a cache fill: atomics, the shim's futex locks and no system call that cancellation acts
    /// in), leaving cancellability alone: two atomic updates of the thread's descriptor fewer on
    /// every cache miss. Work under it that may reach one takes an [`InShim::enter`] of its own,
    /// which then disables cancellation.
    pub fn enter_quiet() -> InShim {
        let prev = raw::get(raw::MODE);
        set_mode(MODE_INSIDE);
        InShim {
            prev,
            restores_cancel: false,
        }
    }

    /// Runs `f`, a real function that is a cancellation point of its own (a condition variable
    /// or semaphore wait), with the program's cancellability, as it would run natively; then
    /// disables cancellation again. A cancellation acting in `f` unwinds the thread from there.
    pub fn cancellable<R>(&self, f: impl FnOnce() -> R) -> R {
        let saved = raw::get(raw::CANCEL);
        if raw::get(raw::MODE) != MODE_INSIDE || saved == 0 {
            return f();
        }
        let program = (saved - 1) as libc::c_int;
        if program == cancel::DISABLE {
            return f();
        }
        // While `f` runs, cancellation is the program's again and no guard holds it: a signal
        // handler's guard then finds 0 and saves and restores the state it finds, and a jump
        // out of that handler leaves nothing to restore.
        raw::set(raw::CANCEL, 0);
        // SAFETY: as in `enter`.
        unsafe { cancel::pthread_setcancelstate(program, std::ptr::null_mut()) };
        let r = f();
        // SAFETY: as in `enter`.
        unsafe { cancel::pthread_setcancelstate(cancel::DISABLE, std::ptr::null_mut()) };
        raw::set(raw::CANCEL, saved);
        r
    }
}

impl Drop for InShim {
    fn drop(&mut self) {
        if raw::get(raw::MODE) == MODE_INSIDE {
            set_mode(self.prev);
        }
        if self.restores_cancel {
            restore_cancel();
        }
    }
}

/// Gives the program back the cancellability an [`InShim`] took away, if one did.
fn restore_cancel() {
    let saved = raw::get(raw::CANCEL);
    if saved != 0 {
        raw::set(raw::CANCEL, 0);
        // SAFETY: as in `InShim::enter`: back to the state the program had.
        unsafe { cancel::pthread_setcancelstate((saved - 1) as libc::c_int, std::ptr::null_mut()) };
    }
}

/// The calling thread's record if it is registered and not inside the shim: one load, for the
/// fast paths (`current` also registers a thread it has not seen).
#[inline(always)]
pub fn current_fast() -> Option<&'static ThreadRec> {
    let p = raw::get(raw::FAST) as *const ThreadRec;
    // SAFETY: records are leaked and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Whether the calling thread's calls go straight to the real functions for now: inside the
/// shim, in a signal handler, after its end, or untracked for good. Then [`current`] is None
/// (one TLS word; for wrappers' paths taken when [`current_fast`] found no record).
#[inline(always)]
pub fn passes_through() -> bool {
    raw::get(raw::MODE) != MODE_NORMAL
}

/// The calling thread's record when the shim should track this call: tracking is on, the
/// thread is known, and the call does not come from inside the shim.
#[inline(always)]
pub fn current() -> Option<&'static ThreadRec> {
    let p = raw::get(raw::FAST) as *const ThreadRec;
    if !p.is_null() {
        // SAFETY: records are leaked and never freed.
        return Some(unsafe { &*p });
    }
    if raw::get(raw::MODE) == MODE_NORMAL {
        super::adopt_current_thread()
    } else {
        None
    }
}

/// The calling thread's kernel name (`comm`: set by `pthread_setname_np` or `prctl`).
pub fn own_kernel_name() -> Option<String> {
    let mut buf = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes and a NUL into the buffer.
    let ok = unsafe {
        libc::prctl(
            libc::PR_GET_NAME,
            buf.as_mut_ptr() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    (ok == 0).then(|| {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&buf[..end]).into_owned()
    })
}

/// Where glibc's `struct pthread` keeps the thread's kernel tid (x86-64, glibc 2.x: 0x2d0),
/// checked on the main thread at start; 0 when the check failed. The kernel writes it
/// (`CLONE_PARENT_SETTID`) before `pthread_create` returns, so a join can name the thread it
/// waits for even before the thread has run.
static TID_OFFSET: AtomicUsize = AtomicUsize::new(0);

pub fn check_tid_offset() {
    use crate::layout::pthread;
    // SAFETY: pthread_self is the calling thread's own descriptor, larger than the offset read.
    let me = unsafe { libc::pthread_self() } as usize;
    // SAFETY: our own live descriptor.
    let v = unsafe { pthread::tid(me, pthread::TID_OFFSET) };
    if v > 0 && v == gettid() {
        TID_OFFSET.store(pthread::TID_OFFSET, Ordering::Relaxed);
    }
}

/// Whether [`tid_of`] can read threads' tids (the descriptor layout was checked at start).
pub fn tid_known() -> bool {
    TID_OFFSET.load(Ordering::Relaxed) != 0
}

/// The kernel tid of the thread `th` that `pthread_create` just returned, 0 if unknown or if
/// the thread has exited.
///
/// # Safety
/// `th` is 0 or a live descriptor: one `pthread_create` just filled in, of a joinable thread
/// (it cannot have been joined yet).
pub unsafe fn tid_of(th: libc::pthread_t) -> u32 {
    let off = TID_OFFSET.load(Ordering::Relaxed);
    if off == 0 || th == 0 {
        return 0;
    }
    // SAFETY: as the caller promises; the offset was checked at start.
    unsafe { crate::layout::pthread::tid(th as usize, off) }
}

pub use crate::sys::gettid;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_are_counted_by_site_up_to_four_then_together_and_written_once() {
        let t = ThreadRec::new();
        for (ret, n) in [
            (0x10, 3),
            (0x20, 1),
            (0x30, 2),
            (0x40, 1),
            (0x50, 5),
            (0x60, 1),
        ] {
            for _ in 0..n {
                t.count_yield(ret);
            }
        }
        t.count_yield(0x10);
        assert_eq!(t.unwritten_yields(), Some(14));
        assert_eq!(t.unwritten_yields(), None, "written once");
        let sites: Vec<(usize, u64)> = t.unwritten_yield_sites().collect();
        // The first four sites apart, the fifth and sixth as one (ret 0).
        assert_eq!(sites, [(0x10, 4), (0x20, 1), (0x30, 2), (0x40, 1), (0, 6)]);
        assert_eq!(t.unwritten_yield_sites().count(), 0);
        t.count_yield(0x30);
        assert_eq!(t.unwritten_yield_sites().collect::<Vec<_>>(), [(0x30, 3)]);
        assert_eq!(t.unwritten_yields(), Some(15));
        // SAFETY: no thread owns this record.
        unsafe { t.reset() };
        assert_eq!(t.unwritten_yields(), None);
        t.count_yield(0x70);
        assert_eq!(t.unwritten_yield_sites().collect::<Vec<_>>(), [(0x70, 1)]);
    }
}
