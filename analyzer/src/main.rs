use std::path::PathBuf;

use clap::Parser;
use waitshim_analyze::{Options, SortKey};

/// Report why the threads of a program waited, from the logs libwaitshim.so wrote.
#[derive(Parser)]
#[command(name = "waitshim-analyze", version)]
struct Cli {
    /// Order of the lock contention records: hwm, elapsed, wait, count, or commonality groups by
    /// the outermost / innermost N frames of the waiter chains (outer:N, inner:N).
    #[arg(long, default_value = "hwm", value_parser = |s: &str| s.parse::<SortKey>())]
    sort: SortKey,
    /// Number of contention records (or groups) shown.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Print one JSON document (schema waitshim-report/1, see analyzer/JSON.md) instead of text.
    #[arg(long)]
    json: bool,
    /// List every tracked object in the per-object table, not only those with activity.
    #[arg(long)]
    all_objects: bool,
    /// Do not open the program's binaries: show chains as module+offset.
    #[arg(long)]
    no_symbols: bool,
    /// Log files (waitshim.<pid>.log); each is reported in its own section.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    let opts = Options {
        sort: cli.sort,
        top: cli.top,
        all_objects: cli.all_objects,
        symbols: !cli.no_symbols,
    };
    let code = waitshim_analyze::run(
        &cli.files,
        &opts,
        cli.json,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
