//! Objects' lives: registration at init or first use, ids in the log, names, destruction, and the
//! reuse of dead entries.

use super::*;

/// A destroyed object's entry serves a new object only this long after, so that a thread still
/// in the middle of a call that found it before it was destroyed (a program that destroys an
/// object in use) is done with it. Threads' caches that point at it are no concern: they check
/// the address. Short, because the entries of a program that creates and destroys objects in a
/// loop wait here meanwhile: 10 ms of a million a second is 10 000 entries, 6 MB.
const REUSE_AFTER_NS: u64 = 10_000_000;

/// Dead contended entries waiting to serve again from which the oldest waits only
/// [`REUSE_AFTER_NS`]: a program that joins thousands of threads a second (each join a wait on
/// its own object, 8 KiB with its wait table) would otherwise keep a second's worth of them, 300
/// MB at 30 000 a second. Anything that found such an entry during a wait is done within 10 ms
/// but on a stalled machine; even then, it reads memory that stays valid (entries are never
/// freed), and caches and cells check the generation.
const PRESSURE: usize = 1024;

/// How long the dead entry `obj` waits before it serves another object while `waiting` wait
/// with it.
fn quarantine(obj: &ObjEntry, waiting: usize) -> u64 {
    if obj.flags() & objects::CONTENDED != 0 && waiting < PRESSURE {
        objects::CONTENDED_REUSE_AFTER_NS
    } else {
        REUSE_AFTER_NS
    }
}

/// Spare entries kept per kind; more are left to the threads' caches that may point at them
/// (entries are never freed).
const SPARE_MAX: usize = 1 << 16;

impl Tracker {
    /// A fresh entry for an object at `addr`: the oldest spare entry of its kind if it was
    /// destroyed long enough ago, else a new one.
    fn new_object(&self, addr: usize, kind: ObjectKind) -> &'static ObjEntry {
        if let Some(q) = self.spare.get(kind as usize) {
            let now = crate::clock::coarse_ns();
            // try_lock: in a forked child the lock may be held by a thread that did not come along.
            if let Ok(mut q) = q.try_lock() {
                let waiting = q.len();
                if q.front()
                    .is_some_and(|&(at, obj)| at + quarantine(obj, waiting) <= now)
                {
                    if let Some((_, obj)) = q.pop_front() {
                        drop(q);
                        obj.reuse(addr);
                        return obj;
                    }
                }
            }
        }
        objects::leak_entry(ObjEntry::new(addr, kind))
    }

    /// Keeps what the creation record of an object about to enter the registry will say (it
    /// is written when the object is first written to the log, see [`Tracker::id_of`]). `site`
    /// is the creating call, if known: its chain is then usually cached.
    fn register(&self, t: &ThreadRec, obj: &ObjEntry, subtype: u32, how: u8, site: CallSite) {
        obj.create_chain
            .store(self.chain_at(t, site), Ordering::Relaxed);
        obj.subtype.store(subtype, Ordering::Relaxed);
        obj.origin.store(how, Ordering::Relaxed);
        obj.created_ns.store(now_ns(), Ordering::Relaxed);
        obj.created_tid.store(t.tid(), Ordering::Relaxed);
    }

    /// A name given through the C API before the object was tracked goes to it now that it is
    /// in the registry (by the thread that put it there).
    fn apply_pending_name(&self, obj: &ObjEntry) {
        if !self.has_pending_names.load(Ordering::Relaxed) {
            return;
        }
        let name = self
            .pending_names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&obj.addr());
        if let Some(name) = name {
            collect::object_cell(obj).set_name(&name);
            super::delayed::forget(obj);
            self.log.write(
                &ObjectName {
                    object_id: self.id_of(obj),
                    name,
                }
                .into(),
            );
        }
    }

    /// The object's id in the log, writing its creation record first if it has none yet.
    #[inline]
    pub fn id_of(&self, obj: &ObjEntry) -> u64 {
        match obj.id.load(Ordering::Acquire) {
            0 => self.publish(obj).unwrap_or(objects::CHURNED),
            id => id,
        }
    }

    /// As [`Tracker::id_of`], None for an object its destroy has just counted with the
    /// short-lived ones (a flush that found it alive a moment before must not write it).
    pub fn try_id_of(&self, obj: &ObjEntry) -> Option<u64> {
        match obj.id.load(Ordering::Acquire) {
            0 => self.publish(obj),
            objects::CHURNED => None,
            id => Some(id),
        }
    }

    #[cold]
    #[inline(never)]
    fn publish(&self, obj: &ObjEntry) -> Option<u64> {
        let id = self.next_object.fetch_add(1, Ordering::Relaxed);
        if let Err(theirs) = obj
            .id
            .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
        {
            // Another thread wrote it first (its record may still be on its way), or its
            // destroy counted it with the short-lived objects.
            return (theirs != objects::CHURNED).then_some(theirs);
        }
        self.log.write(
            &ObjectCreate {
                object_id: id,
                addr: obj.addr() as u64,
                kind: obj.kind as u8,
                subtype: obj.subtype.load(Ordering::Relaxed),
                origin: obj.origin.load(Ordering::Relaxed),
                ns: obj.created_ns.load(Ordering::Relaxed),
                tid: obj.created_tid.load(Ordering::Relaxed),
                chain_id: obj.create_chain.load(Ordering::Relaxed),
            }
            .into(),
        );
        Some(id)
    }

    /// The live object at `addr`, registering it on first use (static initializers, objects
    /// initialised before the shim started). Caches it for the thread.
    pub fn object(
        &self,
        t: &ThreadRec,
        addr: usize,
        kind: ObjectKind,
        subtype: u32,
    ) -> &'static ObjEntry {
        if let Some((_, obj)) = t.cached(addr) {
            return obj;
        }
        crate::stack::with_room(|| self.object_uncached(t, addr, kind, subtype))
    }

    fn object_uncached(
        &self,
        t: &ThreadRec,
        addr: usize,
        kind: ObjectKind,
        subtype: u32,
    ) -> &'static ObjEntry {
        let obj = match self.objects.get(addr) {
            Some(obj) => obj,
            None => {
                // Registering reaches cancellation points (a chain's modules, the log): the
                // caller's guard may be a quiet one.
                let _in = InShim::enter();
                let fresh = self.new_object(addr, kind);
                self.register(t, fresh, subtype, origin::FIRST_USE, CallSite::default());
                let won = self.objects.get_or_insert(addr, fresh);
                if std::ptr::eq(won, fresh) {
                    self.apply_pending_name(fresh);
                } else {
                    // Another thread registered it first: its entry wins, ours was never seen.
                    fresh.set_flag(objects::DEAD);
                    self.spare_entry(fresh);
                }
                won
            }
        };
        t.install(obj);
        obj
    }

    /// An init function called from `site` succeeded at `addr`: a new generation, whatever was
    /// there before.
    pub fn object_initialised(
        &self,
        t: &ThreadRec,
        addr: usize,
        kind: ObjectKind,
        subtype: u32,
        site: CallSite,
    ) {
        if let Some(old) = self.objects.get(addr) {
            self.retire(t, old);
        }
        let obj = self.new_object(addr, kind);
        self.register(t, obj, subtype, origin::INIT, site);
        self.objects.insert(addr, obj);
        self.apply_pending_name(obj);
        // Not cached for the thread: the single-threaded fast path takes a cached object to be
        // its thread's since an acquisition cached it, and would leave the owner unset (a wait
        // the initialising thread's unlock ended then named no waker). The first use caches it.
    }

    /// A destroy function succeeded at `addr`.
    pub fn object_destroyed(&self, t: &ThreadRec, addr: usize) {
        if let Some(obj) = self.objects.get(addr) {
            self.retire(t, obj);
        }
    }

    fn retire(&self, t: &ThreadRec, obj: &'static ObjEntry) {
        // Once: two threads destroying one object at once (glibc lets both succeed) must not
        // end it twice, nor offer its entry twice.
        if obj.flags.fetch_or(objects::DEAD, Ordering::AcqRel) & objects::DEAD != 0 {
            return;
        }
        if let Some(s) = t.slot_of(obj) {
            t.forget(s);
        }
        // Its lock-order edges go with it (a flush writing them waits for this, or skips them).
        // An object that never had one (most of those a program makes by the million) skips the
        // graph's lock: an edge is put in by a thread holding or taking the object, which a
        // correct program does not do while destroying it, and the acquisition that added it
        // happened before this destruction, so its mark is seen here.
        if obj.in_graph.load(Ordering::Relaxed) {
            self.lock_graph
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove_node(lockorder::node(obj));
        }
        // This entry, not whatever a new generation at the address has put there meanwhile.
        self.objects.remove(obj.addr(), obj);
        let now = now_ns();
        // Only uncontended events (acquisitions, posts, read acquisitions, signals: none bumps
        // the version) and never written: summed with the others of its creation chain, unless
        // a flush writes it first.
        let plain = obj.flags() & objects::CONTENDED == 0 && obj.untouched();
        let churned = plain
            && obj
                .id
                .compare_exchange(0, objects::CHURNED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if churned {
            self.churn(obj, now);
        } else {
            self.retire_written(t, obj, now);
        }
        if obj.reusable() {
            self.spare_entry(obj);
        }
    }

    /// Offers a dead entry for reuse: a contended one later (see `ObjEntry::reusable`).
    fn spare_entry(&self, obj: &'static ObjEntry) {
        if let Some(q) = self.spare.get(obj.kind as usize) {
            let now = crate::clock::coarse_ns();
            let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() < SPARE_MAX {
                q.push_back((now, obj));
            }
        }
    }

    /// The end of an object written to the log: its last counters, and its destruction.
    fn retire_written(&self, t: &ThreadRec, obj: &ObjEntry, now: u64) {
        // Its waits still in threads' cells go into its last counters: those cells are added
        // to a dead entry later, which is not written again.
        let mut waits = HashMap::new();
        if obj.flags() & objects::CONTENDED != 0 {
            for e in self.threads.iter() {
                e.value().0.waits.gather(&mut waits);
            }
        }
        let key = obj as *const ObjEntry as usize;
        self.write_counters(obj, now, 0, waits.get(&key), true);
        self.log.write(
            &ObjectDestroy {
                object_id: self.id_of(obj),
                ns: now,
                tid: t.tid(),
            }
            .into(),
        );
    }

    pub fn name_object(&self, addr: usize, name: String) {
        match self.objects.get(addr) {
            Some(obj) => {
                collect::object_cell(obj).set_name(&name);
                super::delayed::forget(obj);
                self.log.write(
                    &ObjectName {
                        object_id: self.id_of(obj),
                        name,
                    }
                    .into(),
                )
            }
            None => {
                self.pending_names
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(addr, name);
                self.has_pending_names.store(true, Ordering::Relaxed);
            }
        }
    }
}
