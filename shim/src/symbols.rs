//! Function names of code addresses, inside the process, for policy selectors (an object's
//! creation site, a thread's start routine). Off the hot path: a module's symbol table is read
//! from its file the first time a selector needs it, then kept.
//!
//! `dladdr` alone only knows exported symbols; programs rarely export their functions, so the
//! module's `.symtab` (and `.dynsym`) is read with goblin.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

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

fn load(path: &str) -> Table {
    let mut t = Table {
        funcs: Vec::new(),
        absolute: false,
    };
    let Ok(bytes) = std::fs::read(path) else {
        return t;
    };
    let Ok(elf) = goblin::elf::Elf::parse(&bytes) else {
        return t;
    };
    t.absolute = elf.header.e_type == goblin::elf::header::ET_EXEC;
    let mut add = |syms: &goblin::elf::Symtab, strs: &goblin::strtab::Strtab| {
        for s in syms.iter() {
            if s.st_type() != goblin::elf::sym::STT_FUNC || s.st_value == 0 {
                continue;
            }
            if let Some(name) = strs.get_at(s.st_name) {
                let size = s.st_size.max(1);
                t.funcs.push((s.st_value, s.st_value + size, name.into()));
            }
        }
    };
    add(&elf.syms, &elf.strtab);
    add(&elf.dynsyms, &elf.dynstrtab);
    t.funcs.sort_by_key(|f| f.0);
    t.funcs.dedup_by_key(|f| f.0);
    t
}

/// The function containing code address `addr` (pass a return address minus one), if its module
/// has a symbol for it.
pub fn function_at(addr: u64) -> Option<Box<str>> {
    // SAFETY: dladdr fills the struct for any address; the strings it points at live as long as
    // the module stays loaded.
    let (fname, base, dyn_name) = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr as *const libc::c_void, &mut info) == 0 {
            return None;
        }
        let fname = if info.dli_fname.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned()
        };
        let dyn_name = (!info.dli_sname.is_null()).then(|| {
            (
                std::ffi::CStr::from_ptr(info.dli_sname)
                    .to_string_lossy()
                    .into_owned(),
                info.dli_saddr as u64,
            )
        });
        (fname, info.dli_fbase as u64, dyn_name)
    };
    // The main program is reported under its argv[0] (or an empty name): read it where the
    // kernel says it is.
    let path = if !fname.starts_with('/') {
        "/proc/self/exe".to_string()
    } else {
        fname
    };
    let table = {
        let mut all = tables().lock().unwrap_or_else(|e| e.into_inner());
        match all.get(&path) {
            Some(t) => t.clone(),
            None => {
                let t = Arc::new(load(&path));
                all.insert(path, t.clone());
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
    if i > 0 {
        let (start, end, name) = &table.funcs[i - 1];
        if key >= *start && key < *end {
            return Some(name.clone());
        }
    }
    dyn_name.map(|(n, _)| n.into_boxed_str())
}
