//! The shim's only output besides the log: short lines on stderr, written with `write(2)` so that
//! no stdio buffer of the program is touched.
//!
//! Only to the stderr the program started with: a daemon that closes descriptor 2 and opens a
//! data file that gets the number 2 must not find the shim's lines in its data. The identity of
//! descriptor 2 is noted at start ([`init`]) and checked before every line.

use std::sync::atomic::{AtomicU64, Ordering};

/// (st_dev, st_ino) of descriptor 2 at start, folded into one word; 0: stderr was not open, the
/// shim says nothing.
static STDERR_ID: AtomicU64 = AtomicU64::new(0);

fn fd2_id() -> u64 {
    id_of(2)
}

fn id_of(fd: i32) -> u64 {
    // SAFETY: fstat into a local struct; async-signal-safe.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return 0;
        }
        (st.st_dev.rotate_left(32) ^ st.st_ino).max(1)
    }
}

/// Notes which file descriptor 2 is (at start, before the program runs).
pub fn init() {
    STDERR_ID.store(fd2_id(), Ordering::Relaxed);
}

/// Whether descriptor `fd` is the stderr the program started with.
fn is_programs_stderr(fd: i32) -> bool {
    let id = STDERR_ID.load(Ordering::Relaxed);
    id != 0 && id_of(fd) == id
}

/// Writes `waitshim: <msg>\n` to stderr in one `write` call.
pub fn line(msg: &str) {
    line_parts(&[msg]);
}

/// Bytes of a line at most; a longer one keeps its beginning and its end (where the reason is:
/// "cannot create log <long path>: <reason>") around a marker.
const LINE_MAX: usize = 1024;
const HEAD: usize = 300;
const CUT: &[u8] = " [...] ".as_bytes();

/// As [`line`](fn@line), with the message in pieces; allocates nothing (for signal handlers).
pub fn line_parts(parts: &[&str]) {
    // The shim's thread keeps a descriptor table of its own (`crate::fdtable`), without the
    // program's stderr: it writes through a copy of it, taken for the line and closed after.
    let fd = if crate::fdtable::on_own_table() {
        match crate::fdtable::copy_of_programs(2) {
            Some(fd) => fd,
            None => return,
        }
    } else {
        2
    };
    if is_programs_stderr(fd) {
        let mut buf = [0u8; LINE_MAX];
        let n = compose(parts, &mut buf);
        // SAFETY: writing an initialised buffer; a failed write is ignored on purpose.
        unsafe {
            libc::write(fd, buf.as_ptr() as *const libc::c_void, n);
        }
    }
    if fd != 2 {
        // SAFETY: the copy taken above, in the calling thread's own table.
        unsafe { libc::close(fd) };
    }
}

/// `waitshim: ` + the parts + a newline into `buf`, cut in the middle if too long; the length.
fn compose(parts: &[&str], buf: &mut [u8; LINE_MAX]) -> usize {
    let prefix = b"waitshim: ";
    let total = prefix.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    let bytes = || prefix.iter().chain(parts.iter().flat_map(|p| p.as_bytes()));
    let room = LINE_MAX - 1;
    let mut n = 0;
    if total <= room {
        for &b in bytes() {
            buf[n] = b;
            n += 1;
        }
    } else {
        let tail = room - HEAD - CUT.len();
        for &b in bytes()
            .take(HEAD)
            .chain(CUT)
            .chain(bytes().skip(total - tail))
        {
            buf[n] = b;
            n += 1;
        }
    }
    buf[n] = b'\n';
    n + 1
}

#[cold]
pub fn fatal_missing_symbol(name: &[u8]) -> ! {
    let name = String::from_utf8_lossy(&name[..name.len().saturating_sub(1)]).into_owned();
    line(&format!(
        "the C library has no `{name}`; cannot run this program under waitshim"
    ));
    // SAFETY: abort is always safe to call.
    unsafe { libc::abort() }
}

/// One line on stderr and the same as a warning in the log.
pub fn say(log: &crate::log::Log, msg: &str) {
    line(msg);
    log.write(
        &waitshim_format::Note {
            ns: crate::clock::now_ns(),
            level: waitshim_format::note_level::WARNING,
            text: msg.into(),
        }
        .into(),
    );
}
