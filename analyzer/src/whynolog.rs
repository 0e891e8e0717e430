//! `waitshim-analyze why-no-log -- CMD [ARGS]`: the checks a user needs when a program run under
//! the shim left no log. A preloaded library cannot say that it was never loaded, so these are
//! made from outside, on what would be run: the executable (found through PATH as a shell finds
//! it), the environment this command sees (`LD_PRELOAD`, `WAITSHIM_LOG`, `WAITSHIM_DISABLE`) and
//! the directory the log would be created in. `NAME=value` words before the program (alone or
//! after `env`) are taken as its environment: `why-no-log -- LD_PRELOAD=$PWD/libwaitshim.so ./app`
//! checks that setting without loading the shim into the analyzer. Nothing is run.

use std::ffi::{CString, OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use goblin::elf::{header, program_header, Elf};
use waitshim_format::contract;

/// The largest file read whole to look at its ELF headers (a program's headers are at its start,
/// but goblin parses from a whole image; a larger file is read up to this many bytes).
const MAX_READ: u64 = 256 << 20;

/// The line the plain report adds when a log named on its command line does not exist.
pub const HINT: &str =
    "no log there: if the program ran under LD_PRELOAD=libwaitshim.so and left no \
                        log, `waitshim-analyze why-no-log -- CMD [ARGS]` checks the usual reasons \
                        (a static, Go or setuid program, LD_PRELOAD unset or not loadable, a log \
                        directory that is not writable)";

/// What one check found.
struct Finding {
    problem: bool,
    text: String,
}

fn ok(text: impl Into<String>) -> Finding {
    Finding {
        problem: false,
        text: text.into(),
    }
}

fn problem(text: impl Into<String>) -> Finding {
    Finding {
        problem: true,
        text: text.into(),
    }
}

/// Runs the checks for `cmd` and prints one line per check; exit status 0 when nothing was found
/// that keeps the log from being written, 1 when something was, 2 when `cmd` is empty.
pub fn run(cmd: &[OsString], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let out = &mut crate::plain::Guard::new(out);
    let env = Env::new(cmd);
    let Some(program) = cmd.get(env.skip) else {
        let _ = writeln!(
            err,
            "waitshim-analyze why-no-log: give the command: -- [NAME=VALUE...] CMD [ARGS]"
        );
        return 2;
    };
    let mut findings = Vec::new();
    let exe = check_program(&env, program, &mut findings);
    check_preload(&env, exe.as_ref().map(|e| e.machine), &mut findings);
    check_settings(&env, &mut findings);
    let problems = findings.iter().filter(|f| f.problem).count();
    let _ = writeln!(
        out,
        "why-no-log: {}",
        cmd.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    for f in &findings {
        let mark = if f.problem { "PROBLEM" } else { "ok     " };
        let _ = writeln!(out, "  {mark} {}", f.text);
    }
    if problems == 0 {
        let _ = writeln!(
            out,
            "nothing found that keeps the shim from writing a log; if there is still none, the \
             program may have ended before the shim started, or it runs another program through \
             a shell or launcher (check that one the same way)"
        );
        0
    } else {
        let _ = writeln!(
            out,
            "{problems} problem{} found: the program would run without the shim, or without \
             its log",
            if problems == 1 { "" } else { "s" }
        );
        1
    }
}

/// The environment the command would run in: this process's, with the `NAME=value` words that
/// come before the program (alone, or after `env`) put over it, as `env` and a shell do.
struct Env {
    set: Vec<(OsString, OsString)>,
    /// Index of the program in the command.
    skip: usize,
}

impl Env {
    fn new(cmd: &[OsString]) -> Env {
        let mut set = Vec::new();
        let mut i = 0;
        if cmd.first().is_some_and(|c| c == "env") {
            i = 1;
        }
        while let Some(word) = cmd.get(i) {
            let b = word.as_bytes();
            let Some(eq) = b.iter().position(|&c| c == b'=') else {
                break;
            };
            let name = &b[..eq];
            let valid = !name.is_empty()
                && !name[0].is_ascii_digit()
                && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
            if !valid {
                break;
            }
            set.push((
                OsStr::from_bytes(name).to_os_string(),
                OsStr::from_bytes(&b[eq + 1..]).to_os_string(),
            ));
            i += 1;
        }
        Env { set, skip: i }
    }

    fn var(&self, name: &str) -> Option<OsString> {
        match self.set.iter().rev().find(|(n, _)| n == name) {
            Some((_, v)) => Some(v.clone()),
            None => std::env::var_os(name),
        }
    }
}

/// What the checks of the program learned about it.
struct Program {
    machine: u16,
}

/// The path a shell runs for `name`: `name` itself when it holds a '/', else the first
/// executable regular file of that name in PATH.
fn resolve(env: &Env, name: &OsStr) -> Result<PathBuf, String> {
    if name.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(name));
    }
    let path = env.var("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let cand = dir.join(name);
        if let Ok(m) = std::fs::metadata(&cand) {
            if m.is_file() && executable(&cand) {
                return Ok(cand);
            }
        }
    }
    Err(format!(
        "{} is not found in PATH ({})",
        name.to_string_lossy(),
        path.to_string_lossy()
    ))
}

fn executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

fn writable_dir(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

fn read_head(p: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut v = Vec::new();
    std::fs::File::open(p)?.take(MAX_READ).read_to_end(&mut v)?;
    Ok(v)
}

fn machine_name(m: u16) -> String {
    match m {
        header::EM_X86_64 => "x86-64".into(),
        header::EM_386 => "i386".into(),
        header::EM_AARCH64 => "aarch64".into(),
        header::EM_ARM => "arm".into(),
        header::EM_RISCV => "riscv".into(),
        other => format!("machine {other}"),
    }
}

fn check_program(env: &Env, name: &OsStr, f: &mut Vec<Finding>) -> Option<Program> {
    let path = match resolve(env, name) {
        Ok(p) => p,
        Err(e) => {
            f.push(problem(e));
            return None;
        }
    };
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) => {
            f.push(problem(format!("{shown}: {e}")));
            return None;
        }
    };
    if !meta.is_file() {
        f.push(problem(format!("{shown} is not a regular file")));
        return None;
    }
    if !executable(&path) {
        f.push(problem(format!("{shown} is not executable")));
    }
    let bytes = match read_head(&path) {
        Ok(b) => b,
        Err(e) => {
            f.push(problem(format!("{shown}: cannot read it ({e})")));
            return None;
        }
    };
    if bytes.starts_with(b"#!") {
        let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
        let interp = String::from_utf8_lossy(&line[2..]).trim().to_string();
        f.push(ok(format!(
            "{shown} is a script: the program that runs is its interpreter ({interp}); check \
             that one: why-no-log -- {interp}"
        )));
        return None;
    }
    let elf = match Elf::parse(&bytes) {
        Ok(e) => e,
        Err(_) => {
            f.push(problem(format!(
                "{shown} is not an ELF executable: the loader never runs for it"
            )));
            return None;
        }
    };
    let machine = elf.header.e_machine;
    f.push(ok(format!(
        "program: {shown} ({}-bit {})",
        if elf.is_64 { 64 } else { 32 },
        machine_name(machine)
    )));
    let interp = elf
        .program_headers
        .iter()
        .any(|ph| ph.p_type == program_header::PT_INTERP);
    if interp {
        f.push(ok(format!(
            "dynamically linked (loader {}): LD_PRELOAD applies",
            elf.interpreter.unwrap_or("?")
        )));
    } else {
        f.push(problem(format!(
            "{shown} is statically linked (no PT_INTERP program header): no dynamic loader \
             runs for it, so LD_PRELOAD loads nothing into it and waitshim cannot trace it; \
             link it dynamically to profile it"
        )));
    }
    let go = elf.section_headers.iter().any(|s| {
        matches!(
            elf.shdr_strtab.get_at(s.sh_name),
            Some(".go.buildinfo" | ".note.go.buildid")
        )
    });
    if go {
        f.push(problem(format!(
            "{shown} is a Go program: goroutines wait in Go's own runtime, which calls neither \
             libpthread nor glibc's syscall(), so the shim sees none of it{}; and Go ends the \
             process with a raw exit_group system call, so a log it does get has no end record",
            if interp {
                " (with cgo, only the locks the C code takes)"
            } else {
                ""
            }
        )));
    }
    check_secure(&path, &shown, &meta, f);
    Some(Program { machine })
}

/// Set-user-ID, set-group-ID or file capabilities: the loader runs the program in secure mode.
fn check_secure(path: &Path, shown: &str, meta: &std::fs::Metadata, f: &mut Vec<Finding>) {
    // SAFETY: plain system calls.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mode = meta.mode();
    let mut why = Vec::new();
    if mode & libc::S_ISUID != 0 && meta.uid() != uid {
        why.push(format!(
            "set-user-ID (owner uid {}, you are uid {uid})",
            meta.uid()
        ));
    }
    if mode & libc::S_ISGID != 0 && meta.gid() != gid {
        why.push(format!(
            "set-group-ID (group gid {}, yours is gid {gid})",
            meta.gid()
        ));
    }
    if has_capabilities(path) {
        why.push("given file capabilities (security.capability)".to_string());
    }
    if why.is_empty() {
        f.push(ok("not set-user-ID, set-group-ID or given capabilities"));
    } else {
        f.push(problem(format!(
            "{shown} is {}: the loader runs it in secure-execution mode, where it ignores \
             LD_PRELOAD entries that contain a '/' and loads a bare name only from the \
             standard library directories, and only when that file is itself set-user-ID; \
             profile a copy of it without those bits instead",
            why.join(" and ")
        )));
    }
}

fn has_capabilities(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path and name; a null buffer of size 0 asks for the size only.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}

/// The LD_PRELOAD entries: the loader splits on ':' and whitespace.
fn preload_entries(v: &OsStr) -> Vec<String> {
    v.to_string_lossy()
        .split(|c: char| c == ':' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn check_preload(env: &Env, machine: Option<u16>, f: &mut Vec<Finding>) {
    let Some(v) = env.var("LD_PRELOAD") else {
        // The shim `run` would preload, found as `run` finds it (crate::shimpath), with the
        // command's environment.
        let found = crate::shimpath::locate_in(
            None,
            env.var(contract::env::SHIM),
            crate::shimpath::current_exe(),
        );
        let (shim, note) = match found {
            Ok(p) => (p.display().to_string(), String::new()),
            Err(crate::shimpath::NotFound::Named { by, path, error }) => (
                "/path/to/libwaitshim.so".to_string(),
                format!(
                    " (the {by} this environment names, {}, is not usable: {error})",
                    path.display()
                ),
            ),
            Err(crate::shimpath::NotFound::Nowhere { .. }) => (
                "/path/to/libwaitshim.so".to_string(),
                " (this waitshim-analyze finds no shim: `waitshim-analyze run -- true` lists \
                 where it looked)"
                    .to_string(),
            ),
        };
        f.push(problem(format!(
            "LD_PRELOAD is not set in this environment: nothing loads the shim; run \
             LD_PRELOAD={shim} CMD{note}, or `waitshim-analyze run -- CMD`, which sets it"
        )));
        return;
    };
    let entries = preload_entries(&v);
    let shims: Vec<&String> = entries.iter().filter(|e| e.contains("waitshim")).collect();
    if shims.is_empty() {
        f.push(problem(format!(
            "LD_PRELOAD={} names no libwaitshim.so: nothing loads the shim",
            v.to_string_lossy()
        )));
        return;
    }
    for s in shims {
        if !s.contains('/') {
            f.push(ok(format!(
                "LD_PRELOAD names {s} without a directory: the loader looks for it in the library \
                 search path (give its absolute path to be sure it is found)"
            )));
            continue;
        }
        let p = Path::new(s.as_str());
        match std::fs::metadata(p) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                f.push(problem(format!(
                    "LD_PRELOAD names {s}, which is not a file"
                )));
                continue;
            }
            Err(e) => {
                f.push(problem(format!(
                    "LD_PRELOAD names {s}, which does not exist ({e}): the loader says \"cannot \
                     be preloaded\" on stderr and runs the program without it{}",
                    if p.is_relative() {
                        "; a relative path is taken from the program's working directory"
                    } else {
                        ""
                    }
                )));
                continue;
            }
        }
        let bytes = match read_head(p) {
            Ok(b) => b,
            Err(e) => {
                f.push(problem(format!(
                    "LD_PRELOAD names {s}: cannot read it ({e})"
                )));
                continue;
            }
        };
        match Elf::parse(&bytes) {
            Ok(lib) => {
                let m = lib.header.e_machine;
                match machine {
                    Some(pm) if pm != m => f.push(problem(format!(
                        "the shim {s} is built for {}, the program for {}: the loader cannot \
                         load it (\"wrong ELF class\" on stderr) and runs the program without it",
                        machine_name(m),
                        machine_name(pm)
                    ))),
                    _ => f.push(ok(format!("LD_PRELOAD loads {s} ({})", machine_name(m)))),
                }
            }
            Err(_) => f.push(problem(format!(
                "LD_PRELOAD names {s}, which is not an ELF shared library"
            ))),
        }
    }
}

/// WAITSHIM_DISABLE and the log's directory (docs/settings.md: `WAITSHIM_LOG`, `%p` for the pid, relative
/// to the program's working directory, default `waitshim.%p.log`).
fn check_settings(env: &Env, f: &mut Vec<Finding>) {
    if let Some(v) = env.var(contract::env::DISABLE) {
        if !v.is_empty() && v != "0" {
            f.push(problem(
                "WAITSHIM_DISABLE is set: the shim loads but traces nothing and writes no log",
            ));
        }
    }
    let pattern = match env.var(contract::env::LOG) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(contract::LOG_PATTERN),
    };
    let dir = match pattern.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let shown = if dir == Path::new(".") {
        std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|_| ".".into())
    } else {
        dir.display().to_string()
    };
    if dir.as_os_str().as_bytes().contains(&b'%') {
        f.push(ok(format!(
            "the log's directory {shown} depends on the pid: not checked"
        )));
        return;
    }
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {
            if writable_dir(&dir) {
                f.push(ok(format!(
                    "the log ({}) would be created in {shown}, which is writable",
                    pattern.display()
                )));
            } else {
                f.push(problem(format!(
                    "the log ({}) would be created in {shown}, which is not writable by you: the \
                     shim says so in one line on stderr and the program runs untraced; set \
                     WAITSHIM_LOG=/a/writable/dir/waitshim.%p.log",
                    pattern.display()
                )));
            }
        }
        Ok(_) => f.push(problem(format!(
            "the log's directory {shown} is not a directory"
        ))),
        Err(e) => f.push(problem(format!(
            "the log's directory {shown} cannot be used ({e}): the program would run untraced"
        ))),
    }
}

/// Logs in `path`'s directory whose names look like a waitshim log, newest first (at most
/// `max`), for the error about a log that does not exist.
pub fn similar_logs(path: &Path, max: usize) -> Vec<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .take(100_000)
        .filter(|e| {
            let n = e.file_name();
            let n = n.as_bytes();
            n.starts_with(b"waitshim.") && n.ends_with(b".log")
        })
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file()
                .then(|| (m.modified().unwrap_or(std::time::UNIX_EPOCH), e.path()))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().take(max).map(|(_, p)| p).collect()
}
