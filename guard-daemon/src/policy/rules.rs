//! Content rules (Invariant-style): which tools, which argument, which condition, what action.

use regex::Regex;

use crate::{
    call::decision::Decision,
    policy::detect::{Detector, DetectorSet},
};

/// One compiled `[[rules]]` entry.
#[derive(Debug)]
pub(crate) struct Rule {
    pub id: String,
    pub tools: Vec<String>,
    pub arg: Option<String>,
    /// Anchored: `^(?:regex)$`, a full match as the policy says.
    pub regex: Option<Regex>,
    pub equals: Option<String>,
    pub detect: DetectorSet,
    /// Conditions on other arguments (`[[rules.when]]`), every one of which must hold too.
    pub when: Vec<Condition>,
    pub action: Decision,
    pub message: String,
}

/// A condition on one argument: some string of it matches all that is given.
#[derive(Debug)]
pub(crate) struct Condition {
    pub arg: String,
    pub regex: Option<Regex>,
    pub equals: Option<String>,
    pub detect: DetectorSet,
}

impl Condition {
    /// Whether some string of its argument among `subjects` matches it.
    fn met(&self, subjects: &[Subject<'_>]) -> bool {
        (subjects.iter()).filter(|s| s.arg == self.arg).any(|s| {
            holds(
                self.equals.as_deref(),
                self.regex.as_ref(),
                self.detect,
                &s.text,
            )
        })
    }
}

/// Whether `text` satisfies every condition given of `equals`, `regex` and `detect`.
fn holds(equals: Option<&str>, regex: Option<&Regex>, detect: DetectorSet, text: &str) -> bool {
    equals.is_none_or(|e| e == text)
        && regex.is_none_or(|r| r.is_match(text))
        && (detect.is_empty() || detect.iter().any(|d: Detector| d.is_match(text)))
}

/// One string a rule looks at: the top-level argument it came from, and its text.
pub(crate) struct Subject<'a> {
    pub arg: &'a str,
    pub text: std::borrow::Cow<'a, str>,
}

impl Rule {
    /// Whether one of the rule's globs names `tool`.
    pub fn applies_to(&self, tool: &str) -> bool {
        self.tools.iter().any(|g| glob_match(g, tool))
    }

    /// The argument under which the rule matched, or `None`. A rule without conditions
    /// matches every call of its tools (a banned-tools rule); otherwise one single string
    /// must satisfy every condition of the rule's own, and each of its `when` conditions a
    /// string of its own argument (as Invariant's patterns bind several arguments at once).
    pub fn matches<'a>(&self, subjects: &'a [Subject<'a>]) -> Option<Option<&'a str>> {
        if !self.when.iter().all(|c| c.met(subjects)) {
            return None;
        }
        let first_when = || self.when.first().map(|c| c.arg.as_str());
        if self.regex.is_none() && self.equals.is_none() && self.detect.is_empty() {
            // The argument a `when` matched under: the subjects' own, for the borrow.
            let arg = first_when().and_then(|a| subjects.iter().find(|s| s.arg == a));
            return Some(arg.map(|s| s.arg));
        }
        let (equals, regex) = (self.equals.as_deref(), self.regex.as_ref());
        subjects
            .iter()
            .filter(|s| self.arg.as_deref().is_none_or(|a| a == s.arg))
            .find(|s| holds(equals, regex, self.detect, &s.text))
            .map(|s| Some(s.arg))
    }

    /// Every detector the rule looks with, its `when` conditions' too: what the audit log
    /// redacts from the arguments of its tools.
    pub fn detectors(&self) -> DetectorSet {
        (self.when.iter()).fold(self.detect, |acc, c| acc.union(c.detect))
    }
}

/// fnmatch-style globs as inspect_ai uses for tool names: `*` any run, `?` one character.
/// Walks both strings in place: an unknown tool is matched against every rule's globs, so this
/// runs a hundred times per decision and must not allocate.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    // The character at byte offset `i` (a boundary) and its length.
    let at = |s: &str, i: usize| s[i..].chars().next().map(|c| (c, c.len_utf8()));
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and how much of the name it has taken so far.
    let mut star: Option<(usize, usize)> = None;
    while let Some((nc, nlen)) = at(name, ni) {
        match at(pattern, pi) {
            Some((pc, plen)) if pc == '?' || pc == nc => {
                pi += plen;
                ni += nlen;
            }
            Some(('*', _)) => {
                star = Some((pi, ni));
                pi += 1;
            }
            _ => {
                let Some((sp, sn)) = star else {
                    return false;
                };
                let taken = sn + at(name, sn).map_or(0, |(_, l)| l);
                (pi, ni) = (sp + 1, taken);
                star = Some((sp, taken));
            }
        }
    }
    pattern[pi..].bytes().all(|c| c == b'*')
}

/// Whether `s` holds glob characters, so an error can say "glob" or "tool" as the author meant.
pub(crate) fn is_glob(s: &str) -> bool {
    s.contains(['*', '?'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("file_*", "file_read"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("f?le", "file"));
        assert!(glob_match("*_email", "send_email"));
        assert!(!glob_match("file_*", "read_file"));
        assert!(!glob_match("send_email", "send_emails"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("é?*", "éàx"));
        assert!(glob_match("?", "é"));
        assert!(!glob_match("??", "é"));
        assert!(glob_match("*é", "aéé"));
    }

    #[test]
    fn conditions_hold_together() {
        let r = Rule {
            id: "r".into(),
            tools: vec!["send_email".into()],
            arg: Some("to".into()),
            regex: Some(Regex::new(r"^(?:.*@disallowed\.com)$").unwrap()),
            equals: None,
            detect: [Detector::Email].into_iter().collect(),
            when: Vec::new(),
            action: Decision::Block,
            message: String::new(),
        };
        let s = |arg: &'static str, t: &'static str| Subject {
            arg,
            text: t.into(),
        };
        assert_eq!(
            r.matches(&[s("to", "alice@disallowed.com")]),
            Some(Some("to"))
        );
        assert_eq!(r.matches(&[s("to", "bob@allowed.com")]), None);
        assert_eq!(
            r.matches(&[s("body", "alice@disallowed.com")]),
            None,
            "other arg"
        );
        assert_eq!(
            r.matches(&[s("to", "x@disallowed.com.evil")]),
            None,
            "full match"
        );
    }
}
