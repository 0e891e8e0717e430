//! The number of threads waiting on each of the hottest objects over time, for the counter
//! tracks of the trace exports.
//!
//! The waits come from [`super::timeline::for_each_wait`], each thread's in order but the
//! threads' interleaved as the log has them (by the end of a contention episode, or batch by
//! batch), so a wait that began long ago can arrive after many shorter ones that began later.
//! A counter value is a count at one moment, so it can only be worked out from the waits'
//! begins and ends in time order: each wait of a chosen object gives two points (+1 at its
//! begin, -1 at its end), and the points are sorted. So that memory stays bounded however many
//! waits the log has, the points are kept in a buffer of fixed size; a full buffer is sorted
//! and written to an unnamed temporary file (a run), and the runs are merged at the end. A log
//! whose chosen objects have fewer than [`CHUNK`] points needs no file.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};

use crate::model::Model;

use super::timeline::Wait;

/// How many objects get a counter track: the ones threads waited on longest.
pub const HOTTEST: usize = 4;

/// Points kept in memory before they are sorted and written to a run (16 bytes each).
pub const CHUNK: usize = 1 << 18;

/// One change of an object's count: (time, the object's place in [`Waiters::objects`], +1 or
/// -1), ordered by time so that all the changes of one moment are applied together.
type Point = (u64, u32, i32);

pub struct Waiters {
    objects: Vec<u64>,
    points: Vec<Point>,
    chunk: usize,
    runs: Vec<File>,
}

/// The objects threads waited on longest, at most [`HOTTEST`], longest first. A wait still going
/// on when the log ended (a deadlock) counts up to the end of the log: such an object is hot
/// even though its counters, which count ended waits, say nothing of it.
pub fn hottest(model: &Model, end_of_log: u64) -> Vec<u64> {
    let mut by: std::collections::HashMap<u64, u64> = model
        .objects
        .values()
        .map(|o| (o.object_id, o.wait_total_ns()))
        .filter(|&(_, ns)| ns > 0)
        .collect();
    if let Some(open) = &model.open_waits {
        for w in &open.waits {
            let ns = by.entry(w.object_id).or_insert(0);
            *ns = ns.saturating_add(end_of_log.saturating_sub(w.since_ns).max(1));
        }
    }
    let mut objects: Vec<(u64, u64)> = by.into_iter().collect();
    objects.sort_unstable_by_key(|&(id, ns)| (Reverse(ns), id));
    objects.truncate(HOTTEST);
    objects.into_iter().map(|(id, _)| id).collect()
}

impl Waiters {
    /// Counts the waiters on `objects` (from [`hottest`]).
    pub fn new(objects: Vec<u64>) -> Self {
        Self::with_chunk(objects, CHUNK)
    }

    fn with_chunk(objects: Vec<u64>, chunk: usize) -> Self {
        Waiters {
            objects,
            points: Vec::new(),
            chunk,
            runs: Vec::new(),
        }
    }

    /// The objects counted, in the order of their places.
    pub fn objects(&self) -> &[u64] {
        &self.objects
    }

    /// Counts `w` if it is on one of the objects.
    pub fn add(&mut self, w: &Wait) -> io::Result<()> {
        let Some(at) = self.objects.iter().position(|&o| o == w.object_id) else {
            return Ok(());
        };
        if self.points.len() + 2 > self.chunk {
            self.spill()?;
        }
        self.points.push((w.start, at as u32, 1));
        self.points.push((w.end, at as u32, -1));
        Ok(())
    }

    /// Sorts the buffer into a run of its own, in a temporary file that has no name (removed
    /// as soon as it is created: nothing is left behind, however the export ends).
    fn spill(&mut self) -> io::Result<()> {
        self.points.sort_unstable();
        let mut file = temporary()?;
        {
            let mut out = BufWriter::new(&mut file);
            for &(ns, at, delta) in &self.points {
                out.write_all(&ns.to_le_bytes())?;
                out.write_all(&at.to_le_bytes())?;
                out.write_all(&delta.to_le_bytes())?;
            }
            out.flush()?;
        }
        file.rewind()?;
        self.runs.push(file);
        self.points.clear();
        Ok(())
    }

    /// Calls `f` with (place of the object, time, threads waiting on it from then on) at each
    /// moment an object's count changes, in time order. The changes of one moment (a thread
    /// handing the object to the next) are applied together: a count that comes back to what
    /// it was gives no call.
    pub fn finish(
        mut self,
        mut f: impl FnMut(usize, u64, u64) -> io::Result<()>,
    ) -> io::Result<()> {
        self.points.sort_unstable();
        let mut readers: Vec<BufReader<File>> = self.runs.drain(..).map(BufReader::new).collect();
        // The next point of each run, and of the buffer (the last source).
        let mut heap: BinaryHeap<Reverse<(Point, usize)>> = BinaryHeap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some(p) = read_point(r)? {
                heap.push(Reverse((p, i)));
            }
        }
        let mut rest = self.points.into_iter();
        let buffer = readers.len();
        if let Some(p) = rest.next() {
            heap.push(Reverse((p, buffer)));
        }
        let mut count = vec![0i64; self.objects.len()];
        let mut shown = vec![0i64; self.objects.len()];
        let mut pending: Option<(u64, u32)> = None;
        let mut show = |at: u32, ns: u64, count: &[i64]| -> io::Result<()> {
            let i = at as usize;
            if count[i] != shown[i] {
                shown[i] = count[i];
                f(i, ns, count[i].max(0) as u64)?;
            }
            Ok(())
        };
        while let Some(Reverse(((ns, at, delta), from))) = heap.pop() {
            if let Some((pns, pat)) = pending {
                if (pns, pat) != (ns, at) {
                    show(pat, pns, &count)?;
                }
            }
            count[at as usize] += i64::from(delta);
            pending = Some((ns, at));
            let next = if from == buffer {
                rest.next()
            } else {
                read_point(&mut readers[from])?
            };
            if let Some(p) = next {
                heap.push(Reverse((p, from)));
            }
        }
        if let Some((ns, at)) = pending {
            show(at, ns, &count)?;
        }
        Ok(())
    }
}

/// A file in the temporary directory, open for reading and writing and already removed.
pub(crate) fn temporary() -> io::Result<File> {
    let dir = std::env::temp_dir();
    for n in 0u32.. {
        let path = dir.join(format!(".waitshim-waiters.{}.{n}", std::process::id()));
        match File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("a free name among 2^32")
}

fn read_point(r: &mut impl Read) -> io::Result<Option<Point>> {
    let mut b = [0u8; 16];
    match r.read_exact(&mut b) {
        Ok(()) => Ok(Some((
            u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            i32::from_le_bytes(b[12..].try_into().expect("4 bytes")),
        ))),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(object_id: u64, start: u64, end: u64) -> Wait {
        Wait {
            start,
            end,
            object_id,
            chain_id: 0,
            holder_tid: 0,
            record_id: None,
            unended: false,
            waker_tid: 0,
            reason: 0,
        }
    }

    /// The counts `w` gives for `waits`, handed out in the order given.
    fn counts(mut w: Waiters, waits: &[Wait]) -> Vec<(usize, u64, u64)> {
        for x in waits {
            w.add(x).unwrap();
        }
        let mut out = Vec::new();
        w.finish(|i, ns, n| {
            out.push((i, ns, n));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn waits_handed_out_of_order_count_in_time_order_and_handovers_give_no_dip() {
        // A long wait on object 7 arrives after two shorter ones inside it; object 9 is
        // handed over at 30 (one wait ends as the next begins); object 5 is not counted.
        let waits = [
            wait(7, 20, 30),
            wait(9, 10, 30),
            wait(5, 0, 100),
            wait(7, 25, 40),
            wait(9, 30, 50),
            wait(7, 10, 60),
        ];
        let want = vec![
            (0, 10, 1),
            (1, 10, 1),
            (0, 20, 2),
            (0, 25, 3),
            (0, 30, 2),
            (0, 40, 1),
            (1, 50, 0),
            (0, 60, 0),
        ];
        assert_eq!(counts(Waiters::new(vec![7, 9]), &waits), want);
        // The same through runs in temporary files, two points per run.
        assert_eq!(counts(Waiters::with_chunk(vec![7, 9], 2), &waits), want);
    }
}
