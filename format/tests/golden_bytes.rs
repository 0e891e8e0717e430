//! Golden bytes: the exact frame the encoder writes for one fixed value of every record type.
//! The log format is a contract with logs already written and with readers already shipped; any
//! change of these bytes is a change of the wire format, and has to be one on purpose (new
//! fields go at the end of a record, new records get a new type code; see `record.rs`).
//!
//! # Layout
//!
//! A frame (`frame.rs`) is a 12-byte header, the record's body, and zero padding to a multiple
//! of 4 bytes:
//!
//! ```text
//! u16 tag = 0x5357 ("WS") | u16 type | u32 body_len | u32 crc32(type, body_len, body) | body | pad
//! ```
//!
//! The body (`wire.rs`) is the record's fields in declaration order, packed (no alignment):
//! integers little-endian at their own width (`u8` 1 byte, `u16` 2, `u32`/`i32` 4, `u64`/`i64`
//! 8, signed ones two's complement); a `String` is a `u32` byte count and the UTF-8 bytes; a
//! `Vec<T>` is a `u32` element count and the elements, each encoded the same way. No varints,
//! no field tags, no terminators.
//!
//! # Checked by hand
//!
//! `ThreadExit { tid: 0x111, ns: 0x222 }`, 24 bytes:
//!
//! ```text
//! 57 53        tag 0x5357, little-endian
//! 06 00        type 6 (ThreadExit in the `records!` table)
//! 0c 00 00 00  body_len 12 = tid (4) + ns (8)
//! 51 aa ba b4  crc32 of `06 00 0c 00 00 00` followed by the body (the tag is not covered)
//! 11 01 00 00  tid = 0x0111
//! 22 02 00 00 00 00 00 00  ns = 0x0222
//!              12 + 12 = 24 is a multiple of 4: no padding
//! ```
//!
//! `Note { ns: 0x111, level: 0x22, text: "hi" }`, 28 bytes:
//!
//! ```text
//! 57 53 11 00  tag, type 17
//! 0f 00 00 00  body_len 15 = ns (8) + level (1) + text (4 + 2)
//! 0b d6 93 3a  crc32
//! 11 01 00 00 00 00 00 00  ns = 0x0111
//! 22           level = 0x22: a u8 is one byte, and the next field follows it unaligned
//! 02 00 00 00  text: 2 bytes
//! 68 69        "hi"
//! 00           12 + 15 = 27: one byte of padding to 28
//! ```
//!
//! `RunEnd { ns: 0x111, reason: 0x22, exit_status: -6, hwm: 0x444, dropped: 0x555 }`, 44 bytes:
//!
//! ```text
//! 57 53 10 00  tag, type 16
//! 1d 00 00 00  body_len 29 = 8 + 1 + 8 + 4 + 8
//! 7e e2 c4 8d  crc32
//! 11 01 00 00 00 00 00 00  ns = 0x0111
//! 22           reason = 0x22
//! fa ff ff ff ff ff ff ff  exit_status = -6: i64 two's complement 0xffff_ffff_ffff_fffa
//! 44 04 00 00  hwm = 0x0444
//! 55 05 00 00 00 00 00 00  dropped = 0x0555
//! 00 00 00     12 + 29 = 41: three bytes of padding to 44
//! ```
//!
//! `Chain { chain_id: 0x111, frames: [0x0401_000a, u64::MAX] }`, 36 bytes:
//!
//! ```text
//! 57 53 03 00  tag, type 3
//! 18 00 00 00  body_len 24 = chain_id (4) + count (4) + 2 frames (8 each)
//! 6e 95 c5 10  crc32
//! 11 01 00 00  chain_id = 0x0111
//! 02 00 00 00  frames: 2 elements
//! 0a 00 01 04 00 00 00 00  frames[0] = 0x0401_000a
//! ff ff ff ff ff ff ff ff  frames[1] = u64::MAX
//! ```
//!
//! The other frames were generated once by encoding, then decoded again outside Rust, field by
//! field from the declarations in `record.rs` (which is where the per-field comments in each
//! literal come from), with their checksums recomputed by another CRC-32 implementation (zlib's);
//! both agreed for all of them. [`golden_frames_are_well_formed`] keeps the header of each
//! literal consistent with its body.

use waitshim_format::frame::{FRAME_HEADER_LEN, FRAME_TAG};
use waitshim_format::*;

/// Bytes from hex: pairs of hex digits separated by whitespace; `#` starts a comment that runs
/// to the end of the line.
fn hex(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split('#').next().unwrap_or("");
        for pair in code.split_whitespace() {
            assert_eq!(pair.len(), 2, "not a byte: {pair:?} in {line:?}");
            out.push(u8::from_str_radix(pair, 16).unwrap_or_else(|_| panic!("not hex: {pair:?}")));
        }
    }
    out
}

/// Hex of bytes, 16 to a line, as a message for a mismatch.
fn show(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|c| {
            c.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn encode(rec: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    append_frame(rec, &mut out);
    out
}

/// The type codes this version's decoder knows, asked of the decoder itself: every record has
/// at least one field, so an empty body of a known type is too short, and one of an unknown
/// type is skipped as `Unknown`.
fn known_type_codes() -> Vec<u16> {
    (0..=u16::MAX)
        .filter(|&ty| !matches!(Record::decode_body(ty, &[]), Ok(Record::Unknown { .. })))
        .collect()
}

/// The fixed values. Field `k` (counting from 1) of a record holds `0x0kkk` (`0xkk` for a `u8`),
/// so each field's bytes say which field they are and that the low byte comes first; a few
/// fields hold full-width or negative values instead. Strings are short ASCII, lists hold one or
/// two elements whose fields count on from `0xa1`.
fn golden() -> Vec<(Record, &'static str)> {
    vec![
        (
            RunStart {
                pid: 0x0111,
                ppid: 0x0222,
                realtime_ns: 0x0102_0304_0506_0708,
                mono_ns: 0x0444,
                ncpus: 0x0555,
                exe: "/bin/a".into(),
                cmdline: vec!["a".into(), "-x".into()],
                shim_version: "1.0".into(),
            }
            .into(),
            "
                57 53 01 00 3c 00 00 00 79 47 90 46  # tag WS, type 1, body 60 bytes, crc32
                11 01 00 00                          # pid = 0x111
                22 02 00 00                          # ppid = 0x222
                08 07 06 05 04 03 02 01              # realtime_ns = 0x102030405060708
                44 04 00 00 00 00 00 00              # mono_ns = 0x444
                55 05 00 00                          # ncpus = 0x555
                06 00 00 00                          # exe: 6 bytes
                2f 62 69 6e 2f 61                    #   '/bin/a'
                02 00 00 00                          # cmdline: 2 elements
                01 00 00 00                          #   [0]: 1 byte
                61                                   #     'a'
                02 00 00 00                          #   [1]: 2 bytes
                2d 78                                #     '-x'
                03 00 00 00                          # shim_version: 3 bytes
                31 2e 30                             #   '1.0'
            ",
        ),
        (
            Module {
                module_id: 0x0111,
                base: 0x0222,
                build_id: vec![0xb1, 0xb2, 0xb3],
                path: "/l.so".into(),
                segments: vec![Segment {
                    vaddr: 0x0aa1,
                    memsz: 0x0aa2,
                }],
            }
            .into(),
            "
                57 53 02 00 30 00 00 00 b5 b2 46 04  # tag WS, type 2, body 48 bytes, crc32
                11 01 00 00                          # module_id = 0x111
                22 02 00 00 00 00 00 00              # base = 0x222
                03 00 00 00                          # build_id: 3 elements
                b1                                   #   [0] = 0xb1
                b2                                   #   [1] = 0xb2
                b3                                   #   [2] = 0xb3
                05 00 00 00                          # path: 5 bytes
                2f 6c 2e 73 6f                       #   '/l.so'
                01 00 00 00                          # segments: 1 element
                a1 0a 00 00 00 00 00 00              #   [0].vaddr = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [0].memsz = 0xaa2
            ",
        ),
        (
            Chain {
                chain_id: 0x0111,
                frames: vec![0x0401_000a, u64::MAX],
            }
            .into(),
            "
                57 53 03 00 18 00 00 00 6e 95 c5 10  # tag WS, type 3, body 24 bytes, crc32
                11 01 00 00                          # chain_id = 0x111
                02 00 00 00                          # frames: 2 elements
                0a 00 01 04 00 00 00 00              #   [0] = 0x401000a
                ff ff ff ff ff ff ff ff              #   [1] = 0xffffffffffffffff
            ",
        ),
        (
            ThreadStart {
                tid: 0x0111,
                parent_tid: 0x0222,
                ns: 0x0333,
                start_routine: 0x0444,
                chain_id: 0x0555,
                is_main: 0x66,
            }
            .into(),
            "
                57 53 04 00 1d 00 00 00 c8 14 28 d1  # tag WS, type 4, body 29 bytes, crc32
                11 01 00 00                          # tid = 0x111
                22 02 00 00                          # parent_tid = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00 00 00 00 00              # start_routine = 0x444
                55 05 00 00                          # chain_id = 0x555
                66                                   # is_main = 0x66
                00 00 00                             # padding
            ",
        ),
        (
            ThreadName {
                tid: 0x0111,
                ns: 0x0222,
                name: "w1".into(),
            }
            .into(),
            "
                57 53 05 00 12 00 00 00 1d d4 2c ba  # tag WS, type 5, body 18 bytes, crc32
                11 01 00 00                          # tid = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                02 00 00 00                          # name: 2 bytes
                77 31                                #   'w1'
                00 00                                # padding
            ",
        ),
        (
            ThreadExit {
                tid: 0x0111,
                ns: 0x0222,
            }
            .into(),
            "
                57 53 06 00 0c 00 00 00 51 aa ba b4  # tag WS, type 6, body 12 bytes, crc32
                11 01 00 00                          # tid = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
            ",
        ),
        (
            ObjectCreate {
                object_id: 0x0111,
                addr: 0x0222,
                kind: 0x33,
                subtype: 0x0444,
                origin: 0x55,
                ns: 0x0666,
                tid: 0x0777,
                chain_id: 0x0888,
            }
            .into(),
            "
                57 53 07 00 26 00 00 00 ea 80 81 e7  # tag WS, type 7, body 38 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00 00 00 00 00              # addr = 0x222
                33                                   # kind = 0x33
                44 04 00 00                          # subtype = 0x444
                55                                   # origin = 0x55
                66 06 00 00 00 00 00 00              # ns = 0x666
                77 07 00 00                          # tid = 0x777
                88 08 00 00                          # chain_id = 0x888
                00 00                                # padding
            ",
        ),
        (
            ObjectName {
                object_id: 0x0111,
                name: "q".into(),
            }
            .into(),
            "
                57 53 08 00 0d 00 00 00 d2 2c 41 29  # tag WS, type 8, body 13 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                01 00 00 00                          # name: 1 byte
                71                                   #   'q'
                00 00 00                             # padding
            ",
        ),
        (
            ObjectDestroy {
                object_id: 0x0111,
                ns: 0x0222,
                tid: 0x0333,
            }
            .into(),
            "
                57 53 09 00 14 00 00 00 f0 d1 48 15  # tag WS, type 9, body 20 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                33 03 00 00                          # tid = 0x333
            ",
        ),
        (
            Counters {
                object_id: 0x0111,
                ns: 0x0222,
                acquisitions: 0x0333,
                contended: 0x0444,
                owner_changes: 0x0555,
                busy: 0x0666,
                timeouts: 0x0777,
                errors: 0x0888,
                wait_total_ns: 0x0999,
                wait_max_ns: 0x0aaa,
                hold_total_ns: 0x0bbb,
                hold_max_ns: 0x0ccc,
                hold_samples: 0x0ddd,
                max_waiters: 0x0eee,
            }
            .into(),
            "
                57 53 0a 00 6c 00 00 00 46 b8 f3 ff  # tag WS, type 10, body 108 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                33 03 00 00 00 00 00 00              # acquisitions = 0x333
                44 04 00 00 00 00 00 00              # contended = 0x444
                55 05 00 00 00 00 00 00              # owner_changes = 0x555
                66 06 00 00 00 00 00 00              # busy = 0x666
                77 07 00 00 00 00 00 00              # timeouts = 0x777
                88 08 00 00 00 00 00 00              # errors = 0x888
                99 09 00 00 00 00 00 00              # wait_total_ns = 0x999
                aa 0a 00 00 00 00 00 00              # wait_max_ns = 0xaaa
                bb 0b 00 00 00 00 00 00              # hold_total_ns = 0xbbb
                cc 0c 00 00 00 00 00 00              # hold_max_ns = 0xccc
                dd 0d 00 00 00 00 00 00              # hold_samples = 0xddd
                ee 0e 00 00                          # max_waiters = 0xeee
            ",
        ),
        (
            WaitSite {
                object_id: 0x0111,
                chain_id: 0x0222,
                count: 0x0333,
                wait_total_ns: 0x0444,
                wait_max_ns: 0x0555,
            }
            .into(),
            "
                57 53 0b 00 24 00 00 00 0d 07 19 f4  # tag WS, type 11, body 36 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00                          # chain_id = 0x222
                33 03 00 00 00 00 00 00              # count = 0x333
                44 04 00 00 00 00 00 00              # wait_total_ns = 0x444
                55 05 00 00 00 00 00 00              # wait_max_ns = 0x555
            ",
        ),
        (
            ContentionOpen {
                record_id: 0x0111,
                object_id: 0x0222,
                ns: 0x0333,
                level: 0x0444,
                reason: 0x55,
                holder_tid: 0x0666,
                waiter_tid: 0x0777,
                waiter_chain: 0x0888,
            }
            .into(),
            "
                57 53 0c 00 29 00 00 00 82 69 ec 8b  # tag WS, type 12, body 41 bytes, crc32
                11 01 00 00 00 00 00 00              # record_id = 0x111
                22 02 00 00 00 00 00 00              # object_id = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00                          # level = 0x444
                55                                   # reason = 0x55
                66 06 00 00                          # holder_tid = 0x666
                77 07 00 00                          # waiter_tid = 0x777
                88 08 00 00                          # waiter_chain = 0x888
                00 00 00                             # padding
            ",
        ),
        (
            ContentionClose {
                record_id: 0x0111,
                object_id: 0x0222,
                ns: 0x0333,
                level: 0x0444,
                elapsed_ns: 0x0555,
                threads_tried: 0x0666,
                holder_tid: 0x0777,
                holder_chain: 0x0888,
                waiters: vec![WaiterRef {
                    tid: 0x0aa1,
                    chain_id: 0x0aa2,
                    wait_ns: 0x0aa3,
                }],
                waiters_total: 0x0aaa,
                coalesced: 0x0bbb,
            }
            .into(),
            "
                57 53 0d 00 4c 00 00 00 f6 96 0e bd  # tag WS, type 13, body 76 bytes, crc32
                11 01 00 00 00 00 00 00              # record_id = 0x111
                22 02 00 00 00 00 00 00              # object_id = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00                          # level = 0x444
                55 05 00 00 00 00 00 00              # elapsed_ns = 0x555
                66 06 00 00                          # threads_tried = 0x666
                77 07 00 00                          # holder_tid = 0x777
                88 08 00 00                          # holder_chain = 0x888
                01 00 00 00                          # waiters: 1 element
                a1 0a 00 00                          #   [0].tid = 0xaa1
                a2 0a 00 00                          #   [0].chain_id = 0xaa2
                a3 0a 00 00 00 00 00 00              #   [0].wait_ns = 0xaa3
                aa 0a 00 00                          # waiters_total = 0xaaa
                bb 0b 00 00                          # coalesced = 0xbbb
            ",
        ),
        (
            Highwater {
                ns: 0x0111,
                hwm: 0x0222,
                object_id: 0x0333,
                tid: 0x0444,
            }
            .into(),
            "
                57 53 0e 00 18 00 00 00 be a9 ce 13  # tag WS, type 14, body 24 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                22 02 00 00                          # hwm = 0x222
                33 03 00 00 00 00 00 00              # object_id = 0x333
                44 04 00 00                          # tid = 0x444
            ",
        ),
        (
            Deadlock {
                ns: 0x0111,
                detected_by: 0x0222,
                cycle: vec![
                    DeadlockEdge {
                        tid: 0x0aa1,
                        object_id: 0x0aa2,
                        wait_chain: 0x0aa3,
                        holder_tid: 0x0aa4,
                    },
                    DeadlockEdge {
                        tid: 0x0ab1,
                        object_id: 0x0ab2,
                        wait_chain: 0x0ab3,
                        holder_tid: 0x0ab4,
                    },
                ],
            }
            .into(),
            "
                57 53 0f 00 38 00 00 00 f9 ea da 7c  # tag WS, type 15, body 56 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                22 02 00 00                          # detected_by = 0x222
                02 00 00 00                          # cycle: 2 elements
                a1 0a 00 00                          #   [0].tid = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [0].object_id = 0xaa2
                a3 0a 00 00                          #   [0].wait_chain = 0xaa3
                a4 0a 00 00                          #   [0].holder_tid = 0xaa4
                b1 0a 00 00                          #   [1].tid = 0xab1
                b2 0a 00 00 00 00 00 00              #   [1].object_id = 0xab2
                b3 0a 00 00                          #   [1].wait_chain = 0xab3
                b4 0a 00 00                          #   [1].holder_tid = 0xab4
            ",
        ),
        (
            RunEnd {
                ns: 0x0111,
                reason: 0x22,
                exit_status: -6,
                hwm: 0x0444,
                dropped: 0x0555,
            }
            .into(),
            "
                57 53 10 00 1d 00 00 00 7e e2 c4 8d  # tag WS, type 16, body 29 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                22                                   # reason = 0x22
                fa ff ff ff ff ff ff ff              # exit_status = -6
                44 04 00 00                          # hwm = 0x444
                55 05 00 00 00 00 00 00              # dropped = 0x555
                00 00 00                             # padding
            ",
        ),
        (
            Note {
                ns: 0x0111,
                level: 0x22,
                text: "hi".into(),
            }
            .into(),
            "
                57 53 11 00 0f 00 00 00 0b d6 93 3a  # tag WS, type 17, body 15 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                22                                   # level = 0x22
                02 00 00 00                          # text: 2 bytes
                68 69                                #   'hi'
                00                                   # padding
            ",
        ),
        (
            KindCounters {
                object_id: 0x0111,
                ns: 0x0222,
                values: vec![
                    CounterValue {
                        key: 0x0aa1,
                        value: 0x0aa2,
                    },
                    CounterValue {
                        key: 0x0ab1,
                        value: 0x0ab2,
                    },
                ],
            }
            .into(),
            "
                57 53 12 00 28 00 00 00 26 2c 6b 18  # tag WS, type 18, body 40 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                02 00 00 00                          # values: 2 elements
                a1 0a                                #   [0].key = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [0].value = 0xaa2
                b1 0a                                #   [1].key = 0xab1
                b2 0a 00 00 00 00 00 00              #   [1].value = 0xab2
            ",
        ),
        (
            LockOrder {
                from_object: 0x0111,
                to_object: 0x0222,
                tid: 0x0333,
                chain_id: 0x0444,
                ns: 0x0555,
            }
            .into(),
            "
                57 53 13 00 20 00 00 00 2e 7e a0 54  # tag WS, type 19, body 32 bytes, crc32
                11 01 00 00 00 00 00 00              # from_object = 0x111
                22 02 00 00 00 00 00 00              # to_object = 0x222
                33 03 00 00                          # tid = 0x333
                44 04 00 00                          # chain_id = 0x444
                55 05 00 00 00 00 00 00              # ns = 0x555
            ",
        ),
        (
            PolicyVersion {
                version: 0x0111,
                ns: 0x0222,
                source: "p".into(),
                text: "{}".into(),
                rules: vec!["r".into()],
            }
            .into(),
            "
                57 53 14 00 20 00 00 00 54 74 83 3d  # tag WS, type 20, body 32 bytes, crc32
                11 01 00 00                          # version = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                01 00 00 00                          # source: 1 byte
                70                                   #   'p'
                02 00 00 00                          # text: 2 bytes
                7b 7d                                #   '{}'
                01 00 00 00                          # rules: 1 element
                01 00 00 00                          #   [0]: 1 byte
                72                                   #     'r'
            ",
        ),
        (
            RuleStats {
                version: 0x0111,
                rule: 0x0222,
                ns: 0x0333,
                requests: 0x0444,
                acted: 0x0555,
                suppressed: 0x0666,
            }
            .into(),
            "
                57 53 15 00 28 00 00 00 b5 2f 51 f9  # tag WS, type 21, body 40 bytes, crc32
                11 01 00 00                          # version = 0x111
                22 02 00 00                          # rule = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00 00 00 00 00              # requests = 0x444
                55 05 00 00 00 00 00 00              # acted = 0x555
                66 06 00 00 00 00 00 00              # suppressed = 0x666
            ",
        ),
        (
            WaitEvent {
                object_id: 0x0111,
                tid: 0x0222,
                ns: 0x0333,
                wait_ns: 0x0444,
                waiters: 0x0555,
                reason: 0x0666,
                version: 0x0777,
                rule: 0x0888,
                chain_id: 0x0999,
            }
            .into(),
            "
                57 53 16 00 2e 00 00 00 7c 4f a7 be  # tag WS, type 22, body 46 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00                          # tid = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00 00 00 00 00              # wait_ns = 0x444
                55 05 00 00                          # waiters = 0x555
                66 06                                # reason = 0x666
                77 07 00 00                          # version = 0x777
                88 08 00 00                          # rule = 0x888
                99 09 00 00                          # chain_id = 0x999
                00 00                                # padding
            ",
        ),
        (
            WaiterChains {
                object_id: 0x0111,
                ns: 0x0222,
                version: 0x0333,
                rule: 0x0444,
                waiters: vec![WaiterRef {
                    tid: 0x0aa1,
                    chain_id: 0x0aa2,
                    wait_ns: 0x0aa3,
                }],
            }
            .into(),
            "
                57 53 17 00 2c 00 00 00 fd c9 25 cc  # tag WS, type 23, body 44 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                33 03 00 00                          # version = 0x333
                44 04 00 00                          # rule = 0x444
                01 00 00 00                          # waiters: 1 element
                a1 0a 00 00                          #   [0].tid = 0xaa1
                a2 0a 00 00                          #   [0].chain_id = 0xaa2
                a3 0a 00 00 00 00 00 00              #   [0].wait_ns = 0xaa3
            ",
        ),
        (
            HolderStack {
                object_id: 0x0111,
                ns: 0x0222,
                holder_tid: 0x0333,
                waiter_tid: 0x0444,
                version: 0x0555,
                rule: 0x0666,
                live: 0x77,
                chain_id: 0x0888,
            }
            .into(),
            "
                57 53 18 00 25 00 00 00 4c 0e 15 d2  # tag WS, type 24, body 37 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                33 03 00 00                          # holder_tid = 0x333
                44 04 00 00                          # waiter_tid = 0x444
                55 05 00 00                          # version = 0x555
                66 06 00 00                          # rule = 0x666
                77                                   # live = 0x77
                88 08 00 00                          # chain_id = 0x888
                00 00 00                             # padding
            ",
        ),
        (
            Snapshot {
                seq: 0x0111,
                ns: 0x0222,
                source: 0x33,
                requester_pid: 0x0444,
            }
            .into(),
            "
                57 53 19 00 15 00 00 00 43 a6 9f 95  # tag WS, type 25, body 21 bytes, crc32
                11 01 00 00 00 00 00 00              # seq = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                33                                   # source = 0x33
                44 04 00 00                          # requester_pid = 0x444
                00 00 00                             # padding
            ",
        ),
        (
            ObjectsChurned {
                kind: 0x11,
                chain_id: 0x0222,
                ns: 0x0333,
                count: 0x0444,
                acquisitions: 0x0555,
                lifetime_total_ns: 0x0666,
                lifetime_max_ns: 0x0777,
                counters: vec![CounterValue {
                    key: 0x0aa1,
                    value: 0x0aa2,
                }],
            }
            .into(),
            "
                57 53 1a 00 3b 00 00 00 4f 8a 55 0f  # tag WS, type 26, body 59 bytes, crc32
                11                                   # kind = 0x11
                22 02 00 00                          # chain_id = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00 00 00 00 00              # count = 0x444
                55 05 00 00 00 00 00 00              # acquisitions = 0x555
                66 06 00 00 00 00 00 00              # lifetime_total_ns = 0x666
                77 07 00 00 00 00 00 00              # lifetime_max_ns = 0x777
                01 00 00 00                          # counters: 1 element
                a1 0a                                #   [0].key = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [0].value = 0xaa2
                00                                   # padding
            ",
        ),
        (
            WaitEventReason {
                object_id: 0x0111,
                tid: 0x0222,
                ns: 0x0333,
                version: 0x0444,
                rule: 0x0555,
                from: 0x0666,
                to: 0x0777,
            }
            .into(),
            "
                57 53 1b 00 20 00 00 00 62 81 73 38  # tag WS, type 27, body 32 bytes, crc32
                11 01 00 00 00 00 00 00              # object_id = 0x111
                22 02 00 00                          # tid = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00                          # version = 0x444
                55 05 00 00                          # rule = 0x555
                66 06                                # from = 0x666
                77 07                                # to = 0x777
            ",
        ),
        (
            DeadlockBroken {
                deadlock_ns: 0x0111,
                tid: 0x0222,
                ns: 0x0333,
                outcome: 0x0444,
            }
            .into(),
            "
                57 53 1c 00 16 00 00 00 ab d3 b9 41  # tag WS, type 28, body 22 bytes, crc32
                11 01 00 00 00 00 00 00              # deadlock_ns = 0x111
                22 02 00 00                          # tid = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04                                # outcome = 0x444
                00 00                                # padding
            ",
        ),
        (
            Exec {
                ns: 0x0111,
                path: "/bin/b".into(),
            }
            .into(),
            "
                57 53 1d 00 12 00 00 00 93 55 a5 8a  # tag WS, type 29, body 18 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                06 00 00 00                          # path: 6 bytes
                2f 62 69 6e 2f 62                    #   '/bin/b'
                00 00                                # padding
            ",
        ),
        (
            ObjectsQuiet {
                kind: 0x11,
                chain_id: 0x0222,
                ns: 0x0333,
                count: 0x0444,
                acquisitions: 0x0555,
                owner_changes: 0x0666,
                counters: vec![CounterValue {
                    key: 0x0aa1,
                    value: 0x0aa2,
                }],
            }
            .into(),
            "
                57 53 1e 00 33 00 00 00 d4 ff bc 33  # tag WS, type 30, body 51 bytes, crc32
                11                                   # kind = 0x11
                22 02 00 00                          # chain_id = 0x222
                33 03 00 00 00 00 00 00              # ns = 0x333
                44 04 00 00 00 00 00 00              # count = 0x444
                55 05 00 00 00 00 00 00              # acquisitions = 0x555
                66 06 00 00 00 00 00 00              # owner_changes = 0x666
                01 00 00 00                          # counters: 1 element
                a1 0a                                #   [0].key = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [0].value = 0xaa2
                00                                   # padding
            ",
        ),
        (
            OpenWaits {
                ns: 0x0111,
                waits: vec![OpenWait {
                    tid: 0x0aa1,
                    object_id: 0x0aa2,
                    since_ns: 0x0aa3,
                    chain_id: 0x0aa4,
                    holder_tid: 0x0aa5,
                }],
            }
            .into(),
            "
                57 53 1f 00 28 00 00 00 40 1b 54 d8  # tag WS, type 31, body 40 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                01 00 00 00                          # waits: 1 element
                a1 0a 00 00                          #   [0].tid = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [0].object_id = 0xaa2
                a3 0a 00 00 00 00 00 00              #   [0].since_ns = 0xaa3
                a4 0a 00 00                          #   [0].chain_id = 0xaa4
                a5 0a 00 00                          #   [0].holder_tid = 0xaa5
            ",
        ),
        (
            ThreadSamples {
                ns: 0x0111,
                interval_ns: 0x0222,
                threads: vec![ThreadState {
                    tid: 0x0aa1,
                    state: 0xa2,
                    waiting_kind: 0xa3,
                    on_cpu_ns: 0x0aa4,
                    run_delay_ns: 0x0aa5,
                    timeslices: 0x0aa6,
                    syscall: -1,
                    arg0: 0x0aa8,
                    what: "fd".into(),
                    object_id: 0x0aaa,
                }],
                unsampled: 0x0444,
            }
            .into(),
            "
                57 53 20 00 4c 00 00 00 f4 a2 fb 03  # tag WS, type 32, body 76 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                22 02 00 00 00 00 00 00              # interval_ns = 0x222
                01 00 00 00                          # threads: 1 element
                a1 0a 00 00                          #   [0].tid = 0xaa1
                a2                                   #   [0].state = 0xa2
                a3                                   #   [0].waiting_kind = 0xa3
                a4 0a 00 00 00 00 00 00              #   [0].on_cpu_ns = 0xaa4
                a5 0a 00 00 00 00 00 00              #   [0].run_delay_ns = 0xaa5
                a6 0a 00 00                          #   [0].timeslices = 0xaa6
                ff ff ff ff                          #   [0].syscall = -1
                a8 0a 00 00 00 00 00 00              #   [0].arg0 = 0xaa8
                02 00 00 00                          #   [0].what: 2 bytes
                66 64                                #     'fd'
                aa 0a 00 00 00 00 00 00              #   [0].object_id = 0xaaa
                44 04 00 00                          # unsampled = 0x444
            ",
        ),
        (
            CpuSample {
                ns: 0x0111,
                idle_ns: vec![0x0aa1, 0x0aa2],
                iowait_ns: vec![0x0ab1, 0x0ab2],
            }
            .into(),
            "
                57 53 21 00 30 00 00 00 c6 88 eb c9  # tag WS, type 33, body 48 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                02 00 00 00                          # idle_ns: 2 elements
                a1 0a 00 00 00 00 00 00              #   [0] = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [1] = 0xaa2
                02 00 00 00                          # iowait_ns: 2 elements
                b1 0a 00 00 00 00 00 00              #   [0] = 0xab1
                b2 0a 00 00 00 00 00 00              #   [1] = 0xab2
            ",
        ),
        (
            WaitEvents {
                tid: 0x0111,
                base_ns: 0x0222,
                dropped: 0x0333,
                keep_ns: 0x0444,
                count: 1,
                events: vec![0x0a, 0xac, 0x02, 0x06, 0x04, 0x02, 0x03],
            }
            .into(),
            // The one event, field by field (`events.rs`): LEB128 varints, deltas from base_ns.
            "
                57 53 22 00 2b 00 00 00 8f 33 23 41  # tag WS, type 34, body 43 bytes, crc32
                11 01 00 00                          # tid = 0x111
                22 02 00 00 00 00 00 00              # base_ns = 0x222
                33 03 00 00 00 00 00 00              # dropped = 0x333
                44 04 00 00 00 00 00 00              # keep_ns = 0x444
                01 00 00 00                          # count = 1
                07 00 00 00                          # events: 7 bytes
                0a                                   #   begin: zigzag(+5) = 10, at 0x227
                ac 02                                #   length 300 ns (0x2c | 0x80, 0x02)
                06                                   #   object: zigzag(+3) = 6, id 3
                04                                   #   chain: zigzag(+2) = 4, id 2
                02                                   #   reason 1 (acquired) << 1, not shared
                03                                   #   waker: zigzag(0x112 - 0x111) + 1 = 3
                00                                   # 12 + 43 = 55: one byte of padding
            ",
        ),
        (
            ThreadTotals {
                tid: 0x0111,
                ns: 0x0222,
                on_cpu_ns: 0x0333,
                run_delay_ns: 0x0444,
                timeslices: 0x0555,
                voluntary: 0x0666,
                involuntary: 0x0777,
            }
            .into(),
            "
                57 53 24 00 34 00 00 00 54 13 66 52  # tag WS, type 36, body 52 bytes, crc32
                11 01 00 00                          # tid = 0x111
                22 02 00 00 00 00 00 00              # ns = 0x222
                33 03 00 00 00 00 00 00              # on_cpu_ns = 0x333
                44 04 00 00 00 00 00 00              # run_delay_ns = 0x444
                55 05 00 00 00 00 00 00              # timeslices = 0x555
                66 06 00 00 00 00 00 00              # voluntary = 0x666
                77 07 00 00 00 00 00 00              # involuntary = 0x777
            ",
        ),
        (
            ThreadSwitches {
                ns: 0x0111,
                threads: vec![SwitchCount {
                    tid: 0x0aa1,
                    voluntary: 0x0aa2,
                    involuntary: 0x0aa3,
                    longest_slice_ns: 0x0aa4,
                }],
            }
            .into(),
            "
                57 53 25 00 28 00 00 00 80 76 dc 70  # tag WS, type 37, body 40 bytes, crc32
                11 01 00 00 00 00 00 00              # ns = 0x111
                01 00 00 00                          # threads: 1 element
                a1 0a 00 00                          #   [0].tid = 0xaa1
                a2 0a 00 00 00 00 00 00              #   [0].voluntary = 0xaa2
                a3 0a 00 00 00 00 00 00              #   [0].involuntary = 0xaa3
                a4 0a 00 00 00 00 00 00              #   [0].longest_slice_ns = 0xaa4
            ",
        ),
        (
            ShimCost {
                ns: 0x0112,
                thread_cpu_ns: 0x0bb1,
                tasks: vec![TaskCost {
                    task: 2,
                    runs: 0x0bb2,
                    cpu_ns: 0x0bb3,
                }],
            }
            .into(),
            "
                57 53 26 00 25 00 00 00 e1 00 52 6c  # tag WS, type 38, body 37 bytes, crc32
                12 01 00 00 00 00 00 00              # ns = 0x112
                b1 0b 00 00 00 00 00 00              # thread_cpu_ns = 0xbb1
                01 00 00 00                          # tasks: 1 element
                02                                   #   [0].task = 2 (sampler)
                b2 0b 00 00 00 00 00 00              #   [0].runs = 0xbb2
                b3 0b 00 00 00 00 00 00              #   [0].cpu_ns = 0xbb3
                00 00 00                             # padding to 4 bytes
            ",
        ),
        (
            BlockedChain {
                tid: 0x0cc1,
                ns: 0x0113,
                since_ns: 0x0114,
                syscall: 232,
                arg0: 0x0cc2,
                version: 1,
                rule: 2,
                chain_id: 0x0cc3,
            }
            .into(),
            "
                57 53 27 00 2c 00 00 00 ba 8b d4 fb  # tag WS, type 39, body 44 bytes, crc32
                c1 0c 00 00                          # tid = 0xcc1
                13 01 00 00 00 00 00 00              # ns = 0x113
                14 01 00 00 00 00 00 00              # since_ns = 0x114
                e8 00 00 00                          # syscall = 232 (epoll_wait)
                c2 0c 00 00 00 00 00 00              # arg0 = 0xcc2
                01 00 00 00                          # version = 1
                02 00 00 00                          # rule = 2
                c3 0c 00 00                          # chain_id = 0xcc3
            ",
        ),
        (
            ProgressPoint {
                id: 1,
                ns: 0x0115,
                name: "served".into(),
            }
            .into(),
            "
                57 53 28 00 16 00 00 00 57 99 5e 66  # tag WS, type 40, body 22 bytes, crc32
                01 00 00 00                          # id = 1
                15 01 00 00 00 00 00 00              # ns = 0x115
                06 00 00 00 73 65 72 76 65 64        # name = \"served\"
                00 00                                # padding to 4 bytes
            ",
        ),
        (
            ProgressCounts {
                ns: 0x0116,
                points: vec![ProgressCount {
                    id: 1,
                    visits: 0x0dd1,
                    first_ns: 0x0dd2,
                    last_ns: 0x0dd3,
                    first_begin_ns: 0x0dd4,
                    begins: 0x0dd5,
                    ends: 0x0dd6,
                    begins_sum: 0x0dd7,
                    ends_sum: 0x0dd8,
                }],
            }
            .into(),
            "
                57 53 29 00 50 00 00 00 f8 75 64 11  # tag WS, type 41, body 80 bytes, crc32
                16 01 00 00 00 00 00 00              # ns = 0x116
                01 00 00 00                          # points: 1 element
                01 00 00 00                          #   [0].id = 1
                d1 0d 00 00 00 00 00 00              #   [0].visits = 0xdd1
                d2 0d 00 00 00 00 00 00              #   [0].first_ns = 0xdd2
                d3 0d 00 00 00 00 00 00              #   [0].last_ns = 0xdd3
                d4 0d 00 00 00 00 00 00              #   [0].first_begin_ns = 0xdd4
                d5 0d 00 00 00 00 00 00              #   [0].begins = 0xdd5
                d6 0d 00 00 00 00 00 00              #   [0].ends = 0xdd6
                d7 0d 00 00 00 00 00 00              #   [0].begins_sum = 0xdd7
                d8 0d 00 00 00 00 00 00              #   [0].ends_sum = 0xdd8
            ",
        ),
        (
            DelayRule {
                rule: 2,
                site: "t".into(),
                delay_ns: 20_000,
            }
            .into(),
            "
                57 53 2a 00 11 00 00 00 88 9e f3 00  # tag WS, type 42, body 17 bytes, crc32
                02 00 00 00                          # rule = 2
                01 00 00 00                          # site: 1 byte
                74                                   #   't'
                20 4e 00 00 00 00 00 00              # delay_ns = 20000
                00 00 00                             # padding
            ",
        ),
        (
            Delayed {
                object_id: 0x0dd1,
                rule: 2,
                ns: 0x0115,
                sections: 0x0190,
                total_ns: 0x0dd2,
            }
            .into(),
            "
                57 53 2b 00 24 00 00 00 b9 56 5b 95  # tag WS, type 43, body 36 bytes, crc32
                d1 0d 00 00 00 00 00 00              # object_id = 0xdd1
                02 00 00 00                          # rule = 2
                15 01 00 00 00 00 00 00              # ns = 0x115
                90 01 00 00 00 00 00 00              # sections = 400
                d2 0d 00 00 00 00 00 00              # total_ns = 0xdd2
            ",
        ),
        (
            ThreadYields {
                ns: 0x0116,
                threads: vec![YieldCount {
                    tid: 0x29,
                    yields: 0x030d40,
                }],
                sites: vec![YieldSite {
                    tid: 0x29,
                    ret: 0x1234,
                    yields: 0x030d40,
                }],
            }
            .into(),
            "
                57 53 2c 00 30 00 00 00 40 f8 91 b9  # tag WS, type 44, body 48 bytes, crc32
                16 01 00 00 00 00 00 00              # ns = 0x116
                01 00 00 00                          # threads: 1
                29 00 00 00                          #   tid = 41
                40 0d 03 00 00 00 00 00              #   yields = 200000
                01 00 00 00                          # sites: 1
                29 00 00 00                          #   tid = 41
                34 12 00 00 00 00 00 00              #   ret = 0x1234
                40 0d 03 00 00 00 00 00              #   yields = 200000
            ",
        ),
    ]
}

#[test]
fn every_record_type_has_a_golden_frame() {
    let mut codes: Vec<u16> = golden().iter().map(|(r, _)| r.type_id()).collect();
    codes.sort_unstable();
    let n = codes.len();
    codes.dedup();
    assert_eq!(codes.len(), n, "one golden frame per type");
    assert_eq!(
        codes,
        known_type_codes(),
        "a record type without a golden frame (or a golden frame of a type that is gone)"
    );
}

#[test]
fn encoding_matches_the_golden_bytes() {
    let mut wrong = Vec::new();
    for (rec, golden) in golden() {
        let want = hex(golden);
        let got = encode(&rec);
        if got != want {
            wrong.push(format!(
                "{rec:?}\nencodes as\n{}\nnot as the golden\n{}",
                show(&got),
                show(&want)
            ));
        }
        assert_eq!(frame_len(&rec), want.len(), "frame_len of {rec:?}");
    }
    assert!(
        wrong.is_empty(),
        "the wire format changed:\n\n{}",
        wrong.join("\n\n")
    );
}

#[test]
fn golden_bytes_decode_to_their_values() {
    let mut log = file_header().to_vec();
    for (rec, golden) in golden() {
        let bytes = hex(golden);
        let len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        let body = &bytes[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len];
        assert_eq!(
            Record::decode_body(rec.type_id(), body),
            Ok(rec.clone()),
            "the body alone"
        );
        log.extend(&bytes);
    }
    // And all of them in one log, through the reader: each frame where the one before ended.
    let mut rd = FrameReader::new(&log[..]).expect("a log");
    let mut offset = FILE_HEADER_LEN as u64;
    for (rec, golden) in golden() {
        let len = hex(golden).len() as u64;
        let item = rd.next_item().unwrap();
        assert_eq!(
            item,
            Some(Item::Record {
                offset,
                len,
                record: rec
            })
        );
        offset += len;
    }
    assert_eq!(rd.next_item().unwrap(), None);
    assert_eq!(rd.ending(), Ending::Clean);
}

/// Each literal is a frame in itself, whatever the encoder does: the tag, the record's type, a
/// body length that matches the bytes, a checksum that matches the body, and zero padding to a
/// multiple of 4.
#[test]
fn golden_frames_are_well_formed() {
    for (rec, golden) in golden() {
        let b = hex(golden);
        assert!(
            b.len() >= FRAME_HEADER_LEN && b.len().is_multiple_of(4),
            "{rec:?}"
        );
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), FRAME_TAG, "{rec:?}");
        let ty = u16::from_le_bytes([b[2], b[3]]);
        assert_eq!(ty, rec.type_id(), "{rec:?}");
        let len = u32::from_le_bytes(b[4..8].try_into().unwrap());
        let body_end = FRAME_HEADER_LEN + len as usize;
        assert!(b.len() - body_end < 4, "{rec:?}: length or padding");
        assert!(b[body_end..].iter().all(|&x| x == 0), "{rec:?}: padding");
        let mut h = crc32fast::Hasher::new();
        h.update(&ty.to_le_bytes());
        h.update(&len.to_le_bytes());
        h.update(&b[FRAME_HEADER_LEN..body_end]);
        let crc = u32::from_le_bytes(b[8..12].try_into().unwrap());
        assert_eq!(crc, h.finalize(), "{rec:?}: checksum");
    }
}

/// The file header: magic, major version, and 4 zero bytes fixed; the minor version is whatever
/// this version writes (it rises when types or fields are added, and readers accept any).
#[test]
fn file_header_golden_bytes() {
    let header = file_header();
    assert_eq!(header.len(), FILE_HEADER_LEN);
    let want = hex("
        57 41 49 54 53 48 49 4d  # WAITSHIM
        01 00                    # major version 1
    ");
    assert_eq!(header[..10], want[..]);
    assert_eq!(header[10..12], VERSION_MINOR.to_le_bytes());
    assert_eq!(header[12..], [0, 0, 0, 0]);
}
