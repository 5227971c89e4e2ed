//! Content rules (Invariant-style): which tools, which argument, which condition, what action.

use regex::Regex;

use crate::{
    decision::Decision,
    detect::{Detector, DetectorSet},
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
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
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
