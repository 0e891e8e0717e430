//! Field encoding: little-endian fixed-width integers, length-prefixed strings, byte strings and
//! lists. Encoding goes through [`Sink`] so the same code both measures a record and writes it into
//! a caller-provided slice (the shim writes straight into its mapped log, without a heap buffer).

use crate::DecodeError;

/// Destination of encoded bytes.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

/// Counts bytes without storing them: the first pass of a two-pass encode.
#[derive(Default)]
pub struct Measure(pub usize);

impl Sink for Measure {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// Writes into a slice that the caller sized with [`Measure`]; bytes past the end are dropped,
/// never written out of bounds.
pub struct SliceSink<'a> {
    pub buf: &'a mut [u8],
    pub pos: usize,
}

impl Sink for SliceSink<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let end = (self.pos + bytes.len()).min(self.buf.len());
        let n = end.saturating_sub(self.pos);
        self.buf[self.pos..end].copy_from_slice(&bytes[..n]);
        self.pos += bytes.len();
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Reads fields from a record body. Every read is bounds-checked; list lengths are checked against
/// the bytes that remain before anything is allocated, so a damaged length cannot request memory
/// beyond the size of the body.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::ShortBody);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}

/// A value that can appear as a field of a record.
pub trait Field: Sized {
    /// Smallest encoded size: used to bound list lengths before allocating.
    const MIN_SIZE: usize;
    fn encode<S: Sink>(&self, s: &mut S);
    fn decode(c: &mut Cursor<'_>) -> Result<Self, DecodeError>;

    /// The items of a list, in a row: one at a time, unless the type does better (bytes: one
    /// copy, where a call per byte was most of the time a log's per-wait events took to read).
    fn encode_list<S: Sink>(items: &[Self], s: &mut S) {
        for x in items {
            x.encode(s);
        }
    }

    /// `n` items of a list, in a row ([`Field::encode_list`]).
    fn decode_list(c: &mut Cursor<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(Self::decode(c)?);
        }
        Ok(v)
    }
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            const MIN_SIZE: usize = std::mem::size_of::<$t>();
            fn encode<S: Sink>(&self, s: &mut S) {
                s.put(&self.to_le_bytes());
            }
            fn decode(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
                let b = c.take(std::mem::size_of::<$t>())?;
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                Ok(<$t>::from_le_bytes(a))
            }
        }
    )*};
}
int_field!(u16, u32, u64, i32, i64);

impl Field for u8 {
    const MIN_SIZE: usize = 1;
    fn encode<S: Sink>(&self, s: &mut S) {
        s.put(&[*self]);
    }
    fn decode(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        Ok(c.take(1)?[0])
    }
    fn encode_list<S: Sink>(items: &[u8], s: &mut S) {
        s.put(items);
    }
    fn decode_list(c: &mut Cursor<'_>, n: usize) -> Result<Vec<u8>, DecodeError> {
        Ok(c.take(n)?.to_vec())
    }
}

fn read_len(c: &mut Cursor<'_>, min_item: usize) -> Result<usize, DecodeError> {
    let n = u32::decode(c)? as usize;
    if n.saturating_mul(min_item.max(1)) > c.remaining() {
        return Err(DecodeError::BadLength);
    }
    Ok(n)
}

impl Field for String {
    const MIN_SIZE: usize = 4;
    fn encode<S: Sink>(&self, s: &mut S) {
        (self.len() as u32).encode(s);
        s.put(self.as_bytes());
    }
    fn decode(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        let n = read_len(c, 1)?;
        // Paths and names come from the traced program and need not be UTF-8: keep what can be shown.
        // `from_utf8` checks valid text (the usual case) several times faster than the lossy
        // conversion's scan.
        let bytes = c.take(n)?;
        Ok(match std::str::from_utf8(bytes) {
            Ok(s) => s.to_owned(),
            Err(_) => String::from_utf8_lossy(bytes).into_owned(),
        })
    }
}

impl<T: Field> Field for Vec<T> {
    const MIN_SIZE: usize = 4;
    fn encode<S: Sink>(&self, s: &mut S) {
        (self.len() as u32).encode(s);
        T::encode_list(self, s);
    }
    fn decode(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        let n = read_len(c, T::MIN_SIZE)?;
        T::decode_list(c, n)
    }
}

/// Declares a struct whose fields are encoded in declaration order. New fields are only ever
/// appended, and decoders ignore trailing bytes, so old readers read new logs.
#[macro_export]
macro_rules! wire_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }

        impl $crate::wire::Field for $name {
            const MIN_SIZE: usize = 0 $(+ <$t as $crate::wire::Field>::MIN_SIZE)*;
            fn encode<S: $crate::wire::Sink>(&self, _s: &mut S) {
                $($crate::wire::Field::encode(&self.$f, _s);)*
            }
            fn decode(_c: &mut $crate::wire::Cursor<'_>) -> Result<Self, $crate::DecodeError> {
                Ok($name { $($f: <$t as $crate::wire::Field>::decode(_c)?),* })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Field + PartialEq + std::fmt::Debug>(v: &Vec<T>) -> Vec<u8> {
        let mut bytes = Vec::new();
        v.encode(&mut bytes);
        let mut m = Measure::default();
        v.encode(&mut m);
        assert_eq!(m.0, bytes.len());
        assert_eq!(&Vec::<T>::decode(&mut Cursor::new(&bytes)).unwrap(), v);
        bytes
    }

    #[test]
    fn byte_lists_are_copied_whole_and_other_lists_item_by_item_to_the_same_bytes() {
        let bytes: Vec<u8> = (0..=255).collect();
        let b = round_trip(&bytes);
        assert_eq!(&b[..4], &256u32.to_le_bytes());
        assert_eq!(&b[4..], &bytes[..]);
        let words: Vec<u16> = vec![1, 0x1234, u16::MAX];
        assert_eq!(round_trip(&words)[4..], [1, 0, 0x34, 0x12, 0xff, 0xff]);
        round_trip(&Vec::<u8>::new());
        // A list longer than what is left: refused before anything is copied.
        let mut short = 10u32.to_le_bytes().to_vec();
        short.extend_from_slice(&[1, 2, 3]);
        assert!(Vec::<u8>::decode(&mut Cursor::new(&short)).is_err());
    }
}
