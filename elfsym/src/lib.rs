//! The one reader of ELF symbol tables and the one demangler of waitshim: the shim uses it to
//! match policy selectors (`creation_site`, `thread_group`) against the functions of call chains
//! inside the running program, the analyzer to name frames and global variables in reports. Both
//! therefore see the same symbols under the same names. [`debugfile`] finds the separate debug
//! file of a stripped module (by build-id, else by `.gnu_debuglink`).

use goblin::elf::Elf;

pub mod debugfile;
pub use debugfile::{build_id, find_debug_file, DebugFile, DebugVia, DEFAULT_DEBUG_ROOT};

/// `STT_OBJECT`: a variable.
pub const STT_OBJECT: u8 = 1;
/// `STT_FUNC`: a function.
pub const STT_FUNC: u8 = 2;
/// `STT_GNU_IFUNC`: a function chosen at load time (`memcpy`).
pub const STT_GNU_IFUNC: u8 = 10;
const STB_GLOBAL: u8 = 1;

/// One symbol: `[start, start + size)` in the module's own addresses, with its raw (mangled)
/// name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sym {
    pub start: u64,
    pub size: u64,
    pub name: String,
}

/// The symbols of one table (`.symtab`, or `.dynsym` when `dynamic`) whose type `wanted`
/// accepts, defined (not imports), sorted by address, one per address: sized, global symbols
/// are preferred over aliases.
pub fn symbols(elf: &Elf<'_>, dynamic: bool, wanted: impl Fn(u8) -> bool) -> Vec<Sym> {
    let (syms, strtab) = if dynamic {
        (&elf.dynsyms, &elf.dynstrtab)
    } else {
        (&elf.syms, &elf.strtab)
    };
    let mut out: Vec<(Sym, u8)> = syms
        .iter()
        .filter(|s| wanted(s.st_type()) && s.st_value != 0 && s.st_shndx != 0)
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

/// Function symbols of one table (see [`symbols`]).
pub fn function_symbols(elf: &Elf<'_>, dynamic: bool) -> Vec<Sym> {
    symbols(elf, dynamic, |t| t == STT_FUNC || t == STT_GNU_IFUNC)
}

/// Variables with a size (global and static ones) of one table (see [`symbols`]).
pub fn data_symbols(elf: &Elf<'_>, dynamic: bool) -> Vec<Sym> {
    let mut v = symbols(elf, dynamic, |t| t == STT_OBJECT);
    v.retain(|s| s.size > 0);
    v
}

/// The symbol of a sorted list (as [`symbols`] gives) that contains `addr`; a symbol without a
/// size contains only its first byte when `sized_only`, else everything up to the next one.
pub fn containing(syms: &[Sym], addr: u64, sized_only: bool) -> Option<&Sym> {
    let i = syms.partition_point(|s| s.start <= addr);
    let s = syms.get(i.checked_sub(1)?)?;
    let off = addr - s.start;
    let inside = if s.size == 0 {
        !sized_only || off == 0
    } else {
        off < s.size
    };
    inside.then_some(s)
}

/// Rust (legacy and v0) and C++ names, readable as the report shows them; anything else as it
/// is.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cxx_and_rust_names_demangle_as_reports_show_them() {
        assert_eq!(demangle("_ZN2db4Pool6createEv"), "db::Pool::create()");
        assert_eq!(
            demangle("_ZN3app6worker17h0123456789abcdefE"),
            "app::worker"
        );
        assert_eq!(demangle("db_open"), "db_open");
    }

    #[test]
    fn the_symbol_containing_an_address_is_found() {
        let syms = vec![
            Sym {
                start: 0x100,
                size: 0x10,
                name: "a".into(),
            },
            Sym {
                start: 0x200,
                size: 0,
                name: "b".into(),
            },
        ];
        assert_eq!(containing(&syms, 0x10f, true).map(|s| &*s.name), Some("a"));
        assert_eq!(containing(&syms, 0x110, true), None);
        assert_eq!(containing(&syms, 0x200, true).map(|s| &*s.name), Some("b"));
        assert_eq!(containing(&syms, 0x208, true), None);
        assert_eq!(containing(&syms, 0x208, false).map(|s| &*s.name), Some("b"));
        assert_eq!(containing(&syms, 0xff, false), None);
    }
}
