//! Whether one policy path reaches no further than another, by meaning rather than text:
//! `{workspace}/src` is within `/srv/ws` in the workspace `/srv/ws`, and `{cwd}` within
//! `{workspace}` (a caller's directory is always inside its workspace), while `{path}` is within
//! `{path}` only: an argument's reach is narrowed by its own `within`, not here.

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

/// `s` as a [`Spot`] in workspace `ws`; `None` for what cannot be compared (a relative path, a
/// `..`, a placeholder inside a component).
fn spot(ws: &Path, s: &str) -> Option<Spot> {
    if let Some(rest) = s.strip_prefix("{workspace}") {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let mut all = parts(&ws.to_string_lossy())?;
        all.extend(parts(rest)?);
        return Some(Spot::Abs(all));
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
    Some(Spot::Abs(parts(s)?))
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
}
