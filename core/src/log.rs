//! The log writer. The file is mapped `MAP_SHARED` into a large reserved address range; a writer
//! reserves its frame with one atomic add on the cursor, fills it in place and publishes it by
//! storing the frame tag last. What is stored in the mapping is in the page cache at once, so a
//! SIGKILL, `_exit` or crash loses nothing already written, and no thread ever waits on another
//! to write (heaptrack's single output lock serialises the program it measures; this does not).
//!
//! The file grows ahead of the cursor with `fallocate` (real blocks: a full disk fails the grow,
//! instead of raising SIGBUS later on a page of a sparse file), never past the process's file
//! size limit (`ulimit -f`: growing past it would raise SIGXFSZ, which kills the program). The
//! last `TAIL` bytes of what is allocated are kept for the records that end the log (the
//! note saying it filled up, the end record with the count of what was dropped), so a log
//! that could not grow still says so, and how much it lost.

use std::ffi::CString;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use waitshim_format::{frame, Record};

/// Address space reserved for the mapping (not memory: pages exist only where written), largest
/// first: some environments (valgrind, address-space limits) refuse large reservations.
const RESERVES: [usize; 4] = [64 << 30, 4 << 30, 1 << 30, 128 << 20];
const FIRST_SIZE: usize = 1 << 20;
/// Kept free for [`Log::write_final`] records.
const TAIL: usize = 64 << 10;
/// The smallest file worth starting with (header, start records, the tail).
const MIN_SIZE: usize = 2 * TAIL;

pub struct Log {
    /// A descriptor of the file in the program's table, -1 if none (the mapping needs none):
    /// held only while the log is created, and when the shim's thread has to share the
    /// program's table (then at the high numbers: see [`move_high`]). The program may still
    /// close it (daemons close every descriptor they did not open) and reuse its number, so it
    /// is checked against `id` before every use. Without one, a thread that must grow the file
    /// opens it by its path for that call alone.
    fd: AtomicI32,
    /// The shim's thread's descriptor of the file, in its own table (or the program's: see
    /// `fd`), with which it grows the file ahead of the writers ([`Log::grow_ahead`]); -1 until
    /// that thread runs.
    shim_fd: AtomicI32,
    /// (st_dev, st_ino) of the log file.
    id: (u64, u64),
    /// The most the file may take of its disk ([`DISK_SHARE`]).
    disk_cap: usize,
    /// The reservation was kept small by an address-space limit.
    reserve_limited: bool,
    base: *mut u8,
    reserve: usize,
    cursor: AtomicUsize,
    file_len: AtomicUsize,
    growing: AtomicBool,
    full: AtomicBool,
    /// Why the log stopped growing (an errno; `EFBIG` for the file size limit), 0 while it grows.
    pub full_errno: AtomicI32,
    /// Where the log stood when it filled up.
    pub full_at: AtomicUsize,
    closed: AtomicBool,
    /// Writers between their reservation and their commit.
    active: AtomicU32,
    pub dropped: AtomicU64,
    pub path: String,
    /// `path`, absolute (the program may change its working directory), as a C string made
    /// once: reopening the file (from a signal handler too, when the log is closed there) must
    /// not allocate.
    path_c: CString,
}

// SAFETY: `base` points to a shared mapping that lives as long as the process; every writer
// touches only the bytes it reserved through the atomic cursor.
unsafe impl Send for Log {}
// SAFETY: as above.
unsafe impl Sync for Log {}

/// `full_errno` of a log whose file another process truncated (see [`Log::take_fault`]).
const CUT_SHORT: i32 = 1_000_001;
/// `full_errno` of a log that reached its share of the disk ([`DISK_SHARE`]).
const DISK_SHARE_REACHED: i32 = 1_000_002;
/// `full_errno` of a log that filled the address space reserved for it, which an address-space
/// limit (`ulimit -v`) kept small ([`AS_SHARE`]).
const RESERVE_FILLED: i32 = 1_000_003;

/// The log takes at most 1/`DISK_SHARE` of the space that was free on its file system when it
/// started: the program's own files must fit as they would without it.
const DISK_SHARE: u64 = 4;
/// Under an address-space limit (`ulimit -v`), the log's mapping reserves at most
/// 1/`AS_SHARE` of it: the program's memory must fit as it would without it.
const AS_SHARE: usize = 32;
/// The file grows by an eighth of its size at a time, within these bounds: the disk space it
/// takes ahead of what is written stays small.
const GROW_MIN: usize = FIRST_SIZE;
const GROW_MAX: usize = 64 << 20;

/// Why the log could not be created.
pub struct OpenFailure(pub String);

fn expand(pattern: &[u8], pid: u32, attempt: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(pattern.len() + 16);
    let mut i = 0;
    while i < pattern.len() {
        if pattern[i] == b'%' && pattern.get(i + 1) == Some(&b'p') {
            out.extend_from_slice(pid.to_string().as_bytes());
            i += 2;
        } else {
            out.push(pattern[i]);
            i += 1;
        }
    }
    if attempt > 0 {
        // The same pid after exec, or a leftover file: never clobber, pick the next free name.
        let suffix = format!(".{attempt}");
        match out.iter().rposition(|&b| b == b'.') {
            Some(dot) if !out[dot..].contains(&b'/') => {
                out.splice(dot..dot, suffix.bytes());
            }
            _ => out.extend_from_slice(suffix.as_bytes()),
        }
    }
    out
}

impl Log {
    /// Creates the log file (never following a symlink, never replacing a file, mode 0600),
    /// maps it and writes the file header.
    pub fn create(pattern: &[u8], pid: u32) -> Result<Log, OpenFailure> {
        let mut fd = -1;
        let mut path = Vec::new();
        for attempt in 0..100 {
            path = expand(pattern, pid, attempt);
            let c = CString::new(path.clone())
                .map_err(|_| OpenFailure("WAITSHIM_LOG contains a NUL byte".into()))?;
            // SAFETY: valid C string; flags make creation exclusive and refuse symlinks.
            fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_RDWR
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if fd >= 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            let shown = String::from_utf8_lossy(&path);
            if err.raw_os_error() != Some(libc::EEXIST) {
                return Err(OpenFailure(format!("cannot create log {shown}: {err}")));
            }
            // Taken by an earlier log (exec keeps the pid), or by a symlink (never followed):
            // the next name. A device such as /dev/full, a FIFO or a directory means the name
            // was not meant for a log file: no file is created beside it.
            if let Some(what) = not_a_file(&c) {
                return Err(OpenFailure(format!(
                    "cannot create log {shown}: it exists and is {what}, not a log file"
                )));
            }
        }
        let path = String::from_utf8_lossy(&path).into_owned();
        if fd < 0 {
            return Err(OpenFailure(format!(
                "cannot create log {path}: too many files of that name exist"
            )));
        }
        let mut base = libc::MAP_FAILED;
        let mut reserve = 0;
        let as_cap = address_space_limit().map(|l| (l / AS_SHARE).max(MIN_SIZE * 8));
        for size in RESERVES {
            let size = as_cap.map_or(size, |c| size.min(c & !(FIRST_SIZE - 1)).max(MIN_SIZE * 8));
            reserve = size;
            // SAFETY: reserving address space for a shared mapping of our own fd.
            base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_NORESERVE,
                    fd,
                    0,
                )
            };
            if base != libc::MAP_FAILED {
                break;
            }
        }
        if base == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            // SAFETY: closing the fd we opened.
            unsafe { libc::close(fd) };
            return Err(OpenFailure(format!("cannot map log {path}: {err}")));
        }
        let id = file_id(fd).unwrap_or((0, 0));
        let disk_cap = disk_share(fd);
        let log = Log {
            fd: AtomicI32::new(fd),
            shim_fd: AtomicI32::new(-1),
            id,
            disk_cap,
            reserve_limited: as_cap.is_some_and(|c| c <= reserve),
            base: base as *mut u8,
            reserve,
            cursor: AtomicUsize::new(waitshim_format::FILE_HEADER_LEN),
            file_len: AtomicUsize::new(0),
            growing: AtomicBool::new(false),
            full: AtomicBool::new(false),
            full_errno: AtomicI32::new(0),
            full_at: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            active: AtomicU32::new(0),
            dropped: AtomicU64::new(0),
            path_c: absolute(&path),
            path,
        };
        let (cap, capped_by) = log.cap();
        let first = FIRST_SIZE.min(cap);
        if first < MIN_SIZE || !log.ensure_len(first) {
            let why = match log.full_errno.load(Ordering::Relaxed) {
                _ if first < MIN_SIZE && capped_by == libc::EFBIG => {
                    format!("the file size limit (ulimit -f) is {} bytes", size_limit())
                }
                _ if first < MIN_SIZE => {
                    log.full_errno.store(capped_by, Ordering::Relaxed);
                    log.full_reason()
                }
                0 => "cannot allocate its first bytes".to_string(),
                _ => log.full_reason(),
            };
            // Nothing of it is left behind: no empty file, no descriptor, no mapping.
            // SAFETY: our own mapping, descriptor and the file this call created.
            unsafe {
                libc::munmap(log.base as *mut libc::c_void, log.reserve);
                libc::close(log.fd.load(Ordering::Relaxed));
                libc::unlink(log.path_c.as_ptr());
            }
            return Err(OpenFailure(format!("cannot grow log {}: {why}", log.path)));
        }
        let header = frame::file_header();
        // SAFETY: the first FIRST_SIZE bytes are backed by the file now.
        unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), log.base, header.len()) };
        // The program's table keeps no descriptor of ours: the mapping needs none.
        // SAFETY: the descriptor this call opened.
        unsafe { libc::close(log.fd.swap(-1, Ordering::AcqRel)) };
        Ok(log)
    }

    /// On the shim's thread, as it starts: opens the file for the thread to grow it ahead of the
    /// writers ([`Log::grow_ahead`]). `own_table`: the thread has a descriptor table of its own;
    /// otherwise the descriptor goes to the high numbers of the program's table, where the
    /// program's threads may use it too.
    pub fn open_for_shim_thread(&self, own_table: bool) {
        let Some(fd) = self.open_by_path() else {
            return;
        };
        if own_table {
            self.shim_fd.store(fd, Ordering::Release);
        } else if let Some(high) = move_high(fd) {
            self.shim_fd.store(high, Ordering::Release);
            self.fd.store(high, Ordering::Release);
        }
    }

    /// On the shim's thread: grows the file ahead of what is written, by a step, when less than
    /// two steps are left, so that the program's threads seldom have to (they open the file for
    /// the call when they do).
    pub fn grow_ahead(&self) {
        let fd = self.shim_fd.load(Ordering::Acquire);
        if fd < 0 || self.full.load(Ordering::Relaxed) || self.closed.load(Ordering::Relaxed) {
            return;
        }
        let len = self.file_len.load(Ordering::Acquire);
        let step = (len / 8).clamp(GROW_MIN, GROW_MAX);
        let at = self.cursor.load(Ordering::Acquire);
        // Never past the cap: reaching it is for a writer to find (and say), not this thread.
        let want = (at + 2 * step).min(self.cap().0);
        if want > len {
            self.ensure_len_via(want, Some(fd));
        }
    }

    /// Makes the file at least `need` bytes long. False if it cannot grow (disk full, quota).
    fn ensure_len(&self, need: usize) -> bool {
        self.ensure_len_via(need, None)
    }

    /// [`Log::ensure_len`] through descriptor `fd` (None: the program's, or one opened for it).
    fn ensure_len_via(&self, need: usize, fd: Option<i32>) -> bool {
        loop {
            let len = self.file_len.load(Ordering::Acquire);
            if len >= need {
                return true;
            }
            if self.full.load(Ordering::Relaxed) {
                return false;
            }
            if self
                .growing
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let len = self.file_len.load(Ordering::Acquire);
                if len < need {
                    let (cap, why) = self.cap();
                    let step = (len / 8).clamp(GROW_MIN, GROW_MAX);
                    let target = need.max(len + step);
                    let target = ((target + FIRST_SIZE - 1) & !(FIRST_SIZE - 1)).min(cap);
                    // Within the cap, at least what is needed now: a log close to the cap
                    // takes its last bytes rather than giving up a whole step early.
                    let target = if target < need { need.min(cap) } else { target };
                    if target < need {
                        self.filled(why);
                    } else {
                        match self.grow_file(fd, len, target) {
                            Ok(()) => self.file_len.store(target, Ordering::Release),
                            Err(e) => self.filled(e),
                        }
                    }
                }
                self.growing.store(false, Ordering::Release);
            } else {
                crate::sys::sched_yield();
            }
        }
    }

    /// The most the file may grow to, and the reason to give when it must stop there.
    fn cap(&self) -> (usize, i32) {
        let fsize = size_limit();
        let (mut cap, mut why) = (
            self.reserve,
            if self.reserve_limited {
                RESERVE_FILLED
            } else {
                libc::EFBIG
            },
        );
        if fsize < cap {
            (cap, why) = (fsize, libc::EFBIG);
        }
        if self.disk_cap < cap {
            (cap, why) = (self.disk_cap, DISK_SHARE_REACHED);
        }
        (cap, why)
    }

    /// The log can grow no more (`errno` says why): later records are dropped and counted.
    fn filled(&self, errno: i32) {
        if self
            .full_errno
            .compare_exchange(0, errno.max(1), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            let at = self.cursor.load(Ordering::Acquire);
            self.full_at.store(at, Ordering::Relaxed);
            self.full.store(true, Ordering::Release);
            self.write_final(
                &waitshim_format::Note {
                    ns: crate::clock::now_ns(),
                    level: waitshim_format::note_level::WARNING,
                    text: format!(
                        "the log filled up at {at} bytes ({}): later records were dropped; \
                         the end record counts them",
                        self.full_reason()
                    ),
                }
                .into(),
            );
        }
        self.full.store(true, Ordering::Release);
    }

    /// Why the log stopped growing, in words (empty while it grows).
    pub fn full_reason(&self) -> String {
        match self.full_errno.load(Ordering::Relaxed) {
            0 => String::new(),
            libc::EFBIG => "the file size limit (ulimit -f) was reached".into(),
            libc::ENOSPC => "the disk is full".into(),
            libc::EDQUOT => "the disk quota is exhausted".into(),
            CUT_SHORT => "another process cut the log file short".into(),
            DISK_SHARE_REACHED => {
                format!("it reached a 1/{DISK_SHARE} share of the disk space free when it started")
            }
            RESERVE_FILLED => format!(
                "it filled the address space reserved for it: 1/{AS_SHARE} of the \
                 address-space limit (ulimit -v)"
            ),
            e => std::io::Error::from_raw_os_error(e).to_string(),
        }
    }

    /// Extends the file to `to` bytes, through `fd` if given; the errno on failure.
    fn grow_file(&self, fd: Option<i32>, from: usize, to: usize) -> Result<(), i32> {
        let held = match fd {
            Some(fd) => LogFd(fd, false),
            None => self.own_fd().ok_or(libc::EBADF)?,
        };
        let fd = held.0;
        // SAFETY: system calls on the log's fd (checked to be the log's).
        unsafe {
            let r = libc::fallocate(fd, 0, from as libc::off_t, (to - from) as libc::off_t);
            if r == 0 {
                return Ok(());
            }
            let e = *libc::__errno_location();
            // File systems without fallocate: a sparse extension is the best there is.
            if (e == libc::EOPNOTSUPP || e == libc::ENOSYS)
                && libc::ftruncate(fd, to as libc::off_t) == 0
            {
                return Ok(());
            }
            Err(if e == libc::EOPNOTSUPP || e == libc::ENOSYS {
                *libc::__errno_location()
            } else {
                e
            })
        }
    }

    /// A descriptor of the log file for one operation on a program's thread: the one kept in
    /// the program's table if it is still the log's, else the file opened by its path for the
    /// call alone; None when that fails too.
    fn own_fd(&self) -> Option<LogFd> {
        let fd = self.fd.load(Ordering::Acquire);
        if fd >= 0 && file_id(fd) == Some(self.id) {
            return Some(LogFd(fd, false));
        }
        self.open_by_path().map(|fd| LogFd(fd, true))
    }

    /// The log file opened again by its path (never following a symlink), if it is still the
    /// same file.
    fn open_by_path(&self) -> Option<i32> {
        // SAFETY: valid C string; O_NOFOLLOW refuses a symlink put in the log's place.
        let fd = unsafe {
            libc::open(
                self.path_c.as_ptr(),
                libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        if file_id(fd) != Some(self.id) {
            // SAFETY: closing the descriptor just opened.
            unsafe { libc::close(fd) };
            return None;
        }
        Some(fd)
    }

    /// Appends one record. Lock-free; a full log drops the record and counts it.
    pub fn write(&self, rec: &Record) {
        self.append(rec, false);
    }

    /// Appends one of the records that end the log (the note that it is full, the end record):
    /// these may use the tail kept free for them.
    pub fn write_final(&self, rec: &Record) {
        self.append(rec, true);
    }

    fn append(&self, rec: &Record, last: bool) {
        self.active.fetch_add(1, Ordering::AcqRel);
        if self.closed.load(Ordering::Acquire) || (!last && self.full.load(Ordering::Relaxed)) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.active.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let len = frame::frame_len(rec);
        let keep = if last { 0 } else { TAIL };
        // Reserved only where it fits: a reservation that could not be written would leave a
        // hole of zeros, and readers stop at zeros (the end of what was written).
        let mut off = self.cursor.load(Ordering::Relaxed);
        loop {
            let end = off + len;
            if end + keep > self.file_len.load(Ordering::Acquire)
                && (last || !self.ensure_len(end + keep))
            {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.active.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            match self
                .cursor
                .compare_exchange_weak(off, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => off = now,
            }
        }
        // SAFETY: [off, off+len) was reserved by this thread alone and is backed by the file.
        let out = unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) };
        frame::write_frame_uncommitted(rec, out);
        // SAFETY: frames are 4-byte aligned and the mapping is page aligned, so the tag is a
        // properly aligned u16 that only this writer stores to.
        let tag = unsafe { &*(self.base.add(off) as *const AtomicU16) };
        tag.store(frame::FRAME_TAG, Ordering::Release);
        self.active.fetch_sub(1, Ordering::AcqRel);
    }

    /// The data-request mailbox in the file header
    /// ([`waitshim_format::contract::mailbox`]).
    pub fn mailbox(&self) -> &AtomicU32 {
        // SAFETY: the header's bytes 12..16 are mapped for the log's life, 4-byte aligned, and
        // only ever accessed atomically (by the shim and by requesters mapping the same file).
        unsafe {
            AtomicU32::from_ptr(
                self.base
                    .add(waitshim_format::contract::mailbox::OFFSET)
                    .cast(),
            )
        }
    }

    /// A write faulted at `addr` (SIGBUS, in a signal handler): if it lies in this log's
    /// mapping, another process cut the file short (log rotation, `: > file`) and the pages past
    /// its new end no longer exist. The whole range becomes private memory, so the write that
    /// faulted, and any other in flight, completes where nothing reads it, and the log takes no
    /// more records. True if the fault was the log's. Async-signal-safe: atomics and one system
    /// call.
    pub fn take_fault(&self, addr: usize) -> bool {
        let base = self.base as usize;
        if addr < base || addr >= base + self.reserve {
            return false;
        }
        if self
            .full_errno
            .compare_exchange(0, CUT_SHORT, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.full_at
                .store(self.cursor.load(Ordering::Acquire), Ordering::Relaxed);
        }
        self.full.store(true, Ordering::Release);
        self.closed.store(true, Ordering::Release);
        // SAFETY: replaces our own mapping, at its own address and size, with private memory.
        let r = unsafe {
            crate::sys::call6(
                libc::SYS_mmap,
                [
                    base,
                    self.reserve,
                    (libc::PROT_READ | libc::PROT_WRITE) as usize,
                    (libc::MAP_PRIVATE
                        | libc::MAP_ANONYMOUS
                        | libc::MAP_FIXED
                        | libc::MAP_NORESERVE) as usize,
                    usize::MAX,
                    0,
                ],
            )
        };
        !crate::sys::failed(r)
    }

    /// Forces what is written to stable storage (a deadlock report must survive the machine).
    pub fn sync(&self) {
        let end = self
            .cursor
            .load(Ordering::Acquire)
            .min(self.file_len.load(Ordering::Acquire));
        // SAFETY: msync on the prefix of our own mapping.
        unsafe { libc::msync(self.base as *mut libc::c_void, end, libc::MS_SYNC) };
    }

    /// Ends the log: no more writes, wait (briefly) for writers in flight, trim the unwritten tail.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let start = crate::clock::now_ns();
        while self.active.load(Ordering::Acquire) != 0 {
            if crate::clock::now_ns() - start > 200_000_000 {
                // A writer is stuck (stopped thread): leave the tail; readers handle zeros.
                return;
            }
            crate::sys::sched_yield();
        }
        let end = self
            .cursor
            .load(Ordering::Acquire)
            .min(self.file_len.load(Ordering::Acquire));
        // SAFETY: system calls on our own mapping and fd. Nothing writes past `end` any more.
        unsafe {
            libc::msync(self.base as *mut libc::c_void, end, libc::MS_ASYNC);
            if let Some(fd) = self.own_fd() {
                if libc::ftruncate(fd.0, end as libc::off_t) == 0 {
                    // Pages past the end are gone: a reopened log grows it again first.
                    self.file_len.store(end, Ordering::Release);
                }
            }
        }
    }

    /// Takes writes again after [`Log::close`] (an exec that failed: the program goes on).
    pub fn reopen(&self) {
        self.closed.store(false, Ordering::Release);
    }

    /// Removes the (closed) log file: it holds nothing worth reading.
    pub fn discard(&self) {
        // SAFETY: unlink of the path this log created.
        unsafe { libc::unlink(self.path_c.as_ptr()) };
    }

    /// In a forked child: the mapping is the parent's file. Drop it without touching the file.
    pub fn abandon(&self) {
        self.closed.store(true, Ordering::Release);
        // SAFETY: the child unmaps its copy of the parent's mapping and closes its copy of the
        // fd (if it is still the log's: the number may be the program's by now); the parent's
        // file is untouched.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.reserve);
            let fd = self.fd.load(Ordering::Acquire);
            if fd >= 0 && file_id(fd) == Some(self.id) {
                libc::close(fd);
            }
        }
    }
}

/// The process's address-space limit (`RLIMIT_AS`, `ulimit -v`) in bytes, if it has one.
fn address_space_limit() -> Option<usize> {
    // SAFETY: getrlimit into a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(libc::RLIMIT_AS, &mut r) == 0 && r.rlim_cur != libc::RLIM_INFINITY)
            .then(|| r.rlim_cur.min(usize::MAX as libc::rlim_t) as usize)
    }
}

/// The log's share of its disk ([`DISK_SHARE`] of the space free now); unbounded when the file
/// system does not say.
fn disk_share(fd: libc::c_int) -> usize {
    // SAFETY: fstatvfs into a local struct, on our own descriptor.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::fstatvfs(fd, &mut st) != 0 || st.f_blocks == 0 {
            return usize::MAX;
        }
        let free = (st.f_bavail as u64).saturating_mul(st.f_frsize as u64);
        (free / DISK_SHARE).min(usize::MAX as u64) as usize
    }
}

/// The process's file size limit (`RLIMIT_FSIZE`, `ulimit -f`), in bytes.
fn size_limit() -> usize {
    // SAFETY: getrlimit into a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) != 0 || r.rlim_cur == libc::RLIM_INFINITY {
            return usize::MAX;
        }
        usize::try_from(r.rlim_cur).unwrap_or(usize::MAX)
    }
}

/// What the existing file at `path` is, when it is neither a regular file nor a symlink.
fn not_a_file(path: &std::ffi::CStr) -> Option<&'static str> {
    // SAFETY: lstat into a local struct; does not follow a symlink.
    let mode = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::lstat(path.as_ptr(), &mut st) != 0 {
            return None;
        }
        st.st_mode & libc::S_IFMT
    };
    match mode {
        libc::S_IFREG => None,
        // A link to a file, or dangling: the next name (a link planted where a log will be
        // written is never followed). A link to something else (`/dev/stdout`) names that.
        libc::S_IFLNK => {
            // SAFETY: stat into a local struct, following the link only to learn its kind.
            let target = unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::stat(path.as_ptr(), &mut st) != 0 {
                    return None;
                }
                st.st_mode & libc::S_IFMT
            };
            match target {
                libc::S_IFREG => None,
                libc::S_IFDIR => Some("a symbolic link to a directory"),
                libc::S_IFIFO => Some("a symbolic link to a FIFO"),
                libc::S_IFCHR | libc::S_IFBLK => Some("a symbolic link to a device"),
                libc::S_IFSOCK => Some("a symbolic link to a socket"),
                _ => Some("a symbolic link to what is not a regular file"),
            }
        }
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFIFO => Some("a FIFO"),
        libc::S_IFCHR | libc::S_IFBLK => Some("a device"),
        libc::S_IFSOCK => Some("a socket"),
        _ => Some("not a regular file"),
    }
}

/// (st_dev, st_ino) of an open descriptor.
pub fn file_id(fd: libc::c_int) -> Option<(u64, u64)> {
    // SAFETY: fstat into a local struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// A descriptor of the log for one operation: `transient` ones (when none could be kept out of
/// the program's way) are closed when it is done.
struct LogFd(libc::c_int, bool);

impl Drop for LogFd {
    fn drop(&mut self) {
        if self.1 {
            // SAFETY: a descriptor this process opened for the operation just done.
            unsafe { libc::close(self.0) };
        }
    }
}

/// The lowest descriptor number the shim keeps one at: programs use low numbers first, and
/// some count on what they get (the first `open` after closing every inherited descriptor).
const HIGH_FD: libc::c_int = 512;

/// Moves a descriptor out of the program's way: to `HIGH_FD` or above, or, under a lower
/// limit on descriptors, to the top of the allowed range if that is well above the numbers in
/// use first. The original number is closed in every case; None when no such number was free
/// (`ulimit -n 4`): the caller then keeps no descriptor.
pub fn move_high(fd: libc::c_int) -> Option<libc::c_int> {
    // SAFETY: getrlimit into a local struct.
    let limit = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur.min(i32::MAX as libc::rlim_t) as libc::c_int
        } else {
            0
        }
    };
    let from = if limit > HIGH_FD {
        HIGH_FD
    } else {
        // Near the top of a small range: at least 64, and 8 below its end.
        limit.saturating_sub(8).max(64)
    };
    // SAFETY: fcntl duplicates our own descriptor; the original is closed either way.
    unsafe {
        let high = if from < limit {
            libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, from)
        } else {
            -1
        };
        libc::close(fd);
        (high >= 0).then_some(high)
    }
}

/// `path` made absolute against the working directory, as a C string.
fn absolute(path: &str) -> CString {
    let p = std::path::Path::new(path);
    let full = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| p.to_path_buf(), |d| d.join(p))
    };
    CString::new(full.into_os_string().into_encoded_bytes()).unwrap_or_default()
}
