//! Templates: command elements, effects and cwd written with `{arg}` placeholders. A
//! placeholder is always a whole element, so an argument can never add argv elements or
//! splice itself into another one.

use std::{ffi::OsString, path::PathBuf};

use super::args::ArgValue;
use crate::plan::Endpoint;

/// A literal or one argument (by index into the tool's arguments).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Elem<L> {
    Lit(L),
    Arg(usize),
}

/// Splits `{name}` from a literal. `Err` when braces appear anywhere but around a whole
/// element, which would be either a typo or an attempt at a partial placeholder.
pub(crate) fn placeholder(s: &str) -> Result<Option<&str>, &'static str> {
    if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        if inner.is_empty() || inner.contains(['{', '}']) {
            return Err("malformed placeholder");
        }
        return Ok(Some(inner));
    }
    if s.contains(['{', '}']) {
        return Err("a placeholder must be a whole element, like \"{path}\"");
    }
    Ok(None)
}

/// argv elements; an absent optional argument drops its element.
pub(crate) fn argv(elems: &[Elem<String>], vals: &[Option<ArgValue>]) -> Vec<OsString> {
    elems
        .iter()
        .filter_map(|e| match e {
            Elem::Lit(s) => Some(OsString::from(s)),
            Elem::Arg(i) => vals.get(*i)?.as_ref().map(|v| match v {
                ArgValue::Path(p) => p.clone().into_os_string(),
                other => OsString::from(other.text().into_owned()),
            }),
        })
        .collect()
}

/// The path `e` names for this call; `None` for an optional argument not given.
pub(crate) fn path(e: &Elem<PathBuf>, vals: &[Option<ArgValue>]) -> Option<PathBuf> {
    match e {
        Elem::Lit(p) => Some(p.clone()),
        Elem::Arg(i) => match vals.get(*i)? {
            Some(ArgValue::Path(p)) => Some(p.clone()),
            _ => None,
        },
    }
}

/// The endpoint `e` names for this call: a url argument's host and port.
pub(crate) fn endpoint(e: &Elem<Endpoint>, vals: &[Option<ArgValue>]) -> Option<Endpoint> {
    match e {
        Elem::Lit(ep) => Some(ep.clone()),
        Elem::Arg(i) => match vals.get(*i)? {
            Some(ArgValue::Url { host, port, .. }) => Some(Endpoint {
                host: host.clone(),
                port: *port,
            }),
            _ => None,
        },
    }
}

/// The text `e` stands for in this call (an env value); `None` for an argument not given.
pub(crate) fn text(e: &Elem<String>, vals: &[Option<ArgValue>]) -> Option<String> {
    match e {
        Elem::Lit(s) => Some(s.clone()),
        Elem::Arg(i) => vals.get(*i)?.as_ref().map(|v| v.text().into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_whole_elements() {
        assert_eq!(placeholder("{path}"), Ok(Some("path")));
        assert_eq!(placeholder("--"), Ok(None));
        assert!(placeholder("--file={path}").is_err());
        assert!(placeholder("{}").is_err());
        assert!(placeholder("{a}{b}").is_err());
    }

    #[test]
    fn argv_templating() {
        let elems = vec![
            Elem::Lit("/bin/cat".to_string()),
            Elem::Lit("--".into()),
            Elem::Arg(0),
            Elem::Arg(1),
        ];
        let vals = vec![Some(ArgValue::Path("/srv/a b".into())), None];
        assert_eq!(
            argv(&elems, &vals),
            vec![OsString::from("/bin/cat"), "--".into(), "/srv/a b".into()]
        );
        let vals = vec![Some(ArgValue::Int(7)), Some(ArgValue::Bool(true))];
        assert_eq!(
            argv(&elems, &vals)[2..],
            [OsString::from("7"), "true".into()]
        );
    }
}
