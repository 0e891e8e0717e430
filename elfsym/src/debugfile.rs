//! Separate debug files: where distributions and `objcopy --only-keep-debug` put the symbol
//! table and DWARF of a stripped module, found the way GDB finds them: by the module's GNU
//! build-id under the debug directory (`/usr/lib/debug/.build-id/ab/cdef….debug`), else by the
//! file name its `.gnu_debuglink` section names, next to the module, in its `.debug`
//! subdirectory, then under the debug directory, checked against the CRC32 the section holds.
//!
//! Nothing here opens a file by itself: the caller passes how a candidate is read (the analyzer
//! reads only regular files, without blocking, up to a size), and the debug directory (tests
//! use their own).

use std::path::{Path, PathBuf};

use goblin::elf::section_header::SHT_NOBITS;
use goblin::elf::Elf;

/// Where separate debug files are installed (Debian, Fedora, Arch, GDB's default).
pub const DEFAULT_DEBUG_ROOT: &str = "/usr/lib/debug";
/// ELF note type of the GNU build-id.
const NT_GNU_BUILD_ID: u32 = 3;

/// How a separate debug file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugVia {
    /// `<root>/.build-id/ab/cdef….debug`, named by the module's build-id.
    BuildId,
    /// The name `.gnu_debuglink` gives, in one of the places GDB looks, with the right CRC32.
    DebugLink,
    /// A debuginfod server's, by build-id (its client's cache, or fetched).
    Debuginfod,
}

/// A module's separate debug file: where it is, how it was found, and its bytes (read once,
/// to check it): a `Vec<u8>`, or whatever holder of them the caller's `read` gives (the shim
/// maps files instead of copying them into the program's heap).
#[derive(Debug, Clone)]
pub struct DebugFile<B = Vec<u8>> {
    pub path: PathBuf,
    pub via: DebugVia,
    pub bytes: B,
}

/// What a `.gnu_debuglink` section holds: the debug file's name (no directory) and the CRC32
/// of its whole contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugLink {
    pub name: String,
    pub crc: u32,
}

/// The GNU build-id of an ELF image, if it has one.
pub fn build_id<'a>(elf: &Elf<'a>, bytes: &'a [u8]) -> Option<&'a [u8]> {
    let notes = elf.iter_note_headers(bytes)?;
    for note in notes.flatten() {
        if note.n_type == NT_GNU_BUILD_ID && note.name == "GNU" {
            return Some(note.desc);
        }
    }
    None
}

/// The contents of the section called `name`, if the file holds them.
fn section<'a>(elf: &Elf<'_>, bytes: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let sh = elf
        .section_headers
        .iter()
        .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(name))?;
    if sh.sh_type == SHT_NOBITS {
        return None;
    }
    let start = usize::try_from(sh.sh_offset).ok()?;
    let end = start.checked_add(usize::try_from(sh.sh_size).ok()?)?;
    bytes.get(start..end)
}

/// The `.gnu_debuglink` of a module: a NUL-terminated file name, padding to a multiple of 4
/// bytes, then the CRC32 in the file's byte order. `None` when absent, damaged, or naming
/// something that is not a plain file name (a path, `.`, `..`): the module is any file, and
/// only its own directory and the debug directory are searched.
pub fn debuglink(elf: &Elf<'_>, bytes: &[u8]) -> Option<DebugLink> {
    let data = section(elf, bytes, ".gnu_debuglink")?;
    let nul = data.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(data.get(..nul)?).ok()?;
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return None;
    }
    let at = (nul + 1).next_multiple_of(4);
    let crc: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
    let crc = if elf.little_endian {
        u32::from_le_bytes(crc)
    } else {
        u32::from_be_bytes(crc)
    };
    Some(DebugLink {
        name: name.to_string(),
        crc,
    })
}

/// `<root>/.build-id/ab/cdef….debug` for a build-id (of two bytes at least).
pub fn build_id_path(root: &Path, id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let rest: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    Some(
        root.join(".build-id")
            .join(format!("{first:02x}"))
            .join(format!("{rest}.debug")),
    )
}

/// Where GDB looks for the debug file `name` of `module`, in its order: `<dir>/<name>`,
/// `<dir>/.debug/<name>`, `<root>/<dir>/<name>`, where `<dir>` is the directory of the
/// module's real path (symbolic links resolved), then of the path as given when it differs.
/// The module itself is never a candidate.
pub fn debuglink_candidates(module: &Path, name: &str, root: &Path) -> Vec<PathBuf> {
    let real = std::fs::canonicalize(module).ok();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for p in real.iter().map(PathBuf::as_path).chain([module]) {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in &dirs {
        let mut here = vec![dir.join(name), dir.join(".debug").join(name)];
        if let Ok(rel) = dir.strip_prefix("/") {
            here.push(root.join(rel).join(name));
        }
        for c in here {
            let is_module = c == module || real.as_deref() == Some(c.as_path());
            if !is_module && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// The separate debug file of build-id `id` under `root`, if there is one whose own build-id
/// (when it has one) is the same.
pub fn debug_file_by_build_id<B: AsRef<[u8]>>(
    root: &Path,
    id: &[u8],
    mut read: impl FnMut(&Path) -> Option<B>,
) -> Option<DebugFile<B>> {
    let path = build_id_path(root, id)?;
    let bytes = read(&path)?;
    let elf = Elf::parse(bytes.as_ref()).ok()?;
    if build_id(&elf, bytes.as_ref()).is_some_and(|own| own != id) {
        return None;
    }
    drop(elf);
    Some(DebugFile {
        path,
        via: DebugVia::BuildId,
        bytes,
    })
}

/// The separate debug file `.gnu_debuglink` names, in the first place of
/// [`debuglink_candidates`] that holds a file with the CRC32 the link gives.
pub fn debug_file_by_debuglink<B: AsRef<[u8]>>(
    module: &Path,
    elf: &Elf<'_>,
    bytes: &[u8],
    root: &Path,
    mut read: impl FnMut(&Path) -> Option<B>,
) -> Option<DebugFile<B>> {
    let link = debuglink(elf, bytes)?;
    debuglink_candidates(module, &link.name, root)
        .into_iter()
        .find_map(|path| {
            let bytes = read(&path)?;
            (crc32fast::hash(bytes.as_ref()) == link.crc).then_some(DebugFile {
                path,
                via: DebugVia::DebugLink,
                bytes,
            })
        })
}

/// The separate debug file of `module` (whose contents are `bytes`, parsed as `elf`), found as
/// GDB finds it: by build-id under `root` (normally [`DEFAULT_DEBUG_ROOT`]), else by
/// `.gnu_debuglink` (see [`debug_file_by_debuglink`]). `read` reads a candidate file, `None`
/// when it cannot or should not be read.
pub fn find_debug_file<B: AsRef<[u8]>>(
    module: &Path,
    elf: &Elf<'_>,
    bytes: &[u8],
    root: &Path,
    mut read: impl FnMut(&Path) -> Option<B>,
) -> Option<DebugFile<B>> {
    build_id(elf, bytes)
        .and_then(|id| debug_file_by_build_id(root, id, &mut read))
        .or_else(|| debug_file_by_debuglink(module, elf, bytes, root, &mut read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn tool_missing(tool: &str) -> bool {
        let found = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            // Under CI a missing tool fails the run instead of passing it silently.
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(
                !ci,
                "`{tool}` is not installed (needed to build the test's binaries); under CI=true a missing dependency fails the run"
            );
            eprintln!("SKIPPED: `{tool}` is not installed (needed to build the test's binaries)");
        }
        !found
    }

    fn run(cmd: &mut Command) {
        let status = cmd.status().expect("run a tool");
        assert!(status.success(), "{cmd:?} failed");
    }

    fn read(path: &Path) -> Option<Vec<u8>> {
        std::fs::read(path).ok()
    }

    /// A scratch directory in the system's temp directory, removed afterwards.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "waitshim-elfsym-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create scratch dir");
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Builds `dir/prog` with `-g` (and a build-id unless `build_id` is false), and returns it.
    fn build(dir: &Path, build_id: bool) -> PathBuf {
        let src = dir.join("prog.c");
        std::fs::write(
            &src,
            "int work(int x) { return x * 3; }\nint main(void) { return work(1) - 3; }\n",
        )
        .expect("write source");
        let prog = dir.join("prog");
        let id = if build_id {
            "-Wl,--build-id=sha1"
        } else {
            "-Wl,--build-id=none"
        };
        run(Command::new("gcc")
            .args(["-g", "-O0", id, "-o"])
            .arg(&prog)
            .arg(&src));
        prog
    }

    /// Splits `prog`'s debug information into `debug`, strips `prog` of it and links it to
    /// `debug` (whose file name the link records).
    fn split(prog: &Path, debug: &Path) {
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(prog)
            .arg(debug));
        let mut link = std::ffi::OsString::from("--add-gnu-debuglink=");
        link.push(debug);
        run(Command::new("objcopy")
            .arg("--strip-debug")
            .arg(link)
            .arg(prog));
    }

    fn parse(path: &Path) -> Vec<u8> {
        std::fs::read(path).expect("read binary")
    }

    #[test]
    fn build_id_paths_are_named_by_the_first_byte_and_the_rest() {
        assert_eq!(
            build_id_path(Path::new("/usr/lib/debug"), &[0xab, 0xcd, 0xef, 0x01]),
            Some(PathBuf::from("/usr/lib/debug/.build-id/ab/cdef01.debug"))
        );
        assert_eq!(build_id_path(Path::new("/r"), &[0xab]), None);
        assert_eq!(build_id_path(Path::new("/r"), &[]), None);
    }

    #[test]
    fn debuglink_candidates_come_in_gdbs_order() {
        let c = debuglink_candidates(
            Path::new("/nonexistent/dir/libx.so"),
            "libx.so.debug",
            Path::new("/dbg"),
        );
        assert_eq!(
            c,
            [
                "/nonexistent/dir/libx.so.debug",
                "/nonexistent/dir/.debug/libx.so.debug",
                "/dbg/nonexistent/dir/libx.so.debug",
            ]
            .map(PathBuf::from)
        );
        // A link naming the module itself is not followed back to it.
        let c = debuglink_candidates(
            Path::new("/nonexistent/libx.so"),
            "libx.so",
            Path::new("/d"),
        );
        assert!(!c.contains(&PathBuf::from("/nonexistent/libx.so")), "{c:?}");
    }

    #[test]
    fn a_debug_file_is_found_through_gnu_debuglink_and_its_crc_checked() {
        if tool_missing("gcc") || tool_missing("objcopy") {
            return;
        }
        let s = Scratch::new("debuglink");
        let dir = s.0.join("bin");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let prog = build(&dir, false);
        let debug = dir.join("prog.debug");
        split(&prog, &debug);
        let bytes = parse(&prog);
        let elf = Elf::parse(&bytes).expect("ELF");
        assert_eq!(build_id(&elf, &bytes), None);
        let link = debuglink(&elf, &bytes).expect("a .gnu_debuglink");
        assert_eq!(link.name, "prog.debug");
        assert_eq!(link.crc, crc32fast::hash(&parse(&debug)));
        let root = s.0.join("root");

        // Next to the module.
        let found = find_debug_file(&prog, &elf, &bytes, &root, read).expect("found");
        assert_eq!(found.path, debug);
        assert_eq!(found.via, DebugVia::DebugLink);
        assert_eq!(found.bytes, parse(&debug));

        // In its .debug directory.
        std::fs::create_dir_all(dir.join(".debug")).expect("mkdir");
        let in_dot_debug = dir.join(".debug").join("prog.debug");
        std::fs::rename(&debug, &in_dot_debug).expect("move");
        let found = find_debug_file(&prog, &elf, &bytes, &root, read).expect("found");
        assert_eq!(found.path, in_dot_debug);

        // Under the debug directory, by the module's real directory.
        let real_dir = std::fs::canonicalize(&dir).expect("canonical");
        let under_root = root
            .join(real_dir.strip_prefix("/").expect("absolute"))
            .join("prog.debug");
        std::fs::create_dir_all(under_root.parent().expect("parent")).expect("mkdir");
        std::fs::rename(&in_dot_debug, &under_root).expect("move");
        let found = find_debug_file(&prog, &elf, &bytes, &root, read).expect("found");
        assert_eq!(found.path, under_root);

        // A file of that name with other contents (another build's) is not taken...
        std::fs::write(&debug, b"not the debug file").expect("write");
        let found = find_debug_file(&prog, &elf, &bytes, &root, read).expect("found");
        assert_eq!(found.path, under_root);
        // ...and without the right one, nothing is found.
        std::fs::remove_file(&under_root).expect("remove");
        assert!(find_debug_file(&prog, &elf, &bytes, &root, read).is_none());
    }

    #[test]
    fn a_debug_file_is_found_by_build_id_first() {
        if tool_missing("gcc") || tool_missing("objcopy") {
            return;
        }
        let s = Scratch::new("buildid");
        let prog = build(&s.0, true);
        let debug = s.0.join("prog.debug");
        split(&prog, &debug);
        let bytes = parse(&prog);
        let elf = Elf::parse(&bytes).expect("ELF");
        let id = build_id(&elf, &bytes).expect("build-id").to_vec();
        let root = s.0.join("root");
        let by_id = build_id_path(&root, &id).expect("path");
        std::fs::create_dir_all(by_id.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&debug, &by_id).expect("copy");

        let found = find_debug_file(&prog, &elf, &bytes, &root, read).expect("found");
        assert_eq!(found.path, by_id);
        assert_eq!(found.via, DebugVia::BuildId);

        // A file of another build-id at that path is not taken: the debuglink one is.
        let mut wrong = std::fs::read(&by_id).expect("read");
        let elf_dbg = Elf::parse(&wrong).expect("ELF");
        let note = build_id(&elf_dbg, &wrong).expect("build-id");
        let at = note.as_ptr() as usize - wrong.as_ptr() as usize;
        drop(elf_dbg);
        wrong[at] ^= 0xff;
        std::fs::write(&by_id, &wrong).expect("write");
        let found = find_debug_file(&prog, &elf, &bytes, &root, read).expect("found");
        assert_eq!(found.path, debug);
        assert_eq!(found.via, DebugVia::DebugLink);
    }

    #[test]
    fn a_stripped_module_without_a_link_has_no_debug_file() {
        if tool_missing("gcc") || tool_missing("objcopy") {
            return;
        }
        let s = Scratch::new("stripped");
        let prog = build(&s.0, true);
        run(Command::new("objcopy").arg("--strip-all").arg(&prog));
        let bytes = parse(&prog);
        let elf = Elf::parse(&bytes).expect("ELF");
        assert!(elf.syms.is_empty());
        assert_eq!(debuglink(&elf, &bytes), None);
        assert!(find_debug_file(&prog, &elf, &bytes, &s.0.join("root"), read).is_none());
    }
}
