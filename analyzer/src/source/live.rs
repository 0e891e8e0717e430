//! The live flavour of the log source: following a log while the shim writes it. Each call
//! reads only the frames written since the previous one, so the cost of a refresh is what is
//! new, not the size of the log.
//!
//! The shim grows its file ahead of what it has written, so a live log ends in zero-filled space,
//! and a frame can still be unpublished (tag zero) while frames after it are already written (its
//! writer reserved it first and publishes it a moment later). Such a frame is waited for, not
//! counted as damage, unless it stays unwritten past [`UNPUBLISHED_GRACE`] or the program is gone.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use waitshim_format::frame::FRAME_HEADER_LEN;
use waitshim_format::{DecodeError, Ending, FrameReader, Item, Record};

use super::{ReadError, ReadSummary};

/// Bytes handed to one frame reader: more than the largest frame
/// ([`waitshim_format::frame::MAX_BODY_LEN`]), so a whole frame always fits, and little enough
/// that looking over the zero-filled tail of a live log stays cheap.
const WINDOW: u64 = 4 << 20;
/// How long a frame may stay unpublished while later frames are written before it counts as
/// damage (its writer was killed or stopped between reserving and publishing it).
pub const UNPUBLISHED_GRACE: Duration = Duration::from_secs(2);

/// A log being read as it grows.
pub struct Follower {
    file: File,
    version_minor: u16,
    /// Offset of the first frame not read yet.
    next: u64,
    /// An unpublished frame seen with later frames already written, and since when.
    unpublished: Option<(u64, Instant)>,
    /// What was read so far: records, damage, another log after this one, how it ends for now.
    summary: ReadSummary,
}

/// What one call to [`Follower::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Bytes of the file read as frames or damage.
    pub bytes: u64,
    /// True unless the call stopped at its byte budget with more of the file to read.
    pub caught_up: bool,
}

impl Follower {
    /// Opens the log at `path`; fails if it is not a log.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        Self::from_file(super::open(path)?, path)
    }

    /// Follows an already opened log; `path` names it in messages.
    pub fn from_file(mut file: File, path: &Path) -> Result<Self, ReadError> {
        file.rewind()
            .map_err(|e| ReadError::new(path, format!("cannot read: {e}")))?;
        let header = FrameReader::new(&file).map_err(|e| ReadError::open(path, e))?;
        Ok(Follower {
            version_minor: header.version_minor,
            file,
            next: waitshim_format::FILE_HEADER_LEN as u64,
            unpublished: None,
            summary: ReadSummary::new(path),
        })
    }

    pub fn path(&self) -> &Path {
        &self.summary.path
    }

    /// What was read so far. Its ending is where the last look stopped: unwritten space while
    /// the program runs.
    pub fn summary(&self) -> &ReadSummary {
        &self.summary
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Offset up to which the log has been read.
    pub fn offset(&self) -> u64 {
        self.next
    }

    /// Reads what was written since the last call and hands each record to `sink`, reading at most
    /// about `budget` bytes. `live`: the program may still be writing the log (an unpublished frame
    /// is waited for rather than skipped as damage).
    pub fn poll(
        &mut self,
        live: bool,
        budget: u64,
        mut sink: impl FnMut(Record),
    ) -> std::io::Result<Progress> {
        let len = self.file.metadata()?.len();
        let mut progress = Progress::default();
        loop {
            if self.next >= len || self.summary.next_log.is_some() {
                progress.caught_up = true;
                return Ok(progress);
            }
            if progress.bytes >= budget {
                return Ok(progress);
            }
            let start = self.next;
            let window = (len - start).min(WINDOW);
            let more_after_window = window < len - start;
            self.file.seek(SeekFrom::Start(start))?;
            let src = BufReader::new((&self.file).take(window));
            let mut reader = FrameReader::at(src, start, self.version_minor);
            let mut wait_here = false;
            while let Some(item) = reader.next_item()? {
                match item {
                    Item::Record {
                        offset,
                        len,
                        record,
                    } => {
                        self.next = offset + len;
                        self.summary.record(offset, len, record, &mut sink);
                    }
                    Item::Damage { offset, len, what } => {
                        let end = offset + len;
                        if live
                            && what == DecodeError::Unwritten
                            && !grace_over(&mut self.unpublished, offset)
                        {
                            wait_here = true;
                            break;
                        }
                        // The reader skipped to the end of its window looking for the next
                        // frame: that frame may lie across the window's end. Look again with
                        // a window that starts here, unless this window already did.
                        if more_after_window
                            && end + FRAME_HEADER_LEN as u64 > start + window
                            && offset > start
                        {
                            break;
                        }
                        self.summary.damage(offset, len, what);
                        self.next = end;
                    }
                }
            }
            if !more_after_window || matches!(reader.ending(), Ending::NextLog { .. }) {
                self.summary.ended(reader.ending());
            }
            if let Some(offset) = self.summary.next_log {
                self.next = offset;
            }
            progress.bytes += self.next - start;
            // Stop at an unpublished frame, at the end of what is written (the rest is zeros or
            // a frame still being written), or when nothing could be read.
            if wait_here
                || !more_after_window
                || self.next == start
                || self.summary.next_log.is_some()
            {
                progress.caught_up = true;
                return Ok(progress);
            }
        }
    }
}

/// Whether the unpublished frame at `offset` has been waited for long enough; `unpublished` is
/// the one seen before, and since when.
fn grace_over(unpublished: &mut Option<(u64, Instant)>, offset: u64) -> bool {
    match *unpublished {
        Some((at, since)) if at == offset => since.elapsed() >= UNPUBLISHED_GRACE,
        _ => {
            *unpublished = Some((offset, Instant::now()));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use waitshim_format::{append_frame, file_header, Snapshot};

    fn snapshot(seq: u64) -> Record {
        Snapshot {
            seq,
            ns: seq * 10,
            source: 1,
            requester_pid: 7,
        }
        .into()
    }

    fn seqs(f: &mut Follower, live: bool) -> Vec<u64> {
        let mut out = Vec::new();
        f.poll(live, u64::MAX, |r| {
            if let Record::Snapshot(s) = r {
                out.push(s.seq)
            }
        })
        .expect("poll");
        out
    }

    /// A log the way the shim leaves it while running: frames, then zeros.
    fn live_log(frames: &[Record], zeros: usize) -> Vec<u8> {
        let mut bytes = file_header().to_vec();
        for r in frames {
            append_frame(r, &mut bytes);
        }
        bytes.resize(bytes.len() + zeros, 0);
        bytes
    }

    #[test]
    fn reads_only_what_was_written_since_the_last_poll() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live.log");
        let first = live_log(&[snapshot(1), snapshot(2)], 0);
        let written = first.len();
        let mut bytes = first.clone();
        bytes.resize(written + (1 << 16), 0);
        std::fs::write(&p, &bytes).unwrap();

        let mut f = Follower::open(&p).unwrap();
        assert_eq!(seqs(&mut f, true), [1, 2]);
        assert_eq!(f.offset(), written as u64);
        assert_eq!(seqs(&mut f, true), Vec::<u64>::new(), "nothing new");

        // The shim writes the next frame into the zero space, in place.
        let mut frame = Vec::new();
        append_frame(&snapshot(3), &mut frame);
        let mut file = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        file.seek(SeekFrom::Start(written as u64)).unwrap();
        file.write_all(&frame).unwrap();
        assert_eq!(seqs(&mut f, true), [3]);
        assert_eq!(f.summary().records, 3);
        assert_eq!(f.summary().damage_count, 0);
    }

    #[test]
    fn an_unpublished_frame_is_waited_for_while_the_program_runs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live.log");
        let mut bytes = live_log(&[snapshot(1)], 0);
        let hole = bytes.len();
        append_frame(&snapshot(2), &mut bytes);
        append_frame(&snapshot(3), &mut bytes);
        bytes.resize(bytes.len() + 4096, 0);
        let tag = bytes[hole..hole + 2].to_vec();
        bytes[hole] = 0;
        bytes[hole + 1] = 0;
        std::fs::write(&p, &bytes).unwrap();

        let mut f = Follower::open(&p).unwrap();
        assert_eq!(seqs(&mut f, true), [1]);
        assert_eq!(
            f.offset(),
            hole as u64,
            "stops before the unpublished frame"
        );
        assert_eq!(f.summary().damage_count, 0);

        // Its writer publishes it: everything after it is read too.
        let mut file = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        file.seek(SeekFrom::Start(hole as u64)).unwrap();
        file.write_all(&tag).unwrap();
        assert_eq!(seqs(&mut f, true), [2, 3]);
        assert_eq!(f.summary().damage_count, 0);
    }

    #[test]
    fn an_unpublished_frame_of_an_ended_program_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dead.log");
        let mut bytes = live_log(&[snapshot(1)], 0);
        let hole = bytes.len();
        append_frame(&snapshot(2), &mut bytes);
        append_frame(&snapshot(3), &mut bytes);
        bytes[hole] = 0;
        bytes[hole + 1] = 0;
        std::fs::write(&p, &bytes).unwrap();

        let mut f = Follower::open(&p).unwrap();
        assert_eq!(seqs(&mut f, true), [1]);
        assert_eq!(seqs(&mut f, false), [3]);
        assert_eq!(f.summary().damage_count, 1);
    }

    #[test]
    fn frames_across_window_boundaries_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.log");
        // Enough frames to span several windows.
        let n = 3 * WINDOW / 36 + 10;
        let frames: Vec<Record> = (1..=n).map(snapshot).collect();
        std::fs::write(&p, live_log(&frames, 1 << 20)).unwrap();

        let mut f = Follower::open(&p).unwrap();
        // A small budget: several polls to catch up, none loses a frame.
        let mut all = Vec::new();
        loop {
            let mut got = Vec::new();
            let progress = f
                .poll(true, 1 << 20, |r| {
                    if let Record::Snapshot(s) = r {
                        got.push(s.seq)
                    }
                })
                .unwrap();
            all.extend(got);
            if progress.caught_up {
                break;
            }
        }
        assert_eq!(all, (1..=n).collect::<Vec<_>>());
        assert_eq!(f.summary().damage_count, 0);
    }

    #[test]
    fn a_file_that_is_not_a_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notes.txt");
        std::fs::write(&p, "just some words, no log here").unwrap();
        let e = Follower::open(&p).err().expect("refused");
        assert!(e.to_string().contains("not a waitshim log"), "{e}");
    }
}
