//! What a blocked thread waits on, in words: the file, pipe or socket behind a descriptor (with
//! its addresses), the descriptors an epoll set watches, the path an `open` waits for.

use super::*;

/// The path a thread blocked in `open` or `openat` opens (the numbers are x86-64's: 2 and 257,
/// the path their first and second argument), read from the process's own memory with
/// `process_vm_readv`, which fails cleanly on an address that is not mapped. None for other
/// calls.
pub(super) fn opened_path(nr: i32, arg0: u64, arg1: u64) -> Option<String> {
    let ptr = match nr {
        2 if cfg!(target_arch = "x86_64") => arg0,
        257 if cfg!(target_arch = "x86_64") => arg1,
        _ => return None,
    };
    if ptr == 0 {
        return None;
    }
    let mut buf = [0u8; 256];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // The whole buffer's worth, or, when that crosses into an unmapped page (the call reads
    // one piece whole or not at all), up to the end of the page the path starts in.
    let room = 4096 - (ptr as usize % 4096);
    let read = |len: usize| {
        let remote = libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: reads this process's memory through the kernel into a local buffer; an
        // unmapped address gives an error, not a fault.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        usize::try_from(n).ok()
    };
    let n = read(buf.len()).or_else(|| read(buf.len().min(room)))?;
    let bytes = &buf[..n];
    let path = &bytes[..bytes.iter().position(|&b| b == 0)?];
    // Not looked up (no `stat`): the file system the thread is stuck in (a network or FUSE
    // mount) would hold the sampler too.
    Some(String::from_utf8_lossy(path).into_owned())
}

/// Whether the first argument of system call `nr` is a descriptor (the numbers are x86-64's).
pub fn takes_fd(nr: i32) -> bool {
    cfg!(target_arch = "x86_64") && waitshim_format::syscalls::takes_fd(nr)
}

/// What a thread blocked in system call `nr` with first arguments `arg0` and `arg1` waits on
/// (seed 004): the path it opens, the descriptor's file, pipe or socket (with its protocol and
/// addresses: the shim is in the process, so the descriptor is its own to ask), the
/// descriptors an epoll set watches, the child a `wait4` waits for, the word of a futex the
/// shim does not track. Empty when nothing more than the call's name can be said. Called only when a thread enters the state.
///
/// The descriptors are the program's, named through thread `tid`'s view in `/proc` (the
/// sampler's thread has a table of its own: see `crate::fdtable`).
pub fn describe(tid: u32, nr: i32, arg0: u64, arg1: u64) -> String {
    let mut out = String::new();
    if let Some(path) = opened_path(nr, arg0, arg1) {
        out = path;
    } else if takes_fd(nr) {
        let fd = arg0 as i32;
        let link = std::fs::read_link(format!("/proc/self/task/{tid}/fd/{fd}"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push_str(&link);
        if link.starts_with("socket:[") {
            if let Some(s) = program_socket_text(fd) {
                out.push(' ');
                out.push_str(&s);
            }
        } else if link == "anon_inode:[eventpoll]" {
            // One open of the set's fdinfo, when the thread enters its wait.
            let info = std::fs::read_to_string(format!("/proc/self/task/{tid}/fdinfo/{fd}"))
                .unwrap_or_default();
            let watched: Vec<i32> = info
                .lines()
                .filter_map(|l| l.strip_prefix("tfd:"))
                .filter_map(|l| l.split_ascii_whitespace().next()?.parse().ok())
                .collect();
            out.push_str(&watched_text(tid, &watched));
        }
    } else if cfg!(target_arch = "x86_64") && nr == 202 {
        out = format!("untracked futex word {arg0:#x}");
    } else if cfg!(target_arch = "x86_64") && nr == 61 {
        out = match arg0 as i64 as i32 {
            -1 => "any child".to_string(),
            pid if pid > 0 => format!("child {pid}"),
            pid => format!("process group {}", -pid),
        };
    }
    out.chars().take(200).collect()
}

/// What an epoll set watches: each descriptor with what it is (a pipe, a file's path, a
/// socket with its addresses), as many as fit in the 200 characters a description keeps, then
/// how many more.
pub(super) fn watched_text(tid: u32, fds: &[i32]) -> String {
    let mut out = String::new();
    if fds.is_empty() {
        return out;
    }
    out.push_str(if fds.len() == 1 {
        " watching fd"
    } else {
        " watching fds"
    });
    for (i, &fd) in fds.iter().enumerate() {
        let mut item = format!("{} {fd}", if i == 0 { "" } else { "," });
        if let Ok(link) = std::fs::read_link(format!("/proc/self/task/{tid}/fd/{fd}")) {
            let link = link.to_string_lossy();
            item.push(' ');
            match link
                .starts_with("socket:[")
                .then(|| program_socket_text(fd))
                .flatten()
            {
                Some(s) => item.push_str(&s),
                None => item.push_str(&link),
            }
        }
        // The 200 less what the set's own name took ("anon_inode:[eventpoll]").
        if out.len() + item.len() > 150 {
            out.push_str(&format!(" and {} more", fds.len() - i));
            break;
        }
        out.push_str(&item);
    }
    out
}

/// `what` with the thread's run state, when it says more than the system call (see
/// [`run_state_words`]): `/data/db (uninterruptible: disk or other I/O)`. One open, `pread`
/// and close of `/proc/self/task/TID/stat`, only when a thread is seen entering a blocked
/// state (the file is not kept: the ones read at every look are).
pub(super) fn with_run_state(mut what: String, tid: u32) -> String {
    let Some(fd) = open_plain(&format!("/proc/self/task/{tid}/stat")) else {
        return what;
    };
    let mut buf = [0u8; 1024];
    let words = pread_all(fd, &mut buf)
        .and_then(parse_stat)
        .and_then(|(state, _)| run_state_words(state));
    close_plain(fd);
    if let Some(words) = words {
        if !what.is_empty() {
            what.push(' ');
        }
        what.push('(');
        what.push_str(words);
        what.push(')');
    }
    what
}

/// A socket's protocol and addresses: `tcp 127.0.0.1:8080 listening`, `tcp 127.0.0.1:41234 ->
/// 127.0.0.1:8080`, `unix /run/x.sock`.
/// [`socket_text`] of the program's descriptor `fd`: asked of a copy in the sampler's own table
/// (`pidfd_getfd` on this process, closed after) when it has one, else of `fd` itself.
pub(super) fn program_socket_text(fd: i32) -> Option<String> {
    if !crate::fdtable::own() {
        return socket_text(fd);
    }
    let copy = crate::fdtable::copy_of_programs(fd)?;
    let text = socket_text(copy);
    // SAFETY: the copy this call made, in the sampler's own table.
    unsafe { libc::close(copy) };
    text
}

pub(super) fn socket_text(fd: i32) -> Option<String> {
    let opt = |name: libc::c_int| -> Option<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt into a local int of the right size.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    let domain = opt(libc::SO_DOMAIN)?;
    let ty = opt(libc::SO_TYPE).unwrap_or(0);
    let listening = opt(libc::SO_ACCEPTCONN).unwrap_or(0) != 0;
    let proto = match (domain, ty) {
        (libc::AF_INET | libc::AF_INET6, libc::SOCK_STREAM) => "tcp",
        (libc::AF_INET | libc::AF_INET6, libc::SOCK_DGRAM) => "udp",
        (libc::AF_UNIX, _) => "unix",
        (libc::AF_NETLINK, _) => "netlink",
        _ => "socket",
    };
    let addr = |peer: bool| -> Option<String> {
        // SAFETY: a zeroed sockaddr_storage is a valid out-parameter; its length is passed.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let p = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
        // SAFETY: as above.
        let r = unsafe {
            if peer {
                libc::getpeername(fd, p, &mut len)
            } else {
                libc::getsockname(fd, p, &mut len)
            }
        };
        if r != 0 {
            return None;
        }
        sockaddr_text(&ss, len as usize)
    };
    let mut out = proto.to_string();
    if let Some(local) = addr(false) {
        out.push(' ');
        out.push_str(&local);
    }
    if listening {
        out.push_str(" listening");
    } else if let Some(peer) = addr(true) {
        out.push_str(" -> ");
        out.push_str(&peer);
    }
    Some(out)
}

pub(super) fn sockaddr_text(ss: &libc::sockaddr_storage, len: usize) -> Option<String> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(format!("{ip}:{}", u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(format!("[{ip}]:{}", u16::from_be(a.sin6_port)))
        }
        libc::AF_UNIX => {
            // SAFETY: the family says the storage holds a sockaddr_un.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_un>() };
            let path_len = len.saturating_sub(std::mem::size_of::<libc::sa_family_t>());
            let bytes: Vec<u8> = a.sun_path[..path_len.min(a.sun_path.len())]
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
        }
        _ => None,
    }
}
