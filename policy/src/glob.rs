//! Shell-style name patterns for policy selectors: `*` (any run of characters, `/` included),
//! `?` (one character), `[abc]`, `[a-z]`, `[!x]` (or `[^x]`), and `\` to take the next character
//! literally. Matching is case-sensitive, works on characters (not bytes), and costs at most
//! pattern length × name length steps: one backtracking point, never a recursion.

use std::fmt;

/// Longest pattern accepted, in bytes: names and symbols are matched once per object, but a
/// pathological pattern should still not make that expensive.
pub const MAX_LEN: usize = 1024;

/// A compiled pattern; equal when written the same way.
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    AnyChar,
    AnyRun,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Char(t) => *t == c,
            Token::AnyChar => true,
            Token::AnyRun => false,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

impl Glob {
    /// Compiles `pattern`; the error says what is wrong with it, without the field's name.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("empty pattern (use \"*\" to match every name)".into());
        }
        if pattern.len() > MAX_LEN {
            return Err(format!(
                "pattern is {} bytes long; at most {MAX_LEN}",
                pattern.len()
            ));
        }
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            let token = match c {
                '*' => {
                    // A run of stars matches what one star matches.
                    if tokens.last() == Some(&Token::AnyRun) {
                        continue;
                    }
                    Token::AnyRun
                }
                '?' => Token::AnyChar,
                '\\' => match chars.next() {
                    Some(e) => Token::Char(e),
                    None => return Err("ends with a lone \\ (write \\\\ for a backslash)".into()),
                },
                '[' => class(&mut chars)?,
                c => Token::Char(c),
            };
            tokens.push(token);
        }
        Ok(Glob {
            source: pattern.to_string(),
            tokens,
        })
    }

    /// Whether the whole of `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        let tokens = &self.tokens;
        let mut t = 0; // next token
        let mut n = 0; // byte offset of the next character of `name`
                       // Where to resume after the last `*`: the token after it, and the name offset it
                       // currently stops at. Each retry moves the star one character further, so the loop
                       // runs at most tokens × characters times.
        let mut resume: Option<(usize, usize)> = None;
        loop {
            let c = name[n..].chars().next();
            match (tokens.get(t), c) {
                (Some(Token::AnyRun), _) => {
                    resume = Some((t + 1, n));
                    t += 1;
                    continue;
                }
                (Some(tok), Some(c)) if tok.matches(c) => {
                    t += 1;
                    n += c.len_utf8();
                    continue;
                }
                (None, None) => return true,
                _ => {}
            }
            // Mismatch: let the last star swallow one more character, if there is one.
            match resume {
                Some((rt, rn)) => match name[rn..].chars().next() {
                    Some(c) => {
                        let rn = rn + c.len_utf8();
                        resume = Some((rt, rn));
                        t = rt;
                        n = rn;
                    }
                    None => return false,
                },
                None => return false,
            }
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches exactly one name (no wildcard in it).
    pub fn is_literal(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Char(_)))
    }
}

/// Reads a bracket expression after its `[`.
fn class(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<Token, String> {
    let unclosed = || "unclosed [ (write \\[ for a literal bracket)".to_string();
    let negated = matches!(chars.peek(), Some('!') | Some('^'));
    if negated {
        chars.next();
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let c = chars.next().ok_or_else(unclosed)?;
        let lo = match c {
            // `]` right after `[` or `[!` is a member, as in the shell.
            ']' if !first => break,
            '\\' => chars.next().ok_or_else(unclosed)?,
            c => c,
        };
        first = false;
        // `a-z` is a range; a `-` before the closing `]` is a member.
        let mut ahead = chars.clone();
        if ahead.next() == Some('-') && !matches!(ahead.peek(), Some(']') | None) {
            chars.next();
            let hi = match chars.next().ok_or_else(unclosed)? {
                '\\' => chars.next().ok_or_else(unclosed)?,
                c => c,
            };
            if hi < lo {
                return Err(format!(
                    "range [{lo}-{hi}] is empty (write it as [{hi}-{lo}])"
                ));
            }
            ranges.push((lo, hi));
        } else {
            ranges.push((lo, lo));
        }
    }
    Ok(Token::Class { negated, ranges })
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Glob({:?})", self.source)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, n: &str) -> bool {
        Glob::new(p).unwrap().matches(n)
    }

    #[test]
    fn stars_and_question_marks() {
        assert!(m("db_*", "db_open"));
        assert!(m("db_*", "db_"));
        assert!(!m("db_*", "xdb_open"));
        assert!(m("*", ""));
        assert!(m("*", "anything/at all"));
        assert!(m("*_lock", "queue_lock"));
        assert!(!m("*_lock", "queue_locker"));
        assert!(m("worker-?", "worker-3"));
        assert!(!m("worker-?", "worker-12"));
        assert!(m("a*b*c", "a-x-b-y-c"));
        assert!(m("a*b*c", "abc"));
        assert!(!m("a*b*c", "acb"));
        assert!(m("**x**", "x"));
        assert!(m("*ab", "aab"));
        assert!(m("*aab", "aaab"));
        assert!(!m("exact", "exactly"));
        assert!(!m("exactly", "exact"));
    }

    #[test]
    fn classes() {
        assert!(m("worker-[0-9]", "worker-7"));
        assert!(!m("worker-[0-9]", "worker-x"));
        assert!(m("[abc]x", "bx"));
        assert!(!m("[abc]x", "dx"));
        assert!(m("[!abc]x", "dx"));
        assert!(!m("[!abc]x", "ax"));
        assert!(m("[^a]", "b"));
        assert!(m("[]]", "]"));
        assert!(m("[!]]", "a"));
        assert!(!m("[!]]", "]"));
        assert!(m("[a-]", "-"));
        assert!(m("[-a]", "-"));
        assert!(m("[a-cx-z]", "y"));
        assert!(!m("[a-cx-z]", "m"));
        assert!(m("[\\]]", "]"));
        assert!(m("[é-ë]", "ê"));
    }

    #[test]
    fn escapes_and_unicode() {
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "x"));
        assert!(m("a\\?b", "a?b"));
        assert!(m("\\[x]", "[x]"));
        assert!(m("naïve_?", "naïve_é"));
        assert!(m("*ï*", "naïve"));
        assert!(m("std::*::lock", "std::sync::mutex::lock"));
    }

    #[test]
    fn bad_patterns() {
        assert_eq!(
            Glob::new("").unwrap_err(),
            "empty pattern (use \"*\" to match every name)"
        );
        assert_eq!(
            Glob::new("db_[").unwrap_err(),
            "unclosed [ (write \\[ for a literal bracket)"
        );
        assert_eq!(
            Glob::new("[abc").unwrap_err(),
            "unclosed [ (write \\[ for a literal bracket)"
        );
        assert_eq!(
            Glob::new("x\\").unwrap_err(),
            "ends with a lone \\ (write \\\\ for a backslash)"
        );
        assert_eq!(
            Glob::new("[z-a]").unwrap_err(),
            "range [z-a] is empty (write it as [a-z])"
        );
        assert!(Glob::new(&"a".repeat(MAX_LEN + 1)).is_err());
        assert!(Glob::new(&"a".repeat(MAX_LEN)).is_ok());
    }

    #[test]
    fn keeps_source_and_literal() {
        let g = Glob::new("db_**").unwrap();
        assert_eq!(g.as_str(), "db_**");
        assert_eq!(g.to_string(), "db_**");
        assert!(!g.is_literal());
        assert!(Glob::new("main").unwrap().is_literal());
        assert!(Glob::new("a\\*").unwrap().is_literal());
    }

    #[test]
    fn no_exponential_backtracking() {
        // A recursive matcher takes ~2^30 steps here; this one a few thousand.
        let g = Glob::new(&format!("{}b", "a*".repeat(30))).unwrap();
        assert!(!g.matches(&"a".repeat(200)));
        assert!(g.matches(&format!("{}b", "a".repeat(200))));
    }

    /// The obvious recursive definition, to check the iterative matcher against.
    fn reference(tokens: &[Token], name: &[char]) -> bool {
        match tokens.first() {
            None => name.is_empty(),
            Some(Token::AnyRun) => (0..=name.len()).any(|i| reference(&tokens[1..], &name[i..])),
            Some(t) => {
                !name.is_empty() && t.matches(name[0]) && reference(&tokens[1..], &name[1..])
            }
        }
    }

    #[test]
    fn agrees_with_reference_on_random_inputs() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pattern_alphabet = ['a', 'b', '*', '?', '[', ']', '!', '-', '\\', 'é'];
        let name_alphabet = ['a', 'b', '-', ']', '!', 'é', '*'];
        let mut compiled = 0;
        for _ in 0..20_000 {
            let plen = (next() % 8) as usize;
            let pattern: String = (0..plen)
                .map(|_| pattern_alphabet[(next() % pattern_alphabet.len() as u64) as usize])
                .collect();
            let Ok(g) = Glob::new(&pattern) else { continue };
            compiled += 1;
            for _ in 0..4 {
                let nlen = (next() % 7) as usize;
                let name: Vec<char> = (0..nlen)
                    .map(|_| name_alphabet[(next() % name_alphabet.len() as u64) as usize])
                    .collect();
                let s: String = name.iter().collect();
                assert_eq!(
                    g.matches(&s),
                    reference(&g.tokens, &name),
                    "pattern {pattern:?} name {s:?}"
                );
            }
        }
        assert!(compiled > 5_000);
    }
}
