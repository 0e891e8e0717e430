//! Stage 1: stream the records of one log file, in bounded memory, and note what could not be
//! read (damage) and how the log ends.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use waitshim_format::{DecodeError, FrameReader, Item, OpenError, Record};

/// Damaged stretches kept for the report; more are counted but not listed.
const MAX_DAMAGE_LISTED: usize = 100;

/// Bytes that could not be read as records; reading resumed after them.
#[derive(Debug, Clone)]
pub struct Damage {
    pub offset: u64,
    pub bytes: u64,
    pub why: DecodeError,
}

/// How the readable part of the log ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The last record is followed by the end of the file.
    Clean,
    /// Space the shim reserved was never written: the program is still running, was killed, or
    /// left by exec/_exit before the shim wrote its exit record.
    Unwritten,
    /// The file stops in the middle of a record: it was cut short (copied while live, disk full).
    Truncated,
}

impl Ending {
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Clean => "clean",
            Ending::Unwritten => "unwritten",
            Ending::Truncated => "truncated",
        }
    }
}

/// What reading the file found besides its records.
#[derive(Debug, Clone)]
pub struct ReadSummary {
    pub path: PathBuf,
    pub ending: Ending,
    /// Where the last readable frame ends: the unreadable tail, if any, starts here.
    pub end_offset: u64,
    pub damage: Vec<Damage>,
    pub damage_count: u64,
    pub damage_bytes: u64,
    pub records: u64,
    /// Records of types this analyzer does not know (written by a newer shim): skipped.
    pub unknown_records: u64,
    /// An I/O error that stopped reading before the end of the file.
    pub io_error: Option<String>,
    /// Where the file header of another log starts (logs joined with `cat`): reading stopped
    /// there, and this summary is of the first log only.
    pub next_log: Option<u64>,
}

/// The file cannot be read as a log at all.
#[derive(Debug)]
pub struct ReadError {
    pub path: PathBuf,
    pub why: String,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for ReadError {}

/// Reads every record of the log at `path` and hands each to `sink`, in file order.
pub fn read_log(path: &Path, sink: impl FnMut(Record)) -> Result<ReadSummary, ReadError> {
    let file = File::open(path).map_err(|e| ReadError {
        path: path.to_path_buf(),
        why: format!("cannot open: {e}"),
    })?;
    read_from(BufReader::new(file), path, sink)
}

/// Reads a log from any byte stream; `path` only names it in the summary and errors.
pub fn read_from(
    src: impl Read,
    path: &Path,
    mut sink: impl FnMut(Record),
) -> Result<ReadSummary, ReadError> {
    let fail = |why: String| ReadError {
        path: path.to_path_buf(),
        why,
    };
    let mut reader = FrameReader::new(src).map_err(|e| match e {
        OpenError::Io(e) => fail(format!("cannot read: {e}")),
        other => fail(other.to_string()),
    })?;
    let mut summary = ReadSummary {
        path: path.to_path_buf(),
        ending: Ending::Clean,
        end_offset: waitshim_format::FILE_HEADER_LEN as u64,
        damage: Vec::new(),
        damage_count: 0,
        damage_bytes: 0,
        records: 0,
        unknown_records: 0,
        io_error: None,
        next_log: None,
    };
    loop {
        match reader.next_item() {
            Ok(Some(Item::Record {
                offset,
                len,
                record,
            })) => {
                summary.records += 1;
                summary.end_offset = offset.saturating_add(len);
                if matches!(record, Record::Unknown { .. }) {
                    summary.unknown_records += 1;
                }
                sink(record);
            }
            Ok(Some(Item::Damage { offset, len, what })) => {
                summary.damage_count += 1;
                summary.end_offset = offset.saturating_add(len);
                summary.damage_bytes = summary.damage_bytes.saturating_add(len);
                if summary.damage.len() < MAX_DAMAGE_LISTED {
                    summary.damage.push(Damage {
                        offset,
                        bytes: len,
                        why: what,
                    });
                }
            }
            Ok(None) => break,
            Err(e) => {
                summary.io_error = Some(format!(
                    "read error at offset {}: {e}; the rest of the file was not read",
                    reader.position()
                ));
                break;
            }
        }
    }
    summary.ending = match reader.ending() {
        waitshim_format::Ending::Unwritten => Ending::Unwritten,
        waitshim_format::Ending::Truncated => Ending::Truncated,
        waitshim_format::Ending::NextLog { offset } => {
            summary.next_log = Some(offset);
            Ending::Clean
        }
        waitshim_format::Ending::Clean | waitshim_format::Ending::Open => Ending::Clean,
    };
    Ok(summary)
}
