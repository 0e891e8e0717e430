//! The tests name their Rust frames through `dladdr`, which sees only exported symbols.

fn main() {
    println!("cargo:rustc-link-arg-tests=-rdynamic");
}
