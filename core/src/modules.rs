//! Loaded ELF objects, for offline symbolization: path, load base, build-id and loadable
//! segments, written once each at start and after every `dlopen`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use waitshim_format::{Module, Segment};

/// Modules already written, by (base, path hash).
pub struct Modules {
    seen: Mutex<(HashSet<(u64, u64)>, u32)>,
    /// What the last scan found, for a forked child to write without a scan of its own (see
    /// [`Modules::inherit`]); replaced whole by each scan, never changed in place.
    last: AtomicPtr<Vec<Module>>,
}

const NT_GNU_BUILD_ID: u32 = 3;

fn hash(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Reads the GNU build-id from an in-memory PT_NOTE segment.
///
/// # Safety
/// `[start, start+len)` must be a mapped note segment of a loaded object.
unsafe fn build_id(start: *const u8, len: usize) -> Vec<u8> {
    let mut off = 0usize;
    let rd = |o: usize| -> u32 {
        // SAFETY: callers keep `o + 4 <= len`.
        unsafe { std::ptr::read_unaligned(start.add(o) as *const u32) }
    };
    while off + 12 <= len {
        let namesz = rd(off) as usize;
        let descsz = rd(off + 4) as usize;
        let ty = rd(off + 8);
        let name_off = off + 12;
        let desc_off = name_off + ((namesz + 3) & !3);
        let next = desc_off + ((descsz + 3) & !3);
        if next > len {
            break;
        }
        // SAFETY: the name lies inside the segment (checked by `next <= len`).
        let name = unsafe { std::slice::from_raw_parts(start.add(name_off), namesz) };
        if ty == NT_GNU_BUILD_ID && name == b"GNU\0" {
            // SAFETY: as above for the descriptor.
            return unsafe { std::slice::from_raw_parts(start.add(desc_off), descsz) }.to_vec();
        }
        off = next;
    }
    Vec::new()
}

fn exe_path() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our Vec as data.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<Module>)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if name.is_empty() && out.is_empty() {
        exe_path()
    } else {
        name
    };
    let mut m = Module {
        base: info.dlpi_addr,
        path,
        ..Module::default()
    };
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        match ph.p_type {
            libc::PT_LOAD => m.segments.push(Segment {
                vaddr: ph.p_vaddr,
                memsz: ph.p_memsz,
            }),
            libc::PT_NOTE if m.build_id.is_empty() => {
                // SAFETY: a PT_NOTE segment of a loaded object is mapped at base + p_vaddr.
                m.build_id = unsafe {
                    build_id(
                        (info.dlpi_addr + ph.p_vaddr) as *const u8,
                        ph.p_memsz as usize,
                    )
                };
            }
            _ => {}
        }
    }
    if !m.segments.is_empty() {
        out.push(m);
    }
    0
}

impl Modules {
    pub fn new() -> Self {
        Modules {
            seen: Mutex::new((HashSet::new(), 0)),
            last: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Writes a record for every loaded object not written before.
    pub fn scan(&self, log: &crate::log::Log) {
        let mut found: Vec<Module> = Vec::new();
        // SAFETY: `visit` matches dl_iterate_phdr's callback contract and fills `found`.
        unsafe {
            libc::dl_iterate_phdr(
                Some(visit),
                &mut found as *mut Vec<Module> as *mut libc::c_void,
            )
        };
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let old = self
            .last
            .swap(Box::into_raw(Box::new(found.clone())), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: made by `Box::into_raw` above and swapped out, so no longer reachable;
            // only a forked child reads `last`, and a child sees the pointer as it was at the
            // fork, never one freed before.
            drop(unsafe { Box::from_raw(old) });
        }
        self.write_new(&mut seen, found, log);
    }

    /// In a forked child: writes the modules the parent's last scan found, without scanning.
    /// The loader's lock, which a scan takes, may have been held by another thread of the
    /// parent at the fork: a scan would wait for it forever (glibc resets the loader's other
    /// locks in the child, not this one). The objects a child has are its parent's.
    pub fn inherit(&self, parent: &Modules, log: &crate::log::Log) {
        let p = parent.last.load(Ordering::Acquire);
        if p.is_null() {
            return;
        }
        // SAFETY: a list published by the parent's scan, not freed before the fork (see `scan`).
        let found = unsafe { &*p }.clone();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        self.last
            .store(Box::into_raw(Box::new(found.clone())), Ordering::Release);
        self.write_new(&mut seen, found, log);
    }

    fn write_new(
        &self,
        seen: &mut (HashSet<(u64, u64)>, u32),
        found: Vec<Module>,
        log: &crate::log::Log,
    ) {
        for mut m in found {
            if seen.0.insert((m.base, hash(&m.path))) {
                seen.1 += 1;
                m.module_id = seen.1;
                log.write(&m.into());
            }
        }
    }
}

/// The address range of this library's own code, so its frames can be dropped from chains.
pub fn own_range() -> (usize, usize) {
    let mut lo = usize::MAX;
    let mut hi = 0usize;
    let mut found: Vec<Module> = Vec::new();
    // SAFETY: as in `scan`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(visit),
            &mut found as *mut Vec<Module> as *mut libc::c_void,
        )
    };
    let me = own_range as *const () as usize as u64;
    for m in found {
        let inside = m
            .segments
            .iter()
            .any(|s| me >= m.base + s.vaddr && me < m.base + s.vaddr + s.memsz);
        if inside {
            for s in &m.segments {
                lo = lo.min((m.base + s.vaddr) as usize);
                hi = hi.max((m.base + s.vaddr + s.memsz) as usize);
            }
        }
    }
    (lo, hi)
}
