//! One read of a log for everything that needs its records: the [`Model`] takes each record
//! in, and each [`Sink`] sees it too, in the same read, for what the model does not keep (the
//! critical path's packed waits and sampled states, [`crate::critical::Input`]). A batch of
//! per-wait events is unpacked once for all of them.
//!
//! A sink sees each record before the model takes it in, with the model as the log had it up
//! to there, and is finished once the model is: what it cannot decide before the end (a
//! thread's end, a flight recorder's window) it decides then.

use std::io::Read;
use std::path::Path;

use waitshim_format::events::WaitSpan;
use waitshim_format::{Record, WaitEvents};

use crate::model::Model;
use crate::source::{self, ReadError, ReadSummary};

/// What reads a log's records beside the model.
pub trait Sink {
    /// A record other than a batch of per-wait events; `model` holds what came before it.
    fn record(&mut self, rec: &Record, model: &Model);
    /// A batch of per-wait events whose waits unpacked (a damaged batch is the model's to
    /// count, and reaches no sink); `model` holds what came before it.
    fn waits(&mut self, batch: &WaitEvents, waits: &[WaitSpan], model: &Model);
    /// The log is read: `model` is the whole log's, finished.
    fn finish(&mut self, model: &Model);
}

/// Reads the log at `path` into a model, feeding `sinks` in the same read.
pub fn read(path: &Path, sinks: &mut [&mut dyn Sink]) -> Result<(ReadSummary, Model), ReadError> {
    let mut model = Model::new();
    let summary = source::read_log(path, |r| take(&mut model, sinks, r))?;
    Ok((summary, finish(model, sinks)))
}

/// [`read`] from any byte stream (`name` labels it).
pub fn read_from(
    bytes: impl Read,
    name: &Path,
    sinks: &mut [&mut dyn Sink],
) -> Result<(ReadSummary, Model), ReadError> {
    let mut model = Model::new();
    let summary = source::read_from(bytes, name, |r| take(&mut model, sinks, r))?;
    Ok((summary, finish(model, sinks)))
}

fn take(model: &mut Model, sinks: &mut [&mut dyn Sink], rec: Record) {
    match rec {
        Record::WaitEvents(batch) => {
            let waits = batch.waits();
            if let Ok(w) = &waits {
                for s in sinks.iter_mut() {
                    s.waits(&batch, w, model);
                }
            }
            model.add_wait_events(&batch, waits.as_deref());
        }
        rec => {
            for s in sinks.iter_mut() {
                s.record(&rec, model);
            }
            model.add(rec);
        }
    }
}

fn finish(mut model: Model, sinks: &mut [&mut dyn Sink]) -> Model {
    model.finish();
    for s in sinks.iter_mut() {
        s.finish(&model);
    }
    model
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitshim_format::{ThreadStart, WaitEvents};

    /// Counts what it is handed, and what the model knew when.
    #[derive(Default)]
    struct Seen {
        records: u64,
        waits: u64,
        finished_with_threads: Option<usize>,
    }

    impl Sink for Seen {
        fn record(&mut self, _rec: &Record, _model: &Model) {
            self.records += 1;
        }
        fn waits(&mut self, _batch: &WaitEvents, waits: &[WaitSpan], _model: &Model) {
            self.waits += waits.len() as u64;
        }
        fn finish(&mut self, model: &Model) {
            self.finished_with_threads = Some(model.threads.len());
        }
    }

    fn log(records: &[Record]) -> Vec<u8> {
        let mut out = waitshim_format::file_header().to_vec();
        for r in records {
            waitshim_format::append_frame(r, &mut out);
        }
        out
    }

    #[test]
    fn the_model_and_every_sink_get_each_record_in_one_read() {
        let span = |b: u64| WaitSpan {
            begin_ns: b,
            end_ns: b + 10,
            object_id: 7,
            ..WaitSpan::default()
        };
        let bytes = log(&[
            Record::ThreadStart(ThreadStart {
                tid: 5,
                parent_tid: 0,
                ns: 1,
                start_routine: 0,
                chain_id: 0,
                is_main: 1,
            }),
            Record::WaitEvents(WaitEvents::pack(5, 0, 0, 0, &[span(100), span(200)])),
            Record::WaitEvents(WaitEvents::pack(5, 300, 0, 0, &[span(400)])),
        ]);
        let (mut a, mut b) = (Seen::default(), Seen::default());
        let (summary, model) =
            read_from(&bytes[..], Path::new("t.log"), &mut [&mut a, &mut b]).unwrap();
        assert_eq!(summary.records, 3);
        for s in [&a, &b] {
            assert_eq!((s.records, s.waits), (1, 3));
            assert_eq!(s.finished_with_threads, Some(1));
        }
        assert_eq!(model.events.waits, 3);
        assert_eq!(model.threads.len(), 1);
    }
}
