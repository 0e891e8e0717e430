//! Framing. After the 16-byte [file header](crate::FILE_HEADER_LEN), the log is a sequence of
//! frames, each aligned to 4 bytes:
//!
//! ```text
//! u16 tag = FRAME_TAG | u16 type | u32 body_len | u32 crc32(type, body_len, body) | body | pad
//! ```
//!
//! The writer fills a frame with its tag still zero and stores the tag last, so a reader that sees
//! a zero tag knows the frame (and, in a live log, everything after it) is not written yet. A frame
//! whose tag, length or checksum is wrong is damage: the reader skips forward to the next frame that
//! checks out and reports how many bytes it lost.

use std::io::Read;

use crate::record::Record;
use crate::wire::{Measure, SliceSink};
use crate::{DecodeError, FILE_HEADER_LEN, FILE_MAGIC, VERSION_MAJOR};

pub const FRAME_TAG: u16 = 0x5357; // "WS" in little-endian byte order
pub const FRAME_HEADER_LEN: usize = 12;
/// No record the shim writes comes near this; anything larger is damage.
pub const MAX_BODY_LEN: usize = 1 << 20;

pub fn padded(n: usize) -> usize {
    (n + 3) & !3
}

/// Total bytes a record occupies in the log, padding included.
pub fn frame_len(rec: &Record) -> usize {
    let mut m = Measure::default();
    rec.encode_body(&mut m);
    padded(FRAME_HEADER_LEN + m.0)
}

/// [`frame_len`] of the record whose body is `body`, without making the record (a copy).
pub fn frame_len_of(body: &impl crate::wire::Field) -> usize {
    let mut m = Measure::default();
    body.encode(&mut m);
    padded(FRAME_HEADER_LEN + m.0)
}

fn crc(ty: u16, len: u32, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&ty.to_le_bytes());
    h.update(&len.to_le_bytes());
    h.update(body);
    h.finalize()
}

/// Writes a whole frame into `out` (sized by [`frame_len`]) but leaves the tag zero; the caller
/// publishes the frame by storing [`FRAME_TAG`] into its first two bytes. Returns the body length.
pub fn write_frame_uncommitted(rec: &Record, out: &mut [u8]) -> usize {
    let total = out.len();
    let (hdr, rest) = out.split_at_mut(FRAME_HEADER_LEN);
    let mut sink = SliceSink { buf: rest, pos: 0 };
    rec.encode_body(&mut sink);
    let body_len = sink.pos.min(total - FRAME_HEADER_LEN);
    let ty = rec.type_id();
    let c = crc(ty, body_len as u32, &rest[..body_len]);
    hdr[0..2].copy_from_slice(&[0, 0]);
    hdr[2..4].copy_from_slice(&ty.to_le_bytes());
    hdr[4..8].copy_from_slice(&(body_len as u32).to_le_bytes());
    hdr[8..12].copy_from_slice(&c.to_le_bytes());
    for b in &mut rest[body_len..] {
        *b = 0;
    }
    body_len
}

/// Appends a committed frame to a buffer (tests, tools, and anything that writes whole files).
pub fn append_frame(rec: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + frame_len(rec), 0);
    write_frame_uncommitted(rec, &mut out[start..]);
    out[start..start + 2].copy_from_slice(&FRAME_TAG.to_le_bytes());
}

/// The fixed file header.
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(FILE_MAGIC);
    h[8..10].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
    h[10..12].copy_from_slice(&crate::VERSION_MINOR.to_le_bytes());
    h
}

/// What the reader found at one place in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A record, and where its frame lies: `len` is the frame's length in the file (header,
    /// body and padding), so the next frame starts at `offset + len`. That holds for a record of
    /// a type this reader does not know and for one a newer writer extended with fields at its
    /// end, whose re-encoding ([`frame_len`]) would be shorter.
    Record {
        offset: u64,
        len: u64,
        record: Record,
    },
    /// Bytes that could not be read as frames; reading resumed after them.
    Damage {
        offset: u64,
        len: u64,
        what: DecodeError,
    },
}

/// How the log ended, once the reader has consumed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Not reached yet.
    Open,
    /// The last frame was followed by end of file: nothing more was being written.
    Clean,
    /// Only unwritten (zero) space follows: the program is still running, or was killed.
    Unwritten,
    /// The file ends in the middle of a frame.
    Truncated,
    /// The file header of another log starts at `offset` (logs joined with `cat`): the reader
    /// stops there, at the end of the first log. A new reader over the bytes from `offset` reads
    /// the next one.
    NextLog { offset: u64 },
}

/// Streams frames from any reader in bounded memory (at most a couple of maximal frames).
pub struct FrameReader<R> {
    src: R,
    buf: Vec<u8>,
    start: usize,
    /// File offset of `buf[start]`.
    offset: u64,
    eof: bool,
    ending: Ending,
    /// Where unwritten space began, when the log ended that way: a live reader reopens there.
    unwritten_at: u64,
    pub version_minor: u16,
}

#[derive(Debug)]
pub enum OpenError {
    Io(std::io::Error),
    NotALog,
    TooNew(u16),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "{e}"),
            OpenError::NotALog => write!(f, "not a waitshim log (no WAITSHIM header)"),
            OpenError::TooNew(v) => write!(
                f,
                "log format version {v} is newer than this reader understands ({VERSION_MAJOR})"
            ),
        }
    }
}

impl std::error::Error for OpenError {}

impl<R: Read> FrameReader<R> {
    pub fn new(mut src: R) -> Result<Self, OpenError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        let mut got = 0;
        while got < h.len() {
            match src.read(&mut h[got..]) {
                Ok(0) => return Err(OpenError::NotALog),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(OpenError::Io(e)),
            }
        }
        if &h[..8] != FILE_MAGIC {
            return Err(OpenError::NotALog);
        }
        let major = u16::from_le_bytes([h[8], h[9]]);
        if major != VERSION_MAJOR {
            return Err(OpenError::TooNew(major));
        }
        Ok(Self::at(
            src,
            FILE_HEADER_LEN as u64,
            u16::from_le_bytes([h[10], h[11]]),
        ))
    }

    /// Continues reading a log at a frame boundary found by an earlier reader
    /// ([`FrameReader::resume_offset`]); `src` must already be positioned there.
    pub fn at(src: R, offset: u64, version_minor: u16) -> Self {
        FrameReader {
            src,
            buf: Vec::new(),
            start: 0,
            offset,
            eof: false,
            ending: Ending::Open,
            unwritten_at: 0,
            version_minor,
        }
    }

    /// Offset at which to continue reading a live log later.
    pub fn resume_offset(&self) -> u64 {
        match self.ending {
            Ending::Unwritten => self.unwritten_at,
            _ => self.offset,
        }
    }

    pub fn ending(&self) -> Ending {
        self.ending
    }

    /// Bytes of the file consumed so far.
    pub fn position(&self) -> u64 {
        self.offset
    }

    fn avail(&self) -> usize {
        self.buf.len() - self.start
    }

    fn rest(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Makes `n` bytes available from `start` unless the file ends first.
    fn fill(&mut self, n: usize) -> std::io::Result<()> {
        if self.start > 0 && (self.start >= self.buf.len() / 2 || self.buf.len() + n > 4 << 20) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        while self.avail() < n && !self.eof {
            let old = self.buf.len();
            let want = (n - self.avail()).max(64 << 10);
            self.buf.resize(old + want, 0);
            match self.src.read(&mut self.buf[old..]) {
                Ok(0) => {
                    self.buf.truncate(old);
                    self.eof = true;
                }
                Ok(k) => self.buf.truncate(old + k),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => self.buf.truncate(old),
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn advance(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    /// Whether another log's file header starts here.
    fn at_magic(&self) -> bool {
        self.rest().starts_with(FILE_MAGIC)
    }

    /// Checks the frame at `start`: Ok(Some(total_len)) if valid, Ok(None) if the file ends
    /// inside it, Err if it is not a valid frame.
    fn check_frame(&mut self) -> std::io::Result<Result<Option<usize>, DecodeError>> {
        self.fill(FRAME_HEADER_LEN)?;
        if self.avail() < FRAME_HEADER_LEN {
            return Ok(Ok(None));
        }
        let h = &self.buf[self.start..self.start + FRAME_HEADER_LEN];
        if u16::from_le_bytes([h[0], h[1]]) != FRAME_TAG {
            return Ok(Err(DecodeError::BadTag));
        }
        let ty = u16::from_le_bytes([h[2], h[3]]);
        let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let want = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if len > MAX_BODY_LEN {
            return Ok(Err(DecodeError::BadLength));
        }
        let total = padded(FRAME_HEADER_LEN + len);
        self.fill(total)?;
        if self.avail() < FRAME_HEADER_LEN + len {
            return Ok(Ok(None));
        }
        let body = &self.buf[self.start + FRAME_HEADER_LEN..self.start + FRAME_HEADER_LEN + len];
        if crc(ty, len as u32, body) != want {
            return Ok(Err(DecodeError::BadChecksum));
        }
        // Writers pad with zeros. Padding that is not can be the start of another log whose
        // predecessor was cut inside this frame's padding: the frame then ends there.
        let end = FRAME_HEADER_LEN + len;
        let padded_end = total.min(self.avail());
        if self.buf[self.start + end..self.start + padded_end]
            .iter()
            .any(|&b| b != 0)
        {
            self.fill(total + FILE_MAGIC.len())?;
            let rest = self.rest();
            if let Some(at) = (end..padded_end)
                .find(|&i| rest.get(i..).is_some_and(|r| r.starts_with(FILE_MAGIC)))
            {
                return Ok(Ok(Some(at)));
            }
        }
        Ok(Ok(Some(padded_end)))
    }

    /// Skips 4-byte groups of zeros (unwritten space) from `start`. True when they run to the
    /// end of the file; false when something else follows them.
    fn skip_zeros(&mut self) -> std::io::Result<bool> {
        loop {
            self.fill(64 << 10)?;
            let rest = self.rest();
            if rest.is_empty() {
                return Ok(true);
            }
            // Most of a long tail is zeros: a test over the whole chunk first, which the
            // compiler vectorizes, then the search for where they stop.
            let first = if rest.iter().all(|&b| b == 0) {
                None
            } else {
                rest.iter().position(|&b| b != 0)
            };
            match first {
                Some(i) => {
                    self.advance(i & !3);
                    return Ok(false);
                }
                // All zeros: whole groups, or all of it at the end of the file (`fill` stops
                // short of 64 KiB only there).
                None => {
                    let n = if self.eof {
                        rest.len()
                    } else {
                        rest.len() & !3
                    };
                    self.advance(n);
                }
            }
        }
    }

    /// Next item, or None at the end of what is readable now.
    pub fn next_item(&mut self) -> std::io::Result<Option<Item>> {
        if self.ending != Ending::Open {
            return Ok(None);
        }
        let offset = self.offset;
        match self.check_frame()? {
            Ok(Some(total)) => {
                let h = &self.buf[self.start..self.start + FRAME_HEADER_LEN];
                let ty = u16::from_le_bytes([h[2], h[3]]);
                let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
                let body =
                    &self.buf[self.start + FRAME_HEADER_LEN..self.start + FRAME_HEADER_LEN + len];
                let item = match Record::decode_body(ty, body) {
                    Ok(record) => Item::Record {
                        offset,
                        len: total as u64,
                        record,
                    },
                    Err(what) => Item::Damage {
                        offset,
                        len: total as u64,
                        what,
                    },
                };
                self.advance(total);
                Ok(Some(item))
            }
            // The file ends here or inside a frame; what is left of it is all in the buffer
            // (`fill` stops short only at the end of the file).
            Ok(None) => {
                let rest = self.rest();
                let magic = rest.windows(FILE_MAGIC.len()).position(|w| w == FILE_MAGIC);
                if rest.is_empty() {
                    self.ending = Ending::Clean;
                } else if rest.iter().all(|&b| b == 0) {
                    self.unwritten_at = offset;
                    self.ending = Ending::Unwritten;
                } else if let Some(at) = magic {
                    // The last frame of this log was cut short, and another log follows it.
                    if at == 0 {
                        self.ending = Ending::NextLog { offset };
                        return Ok(None);
                    }
                    self.advance(at);
                    return Ok(Some(Item::Damage {
                        offset,
                        len: at as u64,
                        what: DecodeError::CutShort,
                    }));
                } else {
                    self.ending = Ending::Truncated;
                }
                let n = self.avail();
                self.advance(n);
                Ok(None)
            }
            Err(what) => {
                if self.at_magic() {
                    self.ending = Ending::NextLog { offset };
                    return Ok(None);
                }
                let tag_zero = self.buf[self.start] == 0 && self.buf[self.start + 1] == 0;
                let mut check_here = false;
                if tag_zero {
                    self.unwritten_at = offset;
                    if self.skip_zeros()? {
                        self.ending = Ending::Unwritten;
                        return Ok(None);
                    }
                    // Something follows the zeros: a frame published after this one, or the
                    // header of another log.
                    check_here = self.offset > offset;
                }
                self.resync(check_here)?;
                let what = if tag_zero {
                    DecodeError::Unwritten
                } else {
                    what
                };
                Ok(Some(Item::Damage {
                    offset,
                    len: self.offset - offset,
                    what,
                }))
            }
        }
    }

    /// Moves forward, 4 bytes at a time, to the next valid frame, or to the header of another
    /// log (at any byte: the log before it may end in a frame cut short), or to the last bytes
    /// of the file, too few for a frame. `check_here`: `start` itself may be where to stop.
    fn resync(&mut self, mut check_here: bool) -> std::io::Result<()> {
        loop {
            if check_here {
                self.fill(FRAME_HEADER_LEN)?;
                if self.at_magic() || self.avail() < FRAME_HEADER_LEN {
                    return Ok(());
                }
                let tag = u16::from_le_bytes([self.buf[self.start], self.buf[self.start + 1]]);
                if tag == FRAME_TAG && matches!(self.check_frame()?, Ok(Some(_))) {
                    return Ok(());
                }
            }
            check_here = true;
            self.fill(FRAME_HEADER_LEN)?;
            let rest = self.rest();
            let step = (1..4)
                .find(|&i| rest.get(i..).is_some_and(|r| r.starts_with(FILE_MAGIC)))
                .unwrap_or(4)
                .min(rest.len());
            self.advance(step);
        }
    }
}

impl<R: Read> Iterator for FrameReader<R> {
    type Item = std::io::Result<Item>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}
