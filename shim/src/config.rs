//! Configuration from the environment, read once at start.
//!
//! - `WAITSHIM_LOG`: log path; `%p` becomes the pid (default `waitshim.%p.log` in the cwd).
//! - `WAITSHIM_QUIET=1`: no stderr line at exit.
//! - `WAITSHIM_DEPTH`: frames per call chain (1..=64, default 24).
//! - `WAITSHIM_DISABLE=1`: load but trace nothing.

#[derive(Clone)]
pub struct Config {
    pub log_pattern: Vec<u8>,
    pub quiet: bool,
    pub depth: usize,
    pub disabled: bool,
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
        }
    }
}
