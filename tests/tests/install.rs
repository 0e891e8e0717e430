//! Installed like a tool (issue 32, item 7): `run` finds the shim in a `bin/` + `lib/waitshim/`
//! layout (also through a symlink to the binary), through `$WAITSHIM_SHIM`, and says every place
//! it looked when it finds none; the Debian package `scripts/deb.sh` builds holds stripped
//! binaries, their debug files by build-id, man pages and completions, and runs the demo from
//! the installed paths (extracted, and installed with dpkg when the tests run as root);
//! `help` is a command.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use waitshim_tests::{
    analyzer_path, debian_program, fixture, shim_path, site, skip_or_fail, workspace_root, Launch,
};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// Debian's multiarch directory for this machine, as the analyzer names it.
const MULTIARCH: Option<&str> = if cfg!(target_arch = "x86_64") {
    Some("x86_64-linux-gnu")
} else if cfg!(target_arch = "aarch64") {
    Some("aarch64-linux-gnu")
} else {
    None
};

/// `EXE run -- convoy 3` (the demo's fixture) with `$WAITSHIM_SHIM` and `LD_PRELOAD` unset
/// unless `env` sets them.
fn run_demo(exe: &Path, env: &[(&str, &OsStr)]) -> Output {
    Command::new(exe)
        .args(["run", "--"])
        .arg(fixture("convoy"))
        .arg("3")
        .env_remove("WAITSHIM_SHIM")
        .env_remove("LD_PRELOAD")
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::null())
        .output()
        .expect("run waitshim-analyze run")
}

/// The report of the demo: one log, the convoy's mutex named by its creation site (the
/// fixture's debug info read by the analyzer).
fn assert_demo_report(o: &Output, what: &str) {
    let (out, errs) = text(o);
    assert_eq!(code(o), 0, "{what}: {out}\n{errs}");
    assert!(errs.contains("1 log(s)"), "{what}: {errs}");
    let creation = site("convoy.c", "creation-site");
    assert!(out.contains(&creation), "{what}: no {creation} in\n{out}");
}

/// Puts `from` at `to` (a hard link when the file system allows, else a copy).
fn place(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(to);
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

#[test]
fn run_finds_the_shim_in_a_bin_lib_layout_through_waitshim_shim_and_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("prefix");
    let exe = root.join("bin/waitshim-analyze");
    place(analyzer_path(), &exe);
    let lib_waitshim = root.join("lib/waitshim/libwaitshim.so");
    let lib = root.join("lib/libwaitshim.so");
    let beside = root.join("bin/libwaitshim.so");

    // The .deb's and `cargo install`'s layout: PREFIX/bin + PREFIX/lib/waitshim/.
    place(shim_path(), &lib_waitshim);
    assert_demo_report(&run_demo(&exe, &[]), "bin/ + lib/waitshim/");
    // Through a symlink to the binary, from elsewhere: the binary's own directory counts.
    let link = dir.path().join("elsewhere/bin/waitshim-analyze");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&exe, &link).unwrap();
    assert_demo_report(&run_demo(&link, &[]), "a symlink to bin/waitshim-analyze");
    // why-no-log, with no LD_PRELOAD, names the shim run would preload.
    let o = Command::new(&exe)
        .args(["why-no-log", "--", "true"])
        .env_remove("LD_PRELOAD")
        .env_remove("WAITSHIM_SHIM")
        .output()
        .unwrap();
    let want = format!(
        "LD_PRELOAD={}",
        lib_waitshim.canonicalize().unwrap().display()
    );
    assert!(text(&o).0.contains(&want), "{want} in {:?}", text(&o));

    // PREFIX/lib/.
    std::fs::rename(&lib_waitshim, &lib).unwrap();
    assert_demo_report(&run_demo(&exe, &[]), "bin/ + lib/");

    // $WAITSHIM_SHIM names the shim; set but missing, it is an error, with no fallback to the
    // one that is there.
    std::fs::remove_file(&lib).unwrap();
    let env_shim = dir.path().join("elsewhere/my-shim.so");
    place(shim_path(), &env_shim);
    assert_demo_report(
        &run_demo(&exe, &[("WAITSHIM_SHIM", env_shim.as_os_str())]),
        "$WAITSHIM_SHIM",
    );
    place(shim_path(), &beside);
    let missing = dir.path().join("missing/libwaitshim.so");
    let o = run_demo(&exe, &[("WAITSHIM_SHIM", missing.as_os_str())]);
    let (out, errs) = text(&o);
    assert_eq!(code(&o), 2, "{out}\n{errs}");
    assert!(
        errs.contains(&format!("no shim at {} (WAITSHIM_SHIM)", missing.display())),
        "{errs}"
    );
    assert!(!errs.contains("logs in"), "nothing ran: {errs}");
    // Beside the binary (target/release after cargo build).
    assert_demo_report(&run_demo(&exe, &[]), "beside the binary");

    // None anywhere: every place is listed, in order, and where to copy the shim.
    std::fs::remove_file(&beside).unwrap();
    let o = run_demo(&exe, &[]);
    let (out, errs) = text(&o);
    assert_eq!(code(&o), 2, "{out}\n{errs}");
    let root = root.canonicalize().unwrap();
    let mut places = vec![
        "$WAITSHIM_SHIM".to_string(),
        root.join("bin/libwaitshim.so").display().to_string(),
        root.join("lib/waitshim/libwaitshim.so")
            .display()
            .to_string(),
        root.join("lib/libwaitshim.so").display().to_string(),
    ];
    if let Some(t) = MULTIARCH {
        places.push(
            root.join("lib")
                .join(t)
                .join("waitshim/libwaitshim.so")
                .display()
                .to_string(),
        );
    }
    let mut at = 0;
    for p in &places {
        let found = errs[at..].find(p.as_str());
        assert!(found.is_some(), "{p} (in order) in:\n{errs}");
        at += found.unwrap() + p.len();
    }
    assert!(
        errs.contains(&format!(
            "install -D -m 644 target/release/libwaitshim.so {}",
            root.join("lib/waitshim/libwaitshim.so").display()
        )),
        "{errs}"
    );
}

#[test]
fn help_is_a_command_and_a_log_named_help_is_read_as_dot_slash_help() {
    let dir = tempfile::tempdir().unwrap();
    let run = Launch::fixture("convoy").arg("2").run();
    run.assert_success();
    std::fs::copy(run.single_log(), dir.path().join("help")).unwrap();
    let analyze = |args: &[&str]| {
        Command::new(analyzer_path())
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let o = analyze(&["help"]);
    let (out, errs) = text(&o);
    assert_eq!(code(&o), 0, "{out}\n{errs}");
    assert!(out.contains("Usage: waitshim-analyze"), "{out}");
    assert!(
        out.contains("./help"),
        "the help says how to read a log named help: {out}"
    );
    let o = analyze(&["help", "run"]);
    let (out, errs) = text(&o);
    assert_eq!(code(&o), 0, "{out}\n{errs}");
    assert!(out.contains("Usage: waitshim-analyze run"), "{out}");
    assert!(
        out.contains("WAITSHIM_SHIM"),
        "run's help gives the shim's search: {out}"
    );
    // The log named help, as a path.
    let o = analyze(&["./help"]);
    let (out, errs) = text(&o);
    assert_eq!(code(&o), 0, "{out}\n{errs}");
    assert!(out.contains(&site("convoy.c", "creation-site")), "{out}");
}

/// Removes the package at the end of the test, whether it passed or not.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let o = dpkg(&["-r", "waitshim-dbgsym", "waitshim"]);
        if !o.status.success() {
            eprintln!("dpkg -r waitshim failed: {}", text(&o).1);
        }
    }
}

/// dpkg under the lock scripts/lib.sh's `ensure_packages` takes, so that it does not run into
/// an apt-get of another test.
fn dpkg(args: &[&str]) -> Output {
    let lock = std::env::temp_dir().join("waitshim-apt.lock");
    Command::new("flock")
        .args(["-w", "900"])
        .arg(lock)
        .arg("dpkg")
        .args(args)
        .output()
        .expect("run dpkg")
}

fn is_root() -> bool {
    // SAFETY: no arguments, no side effects.
    unsafe { libc::geteuid() == 0 }
}

fn build_id(readelf: &Path, file: &Path) -> String {
    let o = Command::new(readelf).arg("-n").arg(file).output().unwrap();
    let out = text(&o).0;
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build-id in {}: {out}", file.display()))
        .to_string()
}

fn sections(readelf: &Path, file: &Path) -> String {
    let o = Command::new(readelf).arg("-SW").arg(file).output().unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    text(&o).0
}

/// Checks the binaries under `root` (an extracted or installed package): stripped, with a
/// debug file under `debug_root` matching their build-id and holding their DWARF.
fn assert_stripped_with_debug_files(root: &Path, debug_root: &Path) {
    let readelf = debian_program("readelf", "binutils");
    for rel in [
        "usr/bin/waitshim-analyze",
        "usr/lib/waitshim/libwaitshim.so",
    ] {
        let bin = root.join(rel);
        let secs = sections(&readelf, &bin);
        assert!(!secs.contains(".debug_info"), "{rel} is not stripped");
        assert!(!secs.contains(".symtab"), "{rel} keeps its symbol table");
        assert!(secs.contains(".gnu_debuglink"), "{rel} names no debug file");
        let file = Command::new("file").arg(&bin).output();
        if let Ok(f) = file {
            assert!(text(&f).0.contains(", stripped"), "{:?}", text(&f));
        }
        let id = build_id(&readelf, &bin);
        let debug = debug_root.join(format!(
            "usr/lib/debug/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        ));
        assert!(debug.is_file(), "{rel}: no {}", debug.display());
        assert_eq!(build_id(&readelf, &debug), id, "{}", debug.display());
        assert!(
            sections(&readelf, &debug).contains(".debug_info"),
            "{}",
            debug.display()
        );
        eprintln!(
            "{rel}: {} bytes stripped; debug file {} bytes",
            bin.metadata().unwrap().len(),
            debug.metadata().unwrap().len()
        );
    }
}

/// The man page renders (man -l, else groff) without warnings.
fn assert_man_page_renders(page: &Path) {
    let o = if Path::new("/usr/bin/man").is_file() {
        Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .unwrap()
    } else {
        let groff = debian_program("groff", "groff-base");
        let o = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "gzip -dc '{}' | {} -k -man -Tutf8 -ww",
                page.display(),
                groff.display()
            ))
            .output()
            .unwrap();
        assert!(o.stderr.is_empty(), "groff warns: {}", text(&o).1);
        o
    };
    let (out, errs) = text(&o);
    assert!(o.status.success(), "{}: {errs}", page.display());
    assert!(
        out.contains("SYNOPSIS") && out.contains("waitshim-analyze"),
        "{out}"
    );
}

/// Each completion file loads in its shell (bash always; zsh and fish when installed) and
/// completes the commands. `installed`: the files are where the shells look by themselves.
fn assert_completions_load(root: &Path, installed: bool) {
    let bash_file = root.join("usr/share/bash-completion/completions/waitshim-analyze");
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p waitshim-analyze",
            bash_file.display()
        ))
        .output()
        .unwrap();
    assert!(
        o.status.success() && text(&o).0.contains("waitshim-analyze"),
        "bash: {:?}",
        text(&o)
    );
    let zsh_dir = root.join("usr/share/zsh/vendor-completions");
    assert!(zsh_dir.join("_waitshim-analyze").is_file());
    if Path::new("/usr/bin/zsh").is_file() {
        // compinit finds it in zsh's fpath: /usr/share/zsh/vendor-completions is in Debian's.
        let fpath = if installed {
            String::new()
        } else {
            format!("fpath=('{}' $fpath); ", zsh_dir.display())
        };
        let o = Command::new("zsh")
            .arg("-fc")
            .arg(format!(
                "{fpath}autoload -U compinit && compinit -u -D && print -r -- $_comps[waitshim-analyze]"
            ))
            .output()
            .unwrap();
        assert_eq!(
            text(&o).0.trim(),
            "_waitshim-analyze",
            "zsh: {:?}",
            text(&o)
        );
    } else {
        eprintln!("zsh is not installed: its completion file is checked as present only");
    }
    let fish_file = root.join("usr/share/fish/vendor_completions.d/waitshim-analyze.fish");
    assert!(fish_file.is_file());
    if Path::new("/usr/bin/fish").is_file() {
        let source = if installed {
            String::new()
        } else {
            format!("source '{}'; ", fish_file.display())
        };
        let o = Command::new("fish")
            .arg("-c")
            .arg(format!("{source}complete -C 'waitshim-analyze ru'"))
            .output()
            .unwrap();
        assert!(text(&o).0.contains("run"), "fish: {:?}", text(&o));
    } else {
        eprintln!("fish is not installed: its completion file is checked as present only");
    }
}

/// The files every install holds, under `root`.
fn assert_package_files(root: &Path) {
    for rel in [
        "usr/bin/waitshim-analyze",
        "usr/lib/waitshim/libwaitshim.so",
        "usr/include/waitshim.h",
        "usr/share/man/man1/waitshim-analyze.1.gz",
        "usr/share/man/man1/waitshim-analyze-run.1.gz",
        "usr/share/doc/waitshim/README.md",
        "usr/share/doc/waitshim/copyright",
    ] {
        assert!(
            root.join(rel).is_file(),
            "{rel} missing under {}",
            root.display()
        );
    }
    let mode = root
        .join("usr/bin/waitshim-analyze")
        .metadata()
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    // One man page per command.
    let pages = std::fs::read_dir(root.join("usr/share/man/man1"))
        .unwrap()
        .count();
    assert!(pages >= 12, "{pages} man pages");
}

#[test]
fn the_debian_package_installs_and_runs_the_demo_from_the_installed_paths() {
    let started = Instant::now();
    for (tool, package) in [("dpkg-deb", "dpkg"), ("flock", "util-linux")] {
        debian_program(tool, package);
    }
    // cargo-deb, from the crates registry, when it is missing (scripts/deb.sh would install it
    // too; done here first so that a machine without the registry skips, or fails under CI).
    let has_cargo_deb = |cargo: &OsStr| {
        Command::new(cargo)
            .args(["deb", "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    if !has_cargo_deb(&cargo) {
        let o = Command::new(&cargo)
            .args(["install", "--locked", "cargo-deb"])
            .output()
            .expect("run cargo install");
        if !o.status.success() || !has_cargo_deb(&cargo) {
            return skip_or_fail(
                "the_debian_package_installs_and_runs_the_demo_from_the_installed_paths",
                &format!("cargo install --locked cargo-deb failed: {}", text(&o).1),
            );
        }
    }
    // scripts/deb.sh builds in the workspace's target directory: after a release build,
    // nothing is compiled again.
    let o = Command::new("bash")
        .arg(workspace_root().join("scripts/deb.sh"))
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/deb.sh");
    let (out, errs) = text(&o);
    assert!(o.status.success(), "scripts/deb.sh failed:\n{errs}");
    let paths: Vec<PathBuf> = out.lines().map(PathBuf::from).collect();
    let [ddeb, deb] = paths.as_slice() else {
        panic!("scripts/deb.sh printed {out:?}");
    };
    eprintln!(
        "scripts/deb.sh: {:.1} s; {} {} bytes, {} {} bytes",
        started.elapsed().as_secs_f64(),
        deb.display(),
        deb.metadata().unwrap().len(),
        ddeb.display(),
        ddeb.metadata().unwrap().len()
    );

    // Extracted: the layout, the demo from the extracted paths, the debug files, man pages and
    // completions.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for pkg in [deb, ddeb] {
        let o = Command::new("dpkg-deb")
            .arg("-x")
            .arg(pkg)
            .arg(root)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "dpkg-deb -x {}: {:?}",
            pkg.display(),
            text(&o)
        );
    }
    assert_package_files(root);
    assert_demo_report(
        &run_demo(&root.join("usr/bin/waitshim-analyze"), &[]),
        "extracted .deb",
    );
    assert_stripped_with_debug_files(root, root);
    assert_man_page_renders(&root.join("usr/share/man/man1/waitshim-analyze-run.1.gz"));
    assert_completions_load(root, false);

    // Installed with dpkg (root only), and removed whatever happens.
    if !is_root() {
        eprintln!("not root: the package is checked extracted, not installed");
        return;
    }
    let before = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "waitshim"])
        .output()
        .unwrap();
    if text(&before).0.contains("install ok installed") {
        eprintln!("a waitshim package is installed already: left as it is, not reinstalled");
        return;
    }
    let guard = Installed;
    let o = dpkg(&["-i", &deb.to_string_lossy(), &ddeb.to_string_lossy()]);
    assert!(o.status.success(), "dpkg -i: {:?}", text(&o));
    let installed = Path::new("/");
    assert_demo_report(
        &run_demo(Path::new("/usr/bin/waitshim-analyze"), &[]),
        "installed .deb",
    );
    assert_stripped_with_debug_files(installed, installed);
    assert_man_page_renders(Path::new("/usr/share/man/man1/waitshim-analyze.1.gz"));
    assert_completions_load(installed, true);
    drop(guard);
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "waitshim"])
        .output()
        .unwrap();
    assert!(
        !text(&o).0.contains("install ok installed"),
        "waitshim still installed"
    );
    assert!(!Path::new("/usr/bin/waitshim-analyze").exists());
    eprintln!("the whole test: {:.1} s", started.elapsed().as_secs_f64());
}
