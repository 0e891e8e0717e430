//! Stage 3: turn the raw addresses of call chains into function names and source lines, offline,
//! from the binaries the log names. Every lookup degrades instead of failing: a module that is gone,
//! rebuilt (build-id differs) or stripped still gives `module+0xoffset`. A module's separate
//! debug file is found as GDB finds it (by build-id, else by `.gnu_debuglink`: see
//! [`waitshim_elfsym::debugfile`]).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::rc::Rc;

use goblin::elf::Elf;
use object::{Object as _, ObjectSection as _};

use crate::model::Model;

/// Binaries larger than this are not read for symbols (they are read whole); the debug sections
/// of one module are decompressed up to this many bytes in all.
pub const MAX_ELF_BYTES: u64 = 1 << 30;
/// Distinct module files opened per log: a process maps a few hundred at most, and each costs a
/// read of its file; more only come from a damaged or hostile log.
pub const MAX_MODULE_FILES: usize = 1000;
/// Where distributions install separate debug files: `.build-id/ab/cdef….debug` under it, and
/// the files `.gnu_debuglink` names under the module's own directory.
const DEBUG_ROOT: &str = waitshim_elfsym::DEFAULT_DEBUG_ROOT;
/// Inline frames kept per physical frame: bounds what damaged debug info can cost.
const MAX_INLINE_DEPTH: usize = 64;
/// Modules of the C and C++ runtimes, the dynamic loader and the shim (basename prefixes).
const RUNTIME_MODULES: &[&str] = &[
    "libc.so",
    "libc-",
    "libpthread",
    "ld-linux",
    "ld-musl",
    "libwaitshim",
];
/// The C++ runtime and the unwinder: `libc++` also covers `libc++abi`.
const LANGUAGE_RUNTIME_MODULES: &[&str] = &["libstdc++", "libgcc_s", "libc++"];
/// Where compilers and libraries install headers: code from there, inlined into the program, is
/// still the library's (`std::mutex::lock`, `__gthread_mutex_lock`).
const SYSTEM_HEADER_DIRS: &[&str] = &["/usr/include/", "/usr/lib/gcc/", "/usr/local/include/"];
const SYSTEM_HEADER_PARTS: &[&str] = &["/c++/", "/bits/"];
/// Rust's standard library, compiled into every Rust program: its debug info names its sources
/// under `/rustc/<commit>/library/` (`std::sync::Mutex::lock`, the futex wait under it).
const RUST_LIBRARY_SOURCE: &str = "/rustc/";
/// Functions of the C start-up and thread entry, wherever they were linked: `_start` comes from
/// `crt1.o` into the program itself, without debug info.
const RUNTIME_FUNCTIONS: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "_dl_start_user",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "__clone_internal",
];
/// Name prefixes of the language runtimes' code, compiled into the program from headers or
/// Rust's standard library: the C++ `std::mutex::lock`, `std::condition_variable::wait`,
/// `std::shared_mutex`, `std::thread`'s `_State_impl::_M_run`, libstdc++'s gthread layer; Rust's
/// `std::sync::Mutex` internals, `std::thread` spawn closures, `std::rt::lang_start`, and
/// `core`/`alloc` glue (`FnOnce::call_once` shims). Demangled names.
const RUNTIME_FUNCTION_PREFIXES: &[&str] = &[
    "std::",
    "core::",
    "alloc::",
    "__gnu_cxx::",
    "__cxxabiv1::",
    "__gthread",
    "__gthrw",
    "__rust_",
    "__libc_",
    "__pthread",
    "pthread_",
    "_Unwind",
];
/// How a Rust closure is called through a trait object: `<worker::{{closure}} as
/// core::ops::function::FnOnce<()>>::call_once` is glue, the closure itself the next frame.
const RUNTIME_FUNCTION_PARTS: &[&str] = &[" as core::ops::function::Fn"];

/// Whether a demangled function name is the C or C++ or Rust runtime's code rather than the
/// program's own: start-up and thread entry, the standard library's lock, condition variable
/// and thread wrappers (`RUNTIME_FUNCTIONS`, `RUNTIME_FUNCTION_PREFIXES`).
pub fn is_runtime_function(name: &str) -> bool {
    // `<std::thread::Builder>::spawn_unchecked_::{{closure}}`: the type, not the wrapper.
    let bare = name.trim_start_matches('<');
    // `__libc_start_main@@GLIBC_2.34`: the version is not part of the name.
    let unversioned = name.split('@').next().unwrap_or(name);
    RUNTIME_FUNCTIONS.contains(&unversioned)
        || RUNTIME_FUNCTION_PREFIXES
            .iter()
            .any(|p| bare.starts_with(p))
        || RUNTIME_FUNCTION_PARTS.iter().any(|p| name.contains(p))
}

/// One symbolized frame. Everything but `addr` is optional: it is what could be found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// Demangled function name.
    pub function: Option<String>,
    /// Offset of `addr` from the function's start.
    pub offset: Option<u64>,
    /// Source file as the debug info names it (often an absolute path).
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Path of the module that contains `addr`.
    pub module: Option<String>,
    /// `addr` minus the module's load base.
    pub module_offset: Option<u64>,
    /// A function the compiler inlined into the next (outer) frame: it shares that frame's
    /// address and module, and has no `offset`.
    pub inlined: bool,
    /// For a frame chosen as a chain's site ([`Symbolizer::site`]): how many frames of the
    /// chain, innermost first, were passed over as runtime code ([`Frame::is_runtime`]) before
    /// it. `None` for the frames of a chain.
    pub skipped: Option<u32>,
}

impl Frame {
    fn module_is(&self, names: &[&str]) -> bool {
        let Some(path) = &self.module else {
            return false;
        };
        let base = basename(path);
        names.iter().any(|n| base.starts_with(n))
    }

    /// Frames inside the shim itself: never shown, they are how the call was observed.
    pub fn is_shim(&self) -> bool {
        self.module.as_deref().is_some_and(is_shim_path)
    }

    /// Code that is not the program's own: the shim, the C and C++ runtimes and the dynamic
    /// loader (by module), system headers and Rust's standard library compiled into the program
    /// (by source file), start-up and thread entry and the standard libraries' lock, condition
    /// variable and thread wrappers (by function name, for code without debug info). Such
    /// frames are passed over when a chain's site is chosen and when chains are grouped.
    pub fn is_runtime(&self) -> bool {
        self.is_shim()
            || self.module_is(RUNTIME_MODULES)
            || self.module_is(LANGUAGE_RUNTIME_MODULES)
            || self.is_system_source()
            || self.function.as_deref().is_some_and(is_runtime_function)
    }

    /// Code whose source is a system or compiler header (`/usr/include/c++/13/bits/std_mutex.h`)
    /// or Rust's standard library, wherever it was compiled into.
    pub fn is_system_source(&self) -> bool {
        let Some(file) = self.file.as_deref() else {
            return false;
        };
        file.starts_with(RUST_LIBRARY_SOURCE)
            || SYSTEM_HEADER_DIRS.iter().any(|d| file.starts_with(d))
            || SYSTEM_HEADER_PARTS.iter().any(|p| file.contains(p))
            || basename(file).starts_with("gthr-")
            || basename(file) == "gthr.h"
    }

    /// The program's own code ([`Frame::is_runtime`] is not): where its author made the call
    /// that is reported.
    pub fn is_user(&self) -> bool {
        !self.is_runtime()
    }

    /// `module+0x1234`, or the bare address when no module contains it.
    pub fn module_label(&self) -> String {
        match (&self.module, self.module_offset) {
            (Some(m), Some(off)) => format!("{}+{:#x}", basename(m), off),
            _ => format!("{:#x}", self.addr),
        }
    }

    /// `file.c:12` when the debug info gave one.
    pub fn source(&self) -> Option<String> {
        let file = self.file.as_deref()?;
        Some(match self.line {
            Some(l) if l > 0 => format!("{}:{l}", basename(file)),
            _ => basename(file).to_string(),
        })
    }

    /// A short name of the code this frame is in: the function, else the module offset.
    pub fn short_name(&self) -> String {
        self.function.clone().unwrap_or_else(|| self.module_label())
    }

    /// How a frame is shown inside a chain: `function (file.c:12)`, `function+0x1a`, or
    /// `module+0x1234`, followed by the module offset when a function name is shown; inlined
    /// frames say so: `std::mutex::lock() (std_mutex.h:113) (inlined)  [prog+0x1234]`.
    pub fn describe(&self) -> String {
        let inlined = if self.inlined { " (inlined)" } else { "" };
        match (&self.function, self.source()) {
            (Some(f), Some(src)) => format!("{f} ({src}){inlined}  [{}]", self.module_label()),
            (Some(f), None) => match self.offset {
                Some(off) => format!("{f}+{off:#x}{inlined}  [{}]", self.module_label()),
                None => format!("{f}{inlined}  [{}]", self.module_label()),
            },
            (None, Some(src)) => format!("{} ({src}){inlined}", self.module_label()),
            (None, None) => format!("{}{inlined}", self.module_label()),
        }
    }

    /// A place in the program: `convoy.c:12 (main)`, else `main+0x1a (convoy)`, else
    /// `convoy+0x11b2`.
    pub fn site(&self) -> String {
        match (self.source(), &self.function) {
            (Some(src), Some(f)) => format!("{src} ({f})"),
            (Some(src), None) => src,
            (None, Some(f)) => {
                let module = self.module.as_deref().map(basename).unwrap_or("?");
                match self.offset {
                    Some(off) => format!("{f}+{off:#x} ({module})"),
                    None => format!("{f} ({module})"),
                }
            }
            (None, None) => self.module_label(),
        }
    }
}

/// Where to get the debug information of a module that has none: a system library's debug
/// package, else a rebuild with `-g`.
pub fn debug_advice_for(path: &str) -> String {
    let system = ["/usr/", "/lib/", "/lib64/", "/opt/"]
        .iter()
        .any(|d| path.starts_with(d));
    if system {
        format!(
            "{path} has no debug information (no source lines for its frames): {}",
            system_debug_advice(path)
        )
    } else {
        format!(
            "{path} has no debug information (no source lines for its frames): rebuild it with \
             -g (its build-id then changes: run the program again)"
        )
    }
}

/// Where to get the names and source lines of a stripped module (no symbol table, no debug file
/// found): only its exported functions are named. Starts as [`debug_advice_for`] does, since a
/// stripped module has no debug information either.
pub fn stripped_advice_for(path: &str) -> String {
    let system = ["/usr/", "/lib/", "/lib64/", "/opt/"]
        .iter()
        .any(|d| path.starts_with(d));
    let how = if system {
        system_debug_advice(path)
    } else {
        "install its debug package or rebuild it without stripping".to_string()
    };
    format!(
        "{path} has no debug information and is stripped: only exported symbols (no names for \
         its other functions, no source lines); {how}"
    )
}

/// How to get a system library's debug information: from a debuginfod server (which the
/// analyzer asks when `DEBUGINFOD_URLS` is set), or from the distribution's debug archive, which
/// apt does not know until it is added.
fn system_debug_advice(path: &str) -> String {
    let asked = if debuginfod::enabled() {
        "debuginfod (DEBUGINFOD_URLS) had none for it; "
    } else {
        "set `DEBUGINFOD_URLS=https://debuginfod.debian.net` (Ubuntu: \
         https://debuginfod.ubuntu.com; the `debuginfod` package gives debuginfod-find) and \
         analyze again, or "
    };
    format!(
        "{asked}install its debug package: on Debian add the debug archive (`deb \
         http://deb.debian.org/debian-debug/ SUITE-debug main` in /etc/apt/sources.list.d/, \
         SUITE from /etc/os-release), `apt-get update`, then `apt-get install PACKAGE-dbgsym` \
         for the package `dpkg -S {path}` names"
    )
}

/// Whether a module is the shim itself.
fn is_shim_path(path: &str) -> bool {
    path.ends_with(waitshim_format::contract::SHIM_FILE)
}

pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Why a module's symbols could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleStatus {
    Ok {
        dwarf: bool,
    },
    /// Read, but stripped: no symbol table, no debug information, and no separate debug file
    /// found; only the dynamic symbols (the exported functions) name its code.
    Stripped,
    Disabled,
    Missing(String),
    BuildIdMismatch,
    NotElf(String),
    /// The path names something else than a regular file (a FIFO, a device, a directory): it
    /// is not opened, since reading it could block for ever or never end.
    NotRegular(&'static str),
    /// Larger than [`MAX_ELF_BYTES`] (its size).
    TooLarge(u64),
    /// Not opened: the log names more than [`MAX_MODULE_FILES`] files.
    TooMany,
}

impl ModuleStatus {
    pub fn describe(&self) -> String {
        match self {
            ModuleStatus::Ok { dwarf: true } => "symbols and source lines".into(),
            ModuleStatus::Ok { dwarf: false } => "symbols only (no debug info)".into(),
            ModuleStatus::Stripped => {
                "stripped: only exported symbols (no symbol table, no debug info, no debug file)"
                    .into()
            }
            ModuleStatus::Disabled => "not symbolized (--no-symbols)".into(),
            ModuleStatus::Missing(why) => format!("file not available ({why})"),
            ModuleStatus::BuildIdMismatch => {
                "build-id differs from the log: the file was rebuilt since the run".into()
            }
            ModuleStatus::NotElf(why) => format!("not a readable ELF file ({why})"),
            ModuleStatus::NotRegular(what) => {
                format!("not a regular file but {what}: not opened")
            }
            ModuleStatus::TooLarge(size) => format!(
                "too large to read for symbols ({size} bytes; the limit is {} MiB)",
                MAX_ELF_BYTES >> 20
            ),
            ModuleStatus::TooMany => {
                format!("not opened: the log names more than {MAX_MODULE_FILES} module files")
            }
        }
    }

    /// Whether the file was read and gives what it has (a stripped module's exported
    /// functions included).
    pub fn is_ok(&self) -> bool {
        matches!(self, ModuleStatus::Ok { .. } | ModuleStatus::Stripped)
    }
}

use waitshim_elfsym::{data_symbols, function_symbols, Sym};

/// What DWARF is read through: sections copied out of the file, shared by reference count.
type DwarfReader = gimli::EndianRcSlice<gimli::RunTimeEndian>;

struct Loaded {
    symbols: Vec<Sym>,
    /// Sized data symbols (global and static variables), by address.
    data: Vec<Sym>,
    /// DWARF sources, the binary first, then its separate debug file.
    dwarf: Vec<addr2line::Context<DwarfReader>>,
    /// Neither the file nor a separate debug file has a symbol table or debug information:
    /// `symbols` are the dynamic ones.
    stripped: bool,
    /// The file's executable loaded segments: (address, file offset, size in the file), to
    /// read the instruction before a return address ([`Symbolizer::scanned_chain`]).
    code: Vec<(u64, u64, u64)>,
}

struct ModuleMap {
    module_id: u32,
    base: u64,
    path: String,
    build_id: Vec<u8>,
    status: ModuleStatus,
    loaded: Option<Rc<Loaded>>,
    attempted: bool,
}

/// Addresses symbolized and kept for reuse at most, and chain sites: the caches start afresh
/// when full, so that symbolizing millions of distinct chains stays within a fixed memory.
const MAX_CACHED: usize = 1 << 16;

/// Symbolizes addresses of one log's modules; caches per module and per address.
pub struct Symbolizer {
    enabled: bool,
    modules: Vec<ModuleMap>,
    /// Which module each address range belongs to, by range start: ranges do not overlap, a
    /// later module's segment having replaced what it covers of earlier ones.
    ranges: BTreeMap<u64, (u64, usize)>,
    /// Files read, by path and build-id, with what came of it: modules of a log that name the
    /// same file share it, and at most [`MAX_MODULE_FILES`] are read.
    files: HashMap<(String, Vec<u8>), Result<Rc<Loaded>, ModuleStatus>>,
    /// The logical frames of an address (see [`Symbolizer::frames`]).
    cache: HashMap<(u64, bool), Vec<Frame>>,
    /// The site of a chain (see [`Symbolizer::site`]).
    sites: HashMap<u32, Option<Frame>>,
    /// Modules with a frame of the program's own code ([`Frame::is_user`]) in a chain the
    /// report symbolized: those whose missing debug information costs the reader source lines.
    shown: std::collections::BTreeSet<usize>,
}

/// Gives `[lo, hi)` to module `m` in a map of non-overlapping ranges, cutting what earlier
/// ranges had of it.
fn paint(ranges: &mut BTreeMap<u64, (u64, usize)>, lo: u64, hi: u64, m: usize) {
    if lo >= hi {
        return;
    }
    if let Some((&start, &(end, owner))) = ranges.range(..lo).next_back() {
        if end > lo {
            ranges.insert(start, (lo, owner));
            if end > hi {
                ranges.insert(hi, (end, owner));
            }
        }
    }
    let covered: Vec<u64> = ranges.range(lo..hi).map(|(&start, _)| start).collect();
    for start in covered {
        if let Some((end, owner)) = ranges.remove(&start) {
            if end > hi {
                ranges.insert(hi, (end, owner));
            }
        }
    }
    ranges.insert(lo, (hi, m));
}

impl Symbolizer {
    /// `enabled = false` maps addresses to modules only, without opening any file.
    pub fn new(model: &Model, enabled: bool) -> Self {
        let exe = model
            .run
            .as_ref()
            .map(|r| r.exe.clone())
            .unwrap_or_default();
        let mut ranges = BTreeMap::new();
        let mut modules = Vec::new();
        for (i, m) in model.modules.values().enumerate() {
            // Later modules win: an address range reused after dlclose belongs to the newer one.
            for s in &m.segments {
                let lo = m.base.wrapping_add(s.vaddr);
                paint(&mut ranges, lo, lo.saturating_add(s.memsz), i);
            }
            // The main program may be logged without a path: the run's exe names it.
            let path = if m.path.is_empty() {
                exe.clone()
            } else {
                m.path.clone()
            };
            modules.push(ModuleMap {
                module_id: m.module_id,
                base: m.base,
                path,
                build_id: m.build_id.clone(),
                status: if enabled {
                    ModuleStatus::Ok { dwarf: false }
                } else {
                    ModuleStatus::Disabled
                },
                loaded: None,
                attempted: false,
            });
        }
        Symbolizer {
            enabled,
            modules,
            ranges,
            files: HashMap::new(),
            cache: HashMap::new(),
            sites: HashMap::new(),
            shown: Default::default(),
        }
    }

    /// Modules whose files were opened (or not), with what came of it.
    pub fn module_status(&self) -> Vec<(u32, String, ModuleStatus)> {
        self.modules
            .iter()
            .filter(|m| m.attempted || !self.enabled)
            .map(|m| (m.module_id, m.path.clone(), m.status.clone()))
            .collect()
    }

    /// The module whose segment contains `probe`.
    fn module_of(&self, probe: u64) -> Option<usize> {
        let (_, &(end, m)) = self.ranges.range(..=probe).next_back()?;
        (probe < end).then_some(m)
    }

    /// Reads module `i`'s file, once per distinct file.
    fn load(&mut self, i: usize) {
        let Some(m) = self.modules.get_mut(i) else {
            return;
        };
        m.attempted = true;
        let key = (m.path.clone(), m.build_id.clone());
        let loaded = match self.files.get(&key) {
            Some(l) => l.clone(),
            None => {
                let l = if self.files.len() >= MAX_MODULE_FILES {
                    Err(ModuleStatus::TooMany)
                } else {
                    load_module(&m.path, &m.build_id).map(Rc::new)
                };
                self.files.insert(key, l.clone());
                l
            }
        };
        match loaded {
            Ok(l) => {
                m.status = if l.stripped {
                    ModuleStatus::Stripped
                } else {
                    ModuleStatus::Ok {
                        dwarf: !l.dwarf.is_empty(),
                    }
                };
                m.loaded = Some(l);
            }
            Err(status) => m.status = status,
        }
    }

    /// Opens the files of the modules that contain any of `addrs` (as [`Symbolizer::frames`]
    /// takes them), so that [`Symbolizer::module_status`] is complete before anything is
    /// symbolized.
    pub fn open_modules(&mut self, addrs: impl Iterator<Item = (u64, bool)>) {
        if !self.enabled {
            return;
        }
        let mut left = self.modules.iter().filter(|m| !m.attempted).count();
        for (addr, return_address) in addrs {
            if left == 0 {
                break;
            }
            let probe = if return_address {
                addr.saturating_sub(1)
            } else {
                addr
            };
            let Some(i) = self.module_of(probe) else {
                continue;
            };
            let wanted = self
                .modules
                .get(i)
                .is_some_and(|m| !m.attempted && !is_shim_path(&m.path));
            if wanted {
                self.load(i);
                left -= 1;
            }
        }
    }

    /// The logical frames of one address, innermost first: the functions inlined at it (marked
    /// `inlined`), then the function that physically contains it. Never empty.
    ///
    /// `return_address = true`: the call is the instruction before it, so `addr - 1` is looked
    /// up; otherwise the address is a function's own (thread start routines).
    pub fn frames(&mut self, addr: u64, return_address: bool) -> Vec<Frame> {
        if let Some(f) = self.cache.get(&(addr, return_address)) {
            return f.clone();
        }
        let probe = if return_address {
            addr.saturating_sub(1)
        } else {
            addr
        };
        let mut frame = Frame {
            addr,
            ..Frame::default()
        };
        let mut frames = Vec::new();
        if let Some(i) = self.module_of(probe) {
            let (path, base, attempted) = match self.modules.get(i) {
                Some(m) => (m.path.clone(), m.base, m.attempted),
                None => (String::new(), 0, true),
            };
            frame.module = Some(path);
            frame.module_offset = Some(addr.wrapping_sub(base));
            // The shim's own frames are never shown: no need to read its symbols.
            if self.enabled && !frame.is_shim() {
                if !attempted {
                    self.load(i);
                }
                if let Some(l) = self.modules.get(i).and_then(|m| m.loaded.as_ref()) {
                    frames = resolve(
                        l,
                        probe.wrapping_sub(base),
                        addr.wrapping_sub(base),
                        &mut frame,
                    );
                }
            }
        }
        frames.push(frame);
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.cache.insert((addr, return_address), frames.clone());
        frames
    }

    /// The function that physically contains the address (see [`Symbolizer::frames`]), without
    /// the functions inlined into it.
    pub fn frame(&mut self, addr: u64, return_address: bool) -> Frame {
        self.frames(addr, return_address)
            .pop()
            .unwrap_or_else(|| Frame {
                addr,
                ..Frame::default()
            })
    }

    /// A chain scanned from a blocked thread's stack (its program counter, then words above its
    /// stack pointer that point just after a call), innermost first, each frame with whether it
    /// is doubtful: a return address whose call instruction is a direct call to another
    /// function of the same module than the frame above it. Such a word was most likely left on
    /// the stack by an earlier call (memcached's main thread under epoll_wait showed
    /// `_int_realloc`), or the frame above was reached through a tail call.
    pub fn scanned_chain(&mut self, model: &Model, chain_id: u32) -> Vec<(Frame, bool)> {
        let Some(addrs) = model.chains.get(&chain_id) else {
            return Vec::new();
        };
        // Each address's logical frames, and the (module, start) of the function it is in.
        let mut each = Vec::with_capacity(addrs.len());
        for &a in addrs {
            let frames = self.frames(a, true);
            let module = self.module_of(a.saturating_sub(1));
            let start = module.zip(frames.last().and_then(|f| f.addr.checked_sub(f.offset?)));
            if frames.iter().any(Frame::is_user) {
                if let Some(m) = module {
                    self.shown.insert(m);
                }
            }
            each.push((frames, start));
        }
        // Frames since the last one whose call was seen to lead to the frame above it: a frame
        // whose call leads to one of them makes those in between doubtful; one whose call leads
        // to none of them is doubtful itself; one whose call cannot be told joins them.
        let mut doubtful = vec![false; addrs.len()];
        let mut open: Vec<usize> = vec![0];
        for (k, &a) in addrs.iter().enumerate().skip(1) {
            let Some(target) = self.direct_call_target(a) else {
                open.push(k);
                continue;
            };
            let callee = open
                .iter()
                .rposition(|&j| each[j].1.is_some_and(|(m, start)| (m, start) == target));
            match callee {
                Some(p) => {
                    for &j in &open[p + 1..] {
                        doubtful[j] = true;
                    }
                    open = vec![k];
                }
                None => doubtful[k] = true,
            }
        }
        each.into_iter()
            .zip(doubtful)
            .flat_map(|((frames, _), d)| {
                frames
                    .into_iter()
                    .filter(|f| !f.is_shim())
                    .map(move |f| (f, d))
            })
            .collect()
    }

    /// Where the instruction before return address `ret` calls, as (module, function start),
    /// when it is a direct call (`e8 rel32`) to the start of a named function of the same
    /// module; None when it cannot be told (an indirect call, a call through the PLT or into
    /// another module, an unreadable file).
    fn direct_call_target(&mut self, ret: u64) -> Option<(usize, u64)> {
        let before = self.code_before(ret)?;
        if before[0] != 0xe8 {
            return None;
        }
        let rel = i32::from_le_bytes([before[1], before[2], before[3], before[4]]);
        let target = ret.wrapping_add_signed(i64::from(rel));
        let module = self.module_of(target)?;
        if Some(module) != self.module_of(ret.saturating_sub(1)) {
            return None;
        }
        let t = self.frame(target, false);
        (t.function.is_some() && t.offset == Some(0)).then_some((module, target))
    }

    /// The 5 bytes before `ret` in its module's file, if they lie in an executable segment.
    fn code_before(&mut self, ret: u64) -> Option<[u8; 5]> {
        use std::os::unix::fs::FileExt;
        let i = self.module_of(ret.saturating_sub(1))?;
        let m = self.modules.get(i)?;
        let l = m.loaded.as_ref()?;
        let at = ret.checked_sub(m.base)?.checked_sub(5)?;
        let &(vaddr, offset, _) = l
            .code
            .iter()
            .find(|&&(v, _, n)| at >= v && at + 5 <= v.saturating_add(n))?;
        // Only the regular file the module was read from, never blocking (see read_elf_bytes).
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&m.path)
            .ok()?;
        if !file.metadata().ok()?.file_type().is_file() {
            return None;
        }
        let mut b = [0u8; 5];
        file.read_exact_at(&mut b, offset + (at - vaddr)).ok()?;
        Some(b)
    }

    /// The chain's logical frames, innermost first, inlined frames included, without the shim's
    /// own frames.
    pub fn chain(&mut self, model: &Model, chain_id: u32) -> Vec<Frame> {
        let Some(addrs) = model.chains.get(&chain_id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &a in addrs {
            let frames = self.frames(a, true);
            if frames.iter().any(Frame::is_user) {
                if let Some(i) = self.module_of(a.saturating_sub(1)) {
                    self.shown.insert(i);
                }
            }
            out.extend(frames.into_iter().filter(|f| !f.is_shim()));
        }
        out
    }

    /// One line of advice per module that has code of the program's own in the chains
    /// symbolized so far but no debug information (so no source lines), or is stripped (so
    /// only its exported functions are named): where to get them.
    pub fn debug_advice(&self) -> Vec<(String, String)> {
        let mut seen = std::collections::BTreeSet::new();
        self.shown
            .iter()
            .filter_map(|&i| self.modules.get(i))
            .filter_map(|m| match m.status {
                ModuleStatus::Ok { dwarf: false } => Some((m, debug_advice_for(&m.path))),
                ModuleStatus::Stripped => Some((m, stripped_advice_for(&m.path))),
                _ => None,
            })
            .filter(|(m, _)| seen.insert(m.path.clone()))
            .map(|(m, advice)| (m.path.clone(), advice))
            .collect()
    }

    /// Where the chain happened, in the program's terms (see [`site_frame`]): where an object
    /// was created, a thread started, a waiter waited or a holder released.
    pub fn site(&mut self, model: &Model, chain_id: u32) -> Option<Frame> {
        if let Some(site) = self.sites.get(&chain_id) {
            return site.clone();
        }
        let chain = self.chain(model, chain_id);
        let site = site_index(&chain).and_then(|i| {
            let mut f = chain.get(i)?.clone();
            f.skipped = Some(i as u32);
            Some(f)
        });
        // A chain a live log has not shown yet may come later.
        if !model.chains.contains_key(&chain_id) {
            return site;
        }
        if self.sites.len() >= MAX_CACHED {
            self.sites.clear();
        }
        self.sites.insert(chain_id, site.clone());
        site
    }
}

/// A variable of a module (a global or static one) that holds an object: named from the
/// module's symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// The variable's symbol (demangled).
    pub symbol: String,
    /// Where the object is inside it, in bytes.
    pub offset: u64,
    /// The variable's size in bytes.
    pub size: u64,
    /// Path of the module that defines it.
    pub module: String,
}

impl Global {
    /// How the report names it: `stats_lock`; `locks[3]` for the fourth element of an array of
    /// objects of `elem` bytes (the variable's size and the offset both multiples of it);
    /// `stats+0x8` for an object inside a larger variable.
    pub fn name(&self, elem: Option<u64>) -> String {
        let whole = match elem {
            Some(e) => self.size <= e,
            None => true,
        };
        if self.offset == 0 && whole {
            return self.symbol.clone();
        }
        match elem {
            Some(e)
                if self.size.checked_rem(e) == Some(0) && self.offset.checked_rem(e) == Some(0) =>
            {
                format!("{}[{}]", self.symbol, self.offset / e)
            }
            _ => format!("{}+{:#x}", self.symbol, self.offset),
        }
    }
}

impl Symbolizer {
    /// The global or static variable that contains `addr`, from the symbol table of the module
    /// whose segment holds it; None for the heap and stacks, stripped modules, or with
    /// symbols off.
    pub fn global_at(&mut self, addr: u64) -> Option<Global> {
        if !self.enabled {
            return None;
        }
        let i = self.module_of(addr)?;
        if !self.modules.get(i)?.attempted {
            self.load(i);
        }
        let m = self.modules.get(i)?;
        if is_shim_path(&m.path) {
            return None;
        }
        let l = m.loaded.as_ref()?;
        let rel = addr.wrapping_sub(m.base);
        let sym = waitshim_elfsym::containing(&l.data, rel, true)?;
        Some(Global {
            symbol: demangle(&sym.name),
            offset: rel - sym.start,
            size: sym.size,
            module: m.path.clone(),
        })
    }
}

/// The frame that stands for a whole chain: the first of the program's own code
/// ([`Frame::is_user`]), else the first frame.
pub fn site_frame(frames: &[Frame]) -> Option<&Frame> {
    frames.get(site_index(frames)?)
}

/// The index of [`site_frame`] in `frames`: how many frames were passed over before it.
pub fn site_index(frames: &[Frame]) -> Option<usize> {
    if frames.is_empty() {
        return None;
    }
    Some(frames.iter().position(Frame::is_user).unwrap_or(0))
}

/// Fills function and source line of the physical `frame` from a loaded module, and returns the
/// frames inlined at the address, innermost first. `probe` and `ret` are relative to the
/// module's base (the looked-up address and the displayed one).
fn resolve(l: &Loaded, probe: u64, ret: u64, frame: &mut Frame) -> Vec<Frame> {
    if let Some(sym) = waitshim_elfsym::containing(&l.symbols, probe, false) {
        frame.function = Some(demangle(&sym.name));
        frame.offset = Some(ret.wrapping_sub(sym.start));
    }
    let mut logical = l
        .dwarf
        .iter()
        .map(|d| dwarf_frames(d, probe))
        .find(|f| !f.is_empty())
        .unwrap_or_default();
    let Some(outer) = logical.pop() else {
        return Vec::new();
    };
    // The symbol table names the physical function as every tool shows it; DWARF only fills in.
    if frame.function.is_none() {
        frame.function = outer.function;
    }
    frame.file = outer.file;
    frame.line = outer.line;
    logical
        .into_iter()
        .map(|d| Frame {
            function: d.function,
            offset: None,
            file: d.file,
            line: d.line,
            inlined: true,
            ..frame.clone()
        })
        .collect()
}

/// What one DWARF frame tells.
#[derive(Default)]
struct DwarfFrame {
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
}

/// The inline chain DWARF gives for `probe`, innermost first, the physical function last; empty
/// when the debug info has nothing there or cannot be read.
fn dwarf_frames(dwarf: &addr2line::Context<DwarfReader>, probe: u64) -> Vec<DwarfFrame> {
    let mut out = Vec::new();
    // Split DWARF (`.dwo`, `.dwp` files) is not followed: their paths come from the binary,
    // which may be anything.
    if let Ok(mut iter) = dwarf.find_frames(probe).skip_all_loads() {
        loop {
            match iter.next() {
                Ok(Some(f)) => {
                    let (file, line) = match &f.location {
                        Some(loc) => (loc.file.map(str::to_string), loc.line),
                        None => (None, None),
                    };
                    let function = f
                        .function
                        .as_ref()
                        .and_then(|n| n.raw_name().ok())
                        .map(|n| demangle(&n));
                    out.push(DwarfFrame {
                        function,
                        file,
                        line,
                    });
                    if out.len() > MAX_INLINE_DEPTH {
                        // Inline chains are not this deep: the debug info is damaged.
                        out.drain(..out.len() - MAX_INLINE_DEPTH);
                    }
                }
                Ok(None) => break,
                // Half an inline chain would name the wrong physical function.
                Err(_) => return Vec::new(),
            }
        }
    }
    if out.iter().all(|f| f.function.is_none() && f.file.is_none()) {
        return Vec::new();
    }
    out
}

/// Rust (legacy and v0) and C++ names, readable; anything else as it is (the shim's policy
/// selectors match the same names).
pub use waitshim_elfsym::demangle;

/// The GNU build-id of an ELF image, if it has one.
pub fn build_id<'a>(elf: &Elf<'a>, bytes: &'a [u8]) -> Option<Vec<u8>> {
    waitshim_elfsym::build_id(elf, bytes).map(<[u8]>::to_vec)
}

/// The separate debug file of a module under `root` ([`DEBUG_ROOT`] but in tests), as GDB finds
/// it: by the file's build-id (else the one the log gives, for a file without one), else by
/// `.gnu_debuglink` with its CRC32 checked. Candidates are read as modules are.
fn find_debug_file<'a>(
    path: &Path,
    elf: &Elf<'a>,
    bytes: &'a [u8],
    logged_build_id: &[u8],
    root: &Path,
) -> Option<waitshim_elfsym::DebugFile> {
    let read = |p: &Path| read_elf_bytes(p).ok();
    if waitshim_elfsym::build_id(elf, bytes).is_none() && !logged_build_id.is_empty() {
        if let Some(f) =
            waitshim_elfsym::debugfile::debug_file_by_build_id(root, logged_build_id, read)
        {
            return Some(f);
        }
    }
    waitshim_elfsym::find_debug_file(path, elf, bytes, root, read).or_else(|| {
        let id = waitshim_elfsym::build_id(elf, bytes).unwrap_or(logged_build_id);
        debuginfod::debug_file(id)
    })
}

/// Separate debug files from debuginfod servers, as elfutils' client finds them, when
/// `DEBUGINFOD_URLS` names any: its cache first, else `debuginfod-find` (from the `debuginfod`
/// package) fetches the file into it, within a time limit.
mod debuginfod {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    /// One fetch at most this long; all fetches of a run at most [`TOTAL`] (a log can name a
    /// few hundred modules, and a server that does not answer must not hold the report).
    const EACH: Duration = Duration::from_secs(30);
    const TOTAL: Duration = Duration::from_secs(120);

    /// Time spent in fetches so far (ms), and whether the user was told they are made.
    static SPENT_MS: AtomicU64 = AtomicU64::new(0);
    static TOLD: AtomicBool = AtomicBool::new(false);

    /// Whether debuginfod is asked at all: `DEBUGINFOD_URLS` set and not empty.
    pub fn enabled() -> bool {
        std::env::var_os("DEBUGINFOD_URLS").is_some_and(|v| !v.is_empty())
    }

    /// The client's cache directory: `$DEBUGINFOD_CACHE_PATH`, else
    /// `$XDG_CACHE_HOME/debuginfod_client`, else `$HOME/.cache/debuginfod_client`.
    fn cache() -> Option<PathBuf> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("DEBUGINFOD_CACHE_PATH")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("debuginfod_client")))
            .or_else(|| var("HOME").map(|d| d.join(".cache/debuginfod_client")))
    }

    /// The debug file of build-id `id`, with its bytes, if debuginfod gives one whose own
    /// build-id (when it has one) is `id`.
    pub fn debug_file(id: &[u8]) -> Option<waitshim_elfsym::DebugFile> {
        if id.is_empty() || !enabled() {
            return None;
        }
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let cached = cache().map(|c| c.join(&hex).join("debuginfo"));
        let path = match cached.filter(|p| p.is_file()) {
            Some(p) => p,
            None => fetch(&hex)?,
        };
        let bytes = super::read_elf_bytes(&path).ok()?;
        let elf = goblin::elf::Elf::parse(&bytes).ok()?;
        if waitshim_elfsym::build_id(&elf, &bytes).is_some_and(|own| own != id) {
            return None;
        }
        drop(elf);
        Some(waitshim_elfsym::DebugFile {
            path,
            via: waitshim_elfsym::DebugVia::Debuginfod,
            bytes,
        })
    }

    /// `debuginfod-find debuginfo HEX`: the path it prints, if it ends in time with success.
    fn fetch(hex: &str) -> Option<PathBuf> {
        let left = TOTAL.saturating_sub(Duration::from_millis(SPENT_MS.load(Ordering::Relaxed)));
        if left.is_zero() {
            return None;
        }
        if !TOLD.swap(true, Ordering::Relaxed) {
            eprintln!(
                "waitshim-analyze: asking debuginfod (DEBUGINFOD_URLS) for the debug information \
                 of modules that have none here"
            );
        }
        let start = Instant::now();
        let mut child = Command::new("debuginfod-find")
            .args(["debuginfo", hex])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let limit = EACH.min(left);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if start.elapsed() < limit => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        SPENT_MS.fetch_add(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        if !status?.success() {
            return None;
        }
        let mut out = String::new();
        use std::io::Read;
        child
            .stdout
            .take()?
            .take(4096)
            .read_to_string(&mut out)
            .ok()?;
        let p = Path::new(out.trim());
        p.is_absolute().then(|| p.to_path_buf())
    }
}

/// What a file that is not a regular one is, in words.
fn file_kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// Reads a binary named by a log, which can name anything: only a regular file is opened
/// (checked before opening, and again on the opened file, since the path can change in
/// between), without blocking (a FIFO would wait for a writer for ever), and only as many
/// bytes as it had when opened, at most [`MAX_ELF_BYTES`] (`/dev/zero` would never end).
fn read_elf_bytes(path: &Path) -> Result<Vec<u8>, ModuleStatus> {
    let meta = std::fs::metadata(path).map_err(|e| ModuleStatus::Missing(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(ModuleStatus::NotRegular(file_kind(meta.file_type())));
    }
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| ModuleStatus::Missing(e.to_string()))?;
    let meta = file
        .metadata()
        .map_err(|e| ModuleStatus::Missing(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(ModuleStatus::NotRegular(file_kind(meta.file_type())));
    }
    if meta.len() > MAX_ELF_BYTES {
        return Err(ModuleStatus::TooLarge(meta.len()));
    }
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(meta.len() as usize)
        .map_err(|e| ModuleStatus::Missing(e.to_string()))?;
    file.take(meta.len())
        .read_to_end(&mut bytes)
        .map_err(|e| ModuleStatus::Missing(e.to_string()))?;
    Ok(bytes)
}

/// One DWARF section of `file`, decompressed if need be, within `budget` bytes of
/// decompressed data left for the module (a compressed section can claim any size). A section
/// that is absent, damaged or over the budget is empty: lookups then find nothing in it.
fn dwarf_section(file: &object::File<'_>, name: &str, budget: &mut u64) -> Rc<[u8]> {
    let empty: Rc<[u8]> = Rc::from(&[][..]);
    let Some(section) = file.section_by_name(name) else {
        return empty;
    };
    let Ok(c) = section.compressed_data() else {
        return empty;
    };
    if c.format == object::CompressionFormat::None {
        return Rc::from(c.data);
    }
    if c.uncompressed_size > *budget {
        return empty;
    }
    *budget -= c.uncompressed_size;
    let size = c.uncompressed_size as usize;
    let data = match c.format {
        // Inflates into a buffer of the size the header claims, never beyond it.
        object::CompressionFormat::Zlib => c.decompress().ok().map(|d| d.into_owned()),
        object::CompressionFormat::Zstandard => zstd(c.data, size),
        _ => None,
    };
    data.filter(|d| d.len() == size)
        .map_or(empty, |d| Rc::from(d.into_boxed_slice()))
}

/// Zstandard frames decompressed into at most `size` bytes (one more tells the data lied).
fn zstd(mut input: &[u8], size: usize) -> Option<Vec<u8>> {
    use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
    let mut out = Vec::new();
    while !input.is_empty() && out.len() <= size {
        let decoder = match ruzstd::decoding::StreamingDecoder::new(&mut input) {
            Ok(d) => d,
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                input = input.get(length as usize..)?;
                continue;
            }
            Err(_) => return None,
        };
        let room = (size + 1 - out.len()) as u64;
        decoder.take(room).read_to_end(&mut out).ok()?;
    }
    Some(out)
}

/// The DWARF of an ELF image, if it has any that can be read.
fn dwarf_context(bytes: &[u8]) -> Option<addr2line::Context<DwarfReader>> {
    let file = object::File::parse(bytes).ok()?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut budget = MAX_ELF_BYTES;
    let mut dwarf = gimli::Dwarf::load(|id| -> Result<DwarfReader, gimli::Error> {
        Ok(gimli::EndianRcSlice::new(
            dwarf_section(&file, id.name(), &mut budget),
            endian,
        ))
    })
    .ok()?;
    dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
    addr2line::Context::from_dwarf(dwarf).ok()
}

fn has_debug_info(elf: &Elf<'_>) -> bool {
    elf.section_headers.iter().any(|sh| {
        elf.shdr_strtab
            .get_at(sh.sh_name)
            .is_some_and(|n| n == ".debug_info" || n == ".zdebug_info")
    })
}

fn load_module(path: &str, logged_build_id: &[u8]) -> Result<Loaded, ModuleStatus> {
    load_module_with(path, logged_build_id, Path::new(DEBUG_ROOT))
}

/// [`load_module`] with separate debug files looked for under `debug_root`.
fn load_module_with(
    path: &str,
    logged_build_id: &[u8],
    debug_root: &Path,
) -> Result<Loaded, ModuleStatus> {
    let bytes = read_elf_bytes(Path::new(path))?;
    let elf = Elf::parse(&bytes).map_err(|e| ModuleStatus::NotElf(e.to_string()))?;
    let file_build_id = build_id(&elf, &bytes);
    if let Some(id) = &file_build_id {
        if !logged_build_id.is_empty() && id.as_slice() != logged_build_id {
            return Err(ModuleStatus::BuildIdMismatch);
        }
    }
    let mut symbols = function_symbols(&elf, false);
    let mut data = data_symbols(&elf, false);
    let mut dwarf = Vec::new();
    if has_debug_info(&elf) {
        dwarf.extend(dwarf_context(&bytes));
    }
    let mut symtab = !elf.syms.is_empty();
    if let Some(debug) = find_debug_file(Path::new(path), &elf, &bytes, logged_build_id, debug_root)
    {
        if let Ok(debug_elf) = Elf::parse(&debug.bytes) {
            symtab |= !debug_elf.syms.is_empty();
            if symbols.is_empty() {
                symbols = function_symbols(&debug_elf, false);
            }
            if data.is_empty() {
                data = data_symbols(&debug_elf, false);
            }
            if has_debug_info(&debug_elf) {
                dwarf.extend(dwarf_context(&debug.bytes));
            }
        }
    }
    let stripped = !symtab && dwarf.is_empty();
    if symbols.is_empty() {
        symbols = function_symbols(&elf, true);
    }
    if data.is_empty() {
        data = data_symbols(&elf, true);
    }
    let code = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == goblin::elf::program_header::PT_LOAD && p.is_executable())
        .map(|p| (p.p_vaddr, p.p_offset, p.p_filesz))
        .collect();
    Ok(Loaded {
        symbols,
        data,
        dwarf,
        stripped,
        code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_in(file: &str, module: &str) -> Frame {
        Frame {
            addr: 0x1234,
            file: Some(file.into()),
            module: Some(module.into()),
            ..Frame::default()
        }
    }

    #[test]
    fn a_system_librarys_advice_says_how_to_get_debug_symbols_on_a_fresh_machine() {
        let a = debug_advice_for("/usr/lib/x86_64-linux-gnu/libfoo.so.1");
        // `apt-get install PACKAGE-dbgsym` alone fails until the debug archive is added.
        assert!(
            a.contains("debian-debug") && a.contains("apt-get update"),
            "{a}"
        );
        assert!(
            a.contains("dpkg -S /usr/lib/x86_64-linux-gnu/libfoo.so.1"),
            "{a}"
        );
        if debuginfod::enabled() {
            assert!(
                a.contains("debuginfod (DEBUGINFOD_URLS) had none for it"),
                "{a}"
            );
        } else {
            assert!(
                a.contains("DEBUGINFOD_URLS=https://debuginfod.debian.net"),
                "{a}"
            );
        }
        let own = debug_advice_for("/home/u/app/build/app");
        assert!(
            own.contains("rebuild it with -g") && !own.contains("dbgsym"),
            "{own}"
        );
    }

    #[test]
    fn rust_standard_library_frames_are_not_the_programs_own_code() {
        let std_lock = frame_in(
            "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/sys/sync/mutex/futex.rs",
            "/home/u/app/target/release/app",
        );
        assert!(!std_lock.is_user());
        assert!(frame_in("/home/u/app/src/main.rs", "/home/u/app/target/release/app").is_user());
        assert!(frame_in("src/main.rs", "/home/u/app/target/release/app").is_user());
    }

    /// A frame of `module` in function `name`, without debug info (no source file).
    fn named(name: &str, module: &str) -> Frame {
        Frame {
            addr: 0x1234,
            function: Some(name.into()),
            module: Some(module.into()),
            ..Frame::default()
        }
    }

    const PROG: &str = "/home/u/app/build/app";
    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

    #[test]
    fn start_up_and_thread_entry_are_runtime_wherever_they_were_linked() {
        // `_start` is linked into the program itself from crt1.o, without debug info.
        assert!(named("_start", PROG).is_runtime());
        for f in [
            "__libc_start_call_main",
            "__libc_start_main@@GLIBC_2.34",
            "start_thread",
            "__clone3",
        ] {
            assert!(named(f, LIBC).is_runtime(), "{f}");
            // A static program has them too.
            assert!(
                named(f.split('@').next().unwrap_or(f), PROG).is_runtime(),
                "{f}"
            );
        }
        assert!(!named("main", PROG).is_runtime());
        assert!(!named("start_worker", PROG).is_runtime());
        assert!(!named("restart_thread", PROG).is_runtime());
    }

    #[test]
    fn standard_library_wrappers_are_runtime_without_debug_info() {
        for f in [
            // C++ (libstdc++ headers inlined into the program)
            "std::mutex::lock()",
            "std::condition_variable::wait(std::unique_lock<std::mutex>&)",
            "std::shared_mutex::lock_shared()",
            "std::unique_lock<std::mutex>::lock()",
            "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(int), int> > >::_M_run()",
            "__gthread_mutex_lock(pthread_mutex_t*)",
            "__gnu_cxx::__mutex::lock()",
            // Rust std
            "std::sys::sync::mutex::futex::Mutex::lock_contended",
            "std::sync::poison::mutex::Mutex<T>::lock",
            "std::sync::poison::condvar::Condvar::wait",
            "<std::thread::Builder>::spawn_unchecked_::<app::worker, ()>::{closure#1}",
            "std::sys::backtrace::__rust_begin_short_backtrace",
            "core::ops::function::FnOnce::call_once{{vtable.shim}}",
            "<app::main::{closure#0} as core::ops::function::FnOnce<()>>::call_once",
            "std::rt::lang_start_internal",
        ] {
            assert!(named(f, PROG).is_runtime(), "{f}");
            assert!(!named(f, PROG).is_user(), "{f}");
        }
        for f in [
            "Queue::push(int)",
            "app::worker",
            "app::main::{closure#0}",
            "db::Pool::lock_stdlike()",
            "my_std::mutex::lock",
        ] {
            assert!(named(f, PROG).is_user(), "{f}");
        }
    }

    #[test]
    fn a_chains_site_skips_runtime_frames_and_says_how_many() {
        let mut inlined = frame_in("/usr/include/c++/13/bits/std_mutex.h", PROG);
        inlined.function = Some("std::mutex::lock()".into());
        inlined.inlined = true;
        let chain = [
            inlined,
            named("__gthread_mutex_lock(pthread_mutex_t*)", PROG),
            named("Queue::push(int)", PROG),
            named("main", PROG),
            named("__libc_start_call_main", LIBC),
            named("_start", PROG),
        ];
        assert_eq!(site_index(&chain), Some(2));
        assert_eq!(
            site_frame(&chain).and_then(|f| f.function.clone()),
            Some("Queue::push(int)".into())
        );
        // Nothing of the program's own: the innermost frame stands for the chain.
        let runtime_only = [named("start_thread", LIBC), named("__clone3", LIBC)];
        assert_eq!(site_index(&runtime_only), Some(0));
        assert_eq!(site_index(&[]), None);
    }

    /// A module stripped of everything, whose debug file is installed by build-id under a
    /// debug directory (the test's own): names and source lines come from it.
    #[test]
    fn a_debug_file_is_found_by_build_id_under_the_debug_directory() {
        use std::process::Command;
        let present = |tool: &str| {
            Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !present("gcc") || !present("objcopy") {
            // Under CI a missing tool fails the run instead of passing it silently.
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(
                !ci,
                "gcc or objcopy is not installed; under CI=true a missing dependency fails the run"
            );
            eprintln!("SKIPPED: gcc or objcopy is not installed");
            return;
        }
        let dir = std::env::temp_dir().join(format!("waitshim-symbolize-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let src = dir.join("m.c");
        std::fs::write(
            &src,
            "int work(int x)\n{\n    return x + 1;\n}\nint main(void) { return work(0); }\n",
        )
        .expect("write");
        let bin = dir.join("m");
        let run = |cmd: &mut Command| assert!(cmd.status().is_ok_and(|s| s.success()), "{cmd:?}");
        run(Command::new("gcc")
            .args(["-g", "-O0", "-Wl,--build-id=sha1", "-o"])
            .arg(&bin)
            .arg(&src));
        let bytes = std::fs::read(&bin).expect("read");
        let elf = Elf::parse(&bytes).expect("ELF");
        let id = build_id(&elf, &bytes).expect("build-id");
        let work = elf
            .syms
            .iter()
            .find(|s| elf.strtab.get_at(s.st_name) == Some("work"))
            .map(|s| s.st_value)
            .expect("work");
        let root = dir.join("debug");
        let by_id = waitshim_elfsym::debugfile::build_id_path(&root, &id).expect("path");
        std::fs::create_dir_all(by_id.parent().expect("parent")).expect("mkdir");
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&bin)
            .arg(&by_id));
        run(Command::new("objcopy").arg("--strip-all").arg(&bin));
        let path = bin.to_str().expect("utf-8");

        let l = load_module_with(path, &id, &root).expect("loaded");
        assert!(!l.stripped);
        assert!(!l.dwarf.is_empty());
        let mut frame = Frame::default();
        resolve(&l, work, work, &mut frame);
        assert_eq!(frame.function.as_deref(), Some("work"));
        assert_eq!(frame.line, Some(2));

        // Without the debug directory it is stripped.
        let l = load_module_with(path, &id, &dir.join("elsewhere")).expect("loaded");
        assert!(l.stripped);
        assert!(l.dwarf.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_global_is_named_whole_by_element_or_by_offset() {
        let g = |offset, size| Global {
            symbol: "locks".into(),
            offset,
            size,
            module: PROG.into(),
        };
        // A pthread_mutex_t is 40 bytes.
        assert_eq!(g(0, 40).name(Some(40)), "locks");
        assert_eq!(g(0, 160).name(Some(40)), "locks[0]");
        assert_eq!(g(120, 160).name(Some(40)), "locks[3]");
        // Inside a struct whose size is no multiple of the object's.
        assert_eq!(g(8, 48).name(Some(40)), "locks+0x8");
        // Futex words and threads have no element size.
        assert_eq!(g(0, 64).name(None), "locks");
        assert_eq!(g(16, 64).name(None), "locks+0x10");
    }
}
