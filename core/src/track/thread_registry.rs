//! The thread registry: threads register when they start (or are first seen), and leave it when
//! they end; their records are reused.

use super::*;

/// How a thread came to be, when the shim saw it created.
pub struct Birth {
    pub parent: u32,
    pub routine: u64,
    pub chain: u32,
    pub created_ns: u64,
}

/// Records of threads that ended, with when: reused for new threads once nothing can still be
/// looking at them (a wait-for walk, a flush, a live-stack question that started before the
/// exit), so that a program that runs millions of short threads keeps as many records as it had
/// threads at once, not as it ever had.
static RETIRED: Mutex<std::collections::VecDeque<(u64, ThreadRef)>> =
    Mutex::new(std::collections::VecDeque::new());
const QUARANTINE_NS: u64 = 1_000_000_000;
/// Records waiting from which the oldest waits only [`QUARANTINE_SHORT_NS`]: a program that
/// starts and joins 30 000 threads a second would otherwise keep 30 000 records (about 100 MB).
/// What can still look at a record is done within milliseconds but on a stalled machine, and
/// even then reads memory that stays valid (records are never freed).
const PRESSURE: usize = 256;
const QUARANTINE_SHORT_NS: u64 = 20_000_000;

fn retired_record(now: u64) -> Option<&'static ThreadRec> {
    // try_lock: in a forked child the lock may be held by a thread that did not come along.
    let mut r = RETIRED.try_lock().ok()?;
    let quarantine = if r.len() < PRESSURE {
        QUARANTINE_NS
    } else {
        QUARANTINE_SHORT_NS
    };
    if r.front()?.0.saturating_add(quarantine) > now {
        return None;
    }
    let rec = r.pop_front()?.1 .0;
    drop(r);
    // SAFETY: its thread ended a second ago and no thread owns it.
    unsafe { rec.reset() };
    Some(rec)
}

fn retire_record(rec: &'static ThreadRec, now: u64) {
    if let Ok(mut r) = RETIRED.try_lock() {
        r.push_back((now, ThreadRef(rec)));
    }
}

/// The calling thread is about to create a thread: who creates it (tid), where (its chain, 0
/// if not collected) and when. None while it is not tracked.
pub fn creating() -> Option<(u32, u32, u64)> {
    let (t, tr) = (threads::current()?, tracker()?);
    let chain = crate::stack::with_room(|| {
        let _in = InShim::enter();
        tr.chain(t)
    });
    Some((t.tid(), chain, now_ns()))
}

/// A thread the shim saw created starts, before the program's start routine: it registers.
pub fn thread_started(birth: Birth) {
    if let Some(tr) = tracker() {
        let _in = InShim::enter();
        register_thread(tr, Some(birth));
    }
}

/// `pthread_setname_np` named thread `th` `name`: the thread's name from now on, in the log and
/// for the policy.
pub fn thread_named(th: libc::pthread_t, name: &std::ffi::CStr) {
    let (Some(t), Some(tr)) = (threads::current(), tracker()) else {
        return;
    };
    let _in = InShim::enter();
    let name = name.to_string_lossy().into_owned();
    let find = || {
        if th as usize == t.pthread.load(Ordering::Relaxed) {
            Some(t)
        } else {
            tr.threads
                .iter()
                .find(|e| e.value().0.pthread.load(Ordering::Relaxed) == th as usize)
                .map(|e| e.value().0)
        }
    };
    if let Some(target) = find() {
        apply_name(tr, target, name);
        return;
    }
    // Named by its creator before it ran (memcached names its workers right after creating
    // them): the name waits for the thread to register. Put there first, then looked for
    // again: the thread, which registers first and looks second, or this, takes it.
    PENDING_NAMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((th as usize, name));
    HAS_PENDING_NAMES.store(true, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
    if let Some(target) = find() {
        if let Some(name) = take_pending_name(th as usize) {
            apply_name(tr, target, name);
        }
    }
}

/// Names given to threads not registered yet, by descriptor (see [`thread_named`]).
static PENDING_NAMES: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
static HAS_PENDING_NAMES: AtomicBool = AtomicBool::new(false);

fn take_pending_name(pthread: usize) -> Option<String> {
    let mut pending = PENDING_NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let i = pending.iter().position(|(p, _)| *p == pthread)?;
    let (_, name) = pending.swap_remove(i);
    if pending.is_empty() {
        HAS_PENDING_NAMES.store(false, Ordering::Relaxed);
    }
    Some(name)
}

fn apply_name(tr: &Tracker, target: &ThreadRec, name: String) {
    target.named.store(true, Ordering::Relaxed);
    target.policy.set_name(&name);
    tr.log.write(
        &ThreadName {
            tid: target.tid(),
            ns: now_ns(),
            name,
        }
        .into(),
    );
}

/// Registers the calling thread and points its thread-local at its record (a new one, or one a
/// thread that ended left).
pub fn register_thread(tr: &Tracker, birth: Option<Birth>) -> &'static ThreadRec {
    crate::stack::with_room(|| register_thread_here(tr, birth))
}

#[inline(always)]
fn register_thread_here(tr: &Tracker, birth: Option<Birth>) -> &'static ThreadRec {
    let rec: &'static ThreadRec =
        retired_record(now_ns()).unwrap_or_else(|| Box::leak(Box::new(ThreadRec::new())));
    attach_thread(tr, rec, birth);
    rec
}

pub(super) fn attach_thread(tr: &Tracker, rec: &'static ThreadRec, birth: Option<Birth>) {
    let tid = threads::gettid();
    rec.tid.store(tid, Ordering::Relaxed);
    rec.named.store(false, Ordering::Relaxed);
    rec.policy
        .routine
        .store(birth.as_ref().map_or(0, |b| b.routine), Ordering::Relaxed);
    // SAFETY: plain library call.
    rec.pthread
        .store(unsafe { libc::pthread_self() } as usize, Ordering::Relaxed);
    threads::set_record(rec);
    threads::arm_exit_hook();
    tr.threads.insert(tid, ThreadRef(rec));
    let pthread = rec.pthread.load(Ordering::Relaxed);
    tr.by_pthread.insert(pthread, tid);
    // A join that began before this thread ran made its thread object without knowing the tid:
    // it is this thread's (the joiner looks at `by_pthread` again after making it).
    std::sync::atomic::fence(Ordering::SeqCst);
    if let Some(obj) = tr.objects.get(pthread) {
        if obj.kind == ObjectKind::Thread {
            let _ = obj
                .owner
                .last
                .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
    tr.by_tid[tid as usize % TID_INDEX]
        .store(rec as *const ThreadRec as *mut ThreadRec, Ordering::Release);
    tr.live.fetch_add(1, Ordering::Relaxed);
    if tid != getpid() {
        tr.threaded.store(true, Ordering::Relaxed);
    }
    let b = birth.unwrap_or(Birth {
        parent: 0,
        routine: 0,
        chain: 0,
        created_ns: now_ns(),
    });
    tr.log.write(
        &ThreadStart {
            tid,
            parent_tid: b.parent,
            ns: b.created_ns,
            start_routine: b.routine,
            chain_id: b.chain,
            is_main: u8::from(tid == getpid()),
        }
        .into(),
    );
    // A name its creator gave it before it ran (see `thread_named`).
    std::sync::atomic::fence(Ordering::SeqCst);
    if HAS_PENDING_NAMES.load(Ordering::SeqCst) {
        if let Some(name) = take_pending_name(pthread) {
            apply_name(tr, rec, name);
        }
    }
}

/// A thread the shim has not seen start (the main thread before the constructor, threads made
/// without `pthread_create`) calls an interposed function.
#[cold]
pub fn adopt_current_thread() -> Option<&'static ThreadRec> {
    if STATE.load(Ordering::Acquire) == UNINIT {
        init();
        let p = threads::own_record();
        if !p.is_null() {
            // SAFETY: records are leaked.
            return Some(unsafe { &*p });
        }
    }
    let Some(tr) = tracker() else {
        // Off is for good (nothing turns tracking on again in this process): without this,
        // every call of an untraced program would come back here (+14 ns a lock/unlock pair).
        if STATE.load(Ordering::Acquire) == OFF {
            threads::mark_untracked();
        }
        return None;
    };
    let _in = InShim::enter();
    Some(register_thread(tr, None))
}

/// Writes the calling thread's kernel name, when the program did not name it through
/// `pthread_setname_np`: names set with `prctl(PR_SET_NAME)` bypass it, and a thread the program
/// never named has the name it inherited (the main thread: the program's). Read at the thread's
/// end, the final one.
fn name_from_kernel(tr: &Tracker, rec: &ThreadRec, now: u64) {
    if rec.named.load(Ordering::Relaxed) {
        return;
    }
    if let Some(comm) = threads::own_kernel_name() {
        tr.log.write(
            &ThreadName {
                tid: rec.tid(),
                ns: now,
                name: comm.trim_end().into(),
            }
            .into(),
        );
    }
}

/// The process ends on the calling thread (`exit`, `_exit`, a return from `main`): its name, as
/// at a thread's end. No thread-exit hook runs for it (pthread key destructors run only when a
/// thread ends, not when the process does).
pub fn process_ending_on_this_thread(tr: &Tracker) {
    let p = threads::own_record();
    if !p.is_null() {
        // SAFETY: records are leaked; this is the owning thread.
        name_from_kernel(tr, unsafe { &*p }, now_ns());
    }
}

/// The calling thread ends: add its counts, record its name and exit, and stop tracking it.
pub fn thread_exited() {
    crate::stack::with_room(thread_exited_here)
}

#[inline(always)]
fn thread_exited_here() {
    let p = threads::own_record();
    if p.is_null() {
        threads::mark_exited();
        return;
    }
    threads::set_record(std::ptr::null());
    let _in = InShim::enter();
    // SAFETY: records are leaked; this is the owning thread.
    let rec = unsafe { &*p };
    rec.fold_all();
    if let Some(tr) = tracker() {
        // A thread cancelled in a wait (a cancellation point such as sem_wait) never returned
        // from it: it no longer waits.
        let waited = rec.waiting_on.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !waited.is_null() {
            // SAFETY: tracking entries are leaked and never freed.
            unsafe { &*waited }.waiter_left(false, 0);
            tr.blocked.fetch_sub(1, Ordering::Relaxed);
        }
        let tid = rec.tid();
        let now = now_ns();
        name_from_kernel(tr, rec, now);
        // A thread being joined: its exit ends the join's episode, as the one the joiner waited
        // for. Where it "released" is always the thread's exit, so no chain is unwound for it.
        let pthread = rec.pthread.load(Ordering::Relaxed);
        if let Some(obj) = tr.objects.get(pthread) {
            if obj.kind == ObjectKind::Thread
                && obj.owner.last.load(Ordering::Relaxed) == tid
                && obj.flags() & objects::EPISODE != 0
            {
                highwater::on_release(tr, tid, obj, now, 0);
            }
        }
        if let Some(h) = super::hooks::get() {
            (h.thread_ending)(tr, tid);
        }
        if let Some(yields) = rec.unwritten_yields() {
            let sites = rec
                .unwritten_yield_sites()
                .map(|(ret, yields)| waitshim_format::YieldSite {
                    tid,
                    ret: ret as u64,
                    yields,
                })
                .collect();
            tr.log.write(
                &waitshim_format::ThreadYields {
                    ns: now,
                    threads: vec![waitshim_format::YieldCount { tid, yields }],
                    sites,
                }
                .into(),
            );
        }
        // Its own buffer: nobody else adds to it, so the take cannot fail.
        rec.events.take(tr, tid, now);
        tr.log.write(&ThreadExit { tid, ns: now }.into());
        tr.threads.remove(&tid);
        if tr
            .by_pthread
            .get(&pthread)
            .is_some_and(|e| *e.value() == tid)
        {
            tr.by_pthread.remove(&pthread);
        }
        let _ = tr.by_tid[tid as usize % TID_INDEX].compare_exchange(
            p as *mut ThreadRec,
            std::ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        tr.live.fetch_sub(1, Ordering::Relaxed);
        tr.maybe_flush(now);
        retire_record(rec, now);
    }
    drop(_in);
    threads::mark_exited();
}

impl Tracker {
    /// The live thread `tid`, if the shim knows it.
    pub fn thread(&self, tid: u32) -> Option<&'static ThreadRec> {
        if tid == 0 {
            return None;
        }
        let p = self.by_tid[tid as usize % TID_INDEX].load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: records are leaked and never freed.
            let rec: &'static ThreadRec = unsafe { &*p };
            if rec.tid() == tid {
                return Some(rec);
            }
        }
        self.threads.get(&tid).map(|e| e.value().0)
    }

    /// Whether the thread `tid` registered with the shim (counted in `live`).
    pub fn is_registered(&self, tid: u32) -> bool {
        self.threads.contains_key(&tid)
    }

    /// The wait the shim tracks that thread `tid` is in now, if any: (its object's kind as u8
    /// plus 1, the object's id in the log or 0), for the sampler.
    pub fn tracked_wait_of(&self, tid: u32) -> Option<(u8, u64)> {
        let e = self.threads.get(&tid)?;
        let p = e.value().0.waiting_on.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: tracking entries are leaked and never freed.
        let obj: &ObjEntry = unsafe { &*p };
        Some((obj.kind as u8 + 1, self.try_id_of(obj).unwrap_or(0)))
    }
}
