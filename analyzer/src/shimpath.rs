//! Where `waitshim-analyze` finds `libwaitshim.so`: the one place in code that names the
//! shim's path (`run` preloads it, `why-no-log` suggests it). The order, as README's Install
//! section gives it:
//!
//! 1. `run --shim PATH`;
//! 2. `$WAITSHIM_SHIM` (set and not empty): that file, or an error (no fallback: a variable
//!    naming a file that is not there is a mistake to say, not to work around);
//! 3. beside the analyzer's binary (`target/release/` after `cargo build --release`);
//! 4. `../lib/waitshim/libwaitshim.so` from the binary's directory (the .deb's
//!    `/usr/lib/waitshim/`, a `cargo install`'s `~/.cargo/lib/waitshim/`, `/usr/local/...`);
//! 5. `../lib/libwaitshim.so`;
//! 6. `../lib/<multiarch>/waitshim/libwaitshim.so` (Debian's multiarch directory, where a
//!    packager following Debian's policy for private, architecture-dependent libraries puts it).
//!
//! The binary's directory is that of `/proc/self/exe` with its symlinks resolved: a symlink
//! `/usr/local/bin/waitshim-analyze` to `/opt/waitshim/bin/waitshim-analyze` finds
//! `/opt/waitshim/lib/waitshim/libwaitshim.so`.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use waitshim_format::contract;

/// The shim's file name.
pub const FILE: &str = contract::SHIM_FILE;

/// The directory under `lib/` the shim is installed in.
pub const LIB_SUBDIR: &str = "waitshim";

/// Debian's multiarch tuple of the machine this analyzer was built for (`None`: no such
/// directory is looked at).
pub const MULTIARCH: Option<&str> = if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
    Some("x86_64-linux-gnu")
} else if cfg!(all(target_arch = "aarch64", target_env = "gnu")) {
    Some("aarch64-linux-gnu")
} else if cfg!(all(target_arch = "riscv64", target_env = "gnu")) {
    Some("riscv64-linux-gnu")
} else if cfg!(all(
    target_arch = "powerpc64",
    target_endian = "little",
    target_env = "gnu"
)) {
    Some("powerpc64le-linux-gnu")
} else if cfg!(all(target_arch = "s390x", target_env = "gnu")) {
    Some("s390x-linux-gnu")
} else if cfg!(all(target_arch = "x86", target_env = "gnu")) {
    Some("i386-linux-gnu")
} else {
    None
};

/// One place looked at, in the order of the search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub path: PathBuf,
    /// Which rule of the order gave it.
    pub rule: &'static str,
}

/// The places beside the analyzer's binary `exe` (its symlinks already resolved), in order.
pub fn places_beside(exe: &Path) -> Vec<Place> {
    let Some(bin) = exe.parent() else {
        return Vec::new();
    };
    let mut places = vec![Place {
        path: bin.join(FILE),
        rule: "beside waitshim-analyze",
    }];
    if let Some(prefix) = bin.parent() {
        let lib = prefix.join("lib");
        places.push(Place {
            path: lib.join(LIB_SUBDIR).join(FILE),
            rule: "../lib/waitshim/",
        });
        places.push(Place {
            path: lib.join(FILE),
            rule: "../lib/",
        });
        if let Some(tuple) = MULTIARCH {
            places.push(Place {
                path: lib.join(tuple).join(LIB_SUBDIR).join(FILE),
                rule: "../lib/<multiarch>/waitshim/",
            });
        }
    }
    places
}

/// Why no shim was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFound {
    /// `--shim PATH` or `$WAITSHIM_SHIM` names something that is not a file.
    Named {
        /// `--shim` or `WAITSHIM_SHIM`.
        by: &'static str,
        path: PathBuf,
        error: String,
    },
    /// Nothing at any of the standard places.
    Nowhere {
        looked: Vec<Place>,
        /// The binary's path (None: it could not be told, said in `exe_error`).
        exe: Option<PathBuf>,
        exe_error: Option<String>,
    },
}

impl NotFound {
    /// Where a shim built from source should be copied for this binary to find it.
    pub fn install_to(&self) -> Option<PathBuf> {
        match self {
            NotFound::Nowhere { looked, .. } => looked
                .iter()
                .find(|p| p.rule == "../lib/waitshim/")
                .map(|p| p.path.clone()),
            NotFound::Named { .. } => None,
        }
    }
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotFound::Named { by, path, error } => {
                write!(f, "no shim at {} ({by}): {error}", path.display())?;
                if *by == contract::env::SHIM {
                    write!(
                        f,
                        " (an explicit shim that is not there is not replaced by another: \
                         point {by} at libwaitshim.so, or unset it to search the standard places)"
                    )?;
                }
                Ok(())
            }
            NotFound::Nowhere {
                looked,
                exe,
                exe_error,
            } => {
                writeln!(f, "{FILE} not found; looked, in this order, at:")?;
                writeln!(f, "  ${:<28} (not set)", contract::env::SHIM)?;
                for p in looked {
                    writeln!(f, "  {:<29} {}", p.rule, p.path.display())?;
                }
                if let Some(e) = exe_error {
                    writeln!(
                        f,
                        "  (the places beside waitshim-analyze were not searched: its own path is \
                         unknown: {e})"
                    )?;
                }
                let exe_name = exe
                    .as_deref()
                    .map_or_else(|| "waitshim-analyze".into(), |e| e.display().to_string());
                match self.install_to() {
                    Some(to) => write!(
                        f,
                        "The shim is not installed for {exe_name} (`cargo install` installs \
                         programs, not libraries). From waitshim's source:\n  \
                         cargo build --release -p waitshim-shim\n  \
                         install -D -m 644 target/release/{FILE} {}\n\
                         or install the .deb (scripts/deb.sh builds it), or give --shim PATH, or \
                         set {}=PATH.",
                        to.display(),
                        contract::env::SHIM
                    ),
                    None => write!(
                        f,
                        "Give --shim PATH or set {}=PATH (build the shim from waitshim's source: \
                         `cargo build --release -p waitshim-shim`).",
                        contract::env::SHIM
                    ),
                }
            }
        }
    }
}

/// This binary's path, symlinks resolved.
pub fn current_exe() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Ok(std::fs::canonicalize(&exe).unwrap_or(exe))
}

/// The shim this process would preload: `given` (`run --shim`), else the search.
pub fn locate(given: Option<&Path>) -> Result<PathBuf, NotFound> {
    locate_in(given, std::env::var_os(contract::env::SHIM), current_exe())
}

/// [`locate`] with the environment variable's value and the binary's path given. The path
/// returned is absolute (the loader searches its library path for a relative one).
pub fn locate_in(
    given: Option<&Path>,
    env: Option<OsString>,
    exe: Result<PathBuf, String>,
) -> Result<PathBuf, NotFound> {
    let named = match given {
        Some(p) => Some(("--shim", p.to_path_buf())),
        None => env
            .filter(|v| !v.is_empty())
            .map(|v| (contract::env::SHIM, PathBuf::from(v))),
    };
    if let Some((by, path)) = named {
        return match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(absolute(&path)),
            Ok(_) => Err(NotFound::Named {
                by,
                path,
                error: "not a file".into(),
            }),
            Err(e) => Err(NotFound::Named {
                by,
                path,
                error: e.to_string(),
            }),
        };
    }
    let (looked, exe, exe_error) = match exe {
        Ok(exe) => (places_beside(&exe), Some(exe), None),
        Err(e) => (Vec::new(), None, Some(e)),
    };
    match looked.iter().find(|p| p.path.is_file()) {
        Some(p) => Ok(absolute(&p.path)),
        None => Err(NotFound::Nowhere {
            looked,
            exe,
            exe_error,
        }),
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"\x7fELF").unwrap();
    }

    #[test]
    fn the_order_is_beside_then_lib_waitshim_then_lib_then_multiarch() {
        let places = places_beside(Path::new("/opt/ws/bin/waitshim-analyze"));
        let paths: Vec<_> = places
            .iter()
            .map(|p| p.path.display().to_string())
            .collect();
        let mut want = vec![
            "/opt/ws/bin/libwaitshim.so".to_string(),
            "/opt/ws/lib/waitshim/libwaitshim.so".to_string(),
            "/opt/ws/lib/libwaitshim.so".to_string(),
        ];
        if let Some(t) = MULTIARCH {
            want.push(format!("/opt/ws/lib/{t}/waitshim/libwaitshim.so"));
        }
        assert_eq!(paths, want);
    }

    #[test]
    fn the_first_place_holding_the_shim_wins() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bin/waitshim-analyze");
        touch(&exe);
        let lib = dir.path().join("lib/libwaitshim.so");
        touch(&lib);
        assert_eq!(locate_in(None, None, Ok(exe.clone())), Ok(absolute(&lib)));
        let sub = dir.path().join("lib/waitshim/libwaitshim.so");
        touch(&sub);
        assert_eq!(locate_in(None, None, Ok(exe.clone())), Ok(absolute(&sub)));
        let beside = dir.path().join("bin/libwaitshim.so");
        touch(&beside);
        assert_eq!(
            locate_in(None, None, Ok(exe.clone())),
            Ok(absolute(&beside))
        );
        // An empty variable is no variable.
        assert_eq!(
            locate_in(None, Some(OsString::new()), Ok(exe)),
            Ok(absolute(&beside))
        );
    }

    #[test]
    fn a_named_shim_that_is_missing_is_an_error_not_a_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bin/waitshim-analyze");
        touch(&exe);
        touch(&dir.path().join("bin/libwaitshim.so"));
        let missing = dir.path().join("nope.so");
        let e = locate_in(None, Some(missing.clone().into()), Ok(exe.clone())).unwrap_err();
        assert!(
            matches!(&e, NotFound::Named { by: "WAITSHIM_SHIM", path, .. } if *path == missing)
        );
        assert!(e.to_string().contains("(WAITSHIM_SHIM)"), "{e}");
        let e = locate_in(Some(dir.path()), None, Ok(exe.clone())).unwrap_err();
        assert!(e.to_string().contains("(--shim): not a file"));
        // --shim wins over the variable.
        let given = dir.path().join("given.so");
        touch(&given);
        assert_eq!(
            locate_in(Some(&given), Some(missing.into()), Ok(exe)),
            Ok(absolute(&given))
        );
    }

    #[test]
    fn not_found_lists_every_place_and_where_to_copy_the_shim() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bin/waitshim-analyze");
        touch(&exe);
        let e = locate_in(None, None, Ok(exe)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("$WAITSHIM_SHIM"), "{text}");
        for p in places_beside(&dir.path().join("bin/waitshim-analyze")) {
            assert!(text.contains(&p.path.display().to_string()), "{text}");
        }
        let to = dir.path().join("lib/waitshim/libwaitshim.so");
        assert_eq!(e.install_to(), Some(to.clone()));
        assert!(
            text.contains(&format!(
                "install -D -m 644 target/release/libwaitshim.so {}",
                to.display()
            )),
            "{text}"
        );
        let e = locate_in(None, None, Err("no /proc".into())).unwrap_err();
        assert!(e.to_string().contains("its own path is unknown: no /proc"));
    }
}
