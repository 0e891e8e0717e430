//! What the live view shows ([`Screen`]), drawn two ways: as a terminal table with ratatui
//! ([`draw`]) and as plain text for `--once` ([`plain`]). Both show the same lines in the same
//! order: the run (program, state, threads, highwater mark, records read, damage), deadlocks,
//! then the objects threads waited on most.

use std::fmt::Write;

use ratatui::layout::{Alignment, Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::Frame;

use crate::report::fmt_ns;

/// Shown instead of the table before any wait has been counted.
const NO_WAITS: &str = "  (no wait counted yet: a wait is counted when it ends)";
/// Widest the object and creation-site columns get; longer names are cut.
const MAX_NAME_WIDTH: usize = 48;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Running,
    /// The words to show: `exited (status 0)`.
    Exited(String),
    /// No pid to check (the log has no run start record).
    Unknown,
}

impl Status {
    fn text(&self) -> &str {
        match self {
            Status::Running => "running",
            Status::Exited(s) => s,
            Status::Unknown => "state unknown",
        }
    }
}

/// What the per-interval columns measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interval {
    /// The first look at the log: no interval yet.
    SinceStart,
    /// The last refresh interval (`1s`).
    Last(String),
    /// The program has exited: only totals.
    Ended,
}

#[derive(Debug, Clone, Default)]
pub struct ObjectRow {
    /// `mutex#3 "queue"`.
    pub object: String,
    /// `convoy.c:12 (main)`; empty when unknown.
    pub site: String,
    pub interval_wait_ns: u64,
    pub interval_contended: u64,
    pub wait_ns: u64,
    pub contended: u64,
    pub acquisitions: u64,
    pub max_waiters: u64,
}

#[derive(Debug, Clone)]
pub struct Screen {
    pub path: String,
    pub program: String,
    pub pid: Option<u32>,
    pub status: Status,
    /// Run time, and whether it is only a lower bound.
    pub run_time: Option<(u64, bool)>,
    pub threads: String,
    pub hwm: String,
    pub records: u64,
    pub snapshots: u64,
    pub damage: Option<String>,
    pub notes: Vec<String>,
    pub deadlocks: Vec<String>,
    pub deadlocks_total: u64,
    pub interval: Interval,
    pub rows: Vec<ObjectRow>,
    /// Objects that have waited (the table shows the first of them).
    pub objects_waited: usize,
    pub objects_total: usize,
}

impl Screen {
    fn pid_text(&self) -> String {
        self.pid.map_or_else(|| "?".into(), |p| p.to_string())
    }

    fn state_text(&self) -> String {
        match self.run_time {
            Some((t, lower)) => format!(
                "{}, run time {}{}",
                self.status.text(),
                if lower { "at least " } else { "" },
                fmt_ns(t)
            ),
            None => self.status.text().to_string(),
        }
    }

    fn records_text(&self) -> String {
        format!(
            "{} read, {} {}",
            self.records,
            self.snapshots,
            if self.snapshots == 1 {
                "snapshot"
            } else {
                "snapshots"
            }
        )
    }

    /// The header lines as (label, text).
    fn header(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            (
                "program",
                format!("{}  (pid {})", self.program, self.pid_text()),
            ),
            ("state", self.state_text()),
            ("threads", self.threads.clone()),
            ("highwater", self.hwm.clone()),
            ("records", self.records_text()),
        ];
        if let Some(d) = &self.damage {
            h.push(("damage", d.clone()));
        }
        for n in &self.notes {
            h.push(("note", n.clone()));
        }
        h
    }

    fn table_title(&self) -> String {
        let counts = format!(
            "{} of {} objects have waited",
            self.objects_waited, self.objects_total
        );
        match &self.interval {
            Interval::Last(l) => {
                format!("objects with the most waiting in the last {l} ({counts})")
            }
            Interval::SinceStart => format!("objects by waiting since the start ({counts})"),
            Interval::Ended => format!("objects by total waiting ({counts})"),
        }
    }

    fn columns(&self) -> [String; 8] {
        let l = match &self.interval {
            Interval::Last(l) => l.as_str(),
            _ => "int",
        };
        [
            "OBJECT".into(),
            "CREATED AT".into(),
            format!("WAIT/{l}"),
            format!("CONT/{l}"),
            "WAIT TOTAL".into(),
            "CONTENDED".into(),
            "ACQUIRED".into(),
            "MAX WAITERS".into(),
        ]
    }

    fn cells(&self, r: &ObjectRow) -> [String; 8] {
        let (iw, ic) = match self.interval {
            Interval::Last(_) => (fmt_ns(r.interval_wait_ns), r.interval_contended.to_string()),
            _ => ("-".into(), "-".into()),
        };
        [
            cut(&r.object),
            cut(if r.site.is_empty() { "?" } else { &r.site }),
            iw,
            ic,
            fmt_ns(r.wait_ns),
            r.contended.to_string(),
            r.acquisitions.to_string(),
            r.max_waiters.to_string(),
        ]
    }

    fn deadlock_title(&self) -> String {
        format!(
            "DEADLOCK{} ({})",
            if self.deadlocks_total == 1 { "" } else { "S" },
            self.deadlocks_total
        )
    }
}

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_NAME_WIDTH {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX_NAME_WIDTH - 1).collect();
        t.push('…');
        t
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// `s` cut to `w` characters, the cut marked with `…`.
fn cut_to(s: &str, w: usize) -> String {
    if width(s) <= w {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Space between the table's columns.
const COLUMN_GAP: usize = 2;
/// Room the object and creation-site columns want together before figures are dropped for them.
const NAMES_WANT: usize = 40;
/// Figures dropped, in this order, from a table too wide for the terminal: acquisitions, most
/// waiters at once, total contended, total wait. The interval's figures always stay.
const DROP_ORDER: [usize; 4] = [6, 7, 5, 4];

/// Which of the 8 columns fit in `avail` characters, and their widths: the names share what the
/// figures leave.
fn fit_columns(mut widths: [usize; 8], avail: usize) -> (Vec<usize>, [usize; 8]) {
    let mut keep: Vec<usize> = (0..8).collect();
    let figures = |keep: &[usize]| -> usize {
        keep.iter()
            .filter(|&&i| i >= 2)
            .map(|&i| widths[i] + COLUMN_GAP)
            .sum()
    };
    let names = (widths[0] + widths[1]).min(NAMES_WANT);
    for drop in DROP_ORDER {
        if avail.saturating_sub(figures(&keep) + COLUMN_GAP) >= names {
            break;
        }
        keep.retain(|&i| i != drop);
    }
    let room = avail.saturating_sub(figures(&keep) + COLUMN_GAP);
    if widths[0] + widths[1] > room {
        let object = widths[0].min(room.saturating_sub(widths[1]).max(room * 2 / 5));
        widths[0] = object;
        widths[1] = room.saturating_sub(object);
    }
    (keep, widths)
}

/// The screen as plain text (`top --once`).
pub fn plain(s: &Screen) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "waitshim top: {}", s.path);
    for (label, text) in s.header() {
        let _ = writeln!(out, "{label:<10} {text}");
    }
    if !s.deadlocks.is_empty() {
        let _ = writeln!(out, "\n{}", s.deadlock_title());
        for l in &s.deadlocks {
            let _ = writeln!(out, "  {l}");
        }
    }
    let _ = writeln!(out, "\n{}", s.table_title());
    if s.rows.is_empty() {
        let _ = writeln!(out, "{NO_WAITS}");
        return out;
    }
    let header = s.columns();
    let body: Vec<[String; 8]> = s.rows.iter().map(|r| s.cells(r)).collect();
    let mut widths = header.clone().map(|h| width(&h));
    for row in &body {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(c));
        }
    }
    for row in std::iter::once(&header).chain(&body) {
        let mut line = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(w - width(c));
            // Names left, numbers right.
            if i < 2 {
                let _ = write!(line, "{c}{pad}");
            } else {
                let _ = write!(line, "{pad}{c}");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let hidden = s.objects_waited.saturating_sub(s.rows.len());
    if hidden > 0 {
        let _ = writeln!(out, "  ... {hidden} more");
    }
    out
}

/// Draws the screen into a terminal frame.
pub fn draw(f: &mut Frame<'_>, s: &Screen) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut header = vec![Line::from(vec![
        Span::styled("waitshim top  ", bold),
        Span::raw(s.path.clone()),
    ])];
    for (label, text) in s.header() {
        let style = match label {
            "state" => match s.status {
                Status::Running => Style::default().fg(Color::Green),
                Status::Exited(_) => Style::default()
                    .fg(Color::Yellow)
                    .add_modifier(Modifier::BOLD),
                Status::Unknown => Style::default(),
            },
            "damage" | "note" => Style::default().fg(Color::Red),
            _ => Style::default(),
        };
        header.push(Line::from(vec![
            Span::styled(format!("{label:<10} "), dim),
            Span::styled(text, style),
        ]));
    }

    let area = f.area();
    let deadlock_height = if s.deadlocks.is_empty() {
        0
    } else {
        (s.deadlocks.len() as u16 + 2).min(area.height / 3).max(3)
    };
    let [head, dead, title, table, footer] = Layout::vertical([
        Constraint::Length(header.len() as u16 + 1),
        Constraint::Length(deadlock_height),
        Constraint::Length(1),
        Constraint::Min(2),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(header), head);

    if !s.deadlocks.is_empty() {
        let red = Style::default().fg(Color::Red).add_modifier(Modifier::BOLD);
        let lines: Vec<Line> = s
            .deadlocks
            .iter()
            .map(|l| Line::styled(l.clone(), Style::default().fg(Color::Red)))
            .collect();
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(red)
            .title(Span::styled(format!(" {} ", s.deadlock_title()), red));
        f.render_widget(Paragraph::new(lines).block(block), dead);
    }

    f.render_widget(Paragraph::new(Line::styled(s.table_title(), bold)), title);
    if s.rows.is_empty() {
        f.render_widget(Paragraph::new(Line::styled(NO_WAITS, dim)), table);
    } else {
        let columns = s.columns();
        let body: Vec<[String; 8]> = s.rows.iter().map(|r| s.cells(r)).collect();
        let mut widths = columns.clone().map(|c| width(&c));
        for row in &body {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(c));
            }
        }
        let (keep, widths) = fit_columns(widths, table.width as usize);
        let cell = |i: usize, text: &str| {
            let line = Line::from(cut_to(text, widths[i]));
            Cell::from(if i < 2 {
                line
            } else {
                line.alignment(Alignment::Right)
            })
        };
        let row = |texts: &[String; 8]| Row::new(keep.iter().map(|&i| cell(i, &texts[i])));
        let head_row = row(&columns).style(bold.add_modifier(Modifier::REVERSED));
        let rows = body.iter().map(row);
        let constraints = keep.iter().map(|&i| Constraint::Length(widths[i] as u16));
        f.render_widget(
            Table::new(rows, constraints)
                .header(head_row)
                .column_spacing(COLUMN_GAP as u16),
            table,
        );
    }
    f.render_widget(Paragraph::new(Line::styled("q: quit", dim)), footer);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen() -> Screen {
        Screen {
            path: "/tmp/waitshim.77.log".into(),
            program: "./convoy 8".into(),
            pid: Some(77),
            status: Status::Exited("exited (status 0)".into()),
            run_time: Some((650_000_000, false)),
            threads: "9 seen".into(),
            hwm: "7 waiters on mutex#1".into(),
            records: 120,
            snapshots: 0,
            damage: None,
            notes: Vec::new(),
            deadlocks: Vec::new(),
            deadlocks_total: 0,
            interval: Interval::Ended,
            rows: vec![ObjectRow {
                object: "mutex#1 \"queue\"".into(),
                site: "convoy.c:44 (main)".into(),
                interval_wait_ns: 5,
                interval_contended: 1,
                wait_ns: 2_100_000_000,
                contended: 7,
                acquisitions: 8,
                max_waiters: 7,
            }],
            objects_waited: 1,
            objects_total: 3,
        }
    }

    #[test]
    fn plain_text_has_header_and_aligned_table() {
        let text = plain(&screen());
        assert!(
            text.contains("state      exited (status 0), run time 650.0 ms"),
            "{text}"
        );
        assert!(
            text.contains("objects by total waiting (1 of 3 objects have waited)"),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        let head = lines
            .iter()
            .position(|l| l.starts_with("OBJECT"))
            .expect("header");
        let row = lines[head + 1];
        assert!(
            row.starts_with("mutex#1 \"queue\"  convoy.c:44 (main)"),
            "{text}"
        );
        assert!(
            row.contains("  -  "),
            "no interval figures once exited: {row}"
        );
        assert!(
            row.ends_with("2.10 s          7         8            7"),
            "{row:?}"
        );
        assert_eq!(lines[head].len(), row.len(), "columns line up");
    }

    #[test]
    fn deadlocks_come_before_the_table() {
        let mut s = screen();
        s.deadlocks = vec!["at 1.0 s, found by thread 3: 2 threads wait for each other".into()];
        s.deadlocks_total = 1;
        s.interval = Interval::Last("1s".into());
        let text = plain(&s);
        let d = text.find("DEADLOCK (1)").expect("deadlock section");
        assert!(d < text.find("OBJECT").unwrap());
        assert!(text.contains("WAIT/1s"), "{text}");
        assert!(text.contains("in the last 1s"), "{text}");
    }

    #[test]
    fn a_narrow_terminal_drops_totals_before_names() {
        // OBJECT, CREATED AT, WAIT/1s, CONT/1s, WAIT TOTAL, CONTENDED, ACQUIRED, MAX WAITERS.
        let widths = [8, 19, 7, 7, 10, 9, 8, 11];
        let (keep, w) = fit_columns(widths, 200);
        assert_eq!((keep.len(), w), (8, widths), "everything fits");
        let (keep, w) = fit_columns(widths, 80);
        assert_eq!(keep, [0, 1, 2, 3, 4, 5]);
        assert_eq!((w[0], w[1]), (8, 19));
        let (keep, w) = fit_columns(widths, 50);
        assert_eq!(keep, [0, 1, 2, 3]);
        assert!(w[0] + w[1] + 7 + 7 + 3 * COLUMN_GAP <= 50);
        assert_eq!(cut_to("sigkill.c:58 (main)", 12), "sigkill.c:5…");
    }

    #[test]
    fn the_terminal_table_shows_the_same_lines() {
        let backend = ratatui::backend::TestBackend::new(140, 20);
        let mut term = ratatui::Terminal::new(backend).unwrap();
        let mut s = screen();
        s.deadlocks = vec!["  thread 3 waits for mutex#1".into()];
        s.deadlocks_total = 1;
        term.draw(|f| draw(f, &s)).unwrap();
        let buf = term.backend().buffer();
        let text: String = (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    + "\n"
            })
            .collect();
        for needle in [
            "exited (status 0)",
            "DEADLOCK (1)",
            "thread 3 waits for mutex#1",
            "mutex#1 \"queue\"",
            "convoy.c:44 (main)",
            "MAX WAITERS",
            "q: quit",
        ] {
            assert!(text.contains(needle), "{needle:?} not on screen:\n{text}");
        }
    }
}
