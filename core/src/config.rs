//! Configuration from the environment, read once at start.
//!
//! - `WAITSHIM_LOG`: log path; `%p` becomes the pid (default `waitshim.%p.log` in the cwd).
//! - `WAITSHIM_QUIET=1`: no stderr line at exit.
//! - `WAITSHIM_CHILD_LOGS=all`: keep the logs of child processes that had nothing to report.
//! - `WAITSHIM_DEPTH`: frames per call chain (1..=64, default 24).
//! - `WAITSHIM_DISABLE=1`: load but trace nothing.
//! - `WAITSHIM_POLICY`: a policy file (JSON) deciding when the expensive data is collected.
//! - `WAITSHIM_SIGNAL`: the data request signal (default `SIGRTMAX-3`; `none` disables).
//! - `WAITSHIM_SAMPLE`: the sampler's interval (`10ms` default, `1ms` to `10s`; `off`); wins
//!   over the policy file's `sample`.
//! - `WAITSHIM_EVENTS`: per-wait events, `all` (default), `ring:30s` (the last 30 s) or `off`;
//!   wins over the policy file's `events`.
//! - `WAITSHIM_DELAY`: `SITE=DURATION[;...]`, critical sections of the selected locks lengthened
//!   on purpose by a busy delay (`crate::delay`).

use waitshim_format::contract::{env as var, LOG_PATTERN};

#[derive(Clone)]
pub struct Config {
    pub log_pattern: Vec<u8>,
    pub quiet: bool,
    /// Every process keeps its log (`WAITSHIM_CHILD_LOGS=all`), even a traced process's child
    /// that ran on one thread and never waited.
    pub all_child_logs: bool,
    pub depth: usize,
    pub disabled: bool,
    pub policy: Option<String>,
    pub signal: Option<String>,
    /// `WAITSHIM_SAMPLE`, the sampler's interval in ns, 0: off (None: not set, or not valid;
    /// the policy file may then say).
    pub sample_ns: Option<u64>,
    /// `WAITSHIM_EVENTS` (None: not set, or not valid; the policy file may then say).
    pub events: Option<EventsMode>,
    /// `WAITSHIM_DELAY` as set (checked when tracking starts, `crate::delay::init`).
    pub delay: Option<String>,
}

pub use waitshim_policy::events::{parse as parse_events, EventsMode};
pub use waitshim_policy::sample::parse as parse_sample;

/// Per-wait events when neither `WAITSHIM_EVENTS` nor the policy file says: every event. At 8
/// to 13 bytes a blocked wait (the brief waits a back-off absorbs are not events) the log grows
/// far less with them than the waits cost the program; `ring:N` bounds it for long runs.
pub const DEFAULT_EVENTS: EventsMode = EventsMode::All;

/// The sampler's interval when `WAITSHIM_SAMPLE` is not set.
pub const DEFAULT_SAMPLE_NS: u64 = 10_000_000;

fn env(name: &str) -> Option<Vec<u8>> {
    let mut z = [0u8; 32];
    let n = name.len().min(z.len() - 1);
    z[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: NUL-terminated name; getenv's result is copied before anything can change it.
    unsafe {
        let p = libc::getenv(z.as_ptr() as *const libc::c_char);
        if p.is_null() {
            None
        } else {
            Some(std::ffi::CStr::from_ptr(p).to_bytes().to_vec())
        }
    }
}

/// A variable that is set and not empty.
fn text(name: &str) -> Option<String> {
    env(name)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

fn flag(name: &str) -> bool {
    matches!(env(name).as_deref(), Some(v) if !v.is_empty() && v != b"0")
}

impl Config {
    /// Reads the environment; a bad value is reported on stderr and replaced by its default.
    pub fn from_env() -> Config {
        let mut depth = 24;
        if let Some(v) = env(var::DEPTH) {
            match std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
            {
                Some(d) if (1..=64).contains(&d) => depth = d,
                _ => crate::diag::line(&format!(
                    "WAITSHIM_DEPTH={:?} is not a number from 1 to 64; using {depth}",
                    String::from_utf8_lossy(&v)
                )),
            }
        }
        let log_pattern = match env(var::LOG) {
            Some(v) if !v.is_empty() => v,
            Some(_) => {
                crate::diag::line(&format!("{} is empty; using {LOG_PATTERN}", var::LOG));
                LOG_PATTERN.as_bytes().to_vec()
            }
            None => LOG_PATTERN.as_bytes().to_vec(),
        };
        let sample_ns = text(var::SAMPLE).map(|v| {
            parse_sample(&v).unwrap_or_else(|e| {
                crate::diag::line(&format!("WAITSHIM_SAMPLE: {e}; sampling every 10ms"));
                DEFAULT_SAMPLE_NS
            })
        });
        let events = text(var::EVENTS).map(|v| {
            parse_events(&v).unwrap_or_else(|e| {
                crate::diag::line(&format!("WAITSHIM_EVENTS: {e}; writing all events"));
                DEFAULT_EVENTS
            })
        });
        Config {
            events,
            log_pattern,
            sample_ns,
            quiet: flag(var::QUIET),
            all_child_logs: text(var::CHILD_LOGS).is_some_and(|v| v == "all"),
            depth,
            disabled: flag(var::DISABLE),
            policy: text(var::POLICY),
            signal: text(var::SIGNAL),
            delay: text(var::DELAY),
        }
    }
}

/// The text of the regular file at `path`, at most `cap` bytes, for the shim's own settings
/// files. Anything else is refused before it is opened, so that it can neither block the
/// program (a FIFO with no writer blocks `open`) nor grow memory without bound (`/dev/zero`);
/// the descriptor is held only while reading.
pub fn read_small_file(path: &str, cap: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let kind = |t: std::fs::FileType| {
        if t.is_dir() {
            "a directory"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        }
    };
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err(format!("it is {}, not a file", kind(meta.file_type())));
    }
    if meta.len() > cap {
        return Err(format!(
            "it is {} bytes long, more than the {cap} allowed",
            meta.len()
        ));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot read it: {e}"))?;
    // Replaced between the two looks: check what was opened.
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err(format!("it is {}, not a file", kind(meta.file_type())));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > cap {
        return Err(format!("it is more than the {cap} bytes allowed"));
    }
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())
}
