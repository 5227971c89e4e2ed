//! Where a policy came from: source files, locations in them, and load errors that point there.

use std::{fmt, ops::Range, path::PathBuf};

/// A span in one of the policy's source files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Loc {
    pub file: usize,
    pub span: Range<usize>,
}

/// A value with where it was written.
#[derive(Clone, Debug)]
pub(crate) struct S<T> {
    pub v: T,
    pub at: Loc,
}

/// The text of every file of a policy, kept while loading to point errors at it.
#[derive(Default)]
pub(crate) struct Sources {
    pub files: Vec<(PathBuf, String)>,
}

impl Sources {
    /// Adds a file; its index is the `file` of every [`Loc`] in it.
    pub fn add(&mut self, path: PathBuf, text: String) -> usize {
        self.files.push((path, text));
        self.files.len() - 1
    }

    /// An error at `at`, with 1-based line and column (in characters) and the source line.
    pub fn error(&self, at: &Loc, key: &str, message: impl fmt::Display) -> PolicyError {
        let (path, text) = match self.files.get(at.file) {
            Some((p, t)) => (p.clone(), t.as_str()),
            None => (PathBuf::new(), ""),
        };
        let start = floor_char_boundary(text, at.span.start.min(text.len()));
        let before = &text[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = text[line_start..start].chars().count() + 1;
        let source_line = text[line_start..].lines().next().unwrap_or("").to_string();
        PolicyError {
            file: path,
            position: Some((line, col)),
            key: key.to_string(),
            message: message.to_string(),
            source_line,
        }
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// One problem in a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub file: PathBuf,
    /// 1-based line and column; `None` for errors about a whole file (cannot read it).
    pub position: Option<(usize, usize)>,
    /// Dotted key path, e.g. `tools.read_file.args.path.within`; empty when not about a key.
    pub key: String,
    pub message: String,
    /// The offending line of the source, shown under the message.
    pub source_line: String,
}

impl PolicyError {
    /// An error about a whole file, such as one that cannot be read.
    pub(crate) fn file(file: PathBuf, message: impl fmt::Display) -> Self {
        Self {
            file,
            position: None,
            key: String::new(),
            message: message.to_string(),
            source_line: String::new(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        f.write_str(": ")?;
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)?;
        if let Some((line, col)) = self.position {
            write!(f, "\n{line:>5} | {}", self.source_line)?;
            write!(f, "\n      | {}^", " ".repeat(col.saturating_sub(1)))?;
        }
        Ok(())
    }
}

/// Every error found in a policy, not just the first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl PolicyErrors {
    /// The errors, in the order they were found.
    pub fn iter(&self) -> impl Iterator<Item = &PolicyError> {
        self.0.iter()
    }
    /// How many errors there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Collects errors while loading.
pub(crate) struct Diag<'s> {
    pub src: &'s Sources,
    pub errors: Vec<PolicyError>,
}

impl<'s> Diag<'s> {
    /// No errors yet, for the files of `src`.
    pub fn new(src: &'s Sources) -> Self {
        Self {
            src,
            errors: Vec::new(),
        }
    }
    /// Records an error and goes on, so one load reports every problem, not just the first.
    pub fn err(&mut self, at: &Loc, key: &str, message: impl fmt::Display) {
        let e = self.src.error(at, key, message);
        self.errors.push(e);
    }
}
