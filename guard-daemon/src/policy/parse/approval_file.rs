//! inspect_ai's approval policies in their own file, JSON or YAML (`read_approval_policies`):
//! `approvers: [{name, tools, ...}]`, named by `[settings] approval_policies`. Each entry is an
//! `[[approvers]]` of the policy, after the TOML's own, and means what inspect_ai means by it:
//! `auto` with its `decision`, `human` with its `choices` (checked as `[[approvers]]`'
//! are); guard's own approvers by their policy names (`judge:NAME`, `command:[...]` with its `timeout`). An entry guard cannot
//! use (an approver of inspect_ai's Python registry, a choice guard's human does not have) is
//! an error naming its line, never skipped.

use std::path::Path;

use serde::Deserialize;

use crate::policy::{
    PolicyError,
    raw::{RawApprover, RawEffects},
    source::{Diag, Loc, S, Sources},
};

/// The file as inspect_ai writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    approvers: Vec<Entry>,
}

/// One approval policy: the approver's name, its tools, and the approver's arguments.
#[derive(Deserialize)]
struct Entry {
    name: String,
    tools: Tools,
    /// `auto`'s outcome.
    #[serde(default)]
    decision: Option<String>,
    /// `human`'s choices.
    #[serde(default)]
    choices: Option<Vec<String>>,
    /// A `command:[...]` approver's, in seconds.
    #[serde(default)]
    timeout: Option<i64>,
    /// Any other argument: an approver of inspect_ai's registry takes its own
    /// (`bash_allowlist`'s `allowed_commands`), which the name's error says first.
    #[serde(flatten)]
    other: std::collections::BTreeMap<String, serde_json::Value>,
}

/// `tools`: one name or glob, or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum Tools {
    One(String),
    Many(Vec<String>),
}

impl Tools {
    fn names(self) -> Vec<String> {
        match self {
            Self::One(t) => vec![t],
            Self::Many(t) => t,
        }
    }
}

/// Reads the approval policies files the policy files of `src` name (`[settings]
/// approval_policies`, relative to the file that names it) into `src`; the errors of those
/// that cannot be read. In a policy directory, a JSON or YAML file that no policy file names
/// is an error: guard's policy files are TOML, and a file it would skip is never silently so.
pub(crate) fn read(path: &Path, src: &mut Sources) -> Vec<PolicyError> {
    let mut errors = Vec::new();
    let mut reads = Vec::new();
    for (file, text) in &src.files {
        // Most policies name none: they are not parsed twice to find out.
        if !text.contains("approval_policies") {
            continue;
        }
        let Ok(doc) = toml::from_str::<toml::Table>(text) else {
            continue; // its syntax error is reported where it is parsed
        };
        let given = doc.get("settings").and_then(|s| s.get("approval_policies"));
        let Some(toml::Value::String(name)) = given else {
            continue;
        };
        let at = file.parent().unwrap_or(Path::new("/")).join(name);
        if !is_approval_file(&at) {
            let msg = "settings.approval_policies: an approval policies file is JSON \
                       (*.json) or YAML (*.yaml, *.yml)";
            errors.push(PolicyError::file(at, msg));
            continue;
        }
        match read_guarded(&at) {
            Ok(text) => reads.push((at, text)),
            Err(e) => errors.push(PolicyError::file(at, e)),
        }
    }
    let named: Vec<std::path::PathBuf> = reads.iter().map(|(at, _)| at.clone()).collect();
    for (at, text) in reads {
        src.add(at, text);
    }
    if path.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for p in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if is_approval_file(&p) && !named.contains(&p) {
                let msg = "not loaded: guard's policy files are TOML (*.toml), and a JSON or \
                           YAML file is read only as the approval policies file [settings] \
                           approval_policies names";
                errors.push(PolicyError::file(p, msg));
            }
        }
    }
    errors
}

/// The most bytes an approval policies file may hold.
const MAX_BYTES: u64 = 1 << 20;

/// The text of approval policies file `path`, read only when it is what a file guardd trusts
/// with its approvers must be: a regular file (a FIFO would hang every load and reload, a
/// device feed it without end), at most [`MAX_BYTES`], owned by root or by guardd's own uid
/// and writable by no one else (whoever can write it answers escalated calls).
fn read_guarded(path: &Path) -> Result<String, String> {
    use std::{
        io::Read as _,
        os::unix::fs::{MetadataExt as _, OpenOptionsExt as _},
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    let ours = effective_uid();
    if meta.uid() != 0 && meta.uid() != ours {
        return Err(format!(
            "owned by uid {}: an approval policies file must be root's (or guardd's own),              since whoever may write it answers escalated calls",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "writable by its group or others (mode {:o}): chmod go-w it",
            meta.mode() & 0o7777
        ));
    }
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_BYTES} allowed",
            meta.len()
        ));
    }
    let mut text = String::new();
    (file.take(MAX_BYTES + 1))
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_BYTES {
        return Err(format!("more than the {MAX_BYTES} bytes allowed"));
    }
    Ok(text)
}

/// guardd's effective uid.
fn effective_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Whether `path` names an approval policies file (by its extension).
pub(crate) fn is_approval_file(path: &Path) -> bool {
    path.extension()
        .is_some_and(|x| x == "json" || x == "yaml" || x == "yml")
}

/// The approvers of approval policies file `file` of `d`'s sources, `text`, numbered as the
/// file has them. Errors are reported at their line.
pub(crate) fn approvers(d: &mut Diag, file: usize, text: &str) -> Vec<RawApprover> {
    let parsed: Result<File, String> = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| located(text, e.line(), e.column(), &e))
    } else {
        yaml_serde::from_str(text).map_err(|e| match e.location() {
            Some(l) => located(text, l.line(), l.column(), &e),
            None => format!("0:{e}"),
        })
    };
    let file_at = |offset: usize| Loc {
        file,
        span: offset..offset,
    };
    let entries = match parsed {
        Ok(f) => f.approvers,
        Err(e) => {
            let (offset, message) = e.split_once(':').unwrap_or(("0", &e));
            let at = file_at(offset.parse().unwrap_or(0));
            d.err(&at, "approvers", message.trim());
            return Vec::new();
        }
    };
    let mut cursor = Cursor { text, at: 0, file };
    let mut out = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        if let Some(a) = entry(d, &mut cursor, i, e) {
            out.push(a);
        }
    }
    out
}

/// Entry `i` of the file as an `[[approvers]]`.
fn entry(d: &mut Diag, cursor: &mut Cursor, i: usize, e: Entry) -> Option<RawApprover> {
    let key = |k: &str| format!("approvers[{i}].{k}");
    let name = cursor.find(&e.name);
    let tools: Vec<S<String>> = e
        .tools
        .names()
        .into_iter()
        .map(|t| cursor.find(&t))
        .collect();
    if tools.is_empty() {
        let msg = "an approver must name at least one tool or glob";
        d.err(&name.at, &key("tools"), msg);
    }
    match name.v.as_str() {
        "human" | "auto" => {}
        n if n.starts_with("judge:") || n.starts_with("command:") => {}
        n => {
            let msg = format!(
                "approver '{n}' is none guard runs: 'auto', 'human', or guard's own \
                 'judge:NAME' and 'command:[\"/path\", ...]' (an approver of inspect_ai's \
                 Python registry is a command approver here)"
            );
            d.err(&name.at, &key("name"), msg);
            return None;
        }
    }
    for k in e.other.keys() {
        let at = cursor.find(k);
        let msg = format!(
            "'{k}' is no argument of guard's '{}' approver (auto takes decision, human \
             choices, command:[...] timeout)",
            name.v
        );
        d.err(&at.at, &key(k), msg);
    }
    let choices = e
        .choices
        .map(|c| c.iter().map(|x| cursor.find(x)).collect());
    Some(RawApprover {
        index: i,
        tools,
        decision: e.decision.map(|x| cursor.find(&x)),
        choices,
        timeout: e.timeout.map(|t| S {
            v: t,
            at: name.at.clone(),
        }),
        approver: Some(name),
        effects: RawEffects::default(),
    })
}

/// Where in the file each value of the entries was written, found in order: serde's
/// deserialisers keep no spans, so a value is looked for after the one before it.
struct Cursor<'t> {
    text: &'t str,
    at: usize,
    file: usize,
}

impl Cursor<'_> {
    /// `v` where it is written next (else where the last value was).
    fn find(&mut self, v: &str) -> S<String> {
        let found = self.text[self.at..].find(v).map(|i| self.at + i);
        let start = found.unwrap_or(self.at);
        if found.is_some() {
            self.at = start + v.len();
        }
        S {
            v: v.to_owned(),
            at: Loc {
                file: self.file,
                span: start..start + v.len(),
            },
        }
    }
}

/// `e` as "OFFSET:message", its offset that of `line` and `column` (1-based) in `text`.
fn located(text: &str, line: usize, column: usize, e: &impl std::fmt::Display) -> String {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let message = e.to_string();
    // The deserialisers end their messages with where; the error says that itself.
    let message = message.split(" at line ").next().unwrap_or(&message);
    format!("{}:{message}", start + column.saturating_sub(1))
}

#[cfg(test)]
mod tests;
