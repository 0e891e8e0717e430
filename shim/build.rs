//! Compiles the few interposed functions Rust cannot define: the variadic `exec` forms and
//! `syscall`.
fn main() {
    println!("cargo:rerun-if-changed=c/exec.c");
    println!("cargo:rerun-if-changed=c/syscall.c");
    cc::Build::new()
        .file("c/exec.c")
        .file("c/syscall.c")
        .flag("-fvisibility=hidden")
        .warnings(true)
        .compile("waitshim_c");
}
