//! Whether one policy path reaches no further than another, by meaning rather than text:
//! `{workspace}/src` is within `/srv/ws` in the workspace `/srv/ws`, and `{cwd}` within
//! `{workspace}` (a caller's directory is always inside its workspace), while `{path}` is within
//! `{path}` only: an argument's reach is narrowed by its own `within`, not here. An absolute
//! path is compared as the kernel resolves it, as it is compiled (`validate::arg`): a project's
//! `{workspace}/link`, `link` pointing out of the workspace, reaches where `link` points.

use std::path::Path;

/// A policy path in a form that can be compared.
#[derive(Debug, PartialEq, Eq)]
enum Spot {
    /// An absolute path, `{workspace}` filled in: its components.
    Abs(Vec<String>),
    /// `{cwd}` and the components after it.
    Cwd(Vec<String>),
    /// A whole `{arg}` placeholder.
    Arg(String),
}

/// The components of `rest`, or `None` for a `..` (which could lead anywhere).
fn parts(rest: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => out.push(c.to_owned()),
        }
    }
    Some(out)
}

/// The components of absolute `parts` once the file system has resolved them (symlinks in the
/// longest prefix that exists; the rest as written).
fn resolved(parts: Vec<String>) -> Option<Spot> {
    let path: std::path::PathBuf = std::iter::once("/".to_owned()).chain(parts).collect();
    let real = crate::policy::args::resolve(&path);
    Some(Spot::Abs(self::parts(&real.to_string_lossy())?))
}

/// `s` as a [`Spot`] in workspace `ws`; `None` for what cannot be compared (a relative path, a
/// `..`, a placeholder inside a component).
fn spot(ws: &Path, s: &str) -> Option<Spot> {
    if let Some(rest) = s.strip_prefix("{workspace}") {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let mut all = parts(&ws.to_string_lossy())?;
        all.extend(parts(rest)?);
        return resolved(all);
    }
    if let Some(rest) = s.strip_prefix("{cwd}") {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        return Some(Spot::Cwd(parts(rest)?));
    }
    if let Some(name) = s.strip_prefix('{').and_then(|n| n.strip_suffix('}')) {
        return (!name.contains(['{', '}', '/'])).then(|| Spot::Arg(name.to_owned()));
    }
    if !s.starts_with('/') || s.contains(['{', '}']) {
        return None;
    }
    resolved(parts(s)?)
}

/// Whether `narrow` reaches nothing `wide` does not, in workspace `ws`.
pub(super) fn path_within(ws: &Path, narrow: &str, wide: &str) -> bool {
    let (Some(n), Some(w)) = (spot(ws, narrow), spot(ws, wide)) else {
        return false;
    };
    match (n, w) {
        (Spot::Arg(a), Spot::Arg(b)) => a == b,
        (Spot::Abs(n), Spot::Abs(w)) | (Spot::Cwd(n), Spot::Cwd(w)) => n.starts_with(&w),
        (Spot::Cwd(_), Spot::Abs(w)) => {
            parts(&ws.to_string_lossy()).is_some_and(|ws| ws.starts_with(&w))
        }
        _ => false,
    }
}

/// Whether `narrow` is within one of `wide`.
pub(super) fn within_any<'a>(
    ws: &Path,
    narrow: &str,
    wide: impl IntoIterator<Item = &'a str>,
) -> bool {
    wide.into_iter().any(|w| path_within(ws, narrow, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_compared_by_what_they_reach() {
        let ws = Path::new("/srv/ws");
        let yes = [
            ("{workspace}/src", "{workspace}"),
            ("{workspace}/src", "/srv/ws"),
            ("/srv/ws/src/x", "{workspace}/src"),
            ("{workspace}", "/srv"),
            ("{cwd}/out", "{cwd}"),
            ("{cwd}", "{workspace}"),
            ("{cwd}/x", "/"),
            ("{path}", "{path}"),
            ("/usr/bin/git", "/usr/bin"),
            ("/usr/bin/", "/usr/bin"),
        ];
        for (n, w) in yes {
            assert!(path_within(ws, n, w), "{n} within {w}");
        }
        let no = [
            ("{workspace}", "{workspace}/src"),
            ("/srv/wsx", "{workspace}"),
            ("/srv/ws/../etc", "{workspace}"),
            ("{workspace}/../x", "{workspace}"),
            ("{workspace}", "{cwd}"),
            ("{cwd}", "{cwd}/src"),
            ("{path}", "{other}"),
            ("/srv/ws/x", "{path}"),
            ("{path}", "/"),
            ("relative", "/"),
            ("/usr/bin", "/usr/bin/git"),
            ("/usr/binx", "/usr/bin"),
        ];
        for (n, w) in no {
            assert!(!path_within(ws, n, w), "{n} not within {w}");
        }
    }

    /// A link in the workspace that points out of it reaches where it points (issue 49: a
    /// project's `within = ["<ws>/link"]` read outside the workspace).
    #[test]
    fn a_symlink_is_compared_where_it_points() {
        let dir = crate::audit::testdir::TestDir::new("within-link");
        let ws = std::fs::canonicalize(dir.path()).expect("real");
        std::os::unix::fs::symlink("/etc", ws.join("link")).expect("symlink");
        std::fs::create_dir(ws.join("src")).expect("src");
        let lit = |rest: &str| format!("{}/{rest}", ws.display());
        assert!(!path_within(&ws, &lit("link"), "{workspace}"));
        assert!(!path_within(&ws, "{workspace}/link", "{workspace}"));
        assert!(!path_within(
            &ws,
            &lit("link/passwd"),
            &ws.to_string_lossy()
        ));
        assert!(path_within(&ws, &lit("link"), "/etc"));
        assert!(path_within(&ws, &lit("src"), "{workspace}"));
        assert!(path_within(&ws, &lit("new/file"), "{workspace}"));
    }
}
