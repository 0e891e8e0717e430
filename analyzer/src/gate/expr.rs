//! The `--fail-if` language: comparisons of metrics with numbers (or with other metrics),
//! combined with `&&`, `||`, `!` and parentheses.
//!
//! ```text
//! expr    := and ('||' and)*
//! and     := unary ('&&' unary)*
//! unary   := '!' unary | '(' expr ')' | compare
//! compare := operand ('>' | '>=' | '<' | '<=' | '==' | '!=') operand
//! operand := NUMBER [unit] | METRIC [ '(' STRING ')' ]
//! unit    := ns | us | µs | ms | s | %
//! ```
//!
//! A metric is one of [`METRICS`]; some take a selector naming objects (`wait_total("queue.c:41")`).
//! Every name, unit and dimension is checked when the expression is parsed, so that a typo is an
//! error naming its column before any log is read. The parser works on characters with explicit
//! bounds, and nesting is limited, so that no input can make it panic or exhaust the stack.

use std::fmt;

/// What a number measures, so that `wait_total > 3` (3 what?) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// A count (threads, waits, deadlocks).
    Count,
    /// A duration, in nanoseconds.
    Time,
    /// A fraction (0.25, or 25%).
    Ratio,
}

impl Dim {
    fn words(self) -> &'static str {
        match self {
            Dim::Count => "a count",
            Dim::Time => "a time",
            Dim::Ratio => "a ratio",
        }
    }
}

/// Whether a metric may, must or must not name objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Of the whole run only.
    Run,
    /// Of the run, or of the objects a selector names.
    Either,
}

/// A metric the gate knows: its name, what it measures, and whether it takes a selector. The
/// docs/ci.md's table documents each one.
pub struct MetricDef {
    pub name: &'static str,
    pub dim: Dim,
    pub scope: Scope,
}

pub const METRICS: &[MetricDef] = &[
    MetricDef {
        name: "deadlocks",
        dim: Dim::Count,
        scope: Scope::Run,
    },
    MetricDef {
        name: "inversions",
        dim: Dim::Count,
        scope: Scope::Run,
    },
    MetricDef {
        name: "threads",
        dim: Dim::Count,
        scope: Scope::Run,
    },
    MetricDef {
        name: "duration",
        dim: Dim::Time,
        scope: Scope::Run,
    },
    MetricDef {
        name: "still_waiting",
        dim: Dim::Count,
        scope: Scope::Either,
    },
    MetricDef {
        name: "hwm",
        dim: Dim::Count,
        scope: Scope::Either,
    },
    MetricDef {
        name: "acquisitions",
        dim: Dim::Count,
        scope: Scope::Either,
    },
    MetricDef {
        name: "waits",
        dim: Dim::Count,
        scope: Scope::Either,
    },
    MetricDef {
        name: "blocking_waits",
        dim: Dim::Count,
        scope: Scope::Either,
    },
    MetricDef {
        name: "wait_total",
        dim: Dim::Time,
        scope: Scope::Either,
    },
    MetricDef {
        name: "wait_max",
        dim: Dim::Time,
        scope: Scope::Either,
    },
    MetricDef {
        name: "contended_ratio",
        dim: Dim::Ratio,
        scope: Scope::Either,
    },
    MetricDef {
        name: "waits_per_acquisition",
        dim: Dim::Ratio,
        scope: Scope::Either,
    },
    MetricDef {
        name: "wait_share",
        dim: Dim::Ratio,
        scope: Scope::Either,
    },
    MetricDef {
        name: "lost_parallelism",
        dim: Dim::Ratio,
        scope: Scope::Either,
    },
];

pub fn metric_def(name: &str) -> Option<&'static MetricDef> {
    METRICS.iter().find(|m| m.name == name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl Op {
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Eq => a == b,
            Op::Ne => a != b,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "==",
            Op::Ne => "!=",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A literal, already in base units (ns, or a fraction); `dim` is `None` for a bare number.
    Number {
        value: f64,
        dim: Option<Dim>,
        text: String,
    },
    Metric {
        name: &'static str,
        selector: Option<String>,
    },
}

impl Operand {
    fn dim(&self) -> Option<Dim> {
        match self {
            Operand::Number { dim, .. } => *dim,
            Operand::Metric { name, .. } => metric_def(name).map(|d| d.dim),
        }
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Number { text, .. } => f.write_str(text),
            Operand::Metric {
                name,
                selector: None,
            } => f.write_str(name),
            Operand::Metric {
                name,
                selector: Some(s),
            } => write!(f, "{name}({s:?})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Compare { lhs: Operand, op: Op, rhs: Operand },
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Or(a, b) => write!(f, "({a} || {b})"),
            Expr::And(a, b) => write!(f, "({a} && {b})"),
            Expr::Not(a) => write!(f, "!{a}"),
            Expr::Compare { lhs, op, rhs } => write!(f, "{lhs} {} {rhs}", op.as_str()),
        }
    }
}

impl Expr {
    /// Every comparison in the expression, left to right.
    pub fn comparisons(&self) -> Vec<(&Operand, Op, &Operand)> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Or(a, b) | Expr::And(a, b) => {
                    stack.push(b);
                    stack.push(a);
                }
                Expr::Not(a) => stack.push(a),
                Expr::Compare { lhs, op, rhs } => out.push((lhs, *op, rhs)),
            }
        }
        out
    }

    /// Evaluates the expression, `value` giving each operand's value (errors pass through).
    pub fn eval<E>(&self, value: &mut dyn FnMut(&Operand) -> Result<f64, E>) -> Result<bool, E> {
        Ok(match self {
            Expr::Or(a, b) => a.eval(value)? || b.eval(value)?,
            Expr::And(a, b) => a.eval(value)? && b.eval(value)?,
            Expr::Not(a) => !a.eval(value)?,
            Expr::Compare { lhs, op, rhs } => op.holds(value(lhs)?, value(rhs)?),
        })
    }
}

/// Why an expression was refused: what, and at which column (1-based, in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub column: usize,
    pub message: String,
}

impl ParseError {
    /// The message, the expression and a caret under the column.
    pub fn render(&self, text: &str) -> String {
        let pad: String = " ".repeat(self.column.saturating_sub(1));
        format!(
            "bad expression at column {}: {}\n  {text}\n  {pad}^",
            self.column, self.message
        )
    }
}

/// Nesting of parentheses and `!` allowed: deeper input is refused, not recursed into.
const MAX_DEPTH: usize = 64;
/// Longest expression accepted, in characters.
const MAX_LEN: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64, Option<Dim>, f64, String),
    Ident(String),
    Str(String),
    LParen,
    RParen,
    Comma,
    AndAnd,
    OrOr,
    Bang,
    Cmp(Op),
}

fn describe(t: Option<&Tok>) -> String {
    match t {
        None => "the end".into(),
        Some(Tok::Num(_, _, _, s)) => format!("the number {s}"),
        Some(Tok::Ident(s)) => format!("'{s}'"),
        Some(Tok::Str(s)) => format!("the string {s:?}"),
        Some(Tok::LParen) => "'('".into(),
        Some(Tok::RParen) => "')'".into(),
        Some(Tok::Comma) => "','".into(),
        Some(Tok::AndAnd) => "'&&'".into(),
        Some(Tok::OrOr) => "'||'".into(),
        Some(Tok::Bang) => "'!'".into(),
        Some(Tok::Cmp(op)) => format!("'{}'", op.as_str()),
    }
}

fn err(column: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        column,
        message: message.into(),
    }
}

/// Splits the text into tokens with their 1-based columns.
fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let two = |a: char, b: char| c == a && next == Some(b);
        let (tok, len) = if two('&', '&') {
            (Tok::AndAnd, 2)
        } else if two('|', '|') {
            (Tok::OrOr, 2)
        } else if two('>', '=') {
            (Tok::Cmp(Op::Ge), 2)
        } else if two('<', '=') {
            (Tok::Cmp(Op::Le), 2)
        } else if two('=', '=') {
            (Tok::Cmp(Op::Eq), 2)
        } else if two('!', '=') {
            (Tok::Cmp(Op::Ne), 2)
        } else {
            match c {
                '>' => (Tok::Cmp(Op::Gt), 1),
                '<' => (Tok::Cmp(Op::Lt), 1),
                '!' => (Tok::Bang, 1),
                '(' => (Tok::LParen, 1),
                ')' => (Tok::RParen, 1),
                ',' => (Tok::Comma, 1),
                '&' | '|' => return Err(err(col, format!("'{c}' alone: write '{c}{c}'"))),
                '=' => return Err(err(col, "'=' alone: write '==' to compare")),
                '"' | '\'' => {
                    let mut j = i + 1;
                    let mut s = String::new();
                    loop {
                        match chars.get(j) {
                            None => return Err(err(col, "string not closed")),
                            Some(&q) if q == c => break,
                            Some('\\') => {
                                match chars.get(j + 1) {
                                    Some(&e) => s.push(e),
                                    None => return Err(err(col, "string not closed")),
                                }
                                j += 2;
                                continue;
                            }
                            Some(&ch) => s.push(ch),
                        }
                        j += 1;
                    }
                    (Tok::Str(s), j + 1 - i)
                }
                c if c.is_ascii_digit() || c == '.' => {
                    let mut j = i;
                    while chars
                        .get(j)
                        .is_some_and(|ch| ch.is_ascii_digit() || *ch == '.' || *ch == '_')
                    {
                        j += 1;
                    }
                    let digits: String = chars[i..j].iter().filter(|&&ch| ch != '_').collect();
                    let value: f64 = digits
                        .parse()
                        .ok()
                        .filter(|v: &f64| v.is_finite())
                        .ok_or_else(|| err(col, format!("'{digits}' is not a number")))?;
                    let mut k = j;
                    while chars
                        .get(k)
                        .is_some_and(|ch| ch.is_alphabetic() || *ch == '%')
                    {
                        k += 1;
                    }
                    let unit: String = chars[j..k].iter().collect();
                    let (scale, dim) = match unit.as_str() {
                        "" => (1.0, None),
                        "ns" => (1.0, Some(Dim::Time)),
                        "us" | "µs" => (1e3, Some(Dim::Time)),
                        "ms" => (1e6, Some(Dim::Time)),
                        "s" => (1e9, Some(Dim::Time)),
                        "%" => (0.01, Some(Dim::Ratio)),
                        u => {
                            return Err(err(
                                j + 1,
                                format!("unknown unit '{u}' (units: ns, us, ms, s, %)"),
                            ))
                        }
                    };
                    let text: String = chars[i..k].iter().collect();
                    (Tok::Num(value * scale, dim, value, text), k - i)
                }
                c if c.is_alphabetic() || c == '_' => {
                    let mut j = i;
                    while chars
                        .get(j)
                        .is_some_and(|ch| ch.is_alphanumeric() || *ch == '_')
                    {
                        j += 1;
                    }
                    (Tok::Ident(chars[i..j].iter().collect()), j - i)
                }
                c => return Err(err(col, format!("unexpected character '{c}'"))),
            }
        };
        out.push((tok, col));
        i += len;
    }
    Ok(out)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// Column just past the text, for errors at the end.
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    fn col(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end, |(_, c)| *c)
    }

    fn bump(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|(t, _)| t.clone());
        self.pos += 1;
        t
    }

    fn expr(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if depth > MAX_DEPTH {
            return Err(err(self.col(), "nested too deeply"));
        }
        let mut lhs = self.and(depth)?;
        while self.peek() == Some(&Tok::OrOr) {
            self.bump();
            let rhs = self.and(depth)?;
            lhs = Expr::Or(Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn and(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let mut lhs = self.unary(depth)?;
        while self.peek() == Some(&Tok::AndAnd) {
            self.bump();
            let rhs = self.unary(depth)?;
            lhs = Expr::And(Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn unary(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if depth > MAX_DEPTH {
            return Err(err(self.col(), "nested too deeply"));
        }
        match self.peek() {
            Some(Tok::Bang) => {
                self.bump();
                Ok(Expr::Not(Box::new(self.unary(depth + 1)?)))
            }
            Some(Tok::LParen) => {
                let open = self.col();
                self.bump();
                let inner = self.expr(depth + 1)?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(err(
                        self.col(),
                        format!(
                            "expected ')' to close the '(' of column {open}, found {}",
                            describe(self.peek())
                        ),
                    ));
                }
                self.bump();
                Ok(inner)
            }
            _ => self.compare(),
        }
    }

    fn compare(&mut self) -> Result<Expr, ParseError> {
        let lcol = self.col();
        let lhs = self.operand()?;
        let opcol = self.col();
        let op = match self.peek() {
            Some(Tok::Cmp(op)) => *op,
            other => {
                return Err(err(
                    opcol,
                    format!(
                        "expected a comparison (>, >=, <, <=, ==, !=) after {lhs}, found {}",
                        describe(other)
                    ),
                ))
            }
        };
        self.bump();
        let rcol = self.col();
        let rhs = self.operand()?;
        check_dims(&lhs, lcol, &rhs, rcol)?;
        Ok(Expr::Compare { lhs, op, rhs })
    }

    fn operand(&mut self) -> Result<Operand, ParseError> {
        let col = self.col();
        match self.bump() {
            Some(Tok::Num(value, dim, _, text)) => Ok(Operand::Number { value, dim, text }),
            Some(Tok::Ident(name)) => {
                let Some(def) = metric_def(&name) else {
                    let known: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
                    return Err(err(
                        col,
                        format!("unknown metric '{name}' (metrics: {})", known.join(", ")),
                    ));
                };
                if self.peek() != Some(&Tok::LParen) {
                    return Ok(Operand::Metric {
                        name: def.name,
                        selector: None,
                    });
                }
                let pcol = self.col();
                self.bump();
                if def.scope == Scope::Run {
                    return Err(err(
                        pcol,
                        format!(
                            "{} is a figure of the whole run: it takes no object",
                            def.name
                        ),
                    ));
                }
                let scol = self.col();
                let selector = match self.bump() {
                    Some(Tok::Str(s)) if !s.trim().is_empty() => s,
                    Some(Tok::Str(_)) => return Err(err(scol, "empty object selector")),
                    other => {
                        return Err(err(
                            scol,
                            format!(
                                "expected a quoted object name or creation site (\"queue.c:41\"), found {}",
                                describe(other.as_ref())
                            ),
                        ))
                    }
                };
                if self.peek() != Some(&Tok::RParen) {
                    return Err(err(
                        self.col(),
                        format!(
                            "expected ')' after the selector, found {}",
                            describe(self.peek())
                        ),
                    ));
                }
                self.bump();
                Ok(Operand::Metric {
                    name: def.name,
                    selector: Some(selector),
                })
            }
            other => Err(err(
                col,
                format!(
                    "expected a metric or a number, found {}",
                    describe(other.as_ref())
                ),
            )),
        }
    }
}

/// Refuses comparisons of different things: a time with a count, a bare number with a time.
fn check_dims(lhs: &Operand, lcol: usize, rhs: &Operand, rcol: usize) -> Result<(), ParseError> {
    match (lhs.dim(), rhs.dim()) {
        (Some(a), Some(b)) if a != b => Err(err(
            rcol,
            format!("{lhs} is {} but {rhs} is {}", a.words(), b.words()),
        )),
        (Some(Dim::Time), None) => Err(err(
            rcol,
            format!("{lhs} is a time: give {rhs} a unit (ns, us, ms, s)"),
        )),
        (None, Some(Dim::Time)) => Err(err(
            lcol,
            format!("{rhs} is a time: give {lhs} a unit (ns, us, ms, s)"),
        )),
        (Some(Dim::Count), None) | (None, Some(Dim::Count)) => Ok(()),
        (None, None) => Err(err(lcol, "compare a metric, not two numbers")),
        _ => Ok(()),
    }
}

/// Parses one `--fail-if` expression.
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    if text.chars().count() > MAX_LEN {
        return Err(err(MAX_LEN, format!("longer than {MAX_LEN} characters")));
    }
    let toks = lex(text)?;
    if toks.is_empty() {
        return Err(err(1, "empty expression"));
    }
    let end = text.chars().count() + 1;
    let mut p = Parser { toks, pos: 0, end };
    let e = p.expr(0)?;
    if p.pos < p.toks.len() {
        return Err(err(
            p.col(),
            format!(
                "unexpected {} after a complete condition (join conditions with && or ||)",
                describe(p.peek())
            ),
        ));
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(text: &str) -> usize {
        parse(text).expect_err(text).column
    }

    #[test]
    fn parses_the_documented_examples() {
        for t in [
            "hwm > 3",
            "deadlocks > 0",
            "inversions > 0",
            "wait_total(\"queue.c:41\") > 200ms",
            "contended_ratio > 0.2",
            "lost_parallelism > 30%",
            "hwm > 3 && (waits >= 10 || !(wait_max < 1s))",
            "wait_share('stats_lock') != 0",
            "1_000 < acquisitions",
            "wait_total > wait_max",
        ] {
            parse(t).unwrap_or_else(|e| panic!("{t}: {}", e.render(t)));
        }
    }

    #[test]
    fn units_are_converted_to_base_units() {
        let e = parse("wait_total > 1.5ms").unwrap();
        let mut seen = Vec::new();
        e.eval::<()>(&mut |o| {
            if let Operand::Number { value, .. } = o {
                seen.push(*value);
            }
            Ok(0.0)
        })
        .unwrap();
        assert_eq!(seen, vec![1.5e6]);
        let e = parse("lost_parallelism > 30%").unwrap();
        let r = e.eval::<()>(&mut |o| {
            Ok(if matches!(o, Operand::Metric { .. }) {
                0.31
            } else if let Operand::Number { value, .. } = o {
                *value
            } else {
                0.0
            })
        });
        assert_eq!(r, Ok(true));
    }

    #[test]
    fn precedence_and_binds_tighter_than_or() {
        let e = parse("hwm > 1 || hwm > 2 && hwm > 3").unwrap();
        assert!(matches!(e, Expr::Or(_, _)), "{e}");
        let e = parse("!hwm > 1 && threads > 2").unwrap();
        assert!(matches!(e, Expr::And(_, _)), "{e}");
    }

    #[test]
    fn errors_name_the_column() {
        assert_eq!(col("hwm >"), 6);
        assert_eq!(col("hwm 3"), 5);
        assert_eq!(col("hwn > 3"), 1);
        assert_eq!(col("hwm > 3 &&"), 11);
        assert_eq!(col("hwm > 3 & threads > 1"), 9);
        assert_eq!(col("wait_total > 200"), 14);
        assert_eq!(col("wait_total > 200xs"), 17);
        assert_eq!(col("(hwm > 3"), 9);
        assert_eq!(col("hwm > 3)"), 8);
        assert_eq!(col("deadlocks(\"a\") > 0"), 10);
        assert_eq!(col("wait_total(a) > 1ms"), 12);
        assert_eq!(col("hwm > 3%"), 7);
        assert_eq!(col("wait_total(\"x\" > 1ms"), 16);
        assert_eq!(col(""), 1);
        assert_eq!(col("3 > 2"), 1);
        assert_eq!(col("hwm > \"x"), 7);
        let e = parse("hwm = 3").unwrap_err();
        assert!(
            e.render("hwm = 3").contains("\n      ^"),
            "{}",
            e.render("hwm = 3")
        );
    }

    #[test]
    fn deep_nesting_is_refused_not_recursed() {
        let deep = format!("{}hwm > 1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).is_err());
        let bangs = format!("{}hwm > 1", "!".repeat(100_000));
        assert!(parse(&bangs).is_err());
        let ok = format!("{}hwm > 1{}", "(".repeat(30), ")".repeat(30));
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn no_input_panics() {
        // Every prefix of some tricky texts, and a cheap deterministic fuzz of token soup.
        let texts = [
            "wait_total(\"q\\\"ueue.c:41\") >= 2.5ms && !(hwm != 3 || lost_parallelism < 1%)",
            "µs 'é' ( ) , && || ! > >= < <= == != 1.2.3 .5 5. ",
        ];
        for t in texts {
            let chars: Vec<char> = t.chars().collect();
            for n in 0..=chars.len() {
                let s: String = chars[..n].iter().collect();
                let _ = parse(&s);
            }
        }
        let pieces = [
            "hwm",
            "(",
            ")",
            "&&",
            "||",
            "!",
            ">",
            "==",
            "3",
            "2ms",
            "\"x\"",
            "'",
            "%",
            " ",
            "wait_total",
            "é",
            "=",
            "&",
            "1e5",
            ".",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            let mut s = String::new();
            for _ in 0..(state % 12) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                s.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            state = state.wrapping_add(1);
            if let Err(e) = parse(&s) {
                assert!(
                    e.column >= 1 && e.column <= s.chars().count() + 1,
                    "{s:?}: {e:?}"
                );
            }
        }
    }
}
