//! Values of a policy file as the policy's types: numbers, tiers, argument types, decisions,
//! account names, sizes, and an example's arguments as the JSON a client would send.

use serde_json::Value as Json;
use toml::de::DeValue;

use crate::{
    call::{
        decision::{Decision, RiskTier},
        plan::{Enforce, OnDivergence},
    },
    policy::{
        raw::{ArgType, Principal},
        table::{FromToml, ListItem, named},
    },
};

/// A number: a float or an integer (`min_score = 1`).
impl FromToml for f64 {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::Float(f) => f
                .as_str()
                .parse::<f64>()
                .map_err(|_| "not a number".to_string()),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .map(|n| n as f64)
                .map_err(|_| "integer out of range".to_string()),
            other => Err(format!("expected a number, found {}", other.type_str())),
        }
    }
}

impl FromToml for RiskTier {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        named(v, RiskTier::from_name, |s| {
            format!("unknown tier '{s}' (low | medium | high | critical)")
        })
    }
}

impl FromToml for ArgType {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        named(v, ArgType::from_name, |s| {
            format!("unknown type '{s}' (string | path | url | integer | boolean | enum)")
        })
    }
}

impl FromToml for OnDivergence {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let lookup = |s: &str| match s {
            "kill" => Some(OnDivergence::Kill),
            "deny" => Some(OnDivergence::Deny),
            _ => None,
        };
        named(v, lookup, |s| {
            format!("unknown on_divergence '{s}' (kill | deny)")
        })
    }
}

impl FromToml for Enforce {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let lookup = |s: &str| match s {
            "enforce" => Some(Enforce::Enforce),
            "shadow" => Some(Enforce::Shadow),
            _ => None,
        };
        named(v, lookup, |s| {
            format!("unknown enforce '{s}' (enforce | shadow)")
        })
    }
}

/// An example's `expect`: any decision, allow included.
impl FromToml for Decision {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        named(v, Decision::from_name, |s| {
            format!("unknown decision '{s}' (allow | escalate | quarantine | block)")
        })
    }
}

/// A rule's `action`: a decision other than allow (a rule only ever makes a call stricter).
pub(super) struct Action(pub Decision);

impl FromToml for Action {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let lookup = |s: &str| Decision::from_name(s).filter(|&a| a != Decision::Allow);
        named(v, lookup, |s| {
            format!("unknown action '{s}' (block | escalate | quarantine)")
        })
        .map(Action)
    }
}

/// A user or group name that `useradd` would accept.
pub(super) struct Account(pub String);

impl FromToml for Account {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        let s = String::from_toml(v)?;
        if valid_account_name(&s) {
            Ok(Account(s))
        } else {
            Err(format!("'{s}' is not a valid user or group name"))
        }
    }
}

impl FromToml for Principal {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::Integer(n) => u32::from_str_radix(n.as_str(), n.radix())
                .map(Principal::Id)
                .map_err(|_| "id out of range (0 to 4294967295)".to_string()),
            DeValue::String(s) if valid_account_name(s) => Ok(Principal::Name(s.to_string())),
            DeValue::String(s) => Err(format!("'{s}' is not a valid user or group name")),
            other => Err(format!(
                "expected an id or a name, found {}",
                other.type_str()
            )),
        }
    }
}

impl ListItem for Principal {
    fn not_an_array(_: &str) -> String {
        "expected an array of ids or names".to_string()
    }
}

/// `[limits] memory`: bytes, as an integer or a string with a binary suffix.
pub(super) struct Size(pub u64);

impl FromToml for Size {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match v {
            DeValue::String(s) => parse_size(s)
                .map(Size)
                .ok_or_else(|| format!("bad size '{s}' (bytes, or a number with K, M or G)")),
            DeValue::Integer(i) => match u64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) if n > 0 => Ok(Size(n)),
                _ => Err("bad size (a positive number of bytes)".to_string()),
            },
            other => Err(format!("expected a size, found {}", other.type_str())),
        }
    }
}

/// An example's `args`: the call's arguments, as the JSON a client would send.
impl FromToml for serde_json::Map<String, Json> {
    fn from_toml(v: &DeValue) -> Result<Self, String> {
        match to_json(v) {
            Json::Object(m) => Ok(m),
            _ => Err("expected a table of arguments".to_string()),
        }
    }
}

/// POSIX-portable user and group names (what `useradd` accepts by default).
pub(crate) fn valid_account_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter().enumerate().all(|(i, &c)| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || c == b'_'
                || c == b'-'
                || (c == b'$' && i == b.len() - 1)
        })
}

/// `256M` → 268435456. K, M, G, T are binary multiples, as cgroup `memory.max` reads them.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        b'T' | b't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().ok()?;
    n.checked_mul(mult).filter(|&n| n > 0)
}

pub(super) fn to_json(v: &DeValue) -> Json {
    match v {
        DeValue::String(s) => Json::String(s.to_string()),
        DeValue::Integer(i) => {
            i64::from_str_radix(i.as_str(), i.radix()).map_or(Json::Null, Json::from)
        }
        DeValue::Float(f) => f
            .as_str()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Json::Null, Json::Number),
        DeValue::Boolean(b) => Json::Bool(*b),
        DeValue::Datetime(dt) => Json::String(dt.to_string()),
        DeValue::Array(a) => Json::Array(a.iter().map(|x| to_json(x.get_ref())).collect()),
        DeValue::Table(t) => Json::Object(
            t.iter()
                .map(|(k, v)| (k.get_ref().to_string(), to_json(v.get_ref())))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("99999999999999999G"), None);
    }

    #[test]
    fn account_names() {
        assert!(valid_account_name("guard"));
        assert!(valid_account_name("_svc-1"));
        assert!(!valid_account_name("Root"));
        assert!(!valid_account_name("a b"));
        assert!(!valid_account_name(""));
    }
}
