//! Folded stacks (`root;...;leaf weight`, the input of flamegraph.pl, inferno and speedscope)
//! weighted by wait time in nanoseconds, and an SVG flame graph drawn from them by inferno.
//!
//! A stack is a chain outermost first, ending in the object waited on (`[mutex#2 convoy_lock]`)
//! so that the flame graph's tips name what the threads waited for (`[mutex#2 m, still waiting
//! at the end of the log]` for a wait the log ended in). With several logs, each
//! stack starts with its process (`pid 1234`).

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::{frame_name, samples, Exporter, Side, Source};

pub struct Folded<W: Write> {
    out: W,
    side: Side,
    svg: bool,
    /// Weight per distinct stack, summed over samples (and logs).
    stacks: BTreeMap<String, u64>,
    logs: usize,
    first_pid: Option<u32>,
}

/// A frame name made safe for the format: `;` separates frames and the line ends in a space and
/// the weight.
fn clean(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

impl<W: Write> Folded<W> {
    pub fn new(out: W, side: Side, svg: bool) -> Self {
        Folded {
            out,
            side,
            svg,
            stacks: BTreeMap::new(),
            logs: 0,
            first_pid: None,
        }
    }
}

impl<W: Write> Exporter for Folded<W> {
    fn add(&mut self, src: &mut Source<'_>) -> io::Result<()> {
        self.logs += 1;
        if self.first_pid.is_none() {
            self.first_pid = Some(src.pid);
        }
        let model = src.ctx.model;
        for s in samples(model, self.side, None) {
            if s.delay_ns == 0 {
                continue;
            }
            let mut frames: Vec<String> = src
                .frames(s.chain_id)
                .iter()
                .rev()
                .map(|f| clean(&frame_name(f)))
                .collect();
            if frames.is_empty() {
                frames.push("(no chain in the log)".into());
            }
            frames.insert(0, format!("pid {}", src.pid));
            let object = src.object_name(s.object_id);
            // A wait the log ended in has a leaf of its own: a deadlock stands out.
            frames.push(clean(&if s.unended {
                format!("[{object}, still waiting at the end of the log]")
            } else {
                format!("[{object}]")
            }));
            let e = self.stacks.entry(frames.join(";")).or_insert(0);
            *e = e.saturating_add(s.delay_ns);
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        // One log: no process frame (it would be the root of every stack).
        let strip = if self.logs == 1 {
            self.first_pid.map(|p| format!("pid {p};"))
        } else {
            None
        };
        let lines = self.stacks.iter().map(|(stack, weight)| {
            let stack = match &strip {
                Some(p) => stack.strip_prefix(p.as_str()).unwrap_or(stack),
                None => stack,
            };
            format!("{stack} {weight}")
        });
        if self.svg {
            let lines: Vec<String> = lines.collect();
            let mut opts = inferno::flamegraph::Options::default();
            opts.title = match self.side {
                Side::Waiters => "waitshim: where threads waited".into(),
                Side::Holders => "waitshim: who made them wait (holder chains)".into(),
            };
            opts.count_name = "ns waited".into();
            opts.name_type = "Frame:".into();
            if lines.is_empty() {
                // inferno refuses an empty graph; say there was nothing instead.
                writeln!(
                    self.out,
                    "<?xml version=\"1.0\" standalone=\"no\"?>\n<svg version=\"1.1\" \
                     width=\"600\" height=\"60\" xmlns=\"http://www.w3.org/2000/svg\">\
                     <text x=\"10\" y=\"30\">waitshim: no thread waited in this log</text></svg>"
                )?;
            } else {
                inferno::flamegraph::from_lines(
                    &mut opts,
                    lines.iter().map(String::as_str),
                    &mut self.out,
                )
                .map_err(|e| io::Error::other(e.to_string()))?;
            }
        } else {
            for line in lines {
                writeln!(self.out, "{line}")?;
            }
        }
        self.out.flush()
    }
}
