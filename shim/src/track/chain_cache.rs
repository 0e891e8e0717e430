//! The per-thread caches that spare the unwinding of call chains.

use super::*;

impl Tracker {
    /// As [`Tracker::chain`], reusing the chain last captured at the same call site and stack
    /// depth (a thread waiting again where it waited before), which saves the unwinding: the
    /// dearest part of a contended wait. Two call paths that reach one call site at the same
    /// stack depth in one thread would share a chain; that is rare and only mislabels a wait.
    pub fn chain_at(&self, t: &ThreadRec, site: CallSite) -> u32 {
        if site.ret == 0 {
            return self.chain(t);
        }
        let i = (site.ret ^ site.sp.rotate_left(20)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        // SAFETY: called by the owning thread from inside the shim, so not re-entered.
        let cached = unsafe { t.local() }.site_cache[i];
        if cached.0 == site.ret && cached.1 == site.sp && cached.2 != 0 {
            return cached.2;
        }
        let id = self.chain(t);
        // SAFETY: as above; the borrow taken by `chain` has ended.
        unsafe { t.local() }.site_cache[i] = (site.ret, site.sp, id);
        id
    }

    /// Id of the calling thread's current call chain (0 when chains are unavailable).
    pub fn chain(&self, t: &ThreadRec) -> u32 {
        let mut frames = [0u64; chain::MAX_DEPTH];
        let n = chain::capture(self.config.depth, &mut frames);
        if n == 0 {
            return 0;
        }
        let h = chain::hash(&frames[..n]);
        // SAFETY: called by the owning thread from inside the shim, so not re-entered.
        let local = unsafe { t.local() };
        let slot = &mut local.chain_cache[(h as usize) & 31];
        if slot.0 == h {
            return slot.1;
        }
        let id = self.chains.intern(&frames[..n], &self.log);
        *slot = (h, id);
        id
    }
}
