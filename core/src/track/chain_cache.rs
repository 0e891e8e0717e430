//! The per-thread caches that spare the unwinding of call chains.
//!
//! A thread that waits where it waited before (the same call site, at the same stack depth)
//! usually has the same chain: the site cache keeps, for each such site, where on the stack
//! each return address of the chain was found, and takes the chain again only if the stack
//! still holds the same return addresses there (their hash is the chain's). Two call paths that
//! reach one lock helper at the same depth differ in at least one of those words, so a cached
//! chain is never another path's. Reading the words back costs a few loads a frame, against
//! an unwind's CFI walk (see `docs/perf.md`).

use super::*;

/// Site-cache entries per thread.
pub const SITE_ENTRIES: usize = 32;

/// One call site's chain: where its return addresses were on the stack, as offsets from the
/// caller's stack pointer in words (`u16`: a chain whose frames lie further up than 512 KiB is
/// not kept).
#[derive(Clone, Copy)]
pub struct SiteEntry {
    ret: usize,
    sp: usize,
    id: u32,
    hash: u64,
    /// Frames in the chain; 0 for a free entry.
    n: u8,
    /// The first frame, which was not read from the stack (the call site itself).
    first: u64,
    offsets: [u16; chain::MAX_DEPTH],
}

impl Default for SiteEntry {
    fn default() -> Self {
        SiteEntry {
            ret: 0,
            sp: 0,
            id: 0,
            hash: 0,
            n: 0,
            first: 0,
            offsets: [0; chain::MAX_DEPTH],
        }
    }
}

impl Tracker {
    /// As [`Tracker::chain`], reusing the chain last captured at the same call site and stack
    /// depth when the stack still holds it (see the module comment): a contended wait's
    /// dearest part is the unwind.
    pub fn chain_at(&self, t: &ThreadRec, site: CallSite) -> u32 {
        if site.ret == 0 {
            return self.chain(t);
        }
        let i = ((site.ret ^ site.sp.rotate_left(20)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59)
            % SITE_ENTRIES;
        // SAFETY: called by the owning thread from inside the shim, so not re-entered.
        let local = unsafe { t.local() };
        let sites = local
            .site_cache
            .get_or_insert_with(|| Box::new([SiteEntry::default(); SITE_ENTRIES]));
        let e = sites[i];
        if e.n != 0 && e.ret == site.ret && e.sp == site.sp && still_there(&e) {
            return e.id;
        }
        let mut frames = [0u64; chain::MAX_DEPTH];
        let mut slots = [0u64; chain::MAX_DEPTH];
        let n = chain::capture_slots(self.config.depth, &mut frames, &mut slots);
        let (id, hash) = self.intern(t, &frames[..n]);
        // SAFETY: as above; the borrow taken by `intern` has ended.
        let sites = unsafe { t.local() }.site_cache.as_mut();
        if let (Some(sites), Some(entry)) =
            (sites, entry_for(site, id, hash, &frames[..n], &slots[..n]))
        {
            sites[i] = entry;
        }
        id
    }

    /// Id of the calling thread's current call chain (0 when chains are unavailable).
    pub fn chain(&self, t: &ThreadRec) -> u32 {
        let mut frames = [0u64; chain::MAX_DEPTH];
        let n = chain::capture(self.config.depth, &mut frames);
        self.intern(t, &frames[..n]).0
    }

    /// The id of chain `frames` (0 for none), and its hash, through the thread's cache of
    /// interned chains.
    fn intern(&self, t: &ThreadRec, frames: &[u64]) -> (u32, u64) {
        if frames.is_empty() {
            return (0, 0);
        }
        let h = chain::hash(frames);
        // SAFETY: called by the owning thread from inside the shim, so not re-entered.
        let local = unsafe { t.local() };
        let slot = &mut local.chain_cache[(h as usize) & 31];
        if slot.0 == h {
            return (slot.1, h);
        }
        let id = self.chains.intern(frames, &self.log);
        *slot = (h, id);
        (id, h)
    }
}

/// The site-cache entry for the chain `frames` captured at `site`, whose return addresses were
/// read at `slots`; None when it cannot be checked later (a frame not read from the stack, or
/// too far up it).
fn entry_for(
    site: CallSite,
    id: u32,
    hash: u64,
    frames: &[u64],
    slots: &[u64],
) -> Option<SiteEntry> {
    if id == 0 || frames.is_empty() {
        return None;
    }
    let mut e = SiteEntry {
        ret: site.ret,
        sp: site.sp,
        id,
        hash,
        n: frames.len() as u8,
        first: frames[0],
        ..SiteEntry::default()
    };
    for (k, &at) in slots.iter().enumerate().skip(1) {
        let off = at.checked_sub(site.sp as u64)?;
        if off % 8 != 0 || off / 8 > u64::from(u16::MAX) {
            return None;
        }
        e.offsets[k] = (off / 8) as u16;
    }
    Some(e)
}

/// Whether the stack still holds entry `e`'s chain: its return addresses, read back from where
/// they were, hash to the chain's hash.
fn still_there(e: &SiteEntry) -> bool {
    let n = usize::from(e.n);
    let mut slots = [0u64; chain::MAX_DEPTH];
    for (slot, &off) in slots.iter_mut().zip(&e.offsets).take(n).skip(1) {
        *slot = e.sp as u64 + u64::from(off) * 8;
    }
    let mut frames = [0u64; chain::MAX_DEPTH];
    frames[0] = e.first;
    waitshim_unwind::read_slots(&slots[1..n], &mut frames[1..n])
        && chain::hash(&frames[..n]) == e.hash
}
