//! The waitshim log format: the one contract between the shim that writes logs and the analyzer
//! that reads them. Neither side declares a record of its own.
//!
//! A log is a 16-byte header (`WAITSHIM`, major and minor version) followed by checksummed,
//! length-framed records ([`frame`]). Records are typed ([`record::Record`]); a reader skips types
//! it does not know, and each record's fields are only ever extended at the end: the frame reader
//! hands out each record with its frame's offset and length in the file, so that a reader can
//! step over what it does not understand.

pub mod contract;
pub mod events;
pub mod frame;
pub mod record;
pub mod syscalls;
pub mod wire;

pub use frame::{append_frame, file_header, frame_len, Ending, FrameReader, Item, OpenError};
pub use record::*;

pub const FILE_MAGIC: &[u8; 8] = b"WAITSHIM";
pub const FILE_HEADER_LEN: usize = 16;
/// Readers refuse logs of another major version.
pub const VERSION_MAJOR: u16 = 1;
/// Added record types or fields; readers accept any minor version.
pub const VERSION_MINOR: u16 = 1;

/// Why bytes of a log could not be read as a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// A field runs past the end of its record.
    ShortBody,
    /// A length prefix claims more data than the record holds.
    BadLength,
    /// No frame tag where a frame should start.
    BadTag,
    /// The frame's checksum does not match its contents.
    BadChecksum,
    /// Space reserved by the writer that was never filled (the process died while writing).
    Unwritten,
    /// A frame that stops where another log's file header starts (logs joined with `cat`, the
    /// first one cut short).
    CutShort,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecodeError::ShortBody => "record shorter than its fields",
            DecodeError::BadLength => "impossible length",
            DecodeError::BadTag => "no frame marker",
            DecodeError::BadChecksum => "checksum mismatch",
            DecodeError::Unwritten => "space reserved but never written",
            DecodeError::CutShort => "record cut short by the start of another log",
        })
    }
}

impl std::error::Error for DecodeError {}
