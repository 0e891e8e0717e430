//! The format must round-trip every record, and the reader must survive any damage: it either
//! yields records that were really written, or reports damage, and it never panics or allocates
//! beyond a bounded window.

use proptest::prelude::*;
use waitshim_format::events::WaitSpan;
use waitshim_format::frame::{frame_len_of, FRAME_HEADER_LEN};
use waitshim_format::*;

/// A few records of different shapes, for the damage tests (which rely on their order: a note
/// at index 4, a `CpuSample` last). [`every_record`] has one of every type.
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
                object_id: 0,
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

/// One record of every type, every field set: no zero numbers, no empty strings or lists (so
/// that a field the encoder or decoder drops, or reads as another, cannot go unseen), with
/// extreme values and non-ASCII text here and there.
fn every_record() -> Vec<Record> {
    let counters = |base: u64| {
        vec![
            CounterValue {
                key: counter::POSTS,
                value: base,
            },
            CounterValue {
                key: counter::ENDED_ERRNO_BASE + 110,
                value: u64::MAX - base,
            },
        ]
    };
    let waiter = |tid: u32| WaiterRef {
        tid,
        chain_id: tid + 100,
        wait_ns: u64::from(tid) * 1_000_003,
    };
    vec![
        RunStart {
            pid: 4242,
            ppid: 1,
            realtime_ns: 1_700_000_000_123_456_789,
            mono_ns: 98_765_432_100,
            ncpus: 64,
            exe: "/usr/bin/app".into(),
            cmdline: vec!["app".into(), "--threads=8".into(), "naïve ünïcode".into()],
            shim_version: "1.2.3".into(),
        }
        .into(),
        Module {
            module_id: 3,
            base: 0x7f12_3456_0000,
            build_id: vec![0xde, 0xad, 0xbe, 0xef, 0x01],
            path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            segments: vec![
                Segment {
                    vaddr: 0x1000,
                    memsz: 0x2_0000,
                },
                Segment {
                    vaddr: 0x30_0000,
                    memsz: 0x4321,
                },
            ],
        }
        .into(),
        Chain {
            chain_id: 7,
            frames: vec![0x401000, 0x401234, 0x7fff_0000_1234, u64::MAX],
        }
        .into(),
        ThreadStart {
            tid: 4243,
            parent_tid: 4242,
            ns: 1_001,
            start_routine: 0x40_1550,
            chain_id: 8,
            is_main: 1,
        }
        .into(),
        ThreadName {
            tid: 4243,
            ns: 1_002,
            name: "worker-1".into(),
        }
        .into(),
        ThreadExit {
            tid: 4243,
            ns: 9_999,
        }
        .into(),
        ObjectCreate {
            object_id: 3,
            addr: 0x6010,
            kind: ObjectKind::Mutex as u8,
            subtype: mutex_kind::ERRORCHECK | mutex_kind::ROBUST,
            origin: origin::FIRST_USE,
            ns: 5,
            tid: 42,
            chain_id: 7,
        }
        .into(),
        ObjectName {
            object_id: 3,
            name: "queue lock".into(),
        }
        .into(),
        ObjectDestroy {
            object_id: 3,
            ns: 8_888,
            tid: 44,
        }
        .into(),
        Counters {
            object_id: 3,
            ns: 100,
            acquisitions: 1_000_000,
            contended: 5_000,
            owner_changes: 4_000,
            busy: 12,
            timeouts: 3,
            errors: 2,
            wait_total_ns: 123_456_789,
            wait_max_ns: 9_876_543,
            hold_total_ns: 55_555_555,
            hold_max_ns: 444_444,
            hold_samples: 4_321,
            max_waiters: 17,
        }
        .into(),
        WaitSite {
            object_id: 3,
            chain_id: 9,
            count: 77,
            wait_total_ns: 7_700_000,
            wait_max_ns: 300_000,
        }
        .into(),
        ContentionOpen {
            record_id: 1,
            object_id: 3,
            ns: 6,
            level: 4,
            reason: contention_reason::SERIALISED,
            holder_tid: 43,
            waiter_tid: 44,
            waiter_chain: 10,
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
            waiters: vec![waiter(44), waiter(45)],
            waiters_total: 7,
            coalesced: 2,
        }
        .into(),
        Highwater {
            ns: 11,
            hwm: 5,
            object_id: 3,
            tid: 46,
        }
        .into(),
        Deadlock {
            ns: 12,
            detected_by: 47,
            cycle: vec![
                DeadlockEdge {
                    tid: 47,
                    object_id: 3,
                    wait_chain: 11,
                    holder_tid: 48,
                },
                DeadlockEdge {
                    tid: 48,
                    object_id: 4,
                    wait_chain: 12,
                    holder_tid: 47,
                },
            ],
        }
        .into(),
        RunEnd {
            ns: 13,
            reason: end_reason::SIGNAL,
            exit_status: -6,
            hwm: 5,
            dropped: 99,
        }
        .into(),
        Note {
            ns: 1,
            level: note_level::WARNING,
            text: "log nearly full — 90 %".into(),
        }
        .into(),
        KindCounters {
            object_id: 5,
            ns: 14,
            values: counters(31),
        }
        .into(),
        LockOrder {
            from_object: 3,
            to_object: 5,
            tid: 42,
            chain_id: 13,
            ns: 15,
        }
        .into(),
        PolicyVersion {
            version: 2,
            ns: 16,
            source: "/etc/waitshim/policy.json".into(),
            text: r#"{"rules":[{"select":"mutex","actions":["record"]}]}"#.into(),
            rules: vec!["mutex: record".into(), "cond: count".into()],
        }
        .into(),
        RuleStats {
            version: 2,
            rule: 1,
            ns: 17,
            requests: 1_000,
            acted: 250,
            suppressed: 25,
        }
        .into(),
        WaitEvent {
            object_id: 3,
            tid: 44,
            ns: 18,
            wait_ns: 2_500,
            waiters: 3,
            reason: counter::ENDED_SIGNALLED,
            version: 2,
            rule: 1,
            chain_id: 14,
        }
        .into(),
        WaiterChains {
            object_id: 3,
            ns: 19,
            version: 2,
            rule: 1,
            waiters: vec![waiter(49), waiter(50), waiter(51)],
        }
        .into(),
        HolderStack {
            object_id: 3,
            ns: 20,
            holder_tid: 43,
            waiter_tid: 44,
            version: 2,
            rule: 1,
            live: contract::holder_stack::SCANNED,
            chain_id: 15,
        }
        .into(),
        Snapshot {
            seq: 3,
            ns: 21,
            source: snapshot_source::API,
            requester_pid: 5_000,
        }
        .into(),
        ObjectsChurned {
            kind: ObjectKind::Semaphore as u8,
            chain_id: 16,
            ns: 22,
            count: 1_000_000,
            acquisitions: 3_000_000,
            lifetime_total_ns: 9_000_000_000,
            lifetime_max_ns: 70_000,
            counters: counters(32),
        }
        .into(),
        WaitEventReason {
            object_id: 6,
            tid: 44,
            ns: 23,
            version: 2,
            rule: 1,
            from: counter::ENDED_SIGNALLED,
            to: counter::ENDED_SPURIOUS,
        }
        .into(),
        DeadlockBroken {
            deadlock_ns: 12,
            tid: 47,
            ns: 24,
            outcome: counter::ENDED_TIMED_OUT,
        }
        .into(),
        Exec {
            ns: 25,
            path: "/usr/bin/next".into(),
        }
        .into(),
        ObjectsQuiet {
            kind: ObjectKind::RwLock as u8,
            chain_id: 17,
            ns: 26,
            count: 2_000_000,
            acquisitions: 4,
            owner_changes: 1,
            counters: counters(33),
        }
        .into(),
        OpenWaits {
            ns: 27,
            waits: vec![
                OpenWait {
                    tid: 44,
                    object_id: 3,
                    since_ns: 26,
                    chain_id: 18,
                    holder_tid: 43,
                },
                OpenWait {
                    tid: 45,
                    object_id: 7,
                    since_ns: 25,
                    chain_id: 19,
                    holder_tid: 99_999,
                },
            ],
        }
        .into(),
        ThreadSamples {
            ns: 28,
            interval_ns: 10_000_000,
            threads: vec![
                ThreadState {
                    tid: 44,
                    state: thread_state::BLOCKED,
                    waiting_kind: ObjectKind::Futex as u8 + 1,
                    on_cpu_ns: 1_500,
                    run_delay_ns: 300,
                    timeslices: 2,
                    syscall: -1,
                    arg0: 5,
                    what: "socket:[456] tcp 127.0.0.1:80 listening".into(),
                    object_id: 3,
                },
                ThreadState {
                    tid: 45,
                    state: thread_state::STOPPED,
                    waiting_kind: 1,
                    on_cpu_ns: 9,
                    run_delay_ns: 8,
                    timeslices: 7,
                    syscall: 202,
                    arg0: 0x6010,
                    what: "child 42".into(),
                    object_id: 6,
                },
            ],
            unsampled: 1,
        }
        .into(),
        CpuSample {
            ns: 29,
            idle_ns: vec![10_000_000, 20_000_000, 1],
            iowait_ns: vec![40_000, 50_000, 2],
        }
        .into(),
        WaitEvents::pack(
            44,
            1_000_000,
            3,
            30_000_000_000,
            &[
                WaitSpan {
                    begin_ns: 1_000_100,
                    end_ns: 1_250_000,
                    object_id: 5,
                    chain_id: 2,
                    reason: 1,
                    shared: true,
                    waker: 45,
                },
                WaitSpan {
                    begin_ns: 1_300_000,
                    end_ns: 1_300_900,
                    object_id: 6,
                    chain_id: 9,
                    reason: 3,
                    shared: false,
                    waker: 43,
                },
            ],
        )
        .into(),
        ThreadTotals {
            tid: 44,
            ns: 30,
            on_cpu_ns: 123_000,
            run_delay_ns: 45_000,
            timeslices: 67,
            voluntary: 89,
            involuntary: 10,
        }
        .into(),
        ThreadSwitches {
            ns: 31,
            threads: vec![
                SwitchCount {
                    tid: 44,
                    voluntary: 89,
                    involuntary: 10,
                    longest_slice_ns: 4_000_000,
                },
                SwitchCount {
                    tid: 45,
                    voluntary: 1,
                    involuntary: 2,
                    longest_slice_ns: 3,
                },
            ],
        }
        .into(),
        ShimCost {
            ns: 32,
            thread_cpu_ns: 5_000_000,
            tasks: vec![
                TaskCost {
                    task: shim_task::SAMPLER,
                    runs: 300,
                    cpu_ns: 4_000_000,
                },
                TaskCost {
                    task: shim_task::FLUSH,
                    runs: 3,
                    cpu_ns: 900_000,
                },
            ],
        }
        .into(),
        BlockedChain {
            tid: 46,
            ns: 33,
            since_ns: 20,
            syscall: 45,
            arg0: 7,
            version: 1,
            rule: 3,
            chain_id: 9,
        }
        .into(),
        ProgressPoint {
            id: 1,
            ns: 34,
            name: "request served".into(),
        }
        .into(),
        ProgressCounts {
            ns: 35,
            points: vec![ProgressCount {
                id: 1,
                visits: 10,
                first_ns: 20,
                last_ns: 34,
                first_begin_ns: 19,
                begins: 11,
                ends: 10,
                begins_sum: u64::MAX - 5,
                ends_sum: 400,
            }],
        }
        .into(),
        DelayRule {
            rule: 1,
            site: "name:table".into(),
            delay_ns: 20_000,
        }
        .into(),
        Delayed {
            object_id: 3,
            rule: 1,
            ns: 34,
            sections: 400,
            total_ns: 8_100_000,
        }
        .into(),
        ThreadYields {
            ns: 35,
            threads: vec![
                YieldCount {
                    tid: 7,
                    yields: 200_000,
                },
                YieldCount {
                    tid: 8,
                    yields: u64::MAX,
                },
            ],
            sites: vec![
                YieldSite {
                    tid: 7,
                    ret: 0x5555_5555_1234,
                    yields: 199_999,
                },
                YieldSite {
                    tid: 8,
                    ret: 0x5555_5555_5678,
                    yields: 1,
                },
            ],
        }
        .into(),
    ]
}

/// Names every variant of [`Record`]: a record type added to the format without an arm here
/// does not compile. The arm is the reminder to add a sample to [`every_record`] (and a golden
/// frame to `golden_bytes.rs`); [`every_record_type_has_a_sample`] checks that it was.
fn variant_name(r: &Record) -> &'static str {
    match r {
        Record::RunStart(_) => "RunStart",
        Record::Module(_) => "Module",
        Record::Chain(_) => "Chain",
        Record::ThreadStart(_) => "ThreadStart",
        Record::ThreadName(_) => "ThreadName",
        Record::ThreadExit(_) => "ThreadExit",
        Record::ObjectCreate(_) => "ObjectCreate",
        Record::ObjectName(_) => "ObjectName",
        Record::ObjectDestroy(_) => "ObjectDestroy",
        Record::Counters(_) => "Counters",
        Record::WaitSite(_) => "WaitSite",
        Record::ContentionOpen(_) => "ContentionOpen",
        Record::ContentionClose(_) => "ContentionClose",
        Record::Highwater(_) => "Highwater",
        Record::Deadlock(_) => "Deadlock",
        Record::RunEnd(_) => "RunEnd",
        Record::Note(_) => "Note",
        Record::KindCounters(_) => "KindCounters",
        Record::LockOrder(_) => "LockOrder",
        Record::PolicyVersion(_) => "PolicyVersion",
        Record::RuleStats(_) => "RuleStats",
        Record::WaitEvent(_) => "WaitEvent",
        Record::WaiterChains(_) => "WaiterChains",
        Record::HolderStack(_) => "HolderStack",
        Record::Snapshot(_) => "Snapshot",
        Record::ObjectsChurned(_) => "ObjectsChurned",
        Record::WaitEventReason(_) => "WaitEventReason",
        Record::DeadlockBroken(_) => "DeadlockBroken",
        Record::Exec(_) => "Exec",
        Record::ObjectsQuiet(_) => "ObjectsQuiet",
        Record::OpenWaits(_) => "OpenWaits",
        Record::ThreadSamples(_) => "ThreadSamples",
        Record::CpuSample(_) => "CpuSample",
        Record::WaitEvents(_) => "WaitEvents",
        Record::ThreadTotals(_) => "ThreadTotals",
        Record::ThreadSwitches(_) => "ThreadSwitches",
        Record::ShimCost(_) => "ShimCost",
        Record::BlockedChain(_) => "BlockedChain",
        Record::ProgressPoint(_) => "ProgressPoint",
        Record::ProgressCounts(_) => "ProgressCounts",
        Record::DelayRule(_) => "DelayRule",
        Record::Delayed(_) => "Delayed",
        Record::ThreadYields(_) => "ThreadYields",
        Record::Unknown { .. } => "Unknown",
    }
}

/// The type codes this version's decoder knows, asked of the decoder itself: every record has
/// at least one field, so an empty body of a known type is too short, and one of an unknown
/// type is skipped as `Unknown`.
fn known_type_codes() -> Vec<u16> {
    (0..=u16::MAX)
        .filter(|&ty| !matches!(Record::decode_body(ty, &[]), Ok(Record::Unknown { .. })))
        .collect()
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
    let recs = every_record();
    let (back, damage, ending) = read_all(&log_of(&recs));
    assert_eq!(damage, 0);
    assert_eq!(ending, Ending::Clean);
    assert_eq!(back.len(), recs.len());
    for (rec, back) in recs.iter().zip(&back) {
        assert_eq!(back, rec, "{} through the reader", variant_name(rec));
    }
    // Each on its own too: the body alone, and one frame, of exactly its measured length.
    for rec in &recs {
        let name = variant_name(rec);
        let body = body_of(rec);
        assert_eq!(
            Record::decode_body(rec.type_id(), &body).as_ref(),
            Ok(rec),
            "{name} body"
        );
        let mut frame = Vec::new();
        append_frame(rec, &mut frame);
        assert_eq!(frame.len(), frame_len(rec), "{name} frame length");
        if let Record::WaitEvents(w) = rec {
            // The model measures event batches without copying them into a record.
            assert_eq!(frame_len_of(w), frame.len(), "{name} frame_len_of");
        }
        assert_eq!(frame.len() % 4, 0, "{name} frame alignment");
        assert_eq!(
            frame.len(),
            (FRAME_HEADER_LEN + body.len()).next_multiple_of(4)
        );
        let mut one = file_header().to_vec();
        one.extend(&frame);
        assert_eq!(
            read_all(&one),
            (vec![rec.clone()], 0, Ending::Clean),
            "{name} alone"
        );
    }
    // The small sample the damage tests use round-trips as well.
    let (back, damage, ending) = read_all(&log_of(&sample()));
    assert_eq!((back, damage, ending), (sample(), 0, Ending::Clean));
}

#[test]
fn every_record_type_has_a_sample() {
    let recs = every_record();
    let mut names: Vec<&str> = recs.iter().map(variant_name).collect();
    assert!(!names.contains(&"Unknown"));
    names.sort_unstable();
    let distinct = names.len();
    names.dedup();
    assert_eq!(names.len(), distinct, "one sample per type: {names:?}");
    let mut codes: Vec<u16> = recs.iter().map(Record::type_id).collect();
    codes.sort_unstable();
    assert_eq!(
        codes,
        known_type_codes(),
        "the type codes of the samples, and those the decoder knows"
    );
}

#[test]
fn every_sample_sets_every_field() {
    // As Debug prints them: a zero number, an empty string or list, or a zero list element.
    let unset = [": 0,", ": 0 }", "[0,", ", 0,", ", 0]", "\"\"", "[]"];
    for rec in every_record() {
        let text = format!("{rec:?}");
        for u in unset {
            assert!(!text.contains(u), "{u:?} in the sample {text}");
        }
    }
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

#[test]
fn wait_events_come_back_as_the_waits_they_pack_through_a_log() {
    let recs = every_record();
    let packed = recs
        .iter()
        .find_map(|r| match r {
            Record::WaitEvents(w) => Some(w.clone()),
            _ => None,
        })
        .unwrap();
    let (back, _, _) = read_all(&log_of(&[packed.clone().into()]));
    let Record::WaitEvents(back) = &back[0] else {
        panic!("{back:?}")
    };
    let spans = back.waits().unwrap();
    assert_eq!(spans.len(), 2);
    assert_eq!((spans[0].waker, spans[0].shared), (45, true));
    assert_eq!((spans[1].begin_ns, spans[1].end_ns), (1_300_000, 1_300_900));
    assert_eq!(
        (spans[1].object_id, spans[1].chain_id, spans[1].reason),
        (6, 9, 3)
    );
}
