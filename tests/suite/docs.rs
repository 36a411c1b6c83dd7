//! The README is a front page (at most 15 KB, issue 26) and every relative
//! link in it and in docs/ leads somewhere: the file exists and, for a
//! `#section` link into a Markdown file, that file has the heading.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages whose links are checked: the README, every chapter in docs/,
/// and the other READMEs.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md"), repo().join("chains/README.md"), repo().join("python/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and
/// `_` dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    prose(&text)
        .lines()
        .filter_map(|l| l.trim_start_matches('#').strip_prefix(' ').filter(|_| l.starts_with('#')))
        .map(anchor)
        .collect()
}

/// The targets of the `[text](target)` links of `text`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn the_readme_is_a_front_page() {
    let size = std::fs::metadata(repo().join("README.md")).unwrap().len();
    assert!(size <= 15_000, "README.md is {size} bytes: move detail to docs/ (guide, design, results, python)");
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for needed in
        ["tools/test-all.sh", "cargo install --locked --path .", "pip install .", "## Worked example", "## Commands"]
    {
        assert!(readme.contains(needed), "README.md lacks {needed}");
    }
}

#[test]
fn every_relative_link_resolves() {
    let mut dead = Vec::new();
    for page in pages() {
        let text = prose(&std::fs::read_to_string(&page).unwrap());
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") || link.contains(' ') {
                continue;
            }
            let (path, section) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            if !target.exists() {
                dead.push(format!("{}: {link} (no such file)", page.display()));
            } else if !section.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&target).contains(&section.to_string())
            {
                dead.push(format!("{}: {link} (no such heading)", page.display()));
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}
