//! The table of loaded objects the unwinder may read: for each, the range of its code, its
//! readable segments and the search table of its `.eh_frame_hdr`.
//!
//! The table is built outside signal handlers (it allocates and calls `dl_iterate_phdr`) and
//! published as an immutable snapshot through one atomic pointer, so that an unwind (possibly in
//! a signal handler) takes no lock and allocates nothing: it loads the pointer, counts itself
//! as a reader of that snapshot, and checks the pointer again.
//!
//! Snapshots live in a small pool of slots that are never freed. A slot is filled again only
//! when it is not the published one and has no reader; a reader that loaded a slot's address
//! before that notices, when it checks the published pointer again, that the slot is no longer
//! the current one, and backs off without reading it. The table a slot held before is freed
//! when the slot is filled again. The pool grows only when every slot but the published one
//! still has a reader after [`DRAIN_NS`]: at most one slot per such event, each holding one
//! table, so memory stays bounded by the number of unwinds stalled for that long at once.
//!
//! Unloading (`dlclose`) goes through [`around_unload`]: before the object is unmapped the
//! published table keeps only the objects that were loaded when the first table was built
//! (those the dynamic loader never unloads), and the unload waits (bounded) until no unwind
//! still reads an older table.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Readable segments remembered per object; objects have 4 or 5 `PT_LOAD`s in practice.
const MAX_SEGS: usize = 8;
/// How long a publication waits for unwinds still reading an older table.
const DRAIN_NS: u64 = 50_000_000;

const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
/// `.eh_frame_hdr` search table entries: 4-byte signed offsets from the header (datarel|sdata4).
const TABLE_ENC: u8 = 0x3b;

/// One loaded object.
#[derive(Clone, Copy, Default)]
pub(crate) struct Module {
    /// Executable addresses `[text_lo, text_hi)`: program counters that belong to this object.
    pub text_lo: u64,
    pub text_hi: u64,
    segs: [(u64, u64); MAX_SEGS],
    nsegs: usize,
    /// Address of `.eh_frame_hdr` (the base of its table's offsets) and of its search table.
    pub hdr: u64,
    pub table: u64,
    /// Entries of the search table (0: no usable table, nothing in this object unwinds).
    pub count: u64,
}

impl Module {
    /// Whether `[addr, addr + len)` lies in one readable segment of this object: memory that
    /// stays mapped while the object is in a published table.
    #[inline]
    pub fn readable(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.segs[..self.nsegs]
            .iter()
            .any(|&(lo, hi)| addr >= lo && end <= hi)
    }
}

/// A published table: objects sorted by address.
pub(crate) struct Table {
    /// Changes with every publication, so cached rows of an older table are not used.
    pub gen: u32,
    mods: Box<[Module]>,
}

impl Table {
    /// The object whose code contains `pc`.
    #[inline]
    pub fn find(&self, pc: u64) -> Option<&Module> {
        let i = self.mods.partition_point(|m| m.text_lo <= pc);
        let m = self.mods.get(i.checked_sub(1)?)?;
        (pc < m.text_hi).then_some(m)
    }
}

struct Slot {
    readers: AtomicUsize,
    table: AtomicPtr<Table>,
}

/// The published slot (null before the first table is built).
static CURRENT: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());

/// A counted read of the published table; unwinds hold one from start to end.
pub(crate) struct Reader {
    slot: &'static Slot,
    table: &'static Table,
}

impl Reader {
    #[inline]
    pub fn table(&self) -> &Table {
        self.table
    }
}

impl Drop for Reader {
    #[inline]
    fn drop(&mut self) {
        self.slot.readers.fetch_sub(1, Ordering::Release);
    }
}

/// Starts reading the published table. Lock-free, allocation-free, async-signal-safe. `None`
/// before the first table, or when publications keep racing this call (then the unwind is
/// simply skipped).
#[inline]
pub(crate) fn read() -> Option<Reader> {
    for _ in 0..4 {
        let p = CURRENT.load(Ordering::SeqCst);
        if p.is_null() {
            return None;
        }
        // SAFETY: slots are leaked at creation and never freed, so any slot address ever
        // published stays valid.
        let slot: &'static Slot = unsafe { &*p };
        slot.readers.fetch_add(1, Ordering::SeqCst);
        if CURRENT.load(Ordering::SeqCst) == p {
            let t = slot.table.load(Ordering::Acquire);
            // SAFETY: the slot is published and counted as read: its table is complete (stored
            // before the slot was published) and is not replaced while `readers` is non-zero.
            let table = unsafe { &*t };
            return Some(Reader { slot, table });
        }
        slot.readers.fetch_sub(1, Ordering::Release);
    }
    None
}

/// Whether a table has been published.
pub(crate) fn published() -> bool {
    !CURRENT.load(Ordering::Relaxed).is_null()
}

/// What the builder keeps between publications, under [`BuilderLock`].
struct Builder {
    pool: Vec<&'static Slot>,
    gen: u32,
    /// Code start of the objects of the first table: loaded with the program, never unloaded.
    permanent: Vec<u64>,
    /// `dlclose` calls under way: tables published meanwhile keep only permanent objects.
    unloading: usize,
}

struct BuilderCell(UnsafeCell<Builder>);
// SAFETY: the builder is only touched with the builder lock held.
unsafe impl Sync for BuilderCell {}

static BUILDER: BuilderCell = BuilderCell(UnsafeCell::new(Builder {
    pool: Vec::new(),
    gen: 0,
    permanent: Vec::new(),
    unloading: 0,
}));

/// The pid of the process whose thread holds the builder (0: free). A forked child finds the
/// pid of its parent there if a parent's thread held it at the fork; that thread does not exist
/// in the child, so the child takes the lock over.
static BUILDER_OWNER: AtomicU32 = AtomicU32::new(0);

struct BuilderLock;

impl BuilderLock {
    fn take() -> BuilderLock {
        // SAFETY: plain system call.
        let me = unsafe { libc::getpid() } as u32;
        loop {
            match BUILDER_OWNER.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return BuilderLock,
                Err(other)
                    if other != me
                        && BUILDER_OWNER
                            .compare_exchange(other, me, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok() =>
                {
                    return BuilderLock
                }
                Err(_) => pause(),
            }
        }
    }

    fn builder(&mut self) -> &mut Builder {
        // SAFETY: the lock is held for as long as `self` lives and `self` is borrowed mutably.
        unsafe { &mut *BUILDER.0.get() }
    }
}

impl Drop for BuilderLock {
    fn drop(&mut self) {
        BUILDER_OWNER.store(0, Ordering::Release);
    }
}

fn pause() {
    let t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 50_000,
    };
    // SAFETY: plain system call with a valid timespec.
    unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
}

fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: plain system call writing into `t`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The dynamic loader's count of objects loaded so far (`dlpi_adds`) when the published table
/// was read: objects loaded without `dlopen` (by glibc itself) or before `dlopen` returned (by
/// a constructor) show as a different count.
static TABLE_ADDS: AtomicU64 = AtomicU64::new(0);

/// The loaded objects, and the loader's count of objects loaded so far.
struct Collected {
    mods: Vec<Module>,
    adds: u64,
}

/// Whether `dl_iterate_phdr` passed an info with the `dlpi_adds` field (glibc always does).
fn has_adds(size: libc::size_t) -> bool {
    size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs)
}

/// Reads the loaded objects (not in a signal handler: allocates, and `dl_iterate_phdr` locks).
fn collect() -> Collected {
    let mut found = Collected {
        mods: Vec::new(),
        adds: 0,
    };
    // SAFETY: `visit` follows dl_iterate_phdr's callback contract and fills `found`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(visit),
            &mut found as *mut Collected as *mut libc::c_void,
        )
    };
    found.mods.sort_by_key(|m| m.text_lo);
    found
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our Collected as data.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Collected)) };
    if has_adds(size) {
        out.adds = info.dlpi_adds;
    }
    let bias = info.dlpi_addr;
    let mut m = Module {
        text_lo: u64::MAX,
        ..Module::default()
    };
    let mut eh_hdr = None;
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        let lo = bias.wrapping_add(ph.p_vaddr);
        let hi = lo.wrapping_add(ph.p_memsz);
        match ph.p_type {
            libc::PT_LOAD => {
                if ph.p_flags & libc::PF_X != 0 {
                    m.text_lo = m.text_lo.min(lo);
                    m.text_hi = m.text_hi.max(hi);
                }
                if ph.p_flags & libc::PF_R != 0 && m.nsegs < MAX_SEGS {
                    // Only what the file backs: past p_filesz a segment may end in a partial
                    // page, and `.eh_frame` data is always file-backed.
                    m.segs[m.nsegs] = (lo, lo.wrapping_add(ph.p_filesz));
                    m.nsegs += 1;
                }
            }
            PT_GNU_EH_FRAME => eh_hdr = Some((lo, ph.p_memsz)),
            _ => {}
        }
    }
    if m.text_lo >= m.text_hi {
        return 0;
    }
    if let Some((hdr, len)) = eh_hdr {
        if let Some((table, count)) = search_table(&m, hdr, len) {
            (m.hdr, m.table, m.count) = (hdr, table, count);
        }
    }
    out.mods.push(m);
    0
}

/// The loader's count of objects loaded so far (one `dl_iterate_phdr` step).
fn loader_adds() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        if has_adds(size) {
            // SAFETY: dl_iterate_phdr passes a valid info and our u64 as data.
            unsafe { *(data as *mut u64) = (*info).dlpi_adds };
        }
        1
    }
    let mut adds = 0u64;
    // SAFETY: `first` follows the callback contract and writes only `adds`.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut adds as *mut u64 as *mut libc::c_void) };
    adds
}

/// Builds the table again if objects were loaded since it was read (not in a signal
/// handler): after a `dlopen`, which often only finds its object loaded already. Whether it
/// did.
pub fn refresh_if_loaded() -> bool {
    if loader_adds() == TABLE_ADDS.load(Ordering::Relaxed) {
        return false;
    }
    refresh();
    true
}

/// The search table of the `.eh_frame_hdr` at `hdr`: its address and entry count, when the
/// header is of the one form linkers write (version 1, table of datarel|sdata4 pairs) and lies
/// wholly in a readable segment.
fn search_table(m: &Module, hdr: u64, len: u64) -> Option<(u64, u64)> {
    if !m.readable(hdr, len) || len < 4 {
        return None;
    }
    let mut c = crate::cfi::Cursor::new(hdr, hdr + len);
    let version = c.u8()?;
    let ptr_enc = c.u8()?;
    let count_enc = c.u8()?;
    let table_enc = c.u8()?;
    if version != 1 || table_enc != TABLE_ENC {
        return None;
    }
    c.encoded(ptr_enc, hdr)?;
    let count = c.encoded(count_enc, hdr)?;
    let table = c.pos();
    let bytes = count.checked_mul(8)?;
    (table.checked_add(bytes)? <= hdr + len).then_some((table, count))
}

/// Builds the table from the objects loaded now and publishes it. Not for signal handlers.
pub fn refresh() {
    let mut lock = BuilderLock::take();
    let found = collect();
    publish(lock.builder(), found);
}

/// Publishes a table of the objects found (only the permanent ones while an unload is under
/// way).
fn publish(b: &mut Builder, found: Collected) {
    let mut mods = found.mods;
    TABLE_ADDS.store(found.adds, Ordering::Relaxed);
    if b.permanent.is_empty() {
        b.permanent = mods.iter().map(|m| m.text_lo).collect();
    }
    if b.unloading > 0 {
        mods.retain(|m| b.permanent.binary_search(&m.text_lo).is_ok());
    }
    b.gen = b.gen.wrapping_add(1);
    let table = Box::into_raw(Box::new(Table {
        gen: b.gen,
        mods: mods.into_boxed_slice(),
    }));
    let slot = spare_slot(b);
    let old = slot.table.swap(table, Ordering::SeqCst);
    if !old.is_null() {
        // SAFETY: the slot is neither published nor read (spare_slot checked both), and late
        // readers back off before touching its table; `old` came from Box::into_raw.
        drop(unsafe { Box::from_raw(old) });
    }
    CURRENT.store(slot as *const Slot as *mut Slot, Ordering::SeqCst);
}

/// A slot that is not published and has no reader: from the pool, waiting up to [`DRAIN_NS`]
/// for one, else a new one.
fn spare_slot(b: &mut Builder) -> &'static Slot {
    let start = now_ns();
    loop {
        let cur = CURRENT.load(Ordering::SeqCst) as *const Slot;
        let free = b
            .pool
            .iter()
            .find(|s| !std::ptr::eq(**s, cur) && s.readers.load(Ordering::SeqCst) == 0);
        if let Some(s) = free {
            return s;
        }
        if b.pool.len() < 2 || now_ns().saturating_sub(start) > DRAIN_NS {
            let s: &'static Slot = Box::leak(Box::new(Slot {
                readers: AtomicUsize::new(0),
                table: AtomicPtr::new(std::ptr::null_mut()),
            }));
            b.pool.push(s);
            return s;
        }
        pause();
    }
}

/// Waits (at most [`DRAIN_NS`]) until no slot but the published one has a reader.
fn drain() {
    let start = now_ns();
    loop {
        let cur = CURRENT.load(Ordering::SeqCst) as *const Slot;
        let busy = {
            let mut lock = BuilderLock::take();
            lock.builder()
                .pool
                .iter()
                .any(|s| !std::ptr::eq(*s, cur) && s.readers.load(Ordering::SeqCst) != 0)
        };
        if !busy || now_ns().saturating_sub(start) > DRAIN_NS {
            return;
        }
        pause();
    }
}

/// Runs `unload` (the real `dlclose`) so that no unwind reads the memory of an object it
/// unmaps: first a table without the objects that may go is published and unwinds still
/// reading older tables are waited for, then `unload` runs, then the table is built again.
/// Unwinds meanwhile stop at frames in dynamically loaded code. The builder lock is not held
/// while `unload` runs (destructors it runs may load or unload libraries themselves).
pub fn around_unload<R>(unload: impl FnOnce() -> R) -> R {
    if !published() {
        return unload();
    }
    {
        let mut lock = BuilderLock::take();
        let b = lock.builder();
        b.unloading += 1;
        let found = collect();
        publish(b, found);
    }
    drain();
    let r = unload();
    let mut lock = BuilderLock::take();
    let b = lock.builder();
    b.unloading -= 1;
    let found = collect();
    publish(b, found);
    r
}
