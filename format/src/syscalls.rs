//! The system calls a blocked thread is found in (x86-64 numbers): their names, whether their
//! first argument is a descriptor (the shim then says what the descriptor is), and whether the
//! wait is for I/O on descriptors (a trace colours those apart). Shared by the shim's sampler,
//! which writes the numbers, and the analyzer, which names them.

/// (number, name, first argument is a descriptor, waits for I/O on descriptors)
const TABLE: &[(i32, &str, bool, bool)] = &[
    (0, "read", true, true),
    (1, "write", true, true),
    (7, "poll", false, true),
    (16, "ioctl", true, true),
    (17, "pread64", true, true),
    (18, "pwrite64", true, true),
    (19, "readv", true, true),
    (20, "writev", true, true),
    (23, "select", false, true),
    (34, "pause", false, false),
    (35, "nanosleep", false, false),
    (40, "sendfile", true, true),
    (42, "connect", true, true),
    (43, "accept", true, true),
    (44, "sendto", true, true),
    (45, "recvfrom", true, true),
    (46, "sendmsg", true, true),
    (47, "recvmsg", true, true),
    (61, "wait4", false, false),
    (65, "semop", false, false),
    (72, "fcntl", true, false),
    (73, "flock", true, false),
    (74, "fsync", true, true),
    (75, "fdatasync", true, true),
    (128, "rt_sigtimedwait", false, false),
    (130, "rt_sigsuspend", false, false),
    (202, "futex", false, false),
    (230, "clock_nanosleep", false, false),
    (232, "epoll_wait", true, true),
    (247, "waitid", false, false),
    (270, "pselect6", false, true),
    (271, "ppoll", false, true),
    (275, "splice", true, true),
    (281, "epoll_pwait", true, true),
    (288, "accept4", true, true),
    (295, "preadv", true, true),
    (296, "pwritev", true, true),
    (299, "recvmmsg", true, true),
    (307, "sendmmsg", true, true),
    (426, "io_uring_enter", false, true),
    (441, "epoll_pwait2", true, true),
];

fn find(nr: i32) -> Option<&'static (i32, &'static str, bool, bool)> {
    TABLE.iter().find(|e| e.0 == nr)
}

/// The name of system call `nr`, for the calls threads block in.
pub fn name(nr: i32) -> Option<&'static str> {
    find(nr).map(|e| e.1)
}

/// Whether the first argument of system call `nr` is a descriptor.
pub fn takes_fd(nr: i32) -> bool {
    find(nr).is_some_and(|e| e.2)
}

/// Whether a thread blocked in system call `nr` waits for I/O on descriptors.
pub fn is_io(nr: i32) -> bool {
    find(nr).is_some_and(|e| e.3)
}

/// The kinds of resource a blocked thread can wait on, as policy rules name them (`"resource"`
/// in a rule's `match`) and reports group them: see [`resource_kind`].
pub const RESOURCE_KINDS: &[&str] = &[
    "file", "pipe", "socket", "epoll", "eventfd", "timerfd", "signalfd", "inotify", "poll",
    "sleep", "futex", "child", "signal", "other",
];

/// What kind of resource a thread blocked in system call `nr` waits on, from the call and from
/// what the sampler found its descriptor to be (`what`: `pipe:[123]`, `socket:[456] tcp ...`,
/// `anon_inode:[eventpoll] ...`, a path): one of [`RESOURCE_KINDS`].
pub fn resource_kind(nr: i32, what: &str) -> &'static str {
    if takes_fd(nr) {
        let kinds: [(&str, &'static str); 7] = [
            ("pipe:[", "pipe"),
            ("socket:[", "socket"),
            ("anon_inode:[eventpoll]", "epoll"),
            ("anon_inode:[eventfd]", "eventfd"),
            ("anon_inode:[timerfd]", "timerfd"),
            ("anon_inode:[signalfd]", "signalfd"),
            ("anon_inode:inotify", "inotify"),
        ];
        if let Some(&(_, kind)) = kinds.iter().find(|(p, _)| what.starts_with(p)) {
            return kind;
        }
        if what.starts_with('/') {
            return "file";
        }
        // A descriptor the sampler could not name (it was closed meanwhile).
        return "other";
    }
    match name(nr) {
        Some("poll" | "select" | "pselect6" | "ppoll") => "poll",
        Some("nanosleep" | "clock_nanosleep" | "pause") => "sleep",
        Some("futex") => "futex",
        Some("wait4" | "waitid") => "child",
        Some("rt_sigtimedwait" | "rt_sigsuspend") => "signal",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_is_listed_once_with_its_properties() {
        let mut nrs: Vec<i32> = TABLE.iter().map(|e| e.0).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), TABLE.len());
        assert_eq!(name(0), Some("read"));
        assert!(takes_fd(43) && is_io(43));
        assert!(
            takes_fd(73) && !is_io(73),
            "flock waits for a lock, not I/O"
        );
        assert!(
            !takes_fd(7) && is_io(7),
            "poll's first argument is an array"
        );
        assert!(!takes_fd(202) && !is_io(202) && name(9999).is_none());
    }

    #[test]
    fn a_blocked_call_is_classed_by_what_its_descriptor_is() {
        assert_eq!(resource_kind(0, "pipe:[4711]"), "pipe");
        assert_eq!(
            resource_kind(43, "socket:[9] tcp 127.0.0.1:80 listening"),
            "socket"
        );
        assert_eq!(
            resource_kind(232, "anon_inode:[eventpoll] watching fds 4"),
            "epoll"
        );
        assert_eq!(resource_kind(0, "anon_inode:[eventfd]"), "eventfd");
        assert_eq!(resource_kind(73, "/tmp/lock"), "file");
        assert_eq!(
            resource_kind(0, ""),
            "other",
            "a descriptor closed meanwhile"
        );
        assert_eq!(resource_kind(35, ""), "sleep");
        assert_eq!(resource_kind(202, "untracked futex word 0x10"), "futex");
        assert_eq!(resource_kind(61, "child 42"), "child");
        assert_eq!(resource_kind(7, ""), "poll");
        assert_eq!(resource_kind(-1, ""), "other");
        for nr in TABLE.iter().map(|e| e.0) {
            assert!(RESOURCE_KINDS.contains(&resource_kind(nr, "")));
        }
    }
}
