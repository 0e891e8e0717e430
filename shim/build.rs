//! Compiles the few interposed functions Rust cannot define: the variadic `exec` forms.
fn main() {
    println!("cargo:rerun-if-changed=c/exec.c");
    cc::Build::new()
        .file("c/exec.c")
        .flag("-fvisibility=hidden")
        .warnings(true)
        .compile("waitshim_exec");
}
