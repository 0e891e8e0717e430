//! The file an export (or `diff --html`) writes: a hidden file beside its destination, renamed
//! over it once complete, so that a failed export leaves nothing half-written under the name
//! asked for. It is removed whenever the export does not complete: a write error (a full disk,
//! the file size limit: the analyzer ignores SIGXFSZ, see [`crate::ignore_file_size_signal`]),
//! and SIGINT, SIGTERM or SIGHUP while it is written, which then end the analyzer as they would
//! have.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The signals that remove the file before ending the analyzer.
const ENDING: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The path of the file being written, for the signal handler (null: none).
static PENDING: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn remove_and_end(sig: libc::c_int) {
    let path = PENDING.swap(std::ptr::null_mut(), Ordering::SeqCst);
    // SAFETY: unlink, sigaction and raise are async-signal-safe; `path` is a C string that
    // stays allocated (whoever swaps it out owns it, and the handler never frees it). The
    // signal raised is blocked until the handler returns, then ends the process by default.
    unsafe {
        if !path.is_null() {
            libc::unlink(path);
        }
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// A file written beside `dest`; see the module documentation.
pub struct TempOut {
    path: PathBuf,
    /// Whether the file at `path` is still this export's to remove (not yet renamed).
    ours: bool,
    /// The dispositions [`ENDING`] had before.
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl TempOut {
    /// Creates the hidden file beside `dest` (never replacing a file: a name that is taken,
    /// say by an earlier export killed with SIGKILL, gets a number) and opens it for writing.
    pub fn create(dest: &Path) -> Result<(TempOut, File), String> {
        let first = super::temp_beside(dest)?;
        let mut path = first.clone();
        let mut n = 0;
        let file = loop {
            match File::options().write(true).create_new(true).open(&path) {
                Ok(f) => break f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 100 => {
                    n += 1;
                    let mut name = first.clone().into_os_string();
                    name.push(format!(".{n}"));
                    path = PathBuf::from(name);
                }
                Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
            }
        };
        let mut out = TempOut {
            path,
            ours: true,
            old: Vec::new(),
        };
        // Known to the handler only once it is ours: a signal never removes another's file.
        if let Ok(c) = CString::new(out.path.as_os_str().as_bytes()) {
            let earlier = PENDING.swap(c.into_raw(), Ordering::SeqCst);
            if !earlier.is_null() {
                // SAFETY: a pointer from CString::into_raw that no handler took.
                drop(unsafe { CString::from_raw(earlier) });
            }
            out.catch();
        }
        Ok((out, file))
    }

    fn catch(&mut self) {
        for sig in ENDING {
            // SAFETY: sigaction on zeroed structs; the handler is async-signal-safe.
            unsafe {
                let mut cur: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut cur) != 0
                    || cur.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction =
                    remove_and_end as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) == 0 {
                    self.old.push((sig, cur));
                }
            }
        }
    }

    /// The file, complete, takes the name `dest`.
    pub fn commit(mut self, dest: &Path) -> io::Result<()> {
        std::fs::rename(&self.path, dest)?;
        self.ours = false;
        Ok(())
    }
}

impl Drop for TempOut {
    fn drop(&mut self) {
        // Forgotten by the handler first: once renamed, the file is the user's.
        let p = PENDING.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: a pointer from CString::into_raw that no handler took.
            drop(unsafe { CString::from_raw(p) });
        }
        if self.ours {
            let _ = std::fs::remove_file(&self.path);
        }
        for (sig, old) in &self.old {
            // SAFETY: restoring a disposition sigaction returned.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}
