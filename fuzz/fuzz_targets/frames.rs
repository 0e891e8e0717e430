//! Any bytes through the frame reader: the items it yields tile the file (each starts where the
//! one before it ended) and it always ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitshim_format::{FrameReader, Item, FILE_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = FrameReader::new(data) else {
        return;
    };
    let mut next = FILE_HEADER_LEN as u64;
    while let Ok(Some(item)) = reader.next_item() {
        let (Item::Record { offset, len, .. } | Item::Damage { offset, len, .. }) = item;
        assert_eq!(offset, next);
        assert!(len > 0);
        next = offset + len;
    }
    assert!(next <= data.len() as u64);
});
