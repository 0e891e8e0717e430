//! Prints every record of a log, one per line: `cargo run -p waitshim-format --example dump FILE`.
//! For debugging the format itself; users read logs with waitshim-analyze.

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: dump FILE");
        std::process::exit(2);
    };
    let file = match std::fs::File::open(&path) {
        Ok(f) => std::io::BufReader::new(f),
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    let mut rd = match waitshim_format::FrameReader::new(file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    loop {
        match rd.next_item() {
            Ok(Some(item)) => println!("{item:?}"),
            Ok(None) => break,
            Err(e) => {
                eprintln!("{path}: {e}");
                std::process::exit(2);
            }
        }
    }
    println!("ending: {:?}", rd.ending());
}
