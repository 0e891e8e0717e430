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
}
