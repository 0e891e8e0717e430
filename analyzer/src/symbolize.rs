//! Stage 3: turn the raw addresses of call chains into function names and source lines, offline,
//! from the binaries the log names. Every lookup degrades instead of failing: a module that is gone,
//! rebuilt (build-id differs) or stripped still gives `module+0xoffset`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use goblin::elf::Elf;

use crate::model::Model;

/// ELF note type of the GNU build-id.
const NT_GNU_BUILD_ID: u32 = 3;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const STB_GLOBAL: u8 = 1;
/// Binaries larger than this are not read for symbols (they would be loaded whole).
const MAX_ELF_BYTES: u64 = 2 << 30;
/// Where Debian installs separate debug files, named by build-id.
const DEBUG_ROOT: &str = "/usr/lib/debug/.build-id";
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
        self.module
            .as_ref()
            .is_some_and(|p| p.ends_with("libwaitshim.so"))
    }

    /// Frames of the C runtime, the dynamic loader and the shim.
    pub fn is_runtime(&self) -> bool {
        self.is_shim() || self.module_is(RUNTIME_MODULES)
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

    /// The program's own code: not the shim, the C or C++ runtime, the dynamic loader, nor a
    /// system header inlined into the program. Where its author made the call that is reported.
    pub fn is_user(&self) -> bool {
        !self.is_runtime() && !self.module_is(LANGUAGE_RUNTIME_MODULES) && !self.is_system_source()
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

pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Why a module's symbols could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleStatus {
    Ok { dwarf: bool },
    Disabled,
    Missing(String),
    BuildIdMismatch,
    NotElf(String),
}

impl ModuleStatus {
    pub fn describe(&self) -> String {
        match self {
            ModuleStatus::Ok { dwarf: true } => "symbols and source lines".into(),
            ModuleStatus::Ok { dwarf: false } => "symbols only (no debug info)".into(),
            ModuleStatus::Disabled => "not symbolized (--no-symbols)".into(),
            ModuleStatus::Missing(why) => format!("file not available ({why})"),
            ModuleStatus::BuildIdMismatch => {
                "build-id differs from the log: the file was rebuilt since the run".into()
            }
            ModuleStatus::NotElf(why) => format!("not a readable ELF file ({why})"),
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, ModuleStatus::Ok { .. })
    }
}

struct Sym {
    start: u64,
    size: u64,
    name: String,
}

struct Loaded {
    symbols: Vec<Sym>,
    /// DWARF sources, the binary first, then its separate debug file.
    dwarf: Vec<addr2line::Loader>,
}

struct ModuleMap {
    module_id: u32,
    base: u64,
    path: String,
    build_id: Vec<u8>,
    /// Absolute address ranges of the module's segments.
    ranges: Vec<(u64, u64)>,
    status: ModuleStatus,
    loaded: Option<Loaded>,
    attempted: bool,
}

/// Symbolizes addresses of one log's modules; caches per module and per address.
pub struct Symbolizer {
    enabled: bool,
    modules: Vec<ModuleMap>,
    /// The logical frames of an address (see [`Symbolizer::frames`]).
    cache: HashMap<(u64, bool), Vec<Frame>>,
}

impl Symbolizer {
    /// `enabled = false` maps addresses to modules only, without opening any file.
    pub fn new(model: &Model, enabled: bool) -> Self {
        let exe = model
            .run
            .as_ref()
            .map(|r| r.exe.clone())
            .unwrap_or_default();
        let modules = model
            .modules
            .values()
            .map(|m| {
                let ranges = m
                    .segments
                    .iter()
                    .map(|s| {
                        let lo = m.base.wrapping_add(s.vaddr);
                        (lo, lo.saturating_add(s.memsz))
                    })
                    .collect();
                // The main program may be logged without a path: the run's exe names it.
                let path = if m.path.is_empty() {
                    exe.clone()
                } else {
                    m.path.clone()
                };
                ModuleMap {
                    module_id: m.module_id,
                    base: m.base,
                    path,
                    build_id: m.build_id.clone(),
                    ranges,
                    status: if enabled {
                        ModuleStatus::Ok { dwarf: false }
                    } else {
                        ModuleStatus::Disabled
                    },
                    loaded: None,
                    attempted: false,
                }
            })
            .collect();
        Symbolizer {
            enabled,
            modules,
            cache: HashMap::new(),
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
        // Later modules win: an address range reused after dlclose belongs to the newer one.
        let found = self
            .modules
            .iter()
            .rposition(|m| m.ranges.iter().any(|&(lo, hi)| probe >= lo && probe < hi));
        if let Some(m) = found.and_then(|i| self.modules.get_mut(i)) {
            frame.module = Some(m.path.clone());
            frame.module_offset = Some(addr.wrapping_sub(m.base));
            // The shim's own frames are never shown: no need to read its symbols.
            if self.enabled && !frame.is_shim() {
                if !m.attempted {
                    m.attempted = true;
                    match load_module(&m.path, &m.build_id) {
                        Ok(l) => {
                            m.status = ModuleStatus::Ok {
                                dwarf: !l.dwarf.is_empty(),
                            };
                            m.loaded = Some(l);
                        }
                        Err(status) => m.status = status,
                    }
                }
                if let Some(l) = &m.loaded {
                    frames = resolve(
                        l,
                        probe.wrapping_sub(m.base),
                        addr.wrapping_sub(m.base),
                        &mut frame,
                    );
                }
            }
        }
        frames.push(frame);
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

    /// The chain's logical frames, innermost first, inlined frames included, without the shim's
    /// own frames.
    pub fn chain(&mut self, model: &Model, chain_id: u32) -> Vec<Frame> {
        let Some(addrs) = model.chains.get(&chain_id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &a in addrs {
            out.extend(self.frames(a, true).into_iter().filter(|f| !f.is_shim()));
        }
        out
    }

    /// Where the chain happened, in the program's terms (see [`site_frame`]): where an object
    /// was created, a thread started, a waiter waited or a holder released.
    pub fn site(&mut self, model: &Model, chain_id: u32) -> Option<Frame> {
        site_frame(&self.chain(model, chain_id)).cloned()
    }
}

/// The frame that stands for a whole chain: the first of the program's own code
/// ([`Frame::is_user`]), else the first frame.
pub fn site_frame(frames: &[Frame]) -> Option<&Frame> {
    frames
        .iter()
        .find(|f| f.is_user())
        .or_else(|| frames.first())
}

/// Fills function and source line of the physical `frame` from a loaded module, and returns the
/// frames inlined at the address, innermost first. `probe` and `ret` are relative to the
/// module's base (the looked-up address and the displayed one).
fn resolve(l: &Loaded, probe: u64, ret: u64, frame: &mut Frame) -> Vec<Frame> {
    let idx = l.symbols.partition_point(|s| s.start <= probe);
    if let Some(sym) = idx.checked_sub(1).and_then(|i| l.symbols.get(i)) {
        let inside = sym.size == 0 || probe - sym.start < sym.size;
        if inside {
            frame.function = Some(demangle(&sym.name));
            frame.offset = Some(ret.wrapping_sub(sym.start));
        }
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
fn dwarf_frames(dwarf: &addr2line::Loader, probe: u64) -> Vec<DwarfFrame> {
    let mut out = Vec::new();
    if let Ok(mut iter) = dwarf.find_frames(probe) {
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

/// Rust (legacy and v0) and C++ names, readable; anything else as it is.
pub fn demangle(name: &str) -> String {
    let rust_legacy = name.starts_with("_ZN") && looks_like_rust_hash(name);
    if name.starts_with("_R") || rust_legacy {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return s;
            }
        }
    }
    name.to_string()
}

/// Legacy Rust symbols end in a `17h<16 hex digits>E` hash segment (before any `.llvm.` suffix).
fn looks_like_rust_hash(name: &str) -> bool {
    let core = name.split(".llvm.").next().unwrap_or(name);
    let Some(body) = core.strip_suffix('E') else {
        return false;
    };
    body.len() > 19
        && body
            .get(body.len() - 19..body.len() - 16)
            .is_some_and(|s| s == "17h")
        && body
            .get(body.len() - 16..)
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The GNU build-id of an ELF image, if it has one.
pub fn build_id(elf: &Elf<'_>, bytes: &[u8]) -> Option<Vec<u8>> {
    let notes = elf.iter_note_headers(bytes)?;
    for note in notes.flatten() {
        if note.n_type == NT_GNU_BUILD_ID && note.name == "GNU" {
            return Some(note.desc.to_vec());
        }
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Debian's separate debug file for a build-id: `/usr/lib/debug/.build-id/ab/cdef….debug`.
fn debug_file_path(build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(
        Path::new(DEBUG_ROOT)
            .join(format!("{first:02x}"))
            .join(format!("{}.debug", hex(rest))),
    )
}

fn read_elf_bytes(path: &Path) -> Result<Vec<u8>, ModuleStatus> {
    let meta = std::fs::metadata(path).map_err(|e| ModuleStatus::Missing(e.to_string()))?;
    if meta.len() > MAX_ELF_BYTES {
        return Err(ModuleStatus::NotElf("file too large".into()));
    }
    std::fs::read(path).map_err(|e| ModuleStatus::Missing(e.to_string()))
}

/// Function symbols of one symbol table, sorted by address, one per address (sized, global
/// symbols preferred over aliases).
fn function_symbols(elf: &Elf<'_>, dynamic: bool) -> Vec<Sym> {
    let (syms, strtab) = if dynamic {
        (&elf.dynsyms, &elf.dynstrtab)
    } else {
        (&elf.syms, &elf.strtab)
    };
    let mut out: Vec<(Sym, u8)> = syms
        .iter()
        .filter(|s| {
            let t = s.st_type();
            (t == STT_FUNC || t == STT_GNU_IFUNC) && s.st_value != 0 && s.st_shndx != 0
        })
        .filter_map(|s| {
            let name = strtab.get_at(s.st_name)?;
            if name.is_empty() {
                return None;
            }
            let rank = u8::from(s.st_size == 0) * 2 + u8::from(s.st_bind() != STB_GLOBAL);
            Some((
                Sym {
                    start: s.st_value,
                    size: s.st_size,
                    name: name.to_string(),
                },
                rank,
            ))
        })
        .collect();
    out.sort_by(|(a, ra), (b, rb)| a.start.cmp(&b.start).then(ra.cmp(rb)));
    out.dedup_by_key(|(s, _)| s.start);
    out.into_iter().map(|(s, _)| s).collect()
}

fn has_debug_info(elf: &Elf<'_>) -> bool {
    elf.section_headers.iter().any(|sh| {
        elf.shdr_strtab
            .get_at(sh.sh_name)
            .is_some_and(|n| n == ".debug_info" || n == ".zdebug_info")
    })
}

fn load_module(path: &str, logged_build_id: &[u8]) -> Result<Loaded, ModuleStatus> {
    let path = Path::new(path);
    let bytes = read_elf_bytes(path)?;
    let elf = Elf::parse(&bytes).map_err(|e| ModuleStatus::NotElf(e.to_string()))?;
    let file_build_id = build_id(&elf, &bytes);
    if let Some(id) = &file_build_id {
        if !logged_build_id.is_empty() && id.as_slice() != logged_build_id {
            return Err(ModuleStatus::BuildIdMismatch);
        }
    }
    let mut symbols = function_symbols(&elf, false);
    let mut dwarf = Vec::new();
    if has_debug_info(&elf) {
        if let Ok(l) = addr2line::Loader::new(path) {
            dwarf.push(l);
        }
    }
    let id = file_build_id.unwrap_or_else(|| logged_build_id.to_vec());
    if let Some(debug_path) = debug_file_path(&id).filter(|p| p.is_file()) {
        if let Ok(debug_bytes) = read_elf_bytes(&debug_path) {
            if let Ok(debug_elf) = Elf::parse(&debug_bytes) {
                if symbols.is_empty() {
                    symbols = function_symbols(&debug_elf, false);
                }
                if has_debug_info(&debug_elf) {
                    if let Ok(l) = addr2line::Loader::new(&debug_path) {
                        dwarf.push(l);
                    }
                }
            }
        }
    }
    if symbols.is_empty() {
        symbols = function_symbols(&elf, true);
    }
    Ok(Loaded { symbols, dwarf })
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
    fn rust_standard_library_frames_are_not_the_programs_own_code() {
        let std_lock = frame_in(
            "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/sys/sync/mutex/futex.rs",
            "/home/u/app/target/release/app",
        );
        assert!(!std_lock.is_user());
        assert!(frame_in("/home/u/app/src/main.rs", "/home/u/app/target/release/app").is_user());
        assert!(frame_in("src/main.rs", "/home/u/app/target/release/app").is_user());
    }
}
