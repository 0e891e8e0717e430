//! Any bytes as a log: read, modelled and reported in text and JSON, never a panic. Binaries
//! are not opened (module paths in the input are arbitrary; `tests/input.rs` covers them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitshim_analyze::{analyze_bytes, text_report, Options};

fuzz_target!(|data: &[u8]| {
    let opts = Options {
        symbols: false,
        ..Options::default()
    };
    if let Ok(a) = analyze_bytes(data, std::path::Path::new("fuzz.log")) {
        let _ = text_report(&a, &opts);
        let _ = waitshim_analyze::report::json::write_document(
            &mut std::io::sink(),
            std::iter::once(a),
            &opts,
        );
    }
});
