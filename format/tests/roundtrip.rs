//! The format must round-trip every record, and the reader must survive any damage: it either
//! yields records that were really written, or reports damage, and it never panics or allocates
//! beyond a bounded window.

use proptest::prelude::*;
use waitshim_format::*;

fn sample() -> Vec<Record> {
    vec![
        RunStart {
            pid: 42,
            ppid: 1,
            realtime_ns: 1,
            mono_ns: 2,
            ncpus: 2,
            exe: "/bin/app".into(),
            cmdline: vec!["app".into(), "-x".into()],
            shim_version: "0.1.0".into(),
        }
        .into(),
        Chain {
            chain_id: 7,
            frames: vec![0x401000, 0x401234, 0x7fff0000],
        }
        .into(),
        ObjectCreate {
            object_id: 3,
            addr: 0x6010,
            kind: ObjectKind::Mutex as u8,
            subtype: 0,
            origin: origin::FIRST_USE,
            ns: 5,
            tid: 42,
            chain_id: 7,
        }
        .into(),
        ContentionClose {
            record_id: 1,
            object_id: 3,
            ns: 9,
            level: 7,
            elapsed_ns: 1000,
            threads_tried: 8,
            holder_tid: 43,
            holder_chain: 7,
            waiters: vec![WaiterRef {
                tid: 44,
                chain_id: 7,
                wait_ns: 10,
            }],
            waiters_total: 7,
            coalesced: 0,
        }
        .into(),
        Note {
            ns: 1,
            level: note_level::INFO,
            text: "hello".into(),
        }
        .into(),
    ]
}

fn log_of(recs: &[Record]) -> Vec<u8> {
    let mut v = file_header().to_vec();
    for r in recs {
        append_frame(r, &mut v);
    }
    v
}

fn read_all(bytes: &[u8]) -> (Vec<Record>, usize, Ending) {
    let mut rd = match FrameReader::new(bytes) {
        Ok(r) => r,
        Err(_) => return (vec![], 0, Ending::Clean),
    };
    let mut recs = vec![];
    let mut damage = 0;
    while let Some(item) = rd.next_item().unwrap() {
        match item {
            Item::Record { record, .. } => recs.push(record),
            Item::Damage { .. } => damage += 1,
        }
    }
    (recs, damage, rd.ending())
}

#[test]
fn every_record_round_trips() {
    let recs = sample();
    let (back, damage, ending) = read_all(&log_of(&recs));
    assert_eq!(back, recs);
    assert_eq!(damage, 0);
    assert_eq!(ending, Ending::Clean);
}

#[test]
fn unwritten_tail_is_a_live_or_killed_log() {
    let mut bytes = log_of(&sample());
    bytes.extend(std::iter::repeat_n(0u8, 100_000));
    let (back, damage, ending) = read_all(&bytes);
    assert_eq!(back.len(), sample().len());
    assert_eq!(damage, 0);
    assert_eq!(ending, Ending::Unwritten);
}

#[test]
fn a_hole_left_by_a_killed_writer_is_skipped() {
    let recs = sample();
    let mut bytes = file_header().to_vec();
    append_frame(&recs[0], &mut bytes);
    bytes.extend([0u8; 40]);
    append_frame(&recs[1], &mut bytes);
    let (back, damage, _) = read_all(&bytes);
    assert_eq!(back, vec![recs[0].clone(), recs[1].clone()]);
    assert_eq!(damage, 1);
}

#[test]
fn corruption_in_the_middle_loses_only_that_record() {
    let recs = sample();
    let mut bytes = log_of(&recs);
    let second = FILE_HEADER_LEN + frame_len(&recs[0]);
    bytes[second + 20] ^= 0xff;
    let (back, damage, _) = read_all(&bytes);
    assert_eq!(damage, 1);
    assert_eq!(back.len(), recs.len() - 1);
    assert_eq!(back[0], recs[0]);
    assert_eq!(back[1..], recs[2..]);
}

#[test]
fn truncated_log_keeps_what_is_complete() {
    let recs = sample();
    let bytes = log_of(&recs);
    let (back, _, ending) = read_all(&bytes[..bytes.len() - 5]);
    assert_eq!(back, recs[..recs.len() - 1]);
    assert_eq!(ending, Ending::Truncated);
}

#[test]
fn not_a_log_is_refused() {
    assert!(matches!(
        FrameReader::new(&b"hello world, this is text"[..]),
        Err(OpenError::NotALog)
    ));
    assert!(matches!(
        FrameReader::new(&b""[..]),
        Err(OpenError::NotALog)
    ));
}

#[test]
fn unknown_record_types_are_skipped() {
    let mut bytes = file_header().to_vec();
    let start = bytes.len();
    append_frame(&sample()[4], &mut bytes);
    // Rewrite the type to one no reader knows, fixing the checksum: a newer writer's record.
    let len = u32::from_le_bytes(bytes[start + 4..start + 8].try_into().unwrap()) as usize;
    let body = bytes[start + 12..start + 12 + len].to_vec();
    let mut h = crc32fast::Hasher::new();
    h.update(&999u16.to_le_bytes());
    h.update(&(len as u32).to_le_bytes());
    h.update(&body);
    bytes[start + 2..start + 4].copy_from_slice(&999u16.to_le_bytes());
    bytes[start + 8..start + 12].copy_from_slice(&h.finalize().to_le_bytes());
    append_frame(&sample()[0], &mut bytes);
    let (back, damage, _) = read_all(&bytes);
    assert_eq!(damage, 0);
    assert!(matches!(back[0], Record::Unknown { ty: 999, .. }));
    assert_eq!(back[1], sample()[0]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Random damage anywhere: never a panic, and every record read back is one that was written.
    #[test]
    fn damaged_logs_never_panic(flips in prop::collection::vec((0usize..4096, any::<u8>()), 0..16),
                                cut in 0usize..4096) {
        let recs = sample();
        let mut bytes = log_of(&recs);
        bytes.extend(log_of(&recs)[FILE_HEADER_LEN..].iter());
        for (pos, val) in flips {
            if pos >= 8 && pos < bytes.len() {
                bytes[pos] ^= val;
            }
        }
        bytes.truncate(cut.max(FILE_HEADER_LEN).min(bytes.len()));
        let (back, _, _) = read_all(&bytes);
        for r in back {
            prop_assert!(recs.contains(&r), "read back a record that was never written: {:?}", r);
        }
    }

    /// Arbitrary bytes after a valid header.
    #[test]
    fn random_bodies_never_panic(tail in prop::collection::vec(any::<u8>(), 0..8192)) {
        let mut bytes = file_header().to_vec();
        bytes.extend(tail);
        let _ = read_all(&bytes);
    }
}
