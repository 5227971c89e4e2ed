//! The book's link check, run by `cargo xtask docs` before it builds: every relative link of
//! the book's pages and of the README names a file that exists and, with `#anchor`, a heading
//! of that page; every repository path a page writes in backquotes (`guard-daemon/src/...`)
//! still exists. mdbook checks none of these, and a page moved or a file renamed would leave a
//! dead link that nobody clicks until a reader does.

use std::{
    collections::BTreeSet,
    fs,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context as _, Result};

/// The repository's top-level folders: a code span that starts with one of these and names a
/// path is held to exist.
const REPO_DIRS: &[&str] = &[
    "guard-common/",
    "guard-daemon/",
    "guard-ebpf/",
    "guard-mcp/",
    "xtask/",
    "tests/",
    "policies/",
    "clients/",
    "fuzz/",
    "docs/",
];

/// Every broken link of `files` (Markdown), as `file:line: what`; `root` is the repository.
pub fn check(root: &Path, files: &[PathBuf]) -> Result<Vec<String>> {
    let mut broken = Vec::new();
    for file in files {
        let text =
            fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (n, line) in prose_lines(&text) {
            let (links, spans) = scan(line);
            for target in links {
                if let Err(why) = check_link(file, &target) {
                    broken.push(format!("{shown}:{n}: {target}: {why}"));
                }
            }
            for span in spans.iter().filter(|s| is_repo_path(s)) {
                let path = span.trim_end_matches('/');
                if !root.join(path).exists() {
                    broken.push(format!(
                        "{shown}:{n}: `{span}`: no such path in the repository"
                    ));
                }
            }
        }
    }
    Ok(broken)
}

/// The Markdown files beneath `dir`, sorted.
pub fn markdown_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line's link targets (`[text](target)`, outside code spans) and its code spans.
fn scan(line: &str) -> (Vec<String>, Vec<String>) {
    let (mut links, mut spans, mut prose) = (Vec::new(), Vec::new(), String::new());
    let mut rest = line;
    while let Some(i) = rest.find('`') {
        prose.push_str(&rest[..i]);
        // A placeholder keeps `[x](`y`)` from reading as a link across the span.
        prose.push('\u{0}');
        let after = &rest[i + 1..];
        let Some(j) = after.find('`') else {
            rest = "";
            break;
        };
        spans.push(after[..j].to_owned());
        rest = &after[j + 1..];
    }
    prose.push_str(rest);
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(j) = after.find(')') else { break };
        let target = after[..j].trim();
        if !target.is_empty() && !target.contains('\u{0}') {
            links.push(target.to_owned());
        }
        rest = &after[j + 1..];
    }
    (links, spans)
}

/// Whether a code span names a path of the repository (no spaces, placeholders or globs).
fn is_repo_path(span: &str) -> bool {
    REPO_DIRS.iter().any(|d| span.starts_with(d))
        && !span.contains(|c: char| c.is_whitespace() || "*{}<>$|,:".contains(c))
}

/// Whether `target`, a link in `file`, leads somewhere: another site is not checked.
fn check_link(file: &Path, target: &str) -> Result<(), String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let dest = if path.is_empty() {
        file.to_owned()
    } else {
        normalize(&file.parent().unwrap_or(Path::new(".")).join(path))
    };
    if !dest.exists() {
        return Err(format!("no such file {}", dest.display()));
    }
    if anchor.is_empty() {
        return Ok(());
    }
    if dest.extension().is_none_or(|e| e != "md") {
        return Err("an anchor into a file that is no page".into());
    }
    let text = fs::read_to_string(&dest).map_err(|e| e.to_string())?;
    if heading_ids(&text).contains(anchor) {
        Ok(())
    } else {
        Err(format!("no heading #{anchor} in {}", dest.display()))
    }
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The ids mdbook (and GitHub) give a page's headings: the heading's text, lower-cased, its
/// spaces as `-`, everything but letters, digits, `-` and `_` dropped; a repeated id gets
/// `-1`, `-2`...
pub fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let id = slug(&plain(heading.trim()));
        let mut unique = id.clone();
        let mut n = 1;
        while ids.contains(&unique) {
            unique = format!("{id}-{n}");
            n += 1;
        }
        ids.insert(unique);
    }
    ids
}

/// A heading's text as rendered: link targets and Markdown's marks dropped.
fn plain(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(i) = rest.find("](") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find(')').map_or("", |j| &rest[i + j + 1..]);
    }
    out.push_str(rest);
    out.replace(['`', '*', '['], "").replace(']', "")
}

fn slug(text: &str) -> String {
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heading_ids_are_mdbooks() {
        let ids = heading_ids(
            "# `[settings]`\n## guardd's settings: `guardd.toml`\n```sh\n# not a heading\n```\n\
             ## `stdin`: a tool's input\n## Two\n## Two\n",
        );
        let want = [
            "settings",
            "guardds-settings-guarddtoml",
            "stdin-a-tools-input",
            "two",
            "two-1",
        ];
        assert_eq!(ids, want.iter().map(|s| s.to_string()).collect());
    }

    #[test]
    fn scan_finds_links_and_spans_but_no_link_inside_a_span() {
        let (links, spans) =
            scan("see [a](a.md#x) and `[b](b.md)` in `guard-daemon/src/lib.rs` [c](http://x)");
        assert_eq!(links, ["a.md#x", "http://x"]);
        assert_eq!(spans, ["[b](b.md)", "guard-daemon/src/lib.rs"]);
        assert!(is_repo_path("guard-daemon/src/lib.rs"));
        assert!(!is_repo_path("tests/suite/*.rs"));
        assert!(!is_repo_path("target/venv"));
    }

    #[test]
    fn a_dead_link_an_unknown_anchor_and_a_gone_path_are_each_reported() {
        let dir = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        fs::create_dir_all(dir.join("docs")).expect("dir");
        fs::write(dir.join("docs/b.md"), "# B\n## Part one\n").expect("b");
        let a = dir.join("docs/a.md");
        fs::write(
            &a,
            "[ok](b.md#part-one) [gone](c.md) [anchor](b.md#part-two) [self](#a)\n# A\n\
             `docs/b.md` `docs/nothing.md`\n```\n[in code](nowhere.md)\n```\n",
        )
        .expect("a");
        let broken = check(&dir, &[a]).expect("check");
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(broken.len(), 3, "{broken:#?}");
        assert!(broken[0].contains("c.md") && broken[0].starts_with("docs/a.md:1:"));
        assert!(broken[1].contains("#part-two"));
        assert!(broken[2].contains("docs/nothing.md"));
    }
}
