//! Shared by the unwinder's test programs: the C library of `c/frames.c`, built and loaded
//! at test time, and naming frames through `dladdr1` (symbol start and size).

#![allow(dead_code)]

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;

pub type Cb = extern "C" fn(*mut c_void);

/// The loaded C library of `c/frames.c`.
pub struct CLib {
    pub handle: *mut c_void,
    pub c_top: extern "C" fn(Cb, *mut c_void),
    pub c_spin_top: extern "C" fn(*const i32),
    pub path: PathBuf,
}

// SAFETY: the handle and function pointers are plain addresses, valid while the library is
// loaded, usable from any thread.
unsafe impl Sync for CLib {}
unsafe impl Send for CLib {}

/// Compiles `c/frames.c` into a shared library named `name`, loads it and, with `refresh`,
/// rebuilds the unwinder's module table (as the shim does after `dlopen`).
pub fn load(name: &str, refresh: bool) -> CLib {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/frames.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("{name}-{}.so", std::process::id()));
    let out = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-g", "-o"])
        .arg(&path)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cpath = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: dlopen/dlsym with NUL-terminated strings; the symbols have the declared types
    // (see c/frames.c).
    unsafe {
        let handle = libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!handle.is_null(), "dlopen {}", path.display());
        let sym = |n: &CStr| {
            let p = libc::dlsym(handle, n.as_ptr());
            assert!(!p.is_null(), "{n:?} missing");
            p
        };
        let lib = CLib {
            handle,
            c_top: std::mem::transmute::<*mut c_void, extern "C" fn(Cb, *mut c_void)>(sym(
                c"c_top",
            )),
            c_spin_top: std::mem::transmute::<*mut c_void, extern "C" fn(*const i32)>(sym(
                c"c_spin_top",
            )),
            path,
        };
        if refresh {
            waitshim_unwind::refresh();
        }
        lib
    }
}

#[repr(C)]
struct ElfSym {
    st_name: u32,
    st_info: u8,
    st_other: u8,
    st_shndx: u16,
    st_value: u64,
    st_size: u64,
}

extern "C" {
    fn dladdr1(
        addr: *const c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut c_void,
        flags: libc::c_int,
    ) -> libc::c_int;
}
const RTLD_DL_SYMENT: libc::c_int = 1;

/// The dynamic symbol containing `addr`: name, start and size.
pub fn symbol(addr: u64) -> Option<(String, u64, u64)> {
    // SAFETY: dladdr1 fills `info` and points `sym` at the symbol's table entry, which lives as
    // long as its object stays loaded; read at once.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut sym: *mut c_void = std::ptr::null_mut();
        if dladdr1(addr as *const c_void, &mut info, &mut sym, RTLD_DL_SYMENT) == 0
            || info.dli_sname.is_null()
            || sym.is_null()
        {
            return None;
        }
        let s = &*(sym as *const ElfSym);
        let start = info.dli_saddr as u64;
        let name = CStr::from_ptr(info.dli_sname)
            .to_string_lossy()
            .into_owned();
        Some((name, start, s.st_size))
    }
}

/// The function a frame is in: its program counter (`exact`) or return address (looked up one
/// byte back, inside the call), "?" when no symbol's range contains it.
pub fn function(pc: u64, exact: bool) -> String {
    let look = if exact { pc } else { pc - 1 };
    match symbol(look) {
        Some((name, start, size)) if look >= start && look < start + size.max(1) => name,
        _ => "?".into(),
    }
}

/// Names of the frames of a chain whose first frame is `exact` or not.
pub fn names(frames: &[u64], first_exact: bool) -> Vec<String> {
    frames
        .iter()
        .enumerate()
        .map(|(i, &pc)| function(pc, i == 0 && first_exact))
        .collect()
}

/// Whether `want` appears in `have` in this order, one right after the other.
pub fn has_run(have: &[String], want: &[&str]) -> bool {
    have.windows(want.len())
        .any(|w| w.iter().zip(want).all(|(a, b)| a == b))
}
