//! The Perfetto trace's compact encoding read back with Perfetto's own schema (`protoc
//! --decode`): timestamps on the sequence's incremental clock (each the difference from the
//! packet before, from a clock snapshot), small track uuids, interned strings. Rebuilt from
//! the differences, the waits have the very begins and ends the Chrome trace gives them.

use std::collections::BTreeMap;

use serde_json::Value;
use waitshim_tests::{export_beside, perfetto_decode, perfetto_packets, run_both};

fn field<'a>(p: &[&'a str], key: &str) -> Option<&'a str> {
    p.iter().find_map(|l| l.strip_prefix(key))
}

/// The slices of the trace named `name`: (track uuid, begin ns, end ns), times rebuilt from the
/// incremental clock.
fn slices_named(text: &str, name: &str) -> Vec<(u64, u64, u64)> {
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    // Per track, the slices open on it: (name iid, begin).
    let mut open: BTreeMap<u64, Vec<(Option<u64>, u64)>> = BTreeMap::new();
    let mut out = Vec::new();
    for packet in perfetto_packets(text) {
        let p = &packet.lines;
        // Interned event names: `iid: N` followed by `name: "..."`.
        for (i, l) in p.iter().enumerate() {
            if *l == "event_names {" {
                let iid = field(&p[i + 1..i + 2], "iid: ").expect("iid");
                let n = field(&p[i + 2..i + 3], "name: ").expect("name");
                names.insert(iid.parse().unwrap(), n.trim_matches('"').to_string());
            }
        }
        let Some(ts) = packet.ts else {
            continue;
        };
        let Some(track) = field(p, "track_uuid: ") else {
            continue;
        };
        let track: u64 = track.parse().unwrap();
        // The event's own name: after its arguments' (which have name_iids too).
        let iid = p
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("name_iid: "))
            .map(|v| v.parse::<u64>().unwrap());
        match field(p, "type: ") {
            Some("TYPE_SLICE_BEGIN") => open.entry(track).or_default().push((iid, ts)),
            Some("TYPE_SLICE_END") => {
                let (iid, begin) = open
                    .get_mut(&track)
                    .and_then(Vec::pop)
                    .expect("an end closes a slice begun on its track");
                assert!(ts >= begin, "a slice ends before it begins: {begin} {ts}");
                if iid.and_then(|i| names.get(&i)).is_some_and(|n| n == name) {
                    out.push((track, begin, ts));
                }
            }
            _ => {}
        }
    }
    assert!(
        open.values().all(Vec::is_empty),
        "every slice ends: {open:?}"
    );
    out
}

#[test]
fn perfetto_delta_timestamps_give_the_waits_the_chrome_trace_gives() {
    let run = run_both("convoy", &[]);
    let log = run.single_log();
    let text = perfetto_decode(&export_beside(log, "perfetto", "convoy.pftrace"));
    // The encoding: one clock snapshot, the incremental clock as the sequence's default.
    assert_eq!(text.matches("clock_snapshot {").count(), 1, "{text}");
    assert!(text.contains("timestamp_clock_id: 64"), "{text}");
    assert!(text.contains("is_incremental: true"), "{text}");
    assert!(!text.contains("sequence_flags: 2"), "no per-packet flag");
    // Chrome's waits (microseconds with ns digits, from the run's start): their lengths in ns.
    let chrome = export_beside(log, "chrome", "convoy.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(chrome).unwrap()).unwrap();
    let ns = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as i64;
    let mut chrome_waits: Vec<(i64, i64)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "wait" && e["name"] == "Wait: lock")
        .map(|e| (ns(&e["ts"]), ns(&e["dur"])))
        .collect();
    chrome_waits.sort_unstable();
    // Perfetto's, on the threads' own tracks (the states tracks have them too, exact: each
    // twice then), from the first one's begin.
    let mut lens: BTreeMap<i64, usize> = BTreeMap::new();
    let all = slices_named(&text, "Wait: lock");
    for &(_, b, e) in &all {
        *lens.entry((e - b) as i64).or_default() += 1;
    }
    assert!(chrome_waits.len() >= 7, "{chrome_waits:?}");
    for &(_, dur) in &chrome_waits {
        assert!(
            lens.get(&dur).is_some_and(|&n| n >= 2),
            "a wait of {dur} ns in chrome is not twice in perfetto (thread and states \
             tracks): {lens:?}"
        );
    }
    // Their begins, relative to the earliest, agree to the nanosecond.
    let mut begins: Vec<u64> = all.iter().map(|&(_, b, _)| b).collect();
    begins.sort_unstable();
    begins.dedup();
    let first = chrome_waits[0].0;
    let rel: Vec<i64> = chrome_waits.iter().map(|&(t, _)| t - first).collect();
    let mut want: Vec<i64> = begins.iter().map(|&b| (b - begins[0]) as i64).collect();
    want.retain(|r| rel.contains(r));
    assert_eq!(want.len(), rel.len(), "begins {begins:?} against {rel:?}");
}

/// The packets of a trace file: each top-level `Trace.packet` (field 1) as its bytes.
fn raw_packets(bytes: &[u8]) -> Vec<&[u8]> {
    fn varint(b: &[u8], at: &mut usize) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = b[*at];
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
        }
        v
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        assert_eq!(
            varint(bytes, &mut at),
            (1 << 3) | 2,
            "Trace.packet, length-delimited"
        );
        let len = varint(bytes, &mut at) as usize;
        out.push(&bytes[at..at + len]);
        at += len;
    }
    out
}

#[test]
fn a_compressed_perfetto_trace_holds_the_same_packets_deflated() {
    let run = run_both("cond_queue", &[]);
    let log = run.single_log();
    let plain = export_beside(log, "perfetto", "plain.pftrace");
    let packed = log.with_file_name("packed.pftrace");
    let o = std::process::Command::new(waitshim_tests::analyzer_path())
        .args(["export", "--format", "perfetto", "--compress", "-o"])
        .arg(&packed)
        .arg(log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Perfetto's schema knows the field: no bare field numbers.
    let text = perfetto_decode(&packed);
    assert!(text.contains("compressed_packets: "), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())),
        "unknown fields"
    );
    // Each packet is one field 50 (bytes: tag 0x92 0x03), zlib; inflated and put together,
    // they are the plain export, byte for byte.
    let bytes = std::fs::read(&packed).unwrap();
    let mut inner = Vec::new();
    for p in raw_packets(&bytes) {
        assert_eq!(&p[..2], &[0x92, 0x03], "a compressed_packets field");
        let mut at = 2;
        let mut len = 0usize;
        for shift in (0..64).step_by(7) {
            let b = p[at];
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        assert_eq!(at + len, p.len(), "nothing else in the packet");
        let mut z = flate2::read::ZlibDecoder::new(&p[at..]);
        std::io::Read::read_to_end(&mut z, &mut inner).unwrap();
    }
    let plain = std::fs::read(plain).unwrap();
    assert_eq!(inner.len(), plain.len());
    assert!(
        inner == plain,
        "the inflated packets differ from the plain export"
    );
    assert!(
        bytes.len() * 3 < plain.len(),
        "{} of {}",
        bytes.len(),
        plain.len()
    );
    // The option is Perfetto's only.
    let o = std::process::Command::new(waitshim_tests::analyzer_path())
        .args(["export", "--format", "chrome", "--compress", "-o"])
        .arg(log.with_file_name("x.json"))
        .arg(log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--compress applies to --format perfetto only")
    );
}
