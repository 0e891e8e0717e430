//! `waitshim-analyze policy check FILE`: validates a policy file offline, with the parser the
//! shim uses, and says in words what it will collect.

use std::io::Write;
use std::path::Path;

/// Exit code for a file that was read but is not a valid policy.
pub const EXIT_INVALID: i32 = 1;
/// Exit code for a file that could not be read at all.
pub const EXIT_UNREADABLE: i32 = 2;

/// Checks the policy at `path`: on success prints `<path>: valid policy, N rules` and the
/// explanation on `out` and returns 0; otherwise prints one line on `err` and returns
/// [`EXIT_INVALID`] or [`EXIT_UNREADABLE`].
pub fn run(path: &Path, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let shown = path.display();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze: {shown}: cannot read: {e}");
            return EXIT_UNREADABLE;
        }
    };
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(
                err,
                "waitshim-analyze: {shown}: not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            );
            return EXIT_INVALID;
        }
    };
    match waitshim_policy::parse(&text) {
        Ok(policy) => {
            let n = policy.rules.len();
            let plural = if n == 1 { "" } else { "s" };
            let _ = write!(
                out,
                "{shown}: valid policy, {n} rule{plural}\n{}",
                waitshim_policy::explain(&policy)
            );
            0
        }
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze: {shown}: {e}");
            EXIT_INVALID
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the check on a file holding `content`; returns (code, stdout, stderr, path).
    fn check(content: &[u8]) -> (i32, String, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.json");
        std::fs::write(&path, content).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&path, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            path.display().to_string(),
        )
    }

    #[test]
    fn a_valid_policy_is_explained() {
        let (code, out, err, path) = check(
            br#"{"rules": [
                {"name": "db", "match": {"kind": "mutex", "creation_site": "db_*"},
                 "when": {"min_waiters": 3}, "actions": ["record", "waiter_chain"]},
                {"actions": "count"}]}"#,
        );
        assert_eq!(code, 0);
        assert_eq!(err, "");
        let mut lines = out.lines();
        assert_eq!(
            lines.next(),
            Some(format!("{path}: valid policy, 2 rules").as_str())
        );
        assert!(out.contains("Rule 1 \"db\":\n  applies to: waits on mutexes created in a function matching \"db_*\""), "{out}");
        assert!(
            out.contains("only when at least 3 threads wait on the object"),
            "{out}"
        );
        assert!(out.contains("Rule 2 selects every wait"), "{out}");
    }

    #[test]
    fn one_rule_is_singular_and_no_rules_is_allowed() {
        let (code, out, _, path) = check(br#"{"rules": [{"actions": "count"}]}"#);
        assert_eq!(code, 0);
        assert!(
            out.starts_with(&format!("{path}: valid policy, 1 rule\n")),
            "{out}"
        );
        let (code, out, _, path) = check(br#"{"rules": []}"#);
        assert_eq!(code, 0);
        assert!(
            out.starts_with(&format!("{path}: valid policy, 0 rules\n")),
            "{out}"
        );
        assert!(
            out.contains("No rules: nothing expensive is collected"),
            "{out}"
        );
    }

    #[test]
    fn an_invalid_policy_gives_one_line_and_exit_1() {
        let (code, out, err, path) = check(
            br#"{"rules": [{"actions": "count"}, {"when": {"min_waiter": 3}, "actions": "count"}]}"#,
        );
        assert_eq!(code, EXIT_INVALID);
        assert_eq!(out, "");
        assert_eq!(
            err,
            format!("waitshim-analyze: {path}: rules[1].when: unknown field \"min_waiter\"; valid: min_waiters, max_waiters, granularity, every_nth, min_wait, min_stack_depth\n")
        );
        let (code, _, err, path) = check(b"{\n\"rules\": [\n");
        assert_eq!(code, EXIT_INVALID);
        assert_eq!(
            err,
            format!("waitshim-analyze: {path}: invalid JSON at line 3, column 0: EOF while parsing a list\n")
        );
        let (code, _, err, path) = check(b"{\"rules\": [], \"stack_signal\": \"\xff\"}");
        assert_eq!(code, EXIT_INVALID);
        assert_eq!(
            err,
            format!("waitshim-analyze: {path}: not UTF-8 text (invalid byte at offset 31)\n")
        );
    }

    #[test]
    fn an_unreadable_file_gives_exit_2() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run(&missing, &mut out, &mut err), EXIT_UNREADABLE);
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.starts_with(&format!(
                "waitshim-analyze: {}: cannot read: ",
                missing.display()
            )),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1);
        assert!(out.is_empty());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run(dir.path(), &mut out, &mut err), EXIT_UNREADABLE);
    }
}
