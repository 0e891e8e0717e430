//! The lock protocol (`track::owned`) against fake real calls: this test program starts tracking
//! itself, drives each wait shape with a closure standing for glibc's function, ends the run and
//! reads what the log says of each lock. Its own process: the tracker it starts is global.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use libc::{clockid_t, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME, EBUSY, ETIMEDOUT};
use waitshim_core::track::{self, engage, owned, threads, CallSite};
use waitshim_format::{counter, end_reason, FrameReader, Item, ObjectKind, Record};

/// Locks the test never takes for real: zeroed mutexes (unlocked, no owner) whose memory the
/// core reads as a mutex's.
struct Mutexes(Vec<libc::pthread_mutex_t>);

impl Mutexes {
    fn new(n: usize) -> Self {
        // SAFETY: a zeroed pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER on glibc.
        Mutexes((0..n).map(|_| unsafe { std::mem::zeroed() }).collect())
    }
    fn lock(&self, i: usize) -> owned::Lock {
        owned::Lock {
            addr: &self.0[i] as *const libc::pthread_mutex_t as usize,
            kind: ObjectKind::Mutex,
            subtype: waitshim_core::layout::mutex::subtype,
        }
    }
}

fn ns_of(ts: &timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Per lock address: the last `Counters` and kind counters the log holds for it.
#[derive(Default, Debug)]
struct Seen {
    acquisitions: u64,
    contended: u64,
    busy: u64,
    timeouts: u64,
    errors: u64,
    max_waiters: u32,
    ended: HashMap<u16, u64>,
}

fn read_log(dir: &std::path::Path) -> HashMap<u64, Seen> {
    let path = std::fs::read_dir(dir)
        .expect("log directory")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("the run wrote a log");
    let file = std::fs::File::open(&path).expect("open the log");
    let reader = FrameReader::new(std::io::BufReader::new(file)).expect("a log");
    let mut addr_of = HashMap::new();
    let mut seen: HashMap<u64, Seen> = HashMap::new();
    for item in reader {
        let Item::Record { record, .. } = item.expect("readable") else {
            continue;
        };
        match record {
            Record::ObjectCreate(o) => {
                addr_of.insert(o.object_id, o.addr);
            }
            Record::Counters(c) => {
                let s = seen.entry(addr_of[&c.object_id]).or_default();
                s.acquisitions = c.acquisitions;
                s.contended = c.contended;
                s.busy = c.busy;
                s.timeouts = c.timeouts;
                s.errors = c.errors;
                s.max_waiters = c.max_waiters;
            }
            Record::KindCounters(k) => {
                let s = seen.entry(addr_of[&k.object_id]).or_default();
                for v in k.values {
                    s.ended.insert(v.key, v.value);
                }
            }
            _ => {}
        }
    }
    seen
}

#[test]
fn each_wait_shape_counts_what_its_real_call_answered() {
    let dir = std::env::temp_dir().join(format!("waitshim-protocol-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    std::env::set_var("WAITSHIM_LOG", dir.join("run.%p.log"));
    std::env::set_var("WAITSHIM_QUIET", "1");
    std::env::set_var("WAITSHIM_EVENTS", "off");
    track::init();
    let t = threads::current().expect("tracking started and the test thread is tracked");
    let m = Mutexes::new(7);
    let release = |i: usize| {
        // SAFETY: the test's mutex, counted as this thread's.
        unsafe { engage::releasing(t, m.lock(i).addr) };
    };

    // 0: a sliced wait whose first two slices expire, then the real lock takes the mutex. The
    // slices run on the monotonic clock, each ending later than the one before.
    let calls = RefCell::new(Vec::<(clockid_t, u64)>::new());
    // SAFETY: the test's mutex, live, not held by this thread.
    let r = unsafe {
        owned::wait(t, &m.lock(0), None, CallSite::default(), true, |d| {
            let (clk, until) = d.expect("a sliced wait always gives the real call a time");
            calls.borrow_mut().push((clk, ns_of(&until)));
            if calls.borrow().len() < 3 {
                ETIMEDOUT
            } else {
                0
            }
        })
    };
    assert_eq!(r, 0, "the real call's answer is returned");
    let calls = calls.into_inner();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls.iter().all(|&(clk, _)| clk == CLOCK_MONOTONIC));
    assert!(calls.windows(2).all(|w| w[0].1 < w[1].1), "{calls:?}");
    release(0);

    // 1: the caller's deadline comes before the first slice ends: one real call, with the
    // caller's clock and time, whose ETIMEDOUT is the caller's answer.
    let mut now = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(CLOCK_REALTIME, &mut now) };
    let deadline = timespec {
        tv_sec: now.tv_sec,
        tv_nsec: now.tv_nsec,
    };
    let n = Cell::new(0);
    // SAFETY: as above.
    let r = unsafe {
        owned::wait(
            t,
            &m.lock(1),
            Some((CLOCK_REALTIME, deadline)),
            CallSite::default(),
            true,
            |d| {
                n.set(n.get() + 1);
                let (clk, until) = d.expect("a time");
                assert_eq!((clk, ns_of(&until)), (CLOCK_REALTIME, ns_of(&deadline)));
                ETIMEDOUT
            },
        )
    };
    assert_eq!((r, n.get()), (ETIMEDOUT, 1));

    // 2: the brief-wait rule: free after the back-off, counted as a brief contended acquisition;
    // 3: still busy after it, nothing counted (the wrapper goes on to a wait).
    // SAFETY: as above.
    let took = unsafe { owned::after_back_off(t, &m.lock(2), CallSite::default(), || true) };
    assert!(took);
    release(2);
    // SAFETY: as above.
    let took = unsafe { owned::after_back_off(t, &m.lock(3), CallSite::default(), || false) };
    assert!(!took);

    // 4: trylocks: one taken, one busy.
    // SAFETY: as above.
    unsafe {
        owned::tried(t, &m.lock(4), 0);
        engage::releasing(t, m.lock(4).addr);
        owned::tried(t, &m.lock(4), EBUSY);
    }

    // 5: a wait in one real call, on a lock that had an owner, ending in an error.
    // SAFETY: as above.
    let r = unsafe { owned::wait_in_one_call(t, &m.lock(5), true, true, || libc::EINVAL) };
    assert_eq!(r, libc::EINVAL);

    // 6: a spin that takes the lock on its thousandth try.
    let tries = Cell::new(0);
    // SAFETY: as above.
    let r = unsafe {
        owned::spin(t, &m.lock(6), || {
            tries.set(tries.get() + 1);
            tries.get() == 1_000
        })
    };
    assert_eq!((r, tries.get()), (Some(0), 1_000));
    release(6);

    track::finish(end_reason::EXIT);
    let seen = read_log(&dir);
    let at = |i: usize| seen.get(&(m.lock(i).addr as u64));
    let ended = |i: usize, key: u16| at(i).and_then(|s| s.ended.get(&key).copied());

    let s = at(0).expect("the sliced wait's mutex");
    assert_eq!(
        (s.acquisitions, s.contended, s.max_waiters),
        (1, 1, 1),
        "{s:?}"
    );
    assert_eq!(ended(0, counter::ENDED_ACQUIRED), Some(1));
    let s = at(1).expect("the timed-out mutex");
    assert_eq!(
        (s.acquisitions, s.contended, s.timeouts),
        (0, 1, 1),
        "{s:?}"
    );
    assert_eq!(ended(1, counter::ENDED_TIMED_OUT), Some(1));
    let s = at(2).expect("the briefly waited mutex");
    assert_eq!(
        (s.acquisitions, s.contended, s.max_waiters),
        (1, 1, 1),
        "{s:?}"
    );
    assert_eq!(ended(2, counter::ENDED_BRIEF), Some(1));
    assert!(
        at(3).is_none(),
        "a lock still busy after the back-off counts nothing"
    );
    let s = at(4).expect("the tried mutex");
    assert_eq!((s.acquisitions, s.busy, s.contended), (1, 1, 0), "{s:?}");
    let s = at(5).expect("the one-call mutex");
    assert_eq!((s.acquisitions, s.contended, s.errors), (0, 1, 1), "{s:?}");
    assert_eq!(ended(5, counter::ENDED_ERROR), Some(1));
    let s = at(6).expect("the spun mutex");
    assert_eq!((s.acquisitions, s.contended), (1, 1), "{s:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
