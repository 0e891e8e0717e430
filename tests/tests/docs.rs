//! The documentation holds together: every relative link of the README and of `docs/` leads to a
//! file that exists and, with `#anchor`, to a heading that file has; every page of `docs/` is
//! reachable from the README.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use waitshim_tests::workspace_root;

/// The markdown files checked: the README, `docs/*.md`, and the other pages they link to.
fn pages() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut v = vec![
        root.join("README.md"),
        root.join("analyzer/JSON.md"),
        root.join("fixtures/README.md"),
    ];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v.retain(|p| p.is_file());
    v
}

/// Lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut code = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                code = !code;
                return false;
            }
            !code
        })
        .collect()
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    prose(&text)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .map(slug)
        .collect()
}

/// `(target)` of every `[text](target)` link in the prose.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in prose(text) {
        let mut rest = l;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(j) = rest.find(')') {
                let t = &rest[..j];
                if !t.contains(' ') {
                    out.push(t.to_string());
                }
                rest = &rest[j..];
            }
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_documentation_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = fs::read_to_string(&page).expect("read page");
        let dir = page.parent().expect("dir");
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if let Some(a) = anchor {
                if target.extension().is_some_and(|x| x == "md") && !anchors(&target).contains(a) {
                    broken.push(format!("{}: {link}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_docs_is_reachable_from_the_readme() {
    let root = workspace_root();
    // Pages reachable by following relative links from the README.
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut todo = vec![root.join("README.md")];
    while let Some(p) = todo.pop() {
        let Ok(canon) = p.canonicalize() else {
            continue;
        };
        if !seen.insert(canon.clone()) {
            continue;
        }
        let text = fs::read_to_string(&canon).unwrap_or_default();
        let dir = canon.parent().expect("dir").to_path_buf();
        for link in links(&text) {
            let file = link.split('#').next().unwrap_or("");
            if file.is_empty() || link.contains("://") || !file.ends_with(".md") {
                continue;
            }
            todo.push(dir.join(file));
        }
    }
    let orphans: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with(root.join("docs")))
        .filter(|p| !p.canonicalize().is_ok_and(|c| seen.contains(&c)))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        orphans.is_empty(),
        "pages no link from the README leads to: {orphans:?}"
    );
}

#[test]
fn headings_become_the_anchors_github_makes() {
    assert_eq!(slug("### Settings (environment)"), "settings-environment");
    assert_eq!(
        slug("#### Per-wait events: who woke whom"),
        "per-wait-events-who-woke-whom"
    );
    assert_eq!(slug("## In CI: `run`, `check`"), "in-ci-run-check");
}
