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
    Record {
        offset: u64,
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
        Ok(FrameReader {
            src,
            buf: Vec::new(),
            start: 0,
            offset: FILE_HEADER_LEN as u64,
            eof: false,
            ending: Ending::Open,
            unwritten_at: 0,
            version_minor: u16::from_le_bytes([h[10], h[11]]),
        })
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
        Ok(Ok(Some(total.min(self.avail()))))
    }

    /// True when everything from `start` to end of file is zero (unwritten space).
    fn rest_is_zero(&mut self) -> std::io::Result<bool> {
        self.unwritten_at = self.offset;
        loop {
            if self.buf[self.start..].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            if self.eof {
                return Ok(true);
            }
            let n = self.avail();
            self.advance(n);
            self.fill(64 << 10)?;
            if self.avail() == 0 && self.eof {
                return Ok(true);
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
                    Ok(record) => Item::Record { offset, record },
                    Err(what) => Item::Damage {
                        offset,
                        len: total as u64,
                        what,
                    },
                };
                self.advance(total);
                Ok(Some(item))
            }
            Ok(None) => {
                if self.avail() == 0 {
                    self.ending = Ending::Clean;
                } else if self.rest_is_zero()? {
                    self.ending = Ending::Unwritten;
                } else {
                    self.ending = Ending::Truncated;
                }
                let n = self.avail();
                self.advance(n);
                Ok(None)
            }
            Err(what) => {
                let tag_zero = self.buf[self.start] == 0 && self.buf[self.start + 1] == 0;
                if tag_zero && self.rest_is_zero()? {
                    self.ending = Ending::Unwritten;
                    let n = self.avail();
                    self.advance(n);
                    return Ok(None);
                }
                let skipped = self.resync()?;
                let what = if tag_zero {
                    DecodeError::Unwritten
                } else {
                    what
                };
                Ok(Some(Item::Damage {
                    offset,
                    len: skipped,
                    what,
                }))
            }
        }
    }

    /// Skips forward, 4 bytes at a time, to the next valid frame or the end. Returns bytes skipped.
    fn resync(&mut self) -> std::io::Result<u64> {
        let from = self.offset;
        loop {
            self.advance(4.min(self.avail()));
            if self.avail() < FRAME_HEADER_LEN {
                self.fill(FRAME_HEADER_LEN)?;
                if self.avail() < FRAME_HEADER_LEN {
                    break;
                }
            }
            let h = &self.buf[self.start..self.start + 2];
            if u16::from_le_bytes([h[0], h[1]]) != FRAME_TAG {
                continue;
            }
            if let Ok(Some(_)) = self.check_frame()? {
                break;
            }
        }
        Ok(self.offset - from)
    }
}

impl<R: Read> Iterator for FrameReader<R> {
    type Item = std::io::Result<Item>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}
