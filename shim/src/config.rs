//! Configuration from the environment, read once at start.
//!
//! - `WAITSHIM_LOG`: log path; `%p` becomes the pid (default `waitshim.%p.log` in the cwd).
//! - `WAITSHIM_QUIET=1`: no stderr line at exit.
//! - `WAITSHIM_DEPTH`: frames per call chain (1..=64, default 24).
//! - `WAITSHIM_DISABLE=1`: load but trace nothing.
//! - `WAITSHIM_POLICY`: a policy file (JSON) deciding when the expensive data is collected.
//! - `WAITSHIM_SIGNAL`: the data request signal (default `SIGRTMAX-3`; `none` disables).

#[derive(Clone)]
pub struct Config {
    pub log_pattern: Vec<u8>,
    pub quiet: bool,
    pub depth: usize,
    pub disabled: bool,
    pub policy: Option<String>,
    pub signal: Option<String>,
}

fn env(name: &[u8]) -> Option<Vec<u8>> {
    // SAFETY: NUL-terminated name; getenv's result is copied before anything can change it.
    unsafe {
        let p = libc::getenv(name.as_ptr() as *const libc::c_char);
        if p.is_null() {
            None
        } else {
            Some(std::ffi::CStr::from_ptr(p).to_bytes().to_vec())
        }
    }
}

/// A variable that is set and not empty.
fn text(name: &[u8]) -> Option<String> {
    env(name)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

fn flag(name: &[u8]) -> bool {
    matches!(env(name).as_deref(), Some(v) if !v.is_empty() && v != b"0")
}

impl Config {
    /// Reads the environment; a bad value is reported on stderr and replaced by its default.
    pub fn from_env() -> Config {
        let mut depth = 24;
        if let Some(v) = env(b"WAITSHIM_DEPTH\0") {
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
        let log_pattern = match env(b"WAITSHIM_LOG\0") {
            Some(v) if !v.is_empty() => v,
            Some(_) => {
                crate::diag::line("WAITSHIM_LOG is empty; using waitshim.%p.log");
                b"waitshim.%p.log".to_vec()
            }
            None => b"waitshim.%p.log".to_vec(),
        };
        Config {
            log_pattern,
            quiet: flag(b"WAITSHIM_QUIET\0"),
            depth,
            disabled: flag(b"WAITSHIM_DISABLE\0"),
            policy: text(b"WAITSHIM_POLICY\0"),
            signal: text(b"WAITSHIM_SIGNAL\0"),
        }
    }
}
