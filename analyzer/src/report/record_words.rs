//! What a lock contention record says in words. The shim writes the same record for every kind
//! of object: the thread whose act ended the episode goes in its `holder_tid`. Only a mutex, an
//! rwlock and a spinlock are held by a thread; on a condition variable that thread signalled it,
//! on a semaphore it posted, on a barrier it completed the round, on a joined thread it is the
//! thread that exited, on a futex word it woke the sleepers. These rules pick the words, as plain
//! functions of what a record carries.

use waitshim_format::ObjectKind;

/// What the waiters of an object wait for, which decides what a record's `holder_tid` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitedFor {
    /// A thread that holds it (mutex, rwlock, spinlock; an object of unknown kind).
    Holder,
    /// A signal or broadcast (condition variable).
    Signal,
    /// A post (semaphore).
    Post,
    /// The last arrival of the round (barrier).
    Round,
    /// The joined thread's exit.
    Exit,
    /// A wake-up of the futex word.
    Wake,
}

impl WaitedFor {
    pub fn of(kind: Option<ObjectKind>) -> WaitedFor {
        match kind {
            Some(ObjectKind::Cond) => WaitedFor::Signal,
            Some(ObjectKind::Semaphore) => WaitedFor::Post,
            Some(ObjectKind::Barrier) => WaitedFor::Round,
            Some(ObjectKind::Thread) => WaitedFor::Exit,
            Some(ObjectKind::Futex) => WaitedFor::Wake,
            Some(ObjectKind::Mutex | ObjectKind::RwLock | ObjectKind::Spin) | None => {
                WaitedFor::Holder
            }
        }
    }
}

/// The line that says who the waiters waited for, and whether that thread's call chain follows
/// it. `closed`: the record's close is in the log (then `tid` is the thread whose act ended the
/// episode); else `tid` is the holder the shim saw at the opening. `who` names the thread.
pub fn ended_by(w: WaitedFor, closed: bool, tid: u32, who: &str) -> (String, bool) {
    let line = match (w, closed, tid) {
        (WaitedFor::Holder, true, 0) => {
            "holder: none seen (the waiters left without a release this process saw)".to_string()
        }
        (WaitedFor::Holder, true, _) => format!("holder: {who}, released it at:"),
        (WaitedFor::Holder, false, 0) => {
            "holder: not known (none was seen when the episode opened)".to_string()
        }
        (WaitedFor::Holder, false, _) => {
            format!("holder: {who} (had not released it when the log ended)")
        }
        (WaitedFor::Exit, true, 0) => "ended by: the joined thread's exit".to_string(),
        (WaitedFor::Exit, true, _) => format!("ended by: {who} exiting (the joined thread)"),
        (WaitedFor::Exit, false, 0) => "the joined thread had not exited when the log ended".into(),
        (WaitedFor::Exit, false, _) => {
            format!("joined thread: {who} (had not exited when the log ended)")
        }
        (_, true, 0) => format!(
            "ended with {} this process saw ({})",
            match w {
                WaitedFor::Signal => "no signal or broadcast",
                WaitedFor::Post => "no post",
                WaitedFor::Round => "no arrival",
                _ => "no wake-up",
            },
            no_holder(w).0
        ),
        (_, true, _) => {
            let (by, act) = match w {
                WaitedFor::Signal => ("signalled by", "this signal or broadcast"),
                WaitedFor::Post => ("posted by", "this post"),
                WaitedFor::Round => ("completed by", "this arrival, the round's last"),
                _ => ("woken by", "this wake-up"),
            };
            format!(
                "{by}: {who} ({}: the episode ended at {act}), at:",
                no_holder(w).0
            )
        }
        (_, false, _) => format!(
            "{} when the log ended ({}: {})",
            match w {
                WaitedFor::Signal => "not signalled",
                WaitedFor::Post => "not posted",
                WaitedFor::Round => "the round not completed",
                _ => "not woken",
            },
            no_holder(w).0,
            no_holder(w).1
        ),
    };
    let chain = closed && tid != 0 && w != WaitedFor::Exit;
    (line, chain)
}

/// Why an object that nobody holds has no holder in its record: it has none, and what its
/// waiters wait for instead.
fn no_holder(w: WaitedFor) -> (&'static str, &'static str) {
    match w {
        WaitedFor::Signal => (
            "a condition variable has no holder",
            "its waiters wait for a signal",
        ),
        WaitedFor::Post => ("a semaphore has no holder", "its waiters wait for a post"),
        WaitedFor::Round => (
            "a barrier has no holder",
            "its waiters wait for the round's last arrival",
        ),
        _ => (
            "the shim sees no owner of a futex word",
            "its sleepers wait for a wake-up",
        ),
    }
}

/// Why the episode is a record: `reason` as the reports name it (`exceeded`, `serialised`,
/// `object_peak`), with the waiters counted when it opened (`at_open`) and, when the run's
/// highwater mark rose during the episode, how high (`raised_to`).
pub fn opened_why(
    reason: Option<&str>,
    w: WaitedFor,
    at_open: u32,
    raised_to: Option<u32>,
) -> String {
    let waiting = format!("{at_open} waiting");
    match (reason, raised_to) {
        (_, Some(to)) => format!("its waiters rose above the run's highwater mark, to {to}"),
        (Some("exceeded"), None) => "its waiters rose above the run's highwater mark".into(),
        // Nothing to say about a peak or a mark of no waiters.
        (Some(_), None) if at_open == 0 => "with no waiter counted".into(),
        (Some("object_peak"), None) => format!("{waiting}, the most it had had so far"),
        (Some("serialised"), None) => {
            let who = if w == WaitedFor::Holder {
                "every thread but its holder"
            } else {
                "every thread"
            };
            format!(
                "{waiting}, as many as the run's highwater mark, with {who} blocked as the shim \
                 counted them (in waits it tracks, or in a system call at the sampler's last \
                 look): serialised here"
            )
        }
        (Some(other), None) => format!("reason {other}"),
        (None, None) => "unknown reason".into(),
    }
}

/// For a record whose level is 0 (no thread waited behind another by its close, as the shim
/// counted them), what happened to the wait that opened it. `opener_was_holder`: the thread
/// whose wait opened the episode is the one whose act ended it.
pub fn no_waiter(w: WaitedFor, opener: u32, opener_was_holder: bool) -> String {
    match (w, opener_was_holder) {
        (WaitedFor::Round, true) => format!(
            "no thread waited in this episode (HWM 0): thread {opener}'s arrival, counted as a \
             wait, completed the round"
        ),
        (_, true) => format!(
            "no thread waited behind another in this episode (HWM 0): the object was let go as \
             thread {opener}'s wait began, and thread {opener} took it itself"
        ),
        (_, false) => {
            "no thread was counted waiting behind another in this episode (HWM 0)".to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_variable_record_names_the_signaller_not_a_holder() {
        let w = WaitedFor::of(Some(ObjectKind::Cond));
        let (line, chain) = ended_by(w, true, 7, "thread 7");
        assert_eq!(
            line,
            "signalled by: thread 7 (a condition variable has no holder: the episode ended at \
             this signal or broadcast), at:"
        );
        assert!(chain);
        // Still open: nobody had signalled; no thread 0, no holder.
        let (line, chain) = ended_by(w, false, 0, "thread 0");
        assert!(
            line.starts_with("not signalled when the log ended"),
            "{line}"
        );
        assert!(
            !line.contains("thread 0") && !line.starts_with("holder"),
            "{line}"
        );
        assert!(!chain);
    }

    #[test]
    fn only_held_objects_have_a_holder() {
        for kind in [ObjectKind::Mutex, ObjectKind::RwLock, ObjectKind::Spin] {
            let w = WaitedFor::of(Some(kind));
            assert_eq!(
                ended_by(w, true, 3, "thread 3"),
                ("holder: thread 3, released it at:".to_string(), true)
            );
            assert!(ended_by(w, false, 3, "thread 3")
                .0
                .starts_with("holder: thread 3"));
        }
        for kind in [
            ObjectKind::Cond,
            ObjectKind::Semaphore,
            ObjectKind::Barrier,
            ObjectKind::Thread,
            ObjectKind::Futex,
        ] {
            let w = WaitedFor::of(Some(kind));
            for (closed, tid) in [(true, 3), (true, 0), (false, 3), (false, 0)] {
                let (line, _) = ended_by(w, closed, tid, "thread 3");
                assert!(!line.starts_with("holder"), "{kind:?}: {line}");
                assert!(!line.contains("thread 0"), "{kind:?}: {line}");
            }
        }
    }

    #[test]
    fn a_join_names_the_thread_that_exited_without_a_chain() {
        let w = WaitedFor::of(Some(ObjectKind::Thread));
        assert_eq!(
            ended_by(w, true, 9, "thread 9"),
            (
                "ended by: thread 9 exiting (the joined thread)".to_string(),
                false
            )
        );
    }

    #[test]
    fn serialised_says_which_threads_were_blocked_for_the_kind() {
        let held = opened_why(Some("serialised"), WaitedFor::Holder, 3, None);
        assert!(
            held.contains("every thread but its holder blocked"),
            "{held}"
        );
        let cond = opened_why(Some("serialised"), WaitedFor::Signal, 2, None);
        assert!(cond.contains("with every thread blocked"), "{cond}");
        // Neither claims more than the shim counted.
        assert!(!held.contains("could run") && !cond.contains("could run"));
        assert!(cond.contains("as the shim counted them"), "{cond}");
    }

    #[test]
    fn a_record_that_raised_the_mark_says_so_whatever_opened_it() {
        assert_eq!(
            opened_why(Some("object_peak"), WaitedFor::Holder, 1, Some(4)),
            "its waiters rose above the run's highwater mark, to 4"
        );
        assert_eq!(
            opened_why(Some("object_peak"), WaitedFor::Holder, 2, None),
            "2 waiting, the most it had had so far"
        );
        assert_eq!(
            opened_why(Some("serialised"), WaitedFor::Signal, 0, None),
            "with no waiter counted"
        );
    }

    #[test]
    fn a_record_of_level_zero_says_what_became_of_its_wait() {
        let m = no_waiter(WaitedFor::Holder, 5, true);
        assert!(
            m.contains("HWM 0") && m.contains("thread 5 took it itself"),
            "{m}"
        );
        let b = no_waiter(WaitedFor::Round, 5, true);
        assert!(b.contains("completed the round"), "{b}");
        let other = no_waiter(WaitedFor::Signal, 5, false);
        assert!(other.contains("HWM 0"), "{other}");
    }
}
