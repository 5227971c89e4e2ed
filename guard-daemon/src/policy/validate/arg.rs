//! Checks of one declared argument: which keys its type allows, whether its bounds can be met,
//! and its roots, hosts and pattern compiled for decision time.

use std::path::{Path, PathBuf};

use super::anchored;
use crate::policy::{
    args::{ArgSpec, normalize},
    raw::{ArgType, RawArg},
    source::{Diag, Loc, S},
    template::{self, Elem},
};

/// Argument names a template could not tell from the call's context.
const RESERVED: &[&str] = &["workspace", "cwd"];

/// Where a key was written, when it was.
type Given = fn(&RawArg) -> Option<&Loc>;

const STRINGS: &[ArgType] = &[ArgType::String, ArgType::Path, ArgType::Url, ArgType::Enum];

/// Keys that apply only to some argument types, and those types. Written for another type, a
/// key would be ignored when a call is checked, and the policy would not say what its author
/// meant; so it is refused at load.
const ONLY: &[(&str, &[ArgType], Given)] = &[
    ("within", &[ArgType::Path], |a| first(&a.within)),
    ("base", &[ArgType::Path], |a| at(&a.base)),
    ("hosts", &[ArgType::Url], |a| first(&a.hosts)),
    ("schemes", &[ArgType::Url], |a| first(&a.schemes)),
    ("min", &[ArgType::Integer], |a| at(&a.min)),
    ("max", &[ArgType::Integer], |a| at(&a.max)),
    ("pattern", STRINGS, |a| at(&a.pattern)),
    ("max_len", STRINGS, |a| at(&a.max_len)),
    ("values", &[ArgType::Enum, ArgType::String], |a| {
        first(&a.values)
    }),
];

fn first(list: &[S<String>]) -> Option<&Loc> {
    list.first().map(|s| &s.at)
}

fn at<T>(v: &Option<S<T>>) -> Option<&Loc> {
    v.as_ref().map(|s| &s.at)
}

/// Compiles argument `a` of tool key `tk`, reporting what cannot work.
pub(super) fn arg(d: &mut Diag, tk: &str, a: &RawArg) -> ArgSpec {
    let ak = format!("{tk}.args.{}", a.name.v);
    if RESERVED.contains(&a.name.v.as_str()) {
        d.err(
            &a.name.at,
            &ak,
            format!(
                "'{}' is reserved: {{{}}} names the call's own",
                a.name.v, a.name.v
            ),
        );
    }
    let ty = a.ty.v;
    for (k, types, given) in ONLY {
        if let Some(at) = given(a)
            && !types.contains(&ty)
        {
            let names: Vec<_> = types.iter().map(|t| t.name()).collect();
            d.err(
                at,
                &format!("{ak}.{k}"),
                format!("applies only to {} arguments", names.join(" or ")),
            );
        }
    }
    satisfiable(d, &ak, a);
    let within = a
        .within
        .iter()
        .filter_map(|s| root(d, &ak, s, "within"))
        .collect();
    let base = a.base.as_ref().and_then(|s| root(d, &ak, s, "base"));
    hosts(d, &ak, &a.hosts);
    let max_len = a.max_len.as_ref().and_then(|m| {
        if m.v < 0 {
            d.err(&m.at, &format!("{ak}.max_len"), "must not be negative");
            None
        } else {
            Some(m.v as usize)
        }
    });
    ArgSpec {
        name: a.name.v.clone(),
        ty,
        required: a.required,
        within,
        base,
        pattern: a
            .pattern
            .as_ref()
            .and_then(|p| anchored(d, p, &format!("{ak}.pattern"))),
        values: a.values.iter().map(|s| s.v.clone()).collect(),
        max_len,
        hosts: a.hosts.iter().map(|s| s.v.clone()).collect(),
        schemes: a.schemes.iter().map(|s| s.v.clone()).collect(),
        min: a.min.as_ref().map(|s| s.v),
        max: a.max.as_ref().map(|s| s.v),
    }
}

/// Refuses an argument no value can pass: a policy that can never allow the call is a mistake.
fn satisfiable(d: &mut Diag, ak: &str, a: &RawArg) {
    if a.ty.v == ArgType::Enum && a.values.is_empty() {
        d.err(
            &a.ty.at,
            &format!("{ak}.values"),
            "an enum argument needs values",
        );
    }
    if let (Some(lo), Some(hi)) = (&a.min, &a.max)
        && lo.v > hi.v
    {
        d.err(
            &hi.at,
            &format!("{ak}.max"),
            "max is below min: no value can pass",
        );
    }
}

/// A `within` or `base` root: absolute, normalised, or `{workspace}`, `{cwd}` (and a path
/// below).
fn root(d: &mut Diag, ak: &str, s: &S<String>, k: &str) -> Option<Elem<PathBuf>> {
    match template::context(&s.v) {
        Some(Ok((ctx, rest))) => return Some(Elem::Ctx(ctx, rest)),
        Some(Err(why)) => {
            d.err(&s.at, &format!("{ak}.{k}"), why);
            return None;
        }
        None => {}
    }
    if !s.v.starts_with('/') {
        d.err(
            &s.at,
            &format!("{ak}.{k}"),
            "must be an absolute path, {workspace} or {cwd}",
        );
        return None;
    }
    let p = normalize(Path::new(&s.v));
    // Resolve roots that exist, so that a root reached through a symlink (/tmp on some
    // systems) still contains the resolved argument.
    Some(Elem::Lit(std::fs::canonicalize(&p).unwrap_or(p)))
}

/// Host patterns are compared with the lowercased host of a url, so anything else (upper case,
/// a `*` elsewhere than a leading `*.`) could never match.
fn hosts(d: &mut Diag, ak: &str, hosts: &[S<String>]) {
    for h in hosts {
        let bare = h.v.strip_prefix("*.").unwrap_or(&h.v);
        if bare.is_empty()
            || bare.contains('*')
            || !bare.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' || c == ':'
            })
        {
            d.err(
                &h.at,
                &format!("{ak}.hosts"),
                format!("'{}' is not a lowercase host name or *.domain", h.v),
            );
        }
    }
}
