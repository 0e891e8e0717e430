//! `waitshim-analyze export`: the run in the formats other tools open. Everything comes from the
//! model of the log ([`crate::model`]), which is already bounded by the run's objects, threads,
//! chains and contention records; each exporter writes its file as it walks the model, keeping
//! at most one entry per distinct stack (profiles) or per thread (traces) besides. The trace
//! exporters' waiters counters ([`waiters`]) need the waits' begins and ends in time order: they
//! sort them in a buffer of fixed size, spilling sorted runs to a temporary file beyond it.
//!
//! - [`pprof`]: gzipped `profile.proto`, values `contentions/count` and `delay/nanoseconds`.
//! - [`folded`]: folded stacks weighted by wait time, and an SVG flame graph drawn from them.
//! - [`chrome`]: Trace Event Format JSON, a track per thread.
//! - [`perfetto`]: Perfetto's native TrackEvent protobuf, strings interned.
//! - [`html`]: one self-contained page with a timeline per thread and the objects table.
//!
//! Waits still going on when the log ended (a deadlock's) are in every format: as slices to the
//! end of the log in the traces, as samples of their own in the profiles ([`samples`]).
//!
//! Two sides of a wait can be exported as stacks: the waiter's chain (where the thread waited,
//! from the log's cumulative wait sites: every contended wait is in them) or the holder's chain
//! (where the holder released the object that others waited for, from the contention records:
//! only the high-contention episodes the shim recorded).

pub mod chrome;
pub mod exact;
pub mod folded;
pub mod html;
pub mod perfetto;
pub mod pprof;
pub mod slices;
pub mod tempout;
pub mod timeline;
pub mod waiters;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::report::{Ctx, Options};
use crate::source::ReadSummary;
use crate::symbolize::Frame;
use crate::{analyze, Analysis, EXIT_BAD_INPUT};

/// The formats `export --format` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pprof,
    Folded,
    Flamegraph,
    Chrome,
    Perfetto,
    Html,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pprof" => Format::Pprof,
            "folded" => Format::Folded,
            "flamegraph" => Format::Flamegraph,
            "chrome" => Format::Chrome,
            "perfetto" => Format::Perfetto,
            "html" => Format::Html,
            _ => {
                return Err(format!(
                    "unknown format '{s}': pprof, folded, flamegraph, chrome, perfetto or html"
                ))
            }
        })
    }
}

/// Whose call chains a profile shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Side {
    /// Where threads waited (wait sites: every contended wait).
    #[default]
    Waiters,
    /// Where the holder released what others waited for (contention records).
    Holders,
}

impl std::str::FromStr for Side {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "waiters" => Ok(Side::Waiters),
            "holders" => Ok(Side::Holders),
            _ => Err(format!("unknown side '{s}': waiters or holders")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub format: Format,
    pub side: Side,
    pub output: PathBuf,
    pub symbols: bool,
    /// `perfetto`: the packets deflated in batches (`TracePacket.compressed_packets`).
    pub compress: bool,
}

/// One log's model with its symbolizer, as the exporters see it.
pub struct Source<'a> {
    pub ctx: Ctx<'a>,
    /// The pid of the process the log is of (0 when its start record is missing).
    pub pid: u32,
    /// What makes this log's export incomplete beyond what its report says (the log could not
    /// be read again for the thread states or the per-wait events): said on stderr once the log
    /// is exported.
    pub notes: std::cell::RefCell<Vec<String>>,
}

/// Reads the log that `first` summarises again, up to where that first read ended (a log the
/// shim still writes has grown since), handing the bytes to `read` (which gives what its read
/// found, its sink's error, or why the bytes are not a log). Exporters read a log twice: once
/// for the model, once more for what the model does not keep (thread states, per-wait events).
/// A second read that does not find what the first found (the file removed, cut short or
/// changed since, or a read error) gives `what` of what it did read, and a note saying so, for
/// stderr; `read`'s own error is returned.
pub fn read_again<E>(
    first: &ReadSummary,
    what: &str,
    read: impl FnOnce(&mut dyn std::io::Read, &Path) -> Result<Result<ReadSummary, E>, String>,
) -> Result<Option<String>, E> {
    use std::io::Read as _;
    let again = File::open(&first.path)
        .map_err(|e| format!("cannot open: {e}"))
        .and_then(|file| {
            let progress = crate::source::progress::Progress::labelled(
                crate::source::progress::again_label(&first.path, what),
                first.end_offset,
            );
            let bytes = io::BufReader::with_capacity(1 << 18, file).take(first.end_offset);
            let mut bytes = crate::source::progress::Counted::new(bytes, progress);
            read(&mut bytes, &first.path)
        });
    match again {
        Err(why) => Ok(Some(format!(
            "the log could not be read again for {what} ({why}): they are missing"
        ))),
        Ok(Err(e)) => Err(e),
        Ok(Ok(again)) => Ok(second_read_note(first, &again, what)),
    }
}

/// What the second read of a log missed of what the first read found, if anything.
fn second_read_note(first: &ReadSummary, again: &ReadSummary, what: &str) -> Option<String> {
    let at = |s: &ReadSummary| s.records.saturating_sub(1);
    if let Some(e) = &again.io_error {
        return Some(format!(
            "reading the log again for {what} stopped: {e}; they end after record {} of {}",
            at(again),
            first.records
        ));
    }
    if again.records != first.records || again.damage_bytes != first.damage_bytes {
        return Some(format!(
            "the log changed since it was read: reading it again for {what} gave {} of its {} \
             records and {} damaged bytes (first read: {}); they show what the second read \
             found",
            again.records, first.records, again.damage_bytes, first.damage_bytes
        ));
    }
    None
}

impl<'a> Source<'a> {
    /// Keeps `note` (from [`read_again`]) for stderr.
    pub fn note(&self, note: Option<String>) {
        if let Some(n) = note {
            let mut notes = self.notes.borrow_mut();
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
    }

    pub fn new(ctx: Ctx<'a>, pid: u32) -> Self {
        Source {
            ctx,
            pid,
            notes: Default::default(),
        }
    }
}

impl Source<'_> {
    /// `mutex#2 convoy_lock`, `cond#5 "queue"`: an object named shortly, for a frame or label.
    pub fn object_name(&mut self, object_id: u64) -> String {
        let mut s = self.ctx.object_short(object_id);
        let name = self
            .ctx
            .model
            .objects
            .get(&object_id)
            .and_then(|o| o.name().map(str::to_string));
        if let Some(name) = name {
            s.push_str(&format!(" \"{name}\""));
        }
        if let Some(g) = self.ctx.global_name(object_id) {
            s.push(' ');
            s.push_str(&g);
        }
        s
    }

    /// Where the object was created (or first used): `convoy.c:43 (main)`.
    pub fn creation_site(&mut self, object_id: u64) -> Option<String> {
        self.ctx.creation_site(object_id).map(|f| f.site())
    }

    /// The frames of a chain, innermost first, without the shim's own.
    pub fn frames(&mut self, chain_id: u32) -> Vec<Frame> {
        if chain_id == 0 {
            return Vec::new();
        }
        self.ctx.sym.chain(self.ctx.model, chain_id)
    }

    /// The site of a chain in the program's terms, when the chain is known.
    pub fn chain_site(&mut self, chain_id: u32) -> Option<String> {
        if chain_id == 0 {
            return None;
        }
        self.ctx
            .sym
            .site(self.ctx.model, chain_id)
            .map(|f| f.site())
    }

    /// A chain as one line, innermost first: `worker (convoy.c:25) <- start_thread <- clone3`.
    pub fn chain_text(&mut self, chain_id: u32) -> Option<String> {
        let frames = self.frames(chain_id);
        if frames.is_empty() {
            return None;
        }
        let names: Vec<String> = frames.iter().map(frame_name_with_line).collect();
        Some(names.join(" <- "))
    }

    /// `thread 1234 "worker"`.
    pub fn thread_name(&self, tid: u32) -> String {
        self.ctx.thread_label(tid)
    }
}

/// A frame's name in a stack: the function, else `module+0x1234`.
pub fn frame_name(f: &Frame) -> String {
    f.short_name()
}

fn frame_name_with_line(f: &Frame) -> String {
    match f.source() {
        Some(src) => format!("{} ({src})", f.short_name()),
        None => f.short_name(),
    }
}

/// What an exporter is given: each log's source in turn, then the end.
pub trait Exporter {
    fn add(&mut self, src: &mut Source<'_>) -> io::Result<()>;
    fn finish(self: Box<Self>) -> io::Result<()>;
}

/// The error of a failed export, said in one line.
fn io_error(what: &str, path: &Path, e: &io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Exports the logs at `paths` to `opts.output`. Files that are not logs are reported on `err`
/// and the others exported; the return value is the process exit code (2 when any input was
/// not a log or the output could not be written).
pub fn run(paths: &[PathBuf], opts: &ExportOptions, err: &mut dyn Write) -> i32 {
    match export(paths, opts, err) {
        Ok(code) => code,
        Err(msg) => {
            let _ = writeln!(err, "waitshim-analyze export: {msg}");
            EXIT_BAD_INPUT
        }
    }
}

fn export(paths: &[PathBuf], opts: &ExportOptions, err: &mut dyn Write) -> Result<i32, String> {
    // Written beside the destination and renamed at the end: a failed export leaves no
    // half-written file under the name asked for.
    let out_path = &opts.output;
    if opts.compress && opts.format != Format::Perfetto {
        return Err("--compress applies to --format perfetto only".into());
    }
    if out_path.as_os_str().is_empty() {
        return Err("no output file (-o FILE)".into());
    }
    if out_path.is_dir() {
        return Err(format!("{} is a directory", out_path.display()));
    }
    // `-o -`, or a device or pipe (`/dev/stdout`, a FIFO): written straight to, never
    // renamed over.
    let special = std::fs::metadata(out_path).is_ok_and(|m| !m.is_file());
    if out_path.as_os_str() == "-" || special {
        let out: Box<dyn Write> = if out_path.as_os_str() == "-" {
            Box::new(io::stdout())
        } else {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(out_path)
                .map_err(|e| io_error("cannot open", out_path, &e))?;
            Box::new(f)
        };
        let out = BufWriter::with_capacity(1 << 16, out);
        return match export_to(paths, opts, out, err) {
            Ok((code, true)) => Ok(code),
            Ok((code, false)) => Ok(code.max(EXIT_BAD_INPUT)),
            Err(e) => Err(io_error("cannot write", out_path, &e)),
        };
    }
    let (tmp, file) = tempout::TempOut::create(out_path)?;
    let out = BufWriter::with_capacity(1 << 16, file);
    // On any way out but the rename, dropping `tmp` removes the file.
    match export_to(paths, opts, out, err) {
        Ok((code, true)) => {
            tmp.commit(out_path)
                .map_err(|e| io_error("cannot write", out_path, &e))?;
            Ok(code)
        }
        Ok((code, false)) => {
            drop(tmp);
            let _ = writeln!(
                err,
                "waitshim-analyze export: no log could be read; {} not written",
                out_path.display()
            );
            Ok(code.max(EXIT_BAD_INPUT))
        }
        Err(e) => Err(io_error("cannot write", out_path, &e)),
    }
}

/// Where a file for `path` is written first, beside it (hidden, with this process's id), to
/// be renamed over `path` when complete: a failed write leaves nothing half-written under the
/// name asked for.
pub fn temp_beside(path: &Path) -> Result<PathBuf, String> {
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} names no file", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

/// Runs the exporter over every log; (exit code, whether any log was exported).
fn export_to<W: Write + 'static>(
    paths: &[PathBuf],
    opts: &ExportOptions,
    out: BufWriter<W>,
    err: &mut dyn Write,
) -> io::Result<(i32, bool)> {
    let mut exporter: Box<dyn Exporter> = match opts.format {
        Format::Pprof => Box::new(pprof::Pprof::new(out, opts.side)),
        Format::Folded => Box::new(folded::Folded::new(out, opts.side, false)),
        Format::Flamegraph => Box::new(folded::Folded::new(out, opts.side, true)),
        Format::Chrome => Box::new(chrome::Chrome::new(out)?),
        Format::Perfetto => Box::new(perfetto::Perfetto::new(out).compressed(opts.compress)),
        Format::Html => Box::new(html::Html::new(out)),
    };
    let report_opts = Options {
        symbols: opts.symbols,
        ..Options::default()
    };
    crate::source::progress::set_task(Some(match opts.format {
        Format::Pprof => "writing pprof profile",
        Format::Folded => "writing folded stacks",
        Format::Flamegraph => "writing flame graph",
        Format::Chrome => "writing chrome trace",
        Format::Perfetto => "writing perfetto trace",
        Format::Html => "writing HTML page",
    }));
    let mut code = 0;
    let mut any = false;
    for path in paths {
        let a: Analysis = match analyze(path) {
            Ok(a) => a,
            Err(e) => {
                let _ = writeln!(err, "waitshim-analyze: {e}");
                code = EXIT_BAD_INPUT;
                continue;
            }
        };
        let pid = a.model.run.as_ref().map_or(0, |r| r.pid);
        let mut src = Source::new(Ctx::new(&a, &report_opts), pid);
        exporter.add(&mut src)?;
        for note in src.notes.take() {
            let _ = writeln!(err, "waitshim-analyze export: {}: {note}", path.display());
        }
        any = true;
    }
    if any {
        exporter.finish()?;
    }
    Ok((code, any))
}

/// One stack's share of the waiting: what profiles and flame graphs are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub object_id: u64,
    /// The waiter's chain (waiters side) or the holder's release chain (holders side); 0 when
    /// the log has none for these waits.
    pub chain_id: u32,
    /// The holder (holders side); the waiter (waiters side) where the log tells: from the
    /// per-wait events, and for the waits still going on at its end.
    pub tid: Option<u32>,
    /// Waits (waiters side) or waiters made to wait (holders side).
    pub count: u64,
    pub delay_ns: u64,
    /// A wait still going on when the log ended (waiters side), its delay up to the log's
    /// last look at the waits in progress.
    pub unended: bool,
}

/// The waits of each (object, wait site) by thread, from the log's per-wait events (read from
/// the log again), under the rules every reader of them keeps ([`timeline::EventFold`]): a
/// flight recorder's waits within its window only, and a thread's waits kept apart (a wait
/// listed again continues where its earlier listing ended). What splits a wait site's sample
/// by waiting thread. Memory: one entry per (object, site, thread) that waited.
#[derive(Debug, Default)]
pub struct WaitsByThread(HashMap<(u64, u32), BTreeMap<u32, (u64, u64)>>);

impl WaitsByThread {
    /// Those of the log `src` is of; empty when it has no per-wait events. A second read that
    /// finds less than the first leaves a note on `src` (see [`read_again`]).
    pub fn of(src: &Source<'_>) -> Self {
        let mut by = Self::default();
        let model = src.ctx.model;
        if !model.events.any() {
            return by;
        }
        let mut fold = timeline::EventFold::new(model);
        let note = read_again(src.ctx.summary, "the per-wait events", |bytes, path| {
            let summary = crate::source::read_from(bytes, path, |rec| {
                let _ = fold.record(&rec, &mut |tid, w| {
                    by.add(tid, &w);
                    Ok::<(), std::convert::Infallible>(())
                });
            })
            .map_err(|e| e.why)?;
            Ok(Ok::<_, std::convert::Infallible>(summary))
        });
        src.note(note.unwrap_or_else(|never| match never {}));
        by
    }

    fn add(&mut self, tid: u32, w: &timeline::Wait) {
        let e = self
            .0
            .entry((w.object_id, w.chain_id))
            .or_default()
            .entry(tid)
            .or_default();
        e.0 = e.0.saturating_add(1);
        e.1 = e.1.saturating_add(w.end.saturating_sub(w.start));
    }
}

/// A wait site's `count` waits of `ns` in all, split by the waits `threads` (tid → count, ns)
/// gives each thread: (thread, count, ns) for each, and (None, …) for the rest if any. Left
/// whole if the threads' waits add up to more than the site's.
fn split_by_thread(
    count: u64,
    ns: u64,
    threads: Option<&BTreeMap<u32, (u64, u64)>>,
) -> Vec<(Option<u32>, u64, u64)> {
    let mut out = Vec::new();
    let (mut rest_count, mut rest_ns) = (count, ns);
    if let Some(threads) = threads {
        let (c, n) = threads.values().fold((0u64, 0u64), |(c, n), &(a, b)| {
            (c.saturating_add(a), n.saturating_add(b))
        });
        if c <= count && n <= ns {
            (rest_count, rest_ns) = (count - c, ns - n);
            out.extend(threads.iter().map(|(&tid, &(c, n))| (Some(tid), c, n)));
        }
    }
    if rest_count != 0 || rest_ns != 0 || out.is_empty() {
        out.push((None, rest_count, rest_ns));
    }
    out
}

/// The samples of one side of the log's waits, objects in id order.
///
/// Waiters: one per (object, wait site), from the cumulative wait sites, plus one without a
/// chain for what an object's counters count beyond its wait sites, so that the delays add up
/// to the objects' wait totals. With `by_thread` (the log's per-wait events), a site's sample
/// is split: one per thread with the waits its events give, and the rest (waits too brief to
/// block, events the flight recorder dropped or that are older than its window) without a thread; a site whose events add up to
/// more than its counters (which never happens in a whole log) is left whole; then one per wait still going on when the log ended (the log's
/// last list of them), which the counters do not count: a deadlock's waits never end, and a
/// profile without them would say that the deadlocked threads never waited. Holders: one per completed contention record, its delay the sum
/// of its listed waiters' waits up to the release.
pub fn samples(
    model: &crate::model::Model,
    side: Side,
    by_thread: Option<&WaitsByThread>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    match side {
        Side::Waiters => {
            for o in model.objects.values() {
                let object_id = o.object_id;
                let (mut count, mut ns) = (0u64, 0u64);
                for site in o.wait_sites().values() {
                    count = count.saturating_add(site.count);
                    ns = ns.saturating_add(site.wait_total_ns);
                    let threads = by_thread.and_then(|b| b.0.get(&(object_id, site.chain_id)));
                    for (tid, count, delay_ns) in
                        split_by_thread(site.count, site.wait_total_ns, threads)
                    {
                        out.push(Sample {
                            object_id,
                            chain_id: site.chain_id,
                            tid,
                            count,
                            delay_ns,
                            unended: false,
                        });
                    }
                }
                let total_ns = o.wait_total_ns();
                let total_count = o
                    .counters
                    .as_ref()
                    .map_or(0, |c| c.contended)
                    .saturating_add(o.kind_counter(waitshim_format::counter::READ_CONTENDED));
                if total_ns > ns {
                    out.push(Sample {
                        object_id,
                        chain_id: 0,
                        tid: None,
                        count: total_count.saturating_sub(count),
                        delay_ns: total_ns - ns,
                        unended: false,
                    });
                }
            }
            if let Some(open) = &model.open_waits {
                for w in &open.waits {
                    out.push(Sample {
                        object_id: w.object_id,
                        chain_id: w.chain_id,
                        tid: Some(w.tid),
                        count: 1,
                        delay_ns: open.ns.saturating_sub(w.since_ns),
                        unended: true,
                    });
                }
            }
        }
        Side::Holders => {
            for r in model.records.values() {
                let Some(c) = &r.close else { continue };
                if r.opener_was_holder() && c.waiters.is_empty() {
                    continue;
                }
                let delay = c
                    .waiters
                    .iter()
                    .fold(0u64, |n, w| n.saturating_add(w.wait_ns));
                out.push(Sample {
                    object_id: r.object_id,
                    chain_id: c.holder_chain,
                    tid: Some(c.holder_tid),
                    count: u64::from(c.waiters_total.max(c.waiters.len() as u32)),
                    delay_ns: delay,
                    unended: false,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitshim_format::{append_frame, file_header, Record, Snapshot};

    fn log(n: u64) -> Vec<u8> {
        let mut bytes = file_header().to_vec();
        for seq in 1..=n {
            let r: Record = Snapshot {
                seq,
                ns: seq * 10,
                source: 1,
                requester_pid: 7,
            }
            .into();
            append_frame(&r, &mut bytes);
        }
        bytes
    }

    /// Reads `path` again as an exporter does, counting the records handed over.
    fn again(first: &ReadSummary) -> (u64, Option<String>) {
        let mut seen = 0u64;
        let note = read_again(first, "the per-wait events", |bytes, path| {
            let summary =
                crate::source::read_from(bytes, path, |_| seen += 1).map_err(|e| e.why)?;
            Ok(Ok::<_, ()>(summary))
        })
        .expect("no sink error");
        (seen, note)
    }

    #[test]
    fn a_wait_sites_waits_split_by_thread_add_up_to_the_site() {
        let threads: BTreeMap<u32, (u64, u64)> = [(11, (2, 200)), (12, (1, 100))].into();
        assert_eq!(
            split_by_thread(5, 500, Some(&threads)),
            vec![(Some(11), 2, 200), (Some(12), 1, 100), (None, 2, 200)]
        );
        // Every wait accounted for by a thread: no rest.
        assert_eq!(
            split_by_thread(3, 300, Some(&threads)),
            vec![(Some(11), 2, 200), (Some(12), 1, 100)]
        );
        // More in the events than in the counters (not from a whole log): the site whole.
        assert_eq!(
            split_by_thread(2, 500, Some(&threads)),
            vec![(None, 2, 500)]
        );
        assert_eq!(split_by_thread(4, 0, None), vec![(None, 4, 0)]);
    }

    #[test]
    fn a_log_read_again_as_it_was_gives_everything_and_no_note() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.log");
        std::fs::write(&p, log(5)).unwrap();
        let first = crate::source::read_from(File::open(&p).unwrap(), &p, |_| {}).unwrap();
        // A log the shim still writes grows after the first read: the second stops where the
        // first did.
        std::fs::write(&p, log(8)).unwrap();
        assert_eq!(again(&first), (5, None));
    }

    #[test]
    fn a_log_cut_short_or_removed_after_the_first_read_gives_what_is_left_and_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.log");
        std::fs::write(&p, log(5)).unwrap();
        let first = crate::source::read_from(File::open(&p).unwrap(), &p, |_| {}).unwrap();
        std::fs::write(&p, log(3)).unwrap();
        let (seen, note) = again(&first);
        assert_eq!(seen, 3);
        let note = note.expect("a note");
        assert!(
            note.contains("the log changed since it was read")
                && note.contains("for the per-wait events gave 3 of its 5 records"),
            "{note}"
        );
        std::fs::remove_file(&p).unwrap();
        let (seen, note) = again(&first);
        assert_eq!(seen, 0);
        let note = note.expect("a note");
        assert!(
            note.starts_with("the log could not be read again for the per-wait events"),
            "{note}"
        );
    }
}
