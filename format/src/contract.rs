//! Names the shim and the analyzer both rely on outside the records: the environment variables
//! users set, the default log file pattern, the name of the shim's thread (the analyzer finds
//! it by that name to send data requests), and the codes of how a holder's stack was taken.

/// Environment variables read by the shim (and by the analyzer when it inspects a process or
/// launches one).
pub mod env {
    /// The log path; `%p` is replaced by the pid.
    pub const LOG: &str = "WAITSHIM_LOG";
    /// Set and not `0`: the shim loads but tracks nothing and writes no log.
    pub const DISABLE: &str = "WAITSHIM_DISABLE";
    /// Set and not `0`: no "log written" line on stderr at exit.
    pub const QUIET: &str = "WAITSHIM_QUIET";
    /// `all`: every process writes its log. By default a process whose parent is traced too,
    /// that ran on one thread and never waited, leaves none (a build's compilers and shells).
    pub const CHILD_LOGS: &str = "WAITSHIM_CHILD_LOGS";
    /// The policy file.
    pub const POLICY: &str = "WAITSHIM_POLICY";
    /// The data-request signal, or `off`.
    pub const SIGNAL: &str = "WAITSHIM_SIGNAL";
    /// The sampler's interval, or `off`.
    pub const SAMPLE: &str = "WAITSHIM_SAMPLE";
    /// Frames per call chain.
    pub const DEPTH: &str = "WAITSHIM_DEPTH";
    /// Per-wait events ([`crate::WaitEvents`]): `all`, `ring:30s` (the last 30 s only) or `off`.
    pub const EVENTS: &str = "WAITSHIM_EVENTS";
    /// Critical sections lengthened on purpose: `SITE=DURATION[;...]` (`waitshim_policy::delay`).
    pub const DELAY: &str = "WAITSHIM_DELAY";
    /// The analyzer's history database (`history`, `run --history-job`).
    pub const HISTORY: &str = "WAITSHIM_HISTORY";
    /// The shim `waitshim-analyze run` preloads, before the places it searches (README, Install).
    pub const SHIM: &str = "WAITSHIM_SHIM";
}

/// The shim's file name (as installed, and as it shows in a process's mappings).
pub const SHIM_FILE: &str = "libwaitshim.so";

/// The log path when [`env::LOG`] is not set: in the working directory, `%p` the pid.
pub const LOG_PATTERN: &str = "waitshim.%p.log";

/// The kernel name (`comm`) of the shim's own thread. At most 15 bytes, the kernel's limit.
pub const SHIM_THREAD_NAME: &str = "waitshim";

/// The data-request mailbox: a 32-bit word in the log's file header (bytes 12 to 16, zero as
/// written), in the file the shim maps shared. `waitshim-analyze request PID` adds
/// [`mailbox::REQUEST`] to it and wakes the futex on it; the shim's own thread sleeps on that
/// futex, and its other wake-ups add [`mailbox::WAKE`]. No signal is involved: a program's own
/// signals, handlers and masks stay its own.
pub mod mailbox {
    /// The word's offset in the log file.
    pub const OFFSET: usize = 12;
    /// Added by a requester: the low 16 bits count requests.
    pub const REQUEST: u32 = 1;
    /// Added by the shim to wake its thread: the high 16 bits.
    pub const WAKE: u32 = 1 << 16;

    /// The request count in a mailbox word.
    pub fn requests(word: u32) -> u16 {
        word as u16
    }
}

/// [`crate::HolderStack::live`]: how the holder's stack was taken.
pub mod holder_stack {
    /// Where the holder acquired the object (its acquisition chain).
    pub const ACQUIRED: u8 = 0;
    /// What the holder was doing when asked: unwound by the holder itself on a signal.
    pub const BY_SIGNAL: u8 = 1;
    /// Scanned from the holder's stack while it was blocked in a system call.
    pub const SCANNED: u8 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_threads_name_fits_the_kernels_limit() {
        assert!(SHIM_THREAD_NAME.len() <= 15 && !SHIM_THREAD_NAME.contains('\0'));
    }

    #[test]
    fn every_variable_has_the_products_prefix() {
        for v in [
            env::LOG,
            env::DISABLE,
            env::QUIET,
            env::CHILD_LOGS,
            env::POLICY,
            env::SIGNAL,
            env::SAMPLE,
            env::DEPTH,
            env::EVENTS,
            env::DELAY,
            env::HISTORY,
            env::SHIM,
        ] {
            assert!(v.starts_with("WAITSHIM_"), "{v}");
        }
        assert!(LOG_PATTERN.contains("%p"));
    }

    #[test]
    fn each_code_readers_name_has_one_name_and_newer_codes_read_as_unknown() {
        use crate::record::{contention_reason, counter, end_reason, snapshot_source};
        let distinct = |names: Vec<&str>| {
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "{names:?}");
        };
        distinct((1..=3).filter_map(contention_reason::name).collect());
        assert_eq!(contention_reason::name(200), None);
        distinct((1..=4).map(end_reason::name).collect());
        assert_eq!(end_reason::name(200), "unknown");
        distinct((1..=3).map(snapshot_source::name).collect());
        assert_eq!(snapshot_source::name(200), "unknown");
        distinct(counter::ENDED.iter().map(|e| e.1).collect());
        distinct(counter::ENDED.iter().map(|e| e.2).collect());
        let mut keys: Vec<u16> = counter::ENDED.iter().map(|e| e.0).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), counter::ENDED.len());
    }
}
