//! What `/proc` tells about a running program: whether libwaitshim.so is loaded into it, which
//! log it writes (the shim maps its log `MAP_SHARED`, so the log is one of the process's
//! mappings), its environment and the signals it catches.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use waitshim_format::FILE_MAGIC;

/// The shim's file name, as it appears in a process's mappings.
pub const SHIM_NAME: &str = waitshim_format::contract::SHIM_FILE;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// `s` in the permissions: a shared mapping (the shim's log is one).
    pub shared: bool,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// The mapped file; empty for anonymous memory, `[heap]`-style names for the kernel's.
    pub path: String,
}

const DELETED: &str = " (deleted)";

impl Mapping {
    /// A mapping of a file that still has a name.
    fn is_named_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/') && !self.path.ends_with(DELETED)
    }
}

/// Parses the text of `/proc/PID/maps`. Lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    // address perms offset dev inode [path]; the path keeps its spaces.
    let mut rest = line;
    let mut fields = [""; 5];
    for f in &mut fields {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let [range, perms, _offset, dev, inode] = fields;
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        shared: perms.as_bytes().get(3) == Some(&b's'),
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        path: rest.trim_start_matches(' ').to_string(),
    })
}

/// Why a process's log could not be found.
#[derive(Debug)]
pub enum FindError {
    NoProcess(i32),
    NotTraced(i32),
    NoLog(i32),
    Unreadable(i32, std::io::Error),
    /// A log is mapped but cannot be opened from here.
    LogUnreadable(i32, String, std::io::Error),
}

impl std::fmt::Display for FindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FindError::NoProcess(pid) => write!(f, "no process with pid {pid}"),
            FindError::NotTraced(pid) => write!(
                f,
                "process {pid} is not running under waitshim (no {SHIM_NAME} in /proc/{pid}/maps)"
            ),
            FindError::NoLog(pid) => write!(
                f,
                "process {pid} runs under waitshim but has no log open (WAITSHIM_DISABLE=1, \
                 or the shim could not create its log)"
            ),
            FindError::Unreadable(pid, e) => {
                write!(f, "cannot read /proc/{pid}/maps: {e} (is it your process?)")
            }
            FindError::LogUnreadable(pid, path, e) => {
                write!(f, "cannot open {path}, mapped by process {pid}: {e}")
            }
        }
    }
}

impl std::error::Error for FindError {}

fn proc_path(pid: i32, what: &str) -> PathBuf {
    Path::new("/proc").join(pid.to_string()).join(what)
}

/// The mappings of process `pid`. A zombie (ended, not yet reaped) has none.
pub fn read_maps(pid: i32) -> Result<Vec<Mapping>, FindError> {
    if pid <= 0 {
        return Err(FindError::NoProcess(pid));
    }
    match std::fs::read_to_string(proc_path(pid, "maps")) {
        Ok(text) => Ok(parse_maps(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(FindError::NoProcess(pid)),
        Err(e) => Err(FindError::Unreadable(pid, e)),
    }
}

/// Whether libwaitshim.so is loaded into the process.
pub fn has_shim(maps: &[Mapping]) -> bool {
    maps.iter()
        .any(|m| crate::symbolize::basename(&m.path) == SHIM_NAME)
}

/// Opens a mapped file: by its path, else through `/proc/PID/map_files` (a file the process sees
/// under another path, in another mount namespace). The error is the one of the path.
fn open_mapped(pid: i32, m: &Mapping) -> std::io::Result<File> {
    File::open(&m.path).or_else(|e| {
        File::open(proc_path(pid, "map_files").join(format!("{:x}-{:x}", m.start, m.end)))
            .map_err(|_| e)
    })
}

fn starts_with_magic(file: &File) -> bool {
    let mut head = [0u8; 8];
    file.read_exact_at(&mut head, 0).is_ok() && &head == FILE_MAGIC
}

/// The log the shim in process `pid` writes: the path it is mapped under and the file, opened.
pub fn find_log(pid: i32) -> Result<(PathBuf, File), FindError> {
    let maps = read_maps(pid)?;
    if !has_shim(&maps) {
        return Err(FindError::NotTraced(pid));
    }
    let mut seen = Vec::new();
    let mut unreadable = None;
    // Shared mappings first: the shim maps its log MAP_SHARED.
    let candidates = maps
        .iter()
        .filter(|m| m.shared)
        .chain(maps.iter().filter(|m| !m.shared));
    for m in candidates {
        if !m.is_named_file() || seen.contains(&m.inode) {
            continue;
        }
        seen.push(m.inode);
        match open_mapped(pid, m) {
            Ok(file) if starts_with_magic(&file) => return Ok((PathBuf::from(&m.path), file)),
            Ok(_) => {}
            // Only a shared mapping of a file that cannot be read might be the log.
            Err(e) if m.shared && unreadable.is_none() => unreadable = Some((m.path.clone(), e)),
            Err(_) => {}
        }
    }
    Err(match unreadable {
        Some((path, e)) => FindError::LogUnreadable(pid, path, e),
        None => FindError::NoLog(pid),
    })
}

/// Whether process `pid` still has the log `file` mapped: it is alive and still writes it (not
/// ended, not a zombie, not replaced by `exec`). A process whose files cannot be read counts as
/// writing it unless something rules that out ([`writes_log`]).
pub fn maps_file(pid: i32, file: &File, path: &Path) -> bool {
    writes_log(pid, file, path, None) != Writes::No
}

/// Whether a process writes a log, as far as `/proc` tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writes {
    /// It has the log mapped or open.
    Yes,
    /// It does not: no such process, a zombie, or another program.
    No,
    /// It exists, but its mappings and descriptors cannot be read (another user's process, or
    /// one made not dumpable) and nothing else rules it out; its name (`comm`) if known.
    Unknown(Option<String>),
}

/// Whether process `pid` writes the log `file` (at `path`): it has this very file (device and
/// inode) mapped, as the shim maps its log, or open. A live pid is not enough: after the program
/// ended its pid may belong to another process, and a program run in its own PID namespace wrote
/// a pid that means another process here. When the process cannot be inspected, it is still ruled
/// out if it started after the run did (`run_mono_ns`, the log's start on CLOCK_MONOTONIC) or if
/// its name is none of `names` (the names the program went by: its executable's, its main
/// thread's), when given.
pub fn writes_log(pid: i32, file: &File, path: &Path, run: Option<(u64, &[&str])>) -> Writes {
    let Ok(meta) = file.metadata() else {
        return Writes::No;
    };
    let canonical = std::fs::canonicalize(path).ok();
    let maps = match read_maps(pid) {
        Ok(maps) => maps,
        Err(FindError::Unreadable(..)) => {
            let stat = std::fs::read(proc_path(pid, "stat")).ok();
            let stat = stat.as_deref().and_then(parse_stat);
            if let (Some((comm, started_ticks)), Some((run_mono_ns, names))) = (stat, run) {
                if started_after(started_ticks, run_mono_ns) || !name_matches(comm, names) {
                    return Writes::No;
                }
            }
            return Writes::Unknown(stat.map(|(comm, _)| String::from_utf8_lossy(comm).into()));
        }
        Err(_) => return Writes::No,
    };
    let (major, minor) = dev_numbers(meta.dev());
    let mapped = maps.iter().any(|m| {
        m.inode == meta.ino()
            && ((m.dev_major, m.dev_minor) == (major, minor)
                // Overlay file systems show another device in maps than stat does.
                || canonical.as_deref() == Some(Path::new(&m.path)))
    });
    if mapped || has_open(pid, canonical.as_deref()) {
        Writes::Yes
    } else {
        Writes::No
    }
}

/// Whether one of process `pid`'s descriptors is the file at `canonical` (by the path its link
/// names: no file is opened or stat'ed, so a stuck mount cannot hold the analyzer).
fn has_open(pid: i32, canonical: Option<&Path>) -> bool {
    let Some(canonical) = canonical else {
        return false;
    };
    let Ok(dir) = std::fs::read_dir(proc_path(pid, "fd")) else {
        return false;
    };
    dir.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == canonical))
}

/// The live process, other than `except`, that has the log `file` mapped or open, among those
/// whose files can be read: the program when the pid in its log is not its pid here (it runs in
/// a PID namespace of its own). Only processes that started before the run did (`run_mono_ns`)
/// and go by one of `names` are looked into, so the search reads little more than each
/// process's `stat`.
pub fn find_writer(
    file: &File,
    path: &Path,
    except: i32,
    run_mono_ns: u64,
    names: &[&str],
) -> Option<i32> {
    let pids = std::fs::read_dir("/proc").ok()?;
    pids.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != except && pid as u32 != std::process::id())
        .filter(|&pid| {
            let stat = std::fs::read(proc_path(pid, "stat")).ok();
            stat.as_deref()
                .and_then(parse_stat)
                .is_some_and(|(comm, started)| {
                    !started_after(started, run_mono_ns) && name_matches(comm, names)
                })
        })
        .find(|&pid| writes_log(pid, file, path, None) == Writes::Yes)
}

/// `comm` and the start time (clock ticks after boot) from `/proc/PID/stat`.
fn parse_stat(text: &[u8]) -> Option<(&[u8], u64)> {
    // pid (comm) state ...: the name may hold spaces and parentheses, so it ends at the last ')'.
    let open = text.iter().position(|&b| b == b'(')?;
    let close = text.iter().rposition(|&b| b == b')')?;
    let comm = text.get(open + 1..close)?;
    // After the name: state is field 3, starttime field 22.
    let rest = std::str::from_utf8(text.get(close + 1..)?).ok()?;
    let started = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some((comm, started))
}

/// Whether a process that started `started_ticks` clock ticks after boot started after a run
/// that began at `run_mono_ns` on CLOCK_MONOTONIC (then it is not that run's process). The start
/// time counts on the boot clock, which runs ahead of the monotonic one by the time the machine
/// was suspended: the gap now bounds the gap then, so the test never rules out the run's own
/// process. Two ticks of slack for the tick's rounding.
fn started_after(started_ticks: u64, run_mono_ns: u64) -> bool {
    // SAFETY: sysconf and clock_gettime write only to the local given.
    let (tick, boot, mono) = unsafe {
        let tick = libc::sysconf(libc::_SC_CLK_TCK);
        let mut b: libc::timespec = std::mem::zeroed();
        let mut m: libc::timespec = std::mem::zeroed();
        if tick <= 0
            || libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut b) != 0
            || libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut m) != 0
        {
            return false;
        }
        let ns =
            |t: libc::timespec| (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64;
        (tick as u64, ns(b), ns(m))
    };
    let tick_ns = 1_000_000_000 / tick.max(1);
    let started_boot_ns = started_ticks.saturating_mul(tick_ns);
    let suspended_ns = boot.saturating_sub(mono);
    started_boot_ns
        > run_mono_ns
            .saturating_add(suspended_ns)
            .saturating_add(2 * tick_ns)
}

/// Whether a process's `comm` is one of `names` as the kernel keeps them (their first 15
/// bytes).
fn name_matches(comm: &[u8], names: &[&str]) -> bool {
    names.is_empty()
        || names.iter().any(|n| {
            let n = n.as_bytes();
            n[..n.len().min(15)] == *comm
        })
}

/// Major and minor number of a `st_dev` (glibc's encoding).
fn dev_numbers(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// The value of `name` in process `pid`'s environment as it started: Ok(None) when unset.
pub fn environ_var(pid: i32, name: &str) -> std::io::Result<Option<String>> {
    let bytes = std::fs::read(proc_path(pid, "environ"))?;
    Ok(find_var(&bytes, name))
}

fn find_var(environ: &[u8], name: &str) -> Option<String> {
    // The first definition, the one getenv finds.
    environ.split(|&b| b == 0).find_map(|kv| {
        let eq = kv.iter().position(|&b| b == b'=')?;
        (&kv[..eq] == name.as_bytes()).then(|| String::from_utf8_lossy(&kv[eq + 1..]).into())
    })
}

/// The thread of process `pid` named `name` (the shim names its own thread `waitshim`).
pub fn thread_named(pid: i32, name: &str) -> Option<i32> {
    std::fs::read_dir(proc_path(pid, "task"))
        .ok()?
        .flatten()
        .find(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.trim_end_matches('\n') == name)
        })
        .and_then(|e| e.file_name().to_str()?.parse().ok())
}

/// Whether process `pid` has a handler for `signal` (`SigCgt` of `/proc/PID/status`); None when
/// that cannot be read.
pub fn catches_signal(pid: i32, signal: i32) -> Option<bool> {
    let status = std::fs::read_to_string(proc_path(pid, "status")).ok()?;
    caught_in_status(&status, signal)
}

fn caught_in_status(status: &str, signal: i32) -> Option<bool> {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .map(str::trim)?;
    let bits = u64::from_str_radix(mask, 16).ok()?;
    let bit = u32::try_from(signal.checked_sub(1)?).ok()?;
    Some(bit < 64 && bits & (1u64 << bit) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c3a00000-55d0c3a01000 r--p 00000000 08:01 1311 /tmp/run dir/convoy
7f1e2c000000-7f1e3c000000 rw-s 00000000 08:01 4242                       /tmp/run dir/waitshim.77.log
7f1e40000000-7f1e40021000 rw-p 00000000 00:00 0 
7f1e50000000-7f1e50100000 r-xp 00002000 fd:00 991 /work/target/release/libwaitshim.so
7f1e60000000-7f1e60001000 rw-s 00000000 00:05 123 /dev/zero (deleted)
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn maps_lines_keep_paths_with_spaces() {
        let m = parse_maps(MAPS);
        assert_eq!(m.len(), 6);
        assert_eq!(m[0].path, "/tmp/run dir/convoy");
        assert!(!m[0].shared);
        assert_eq!(m[1].path, "/tmp/run dir/waitshim.77.log");
        assert!(m[1].shared);
        assert_eq!((m[1].dev_major, m[1].dev_minor, m[1].inode), (8, 1, 4242));
        assert_eq!(m[1].start, 0x7f1e2c000000);
        assert_eq!(m[2].path, "");
        assert_eq!((m[3].dev_major, m[3].dev_minor), (0xfd, 0));
        assert!(!m[4].is_named_file());
        assert_eq!(m[5].path, "[stack]");
        assert!(has_shim(&m));
        assert!(!has_shim(&m[..3]));
    }

    #[test]
    fn environment_variables_are_found_by_exact_name() {
        let env =
            b"PATH=/bin\0WAITSHIM_SIGNALX=1\0WAITSHIM_SIGNAL=SIGUSR2\0EMPTY=\0WAITSHIM_SIGNAL=9\0";
        assert_eq!(find_var(env, "WAITSHIM_SIGNAL").as_deref(), Some("SIGUSR2"));
        assert_eq!(find_var(env, "EMPTY").as_deref(), Some(""));
        assert_eq!(find_var(env, "WAITSHIM"), None);
    }

    #[test]
    fn caught_signals_come_from_sigcgt() {
        let status = "Name:\tapp\nSigBlk:\t0000000000000000\nSigCgt:\t1000000000000800\n";
        assert_eq!(caught_in_status(status, 12), Some(true), "SIGUSR2 = bit 11");
        assert_eq!(caught_in_status(status, 61), Some(true));
        assert_eq!(caught_in_status(status, 10), Some(false));
        assert_eq!(caught_in_status("Name:\tx\n", 10), None);
    }

    #[test]
    fn stat_gives_the_name_with_its_parentheses_and_the_start_time() {
        let stat = b"4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 5 0 \
                     987654 12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let (comm, started) = parse_stat(stat).unwrap();
        assert_eq!(comm, b"my (odd) prog");
        assert_eq!(started, 987654);
        assert!(parse_stat(b"4242 (x").is_none());
        // The kernel keeps 15 bytes of a name.
        assert!(name_matches(b"a_long_program_", &["a_long_program_name"]));
        assert!(!name_matches(b"process_api", &["sigkill", "sigkill"]));
    }

    #[test]
    fn a_process_that_started_after_a_run_is_not_that_runs_process() {
        let me = std::fs::read(proc_path(std::process::id() as i32, "stat")).unwrap();
        let (_, started) = parse_stat(&me).unwrap();
        // This process started before now, and after boot.
        let mono = |c| {
            let mut t: libc::timespec = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::clock_gettime(c, &mut t) }, 0);
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        assert!(!started_after(started, mono(libc::CLOCK_MONOTONIC)));
        assert!(started_after(started, 0));
    }

    #[test]
    fn this_process_is_alive_and_not_traced() {
        let me = std::process::id() as i32;
        let maps = read_maps(me).expect("own maps");
        assert!(!maps.is_empty());
        assert!(matches!(find_log(me), Err(FindError::NotTraced(_))));
        assert!(matches!(read_maps(0), Err(FindError::NoProcess(0))));
    }
}
