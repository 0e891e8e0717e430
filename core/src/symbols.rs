//! Function names of code addresses, inside the process, for policy selectors (an object's
//! creation site, a thread's start routine). Off the hot path: a module's symbol table is read
//! from its file (mapped, not copied) the first time a selector needs it, then kept.
//!
//! `dladdr` only knows exported symbols (programs rarely export their functions) and takes the
//! loader's lock; modules are found through `/proc/self/maps` and their `.symtab`/`.dynsym` read
//! by `waitshim-elfsym`, the reader the analyzer uses too: a selector sees the functions a
//! report shows. A stripped module's functions come from its separate debug file when it has
//! one, found as the analyzer and GDB find it (by build-id under `/usr/lib/debug`, else by
//! `.gnu_debuglink`), mapped like the module.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::procmaps;

/// Functions of one module: (start, end, name) sorted by start, as offsets from its load bias.
struct Table {
    funcs: Vec<(u64, u64, Box<str>)>,
    /// `ET_EXEC`: symbol values are absolute addresses.
    absolute: bool,
}

fn tables() -> &'static Mutex<HashMap<String, Arc<Table>>> {
    static T: OnceLock<Mutex<HashMap<String, Arc<Table>>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The file's bytes, mapped read-only (a large unstripped binary is not copied into the
/// program's heap).
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    /// Maps the regular file at `path` (anything else, a FIFO or a device a debug link could
    /// name, is left alone: opened without blocking, never read).
    fn open(path: &str) -> Option<Mapped> {
        let c = std::ffi::CString::new(path).ok()?;
        // SAFETY: open/fstat/mmap/close on a descriptor we own; the mapping outlives the fd.
        unsafe {
            let fd = libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY,
            );
            if fd < 0 {
                return None;
            }
            let mut st: libc::stat = std::mem::zeroed();
            let ok = libc::fstat(fd, &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFREG
                && st.st_size > 0;
            let len = st.st_size as usize;
            let ptr = if ok {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    fd,
                    0,
                )
            } else {
                libc::MAP_FAILED
            };
            libc::close(fd);
            (ptr != libc::MAP_FAILED).then_some(Mapped { ptr, len })
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: a read-only mapping of `len` bytes, alive until drop.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

fn load(path: &str) -> Table {
    let mut t = Table {
        funcs: Vec::new(),
        absolute: false,
    };
    let Some(file) = Mapped::open(path) else {
        return t;
    };
    let Ok(elf) = goblin::elf::Elf::parse(file.bytes()) else {
        return t;
    };
    t.absolute = elf.header.e_type == goblin::elf::header::ET_EXEC;
    let mut add = |syms: Vec<waitshim_elfsym::Sym>| {
        for s in syms {
            let end = s.start + s.size.max(1);
            t.funcs.push((s.start, end, s.name.into()));
        }
    };
    let own = waitshim_elfsym::function_symbols(&elf, false);
    if own.is_empty() {
        // Stripped: the debug file has the full table, at the same addresses.
        let debug = waitshim_elfsym::find_debug_file(
            std::path::Path::new(path),
            &elf,
            file.bytes(),
            std::path::Path::new(waitshim_elfsym::DEFAULT_DEBUG_ROOT),
            |p| p.to_str().and_then(Mapped::open),
        );
        if let Some(d) = debug {
            if let Ok(delf) = goblin::elf::Elf::parse(d.bytes.bytes()) {
                add(waitshim_elfsym::function_symbols(&delf, false));
            }
        }
    } else {
        add(own);
    }
    add(waitshim_elfsym::function_symbols(&elf, true));
    t.funcs.sort_by_key(|f| f.0);
    t.funcs.dedup_by_key(|f| f.0);
    t
}

/// The function containing code address `addr` (pass a return address minus one), if its module
/// has a symbol for it. `maps` is a recent [`procmaps::read`].
pub fn function_at(maps: &[procmaps::Mapping], addr: u64) -> Option<Box<str>> {
    let (path, base) = procmaps::module_of(maps, addr)?;
    let table = {
        let mut all = tables().lock().unwrap_or_else(|e| e.into_inner());
        match all.get(path) {
            Some(t) => t.clone(),
            None => {
                let t = Arc::new(load(path));
                all.insert(path.to_string(), t.clone());
                t
            }
        }
    };
    let key = if table.absolute {
        addr
    } else {
        addr.wrapping_sub(base)
    };
    let i = table.funcs.partition_point(|f| f.0 <= key);
    let (start, end, name) = table.funcs.get(i.checked_sub(1)?)?;
    (key >= *start && key < *end).then(|| name.clone())
}
