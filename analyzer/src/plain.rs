//! Strings the program chose (thread and object names, paths, command lines) as the plain-text
//! outputs show them. The program may put anything in them: a terminal escape sequence, or a
//! line break followed by `::error::`, which a CI runner reading the output takes for a
//! workflow command. Control characters (C0, DEL, C1) and the bidirectional overrides are shown
//! as escapes (`\x1b`, `\x0a`, `\u{202e}`), so no such string can act on a terminal or start a
//! line of its own; a name is shown in double quotes, with its own quotes and backslashes
//! escaped. The JSON and HTML outputs escape in their own way and do not use this.

use std::fmt::Write;

/// Whether `c` is shown as an escape: a control character, or one that reorders what follows
/// it on the screen.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_escaped(out: &mut String, s: &str, quote: bool) {
    for c in s.chars() {
        match c {
            '"' | '\\' if quote => {
                out.push('\\');
                out.push(c);
            }
            c if needs_escape(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// `s` with its control characters escaped: for paths and command lines, shown after a label.
pub fn escaped(s: &str) -> String {
    if !s.chars().any(needs_escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    push_escaped(&mut out, s, false);
    out
}

/// `"s"`, with its control characters, quotes and backslashes escaped: how a name is shown.
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    push_escaped(&mut out, s, true);
    out.push('"');
    out
}

/// A plain-text output stream with the same guarantees for everything written to it, whatever
/// a caller forgot to escape: control characters other than line breaks and tabs are shown as
/// escapes, and a line that would start with `::` (after white space) starts with `\` instead. Lines are passed
/// on whole (a line is held until its end, or until its `flush`).
pub struct Guard<W: std::io::Write> {
    inner: W,
    line: Vec<u8>,
}

impl<W: std::io::Write> Guard<W> {
    pub fn new(inner: W) -> Self {
        Guard {
            inner,
            line: Vec::new(),
        }
    }

    /// Writes the held line (with its line break, if it has one).
    fn pass_line(&mut self) -> std::io::Result<()> {
        if self.line.is_empty() {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&self.line);
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (&line[..], ""),
        };
        let mut out = String::with_capacity(body.len() + 2);
        // GitHub's runner trims leading white space before it looks for the `::`.
        if body.trim_start().starts_with("::") {
            out.push('\\');
        }
        for c in body.chars() {
            if c == '\t' || !needs_escape(c) {
                out.push(c);
            } else {
                push_escaped(&mut out, c.encode_utf8(&mut [0; 4]), false);
            }
        }
        out.push_str(end);
        self.line.clear();
        self.inner.write_all(out.as_bytes())
    }
}

/// `text` as a [`Guard`] passes it on.
pub fn guarded(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len());
    {
        let mut g = Guard::new(&mut out);
        let _ = std::io::Write::write_all(&mut g, text.as_bytes());
    }
    String::from_utf8(out).unwrap_or_default()
}

impl<W: std::io::Write> std::io::Write for Guard<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..=i]);
            self.pass_line()?;
            rest = &rest[i + 1..];
        }
        self.line.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.pass_line()?;
        self.inner.flush()
    }
}

impl<W: std::io::Write> Drop for Guard<W> {
    fn drop(&mut self) {
        let _ = std::io::Write::flush(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_move_the_cursor_or_start_a_line() {
        assert_eq!(quoted("worker-1"), "\"worker-1\"");
        assert_eq!(
            quoted("x\n::error::pwned"),
            "\"x\\x0a::error::pwned\"",
            "the line break is shown, not made"
        );
        assert_eq!(quoted("\u{1b}[2J"), "\"\\x1b[2J\"");
        assert_eq!(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quoted("\u{9b}31m"), "\"\\x9b31m\"", "C1 CSI");
        assert_eq!(quoted("ab\u{202e}cd"), "\"ab\\u{202e}cd\"");
        assert_eq!(escaped("/tmp/a b/prog"), "/tmp/a b/prog");
        assert_eq!(escaped("/tmp/\r::warning::x"), "/tmp/\\x0d::warning::x");
        assert_eq!(escaped("über\u{7f}"), "über\\x7f");
    }

    #[test]
    fn the_guard_lets_no_line_start_a_workflow_command_nor_pass_an_escape() {
        use std::io::Write;
        let mut out = Vec::new();
        {
            let mut g = Guard::new(&mut out);
            write!(g, "thread \"a\n::error::x\" \u{1b}[31mred").unwrap();
            writeln!(g, "\ttabbed\r").unwrap();
            writeln!(g, "  \u{a0}::notice::z").unwrap();
            write!(g, "::warning::y").unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "thread \"a\n\\::error::x\" \\x1b[31mred\ttabbed\\x0d\n\\  \u{a0}::notice::z\n\\::warning::y"
        );
    }
}
