//! The shim's only output besides the log: short lines on stderr, written with `write(2)` so that
//! no stdio buffer of the program is touched.

/// Writes `waitshim: <msg>\n` to stderr in one `write` call when it fits the buffer.
pub fn line(msg: &str) {
    line_parts(&[msg]);
}

/// As [`line`], with the message in pieces; allocates nothing (for signal handlers).
pub fn line_parts(parts: &[&str]) {
    let mut buf = [0u8; 512];
    let prefix = b"waitshim: ";
    let mut n = 0;
    let bytes = prefix.iter().chain(parts.iter().flat_map(|p| p.as_bytes()));
    for &b in bytes.take(buf.len() - 1) {
        buf[n] = b;
        n += 1;
    }
    buf[n] = b'\n';
    n += 1;
    // SAFETY: writing an initialised buffer to fd 2; a failed write is ignored on purpose.
    unsafe {
        libc::write(2, buf.as_ptr() as *const libc::c_void, n);
    }
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
