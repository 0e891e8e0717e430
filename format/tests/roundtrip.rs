//! The format must round-trip every record, and the reader must survive any damage: it either
//! yields records that were really written, or reports damage, and it never panics or allocates
//! beyond a bounded window.

use proptest::prelude::*;
use waitshim_format::frame::FRAME_HEADER_LEN;
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
        ThreadSamples {
            ns: 20,
            interval_ns: 10_000_000,
            threads: vec![ThreadState {
                tid: 44,
                state: thread_state::BLOCKED,
                waiting_kind: 0,
                on_cpu_ns: 1_500,
                run_delay_ns: 300,
                timeslices: 2,
                syscall: 0,
                arg0: 5,
                what: "pipe:[1234]".into(),
            }],
            unsampled: 1,
        }
        .into(),
        CpuSample {
            ns: 21,
            idle_ns: vec![10_000_000, 0],
            iowait_ns: vec![0, 0],
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
    let (items, ending) = items(bytes);
    let mut recs = vec![];
    let mut damage = 0;
    for item in items {
        match item {
            Item::Record { record, .. } => recs.push(record),
            Item::Damage { .. } => damage += 1,
        }
    }
    (recs, damage, ending)
}

/// Every item the reader yields, in order, and how the log ended. The items tile the file
/// from the header on: each starts where the one before it ended.
fn items(bytes: &[u8]) -> (Vec<Item>, Ending) {
    let mut rd = match FrameReader::new(bytes) {
        Ok(r) => r,
        Err(_) => return (vec![], Ending::Clean),
    };
    let mut out = vec![];
    let mut next = FILE_HEADER_LEN as u64;
    while let Some(item) = rd.next_item().unwrap() {
        let (Item::Record { offset, len, .. } | Item::Damage { offset, len, .. }) = item;
        assert_eq!(offset, next, "an item starts where the previous one ended");
        assert!(len > 0, "an item covers at least one byte");
        next = offset + len;
        out.push(item);
    }
    (out, rd.ending())
}

/// A frame as a writer of any version would write it: `ty` and `body` as given, valid checksum.
fn raw_frame(ty: u16, body: &[u8]) -> Vec<u8> {
    let len = body.len() as u32;
    let mut h = crc32fast::Hasher::new();
    h.update(&ty.to_le_bytes());
    h.update(&len.to_le_bytes());
    h.update(body);
    let mut f = Vec::new();
    f.extend(0x5357u16.to_le_bytes());
    f.extend(ty.to_le_bytes());
    f.extend(len.to_le_bytes());
    f.extend(h.finalize().to_le_bytes());
    f.extend(body);
    f.resize(f.len().next_multiple_of(4), 0);
    f
}

/// The body of a record as this version encodes it.
fn body_of(rec: &Record) -> Vec<u8> {
    let mut body = Vec::new();
    rec.encode_body(&mut body);
    body
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

#[test]
fn frames_of_a_newer_writer_are_stepped_over_by_their_own_length() {
    // A newer minor version appended 44 bytes of fields to a note, and wrote a record of a type
    // this reader does not know: both are read, each with the length of its frame in the file.
    let note = sample()[4].clone();
    let mut extended = body_of(&note);
    extended.extend([0xab; 44]);
    let newer = raw_frame(note.type_id(), &extended);
    let unknown = raw_frame(999, &[7; 61]);
    let mut bytes = file_header().to_vec();
    bytes.extend(&newer);
    bytes.extend(&unknown);
    append_frame(&sample()[0], &mut bytes);
    let (items, ending) = items(&bytes);
    assert_eq!(ending, Ending::Clean);
    let lens: Vec<u64> = items
        .iter()
        .map(|i| match i {
            Item::Record { len, .. } => *len,
            Item::Damage { .. } => panic!("damage reported: {i:?}"),
        })
        .collect();
    assert_eq!(
        lens,
        [
            newer.len() as u64,
            unknown.len() as u64,
            frame_len(&sample()[0]) as u64
        ]
    );
    assert!(
        lens[0] > frame_len(&note) as u64,
        "longer than this version's note"
    );
    let records: Vec<&Record> = items
        .iter()
        .filter_map(|i| match i {
            Item::Record { record, .. } => Some(record),
            Item::Damage { .. } => None,
        })
        .collect();
    assert_eq!(records[0], &note, "the fields this version knows");
    assert!(matches!(records[1], Record::Unknown { ty: 999, len: 61 }));
    assert_eq!(records[2], &sample()[0]);
}

#[test]
fn two_logs_joined_with_cat_end_the_first_where_the_second_starts() {
    let first = log_of(&sample());
    let mut bytes = first.clone();
    bytes.extend(log_of(&sample()[..2]));
    let (back, damage, ending) = read_all(&bytes);
    assert_eq!(back, sample(), "the first log's records only");
    assert_eq!(damage, 0);
    assert_eq!(
        ending,
        Ending::NextLog {
            offset: first.len() as u64
        }
    );
}

#[test]
fn a_log_cut_short_then_another_ends_at_the_second_header_wherever_it_falls() {
    let first = log_of(&sample());
    let last = sample().last().cloned().expect("sample");
    let padding = frame_len(&last) - FRAME_HEADER_LEN - body_of(&last).len();
    for cut in 1..frame_len(&last) {
        let end = first.len() - cut;
        let mut bytes = first[..end].to_vec();
        bytes.extend(log_of(&sample()));
        let (items, ending) = items(&bytes);
        assert_eq!(ending, Ending::NextLog { offset: end as u64 }, "cut {cut}");
        let (back, damage, _) = read_all(&bytes);
        if cut <= padding {
            // Only padding was lost: the last record is whole.
            assert_eq!((back, damage), (sample(), 0), "cut {cut}");
        } else {
            assert_eq!(back, sample()[..sample().len() - 1], "cut {cut}");
            assert!(
                matches!(items.last(), Some(Item::Damage { .. })),
                "the cut frame is damage: {:?}",
                items.last()
            );
        }
    }
}

#[test]
fn a_log_ending_in_unwritten_space_then_another_ends_at_the_second_header() {
    let mut bytes = log_of(&sample());
    bytes.extend([0u8; 1000]);
    let at = bytes.len() as u64;
    bytes.extend(log_of(&sample()));
    let (items, ending) = items(&bytes);
    assert_eq!(ending, Ending::NextLog { offset: at });
    assert!(matches!(
        items.last(),
        Some(Item::Damage {
            len: 1000,
            what: DecodeError::Unwritten,
            ..
        })
    ));
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

    /// A log cut anywhere, then another: the first is read up to the second one's header.
    #[test]
    fn a_second_log_after_a_cut_anywhere_ends_the_first(cut in FILE_HEADER_LEN..400usize) {
        let first = log_of(&sample());
        let end = cut.min(first.len());
        let mut bytes = first[..end].to_vec();
        bytes.extend(log_of(&sample()));
        let (back, _, ending) = read_all(&bytes);
        prop_assert_eq!(ending, Ending::NextLog { offset: end as u64 });
        prop_assert!(back.len() <= sample().len());
        for r in back {
            prop_assert!(sample().contains(&r));
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
