//! `cargo xtask docs`: guard's book (`docs/book/`), its links checked, built with mdbook into
//! `target/book/html`. The book is built from a copy in `target/book`, where the performance
//! page gets the table of the last `cargo xtask bench` (`target/bench/report.json`) when there
//! is one: the numbers a reader sees then carry the commit and host they were measured on, and
//! nobody copies them by hand. `cargo xtask setup` installs mdbook; `cargo xtask test` builds
//! the book (so CI does), and `cargo xtask install` installs its HTML.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{links, repo, toolchain};

/// The mdbook release setup installs (`cargo install --locked`).
pub const MDBOOK_VERSION: &str = "0.5.4";

/// Where the book's source is, in the repository.
const BOOK: &str = "docs/book";
/// The performance page, whose marked region the bench's table replaces.
const PERFORMANCE: &str = "src/performance.md";
const REPORT_START: &str = "<!-- BENCH-REPORT:";
const REPORT_END: &str = "<!-- BENCH-REPORT-END -->";

/// The mdbook to run: on PATH, else cargo's bin directory; None when neither answers with
/// [`MDBOOK_VERSION`].
fn mdbook() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("mdbook"))
            .find(|p| p.is_file())
    });
    let candidates = on_path
        .into_iter()
        .chain([toolchain::cargo_home().join("bin/mdbook")]);
    candidates.into_iter().find(|p| {
        Command::new(p).arg("--version").output().is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .ends_with(&format!("v{MDBOOK_VERSION}"))
        })
    })
}

/// mdbook [`MDBOOK_VERSION`], installed with cargo when missing (no root needed): `Ok(None)`
/// when it was there, `Ok(Some(what))` when it was installed, `Err(why)` when it could not be.
pub fn ensure_mdbook() -> Result<Option<String>, String> {
    if mdbook().is_some() {
        return Ok(None);
    }
    // The search feature only: no web server or file watcher in a build tool.
    let status = Command::new("cargo")
        .args(["install", "--locked", "--force", "mdbook", "--version"])
        .arg(MDBOOK_VERSION)
        .args(["--no-default-features", "--features", "search"])
        .status()
        .map_err(|e| format!("running cargo install mdbook: {e}"))?;
    match mdbook() {
        Some(_) if status.success() => Ok(Some(format!(
            "installed mdbook {MDBOOK_VERSION}, which builds the book"
        ))),
        _ => Err(format!(
            "`cargo install --locked mdbook --version {MDBOOK_VERSION}` failed; see its output above"
        )),
    }
}

/// Checks the book's links, builds it in `target/book`, and returns the directory of its HTML.
pub fn docs() -> Result<PathBuf> {
    build(&repo::root().join("target/book"))
}

/// Checks the book's links and builds it from a copy in `staged` (a directory of `target/`,
/// removed first), and returns the directory of its HTML, `staged/html`. Installs build in a
/// directory of their own, so that two at once (the tests run them side by side) do not remove
/// each other's.
pub fn build(staged: &Path) -> Result<PathBuf> {
    let root = repo::root();
    let source = root.join(BOOK);
    let mut pages = links::markdown_files(&source.join("src"))?;
    pages.push(root.join("README.md"));
    let broken = links::check(&root, &pages)?;
    if !broken.is_empty() {
        bail!("broken links in the book:\n{}", broken.join("\n"));
    }
    let Some(mdbook) = mdbook() else {
        bail!("mdbook {MDBOOK_VERSION} is not installed: run `cargo xtask setup`");
    };
    // The copy sits as deep as the source (target/NAME/src), so the pages'
    // `{{#include ../../../README.md}}` finds the README from either.
    if staged.parent() != Some(root.join("target").as_path()) {
        bail!(
            "the book is staged in a directory of target/, not {}",
            staged.display()
        );
    }
    let html = staged.join("html");
    if staged.exists() {
        fs::remove_dir_all(staged).with_context(|| format!("removing {}", staged.display()))?;
    }
    copy_dir(&source, staged)?;
    let report = root.join("target/bench/report.json");
    if report.exists() {
        let text = fs::read_to_string(&report)?;
        let json: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("reading {}", report.display()))?;
        let page = staged.join(PERFORMANCE);
        let with_table = with_report(&fs::read_to_string(&page)?, &crate::report::render(&json))?;
        fs::write(&page, with_table)?;
        println!(
            "docs: the performance page has the table of {}",
            report.display()
        );
    }
    repo::check(
        Command::new(mdbook)
            .arg("build")
            .arg(staged)
            .arg("--dest-dir")
            .arg(&html),
    )?;
    println!("docs: {}", html.join("index.html").display());
    Ok(html)
}

/// `page` with its bench region (the lines from [`REPORT_START`] to [`REPORT_END`]) replaced by
/// `table`.
fn with_report(page: &str, table: &str) -> Result<String> {
    let (Some(start), Some(end)) = (page.find(REPORT_START), page.find(REPORT_END)) else {
        bail!("{PERFORMANCE} has no {REPORT_START} ... {REPORT_END} region");
    };
    let end = end + REPORT_END.len();
    Ok(format!("{}{table}{}", &page[..start], &page[end..]))
}

/// Copies the directory `from` to `to` (made), files and folders.
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            fs::copy(&src, &dst)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
        }
    }
    Ok(())
}

/// Every file beneath `dir`, as paths relative to it, sorted.
pub fn files_beneath(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                dirs.push(entry.path());
            } else if let Ok(rel) = entry.path().strip_prefix(dir) {
                out.push(rel.to_owned());
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_replaces_the_marked_region_only() {
        let page =
            "before\n<!-- BENCH-REPORT: x -->\nold table\n<!-- BENCH-REPORT-END -->\nafter\n";
        assert_eq!(
            with_report(page, "NEW").expect("region"),
            "before\nNEW\nafter\n"
        );
        assert!(with_report("no region", "NEW").is_err());
    }

    #[test]
    fn the_books_performance_page_has_its_region() {
        let page = repo::root().join(BOOK).join(PERFORMANCE);
        let text = fs::read_to_string(page).expect("the performance page");
        assert!(with_report(&text, "").is_ok());
    }
}
