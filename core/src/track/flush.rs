//! Writing counters to the log: periodically, at data requests and at exit.

use super::churn::{QuietSum, QUIET_WRITTEN_MAX};
use super::*;

const FLUSH_EVERY_NS: u64 = 250_000_000;

impl Tracker {
    /// Writes the contended waits in progress, with who holds what they wait for, when there
    /// are some or were some at the last flush: a program that hangs (a lost wake-up, a mutex
    /// shared with a process that stopped) is killed with its threads still waiting, and the
    /// log must say for what, and since when.
    pub(super) fn write_open_waits(&self, now: u64) {
        let mut waits = Vec::new();
        for e in self.threads.iter() {
            let t = e.value().0;
            let p = t.waiting_on.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: tracking entries are leaked and never freed.
            let obj: &ObjEntry = unsafe { &*p };
            let Some(object_id) = self.try_id_of(obj) else {
                continue;
            };
            waits.push(waitshim_format::OpenWait {
                tid: t.tid(),
                object_id,
                since_ns: t.wait_start.load(Ordering::Relaxed),
                chain_id: t.wait_chain.load(Ordering::Relaxed),
                holder_tid: obj.holder_checked(),
            });
        }
        let open = !waits.is_empty();
        if open || self.waits_were_open.load(Ordering::Relaxed) {
            self.log
                .write(&waitshim_format::OpenWaits { ns: now, waits }.into());
        }
        self.waits_were_open.store(open, Ordering::Relaxed);
    }

    /// Writes an object's counters and kind counters; with `details`, also its wait sites
    /// (they change only with contended activity). `extra` acquisitions and `pending` waits
    /// are still in threads' caches.
    pub(super) fn write_counters(
        &self,
        obj: &ObjEntry,
        now: u64,
        extra: u64,
        pending: Option<&waits::Pending>,
        details: bool,
    ) {
        let Some(id) = self.try_id_of(obj) else {
            return;
        };
        // Written: from now on the flush compares what it wrote with what there is.
        let b = obj.busy();
        let v = b.version.load(Ordering::Relaxed);
        let counters = obj.counters(id, now, extra, pending);
        b.flushed_quiet.store(
            counters.acquisitions
                + b.quiet.load(Ordering::Relaxed)
                + pending.map_or(0, |p| p.quiet),
            Ordering::Relaxed,
        );
        b.flushed_waits
            .store(pending.map_or(0, |p| p.waits), Ordering::Relaxed);
        self.log.write(&counters.into());
        if let Some(k) = obj.kind_counters(id, now, pending) {
            self.log.write(&k.into());
        }
        if details {
            for site in obj.wait_sites(id, pending) {
                self.log.write(&site.into());
            }
        }
        b.flushed.store(v, Ordering::Relaxed);
        super::delayed::write(self, obj, now);
    }

    /// Writes the counters of the objects that changed since the last flush, unless a flush is
    /// in progress on another thread.
    pub fn flush(&self) {
        if self.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.flush_locked(false);
    }

    /// A complete flush, waiting (briefly) for a flush in progress on another thread rather than
    /// skipping: for exit and data requests.
    pub fn flush_all(&self) {
        self.flush_waiting(true);
    }

    /// The shim thread's periodic flush: as [`Tracker::flush`], waiting for a flush in progress.
    pub fn flush_periodic(&self) {
        self.flush_waiting(false);
    }

    fn flush_waiting(&self, complete: bool) {
        let start = now_ns();
        while self.flushing.swap(true, Ordering::AcqRel) {
            if now_ns().saturating_sub(start) > 500_000_000 {
                return;
            }
            crate::sys::sched_yield();
        }
        self.flush_locked(complete);
    }

    /// Acquisitions, kind-specific counts and waits still counted in threads' caches, by
    /// object (read, not taken: only their threads change them).
    fn pending_counts(&self) -> (HashMap<usize, u64>, HashMap<usize, waits::Pending>) {
        let mut pending: HashMap<usize, u64> = HashMap::new();
        let mut waits: HashMap<usize, waits::Pending> = HashMap::new();
        for e in self.threads.iter() {
            let t = e.value().0;
            for s in &t.slots {
                let n = s.pending.load(Ordering::Relaxed);
                let aux = s.aux.each_ref().map(|a| a.load(Ordering::Relaxed));
                if n == 0 && aux == [0, 0] {
                    continue;
                }
                let Some(obj) = s.entry() else { continue };
                let key = obj as *const ObjEntry as usize;
                if n > 0 {
                    *pending.entry(key).or_default() += n;
                }
                for (i, &v) in aux.iter().enumerate() {
                    if let (Some(k), true) = (obj.aux_key(i), v > 0) {
                        waits.entry(key).or_default().add_quiet(k, u64::from(v));
                    }
                }
            }
            t.waits.gather(&mut waits);
        }
        (pending, waits)
    }

    /// Posts made in signal handlers on semaphores their thread had not cached
    /// ([`handler_counts::HANDLER_POSTS`]) go to their semaphores; those not registered yet wait
    /// for a later flush. Posts the full table could not keep are said in a note.
    fn place_handler_posts(&self, now: u64) {
        handler_counts::HANDLER_POSTS.drain(|addr, n| match self.objects.get(addr) {
            Some(obj) if obj.kind == ObjectKind::Semaphore && obj.flags() & objects::DEAD == 0 => {
                obj.add(waitshim_format::counter::POSTS, n);
                0
            }
            _ => n,
        });
        let lost = handler_counts::HANDLER_POSTS.take_lost();
        if lost > 0 {
            self.log.write(
                &Note {
                    ns: now,
                    level: note_level::WARNING,
                    text: format!(
                        "{lost} sem_post calls from signal handlers were not counted: more than \
                         256 semaphores were posted from handlers on threads that had not used them"
                    ),
                }
                .into(),
            );
        }
    }

    /// Objects whose counters changed through contended activity are written in full. Objects
    /// whose only change is uncontended acquisitions (counted, or still in threads' caches) are
    /// written
    /// (their counters only) at most once per `gap`, which doubles from 1 s to 5 min per object:
    /// a killed run keeps them, and the log does not grow with uncontended traffic. `complete`
    /// writes every change (exit, data requests).
    fn flush_locked(&self, complete: bool) {
        let p = threads::own_record();
        if !p.is_null() {
            // SAFETY: our own record; folding touches only atomics.
            unsafe { &*p }.fold_all();
        }
        let now = now_ns();
        self.place_handler_posts(now);
        // Edges first: the objects they name are written with them, and are no longer quiet.
        lockorder::write_edges(
            self,
            &mut self.lock_graph.lock().unwrap_or_else(|e| e.into_inner()),
        );
        let (pending, waits) = self.pending_counts();
        let mut quiet: HashMap<(u8, u32), QuietSum> = HashMap::new();
        self.objects.for_each(|obj| {
            if obj.flags() & objects::DEAD != 0 {
                // Being destroyed: its last counters are written by the destroy.
                return;
            }
            super::delayed::write(self, obj, now);
            let key = obj as *const ObjEntry as usize;
            let extra = pending.get(&key).copied().unwrap_or(0);
            let waiting = waits.get(&key);
            let unwritten_quiet = obj.id.load(Ordering::Acquire) == 0
                && obj.flags() & objects::CONTENDED == 0
                && obj.untouched()
                && waiting.is_none();
            if unwritten_quiet && self.quiet_written.load(Ordering::Relaxed) >= QUIET_WRITTEN_MAX {
                let sum = quiet
                    .entry((obj.kind as u8, obj.create_chain.load(Ordering::Relaxed)))
                    .or_default();
                sum.count += 1;
                sum.acquisitions += obj.acquisitions.load(Ordering::Relaxed) + extra;
                sum.owner_changes += obj.owner_changes();
                for (k, v) in obj.extra_counts() {
                    match sum.counters.iter_mut().find(|c| c.0 == k) {
                        Some(c) => c.1 += v,
                        None => sum.counters.push((k, v)),
                    }
                }
                return;
            }
            if unwritten_quiet {
                self.quiet_written.fetch_add(1, Ordering::Relaxed);
            }
            // An object never written has no busy part yet: its version is 1, nothing flushed.
            let l = |f: fn(&objects::Busy) -> &AtomicU64, none: u64| {
                obj.busy_if().map_or(none, |b| f(b).load(Ordering::Relaxed))
            };
            if l(|b| &b.version, 1) != l(|b| &b.flushed, 0)
                || waiting.map_or(0, |w| w.waits) != l(|b| &b.flushed_waits, 0)
            {
                self.write_counters(obj, now, extra, waiting, true);
            } else if obj.acquisitions.load(Ordering::Relaxed)
                + extra
                + l(|b| &b.quiet, 0)
                + waiting.map_or(0, |w| w.quiet)
                != l(|b| &b.flushed_quiet, 0)
                && (complete || now >= l(|b| &b.quiet_until, 0))
            {
                self.write_counters(obj, now, extra, waiting, false);
                let b = obj.busy();
                let gap =
                    (b.quiet_gap.load(Ordering::Relaxed) * 2).clamp(1_000_000_000, 300_000_000_000);
                b.quiet_gap.store(gap, Ordering::Relaxed);
                b.quiet_until.store(now + gap, Ordering::Relaxed);
            }
        });
        self.write_churned(now);
        self.write_quiet(quiet, now);
        self.write_open_waits(now);
        self.write_yields(now);
        if let Some(r) = self.progress.counts(now, complete) {
            self.log.write(&r.into());
        }
        super::events::take_all(self, now, complete);
        self.last_flush.store(now, Ordering::Relaxed);
        self.flushing.store(false, Ordering::Release);
    }

    /// The yield counts of the threads that yielded since they were last written.
    fn write_yields(&self, now: u64) {
        let mut threads = Vec::new();
        let mut sites = Vec::new();
        for e in self.threads.iter() {
            let t = e.value().0;
            let tid = t.tid();
            if let Some(yields) = t.unwritten_yields() {
                let at = sites.len();
                sites.extend(t.unwritten_yield_sites().map(|(ret, yields)| {
                    waitshim_format::YieldSite {
                        tid,
                        ret: ret as u64,
                        yields,
                    }
                }));
                // A record served again to a new thread meanwhile: not the counts of `tid`.
                if t.tid() == tid {
                    threads.push(waitshim_format::YieldCount { tid, yields });
                } else {
                    sites.truncate(at);
                }
            }
        }
        if !threads.is_empty() {
            self.log.write(
                &waitshim_format::ThreadYields {
                    ns: now,
                    threads,
                    sites,
                }
                .into(),
            );
        }
    }

    /// Flushes if the last flush is old: counters reach the log while the run goes, so a killed
    /// run still has them.
    pub fn maybe_flush(&self, now: u64) {
        if now.saturating_sub(self.last_flush.load(Ordering::Relaxed)) >= FLUSH_EVERY_NS {
            self.flush();
        }
    }
}
