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
    pub action: Decision,
    pub message: String,
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
    /// must satisfy every condition given.
    pub fn matches<'a>(&self, subjects: &'a [Subject<'a>]) -> Option<Option<&'a str>> {
        if self.regex.is_none() && self.equals.is_none() && self.detect.is_empty() {
            return Some(None);
        }
        subjects
            .iter()
            .filter(|s| self.arg.as_deref().is_none_or(|a| a == s.arg))
            .find(|s| self.holds(&s.text))
            .map(|s| Some(s.arg))
    }

    fn holds(&self, text: &str) -> bool {
        self.equals.as_deref().is_none_or(|e| e == text)
            && self.regex.as_ref().is_none_or(|r| r.is_match(text))
            && (self.detect.is_empty() || self.detect.iter().any(|d: Detector| d.is_match(text)))
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
