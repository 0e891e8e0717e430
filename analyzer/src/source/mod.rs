//! The one log source: the records of a log, with where each frame lies, read from a whole file
//! ([`read_log`], [`read_from`]) or by following a file the shim is still writing
//! ([`live::Follower`]). Both flavours account for what they read in the same [`ReadSummary`]:
//! records, records of unknown types, damaged stretches, another log joined after this one, and
//! how the log ends. What they read goes to a sink (a fold of the record stream: the report's
//! model, the live view's state, an exporter).

pub mod live;
pub mod progress;

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

impl ReadSummary {
    fn new(path: &Path) -> Self {
        ReadSummary {
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
        }
    }

    /// Counts the record of the frame at `offset`, `len` bytes long, and hands it to `sink`.
    fn record(&mut self, offset: u64, len: u64, record: Record, sink: &mut impl FnMut(Record)) {
        self.records += 1;
        self.end_offset = offset.saturating_add(len);
        if matches!(record, Record::Unknown { .. }) {
            self.unknown_records += 1;
        }
        sink(record);
    }

    /// Counts `len` damaged bytes at `offset`, listing the first few stretches.
    fn damage(&mut self, offset: u64, len: u64, why: DecodeError) {
        self.damage_count += 1;
        self.end_offset = offset.saturating_add(len);
        self.damage_bytes = self.damage_bytes.saturating_add(len);
        if self.damage.len() < MAX_DAMAGE_LISTED {
            self.damage.push(Damage {
                offset,
                bytes: len,
                why,
            });
        }
    }

    /// Notes how the frame reader found the log to end.
    fn ended(&mut self, ending: waitshim_format::Ending) {
        self.ending = match ending {
            waitshim_format::Ending::Unwritten => Ending::Unwritten,
            waitshim_format::Ending::Truncated => Ending::Truncated,
            waitshim_format::Ending::NextLog { offset } => {
                self.next_log = Some(offset);
                Ending::Clean
            }
            waitshim_format::Ending::Clean | waitshim_format::Ending::Open => Ending::Clean,
        };
    }
}

/// The file cannot be read as a log at all.
#[derive(Debug)]
pub struct ReadError {
    pub path: PathBuf,
    pub why: String,
}

impl ReadError {
    fn new(path: &Path, why: String) -> Self {
        ReadError {
            path: path.to_path_buf(),
            why,
        }
    }

    /// Why a frame reader could not start on the log at `path`.
    fn open(path: &Path, e: OpenError) -> Self {
        match e {
            OpenError::Io(e) => Self::new(path, format!("cannot read: {e}")),
            other => Self::new(path, other.to_string()),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for ReadError {}

/// Opens the log at `path` for reading.
fn open(path: &Path) -> Result<File, ReadError> {
    File::open(path).map_err(|e| ReadError::new(path, format!("cannot open: {e}")))
}

/// Reads every record of the log at `path` and hands each to `sink`, in file order. A large
/// log's read shows its progress on stderr ([`progress`]).
pub fn read_log(path: &Path, sink: impl FnMut(Record)) -> Result<ReadSummary, ReadError> {
    let file = open(path)?;
    let size = file.metadata().map_or(0, |m| m.len());
    let progress = Some(progress::Progress::new(path, size));
    read_items(
        BufReader::with_capacity(1 << 18, file),
        path,
        sink,
        progress,
    )
}

/// Reads a log from any byte stream; `path` only names it in the summary and errors.
pub fn read_from(
    src: impl Read,
    path: &Path,
    sink: impl FnMut(Record),
) -> Result<ReadSummary, ReadError> {
    read_items(src, path, sink, None)
}

fn read_items(
    src: impl Read,
    path: &Path,
    mut sink: impl FnMut(Record),
    mut progress: Option<progress::Progress>,
) -> Result<ReadSummary, ReadError> {
    let mut reader = FrameReader::new(src).map_err(|e| ReadError::open(path, e))?;
    let mut summary = ReadSummary::new(path);
    loop {
        match reader.next_item() {
            Ok(Some(Item::Record {
                offset,
                len,
                record,
            })) => {
                if let Some(p) = &mut progress {
                    p.at(offset);
                }
                summary.record(offset, len, record, &mut sink)
            }
            Ok(Some(Item::Damage { offset, len, what })) => summary.damage(offset, len, what),
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
    summary.ended(reader.ending());
    Ok(summary)
}
