//! The hash chain: canonical form of a row, its hash, and the check of one stored line.
//!
//! A row's `hash` is the SHA-256 (hex) of the canonical form of the row without `hash`: JSON
//! with object keys sorted recursively and no whitespace. The line written to the file is that
//! canonical text with `,"hash":"…"` spliced in before the closing brace. Keeping `hash` last
//! lets a checker hash the stored bytes themselves instead of re-serializing a parsed row,
//! which would not round-trip every float bit for bit; any change to a stored byte therefore
//! changes the hash. A checker that re-serializes (`sort_keys`, compact separators) computes
//! the same hash for rows without floats.

use std::fmt::{self, Write as _};

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use crate::call::hash::{hex, sha256_hex};

/// `prev` of the very first row of a log.
pub const ZERO_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Fields that the log sets; a caller's row may not carry them.
pub const RESERVED: [&str; 4] = ["seq", "ts", "prev", "hash"];

/// What is wrong with a stored row, or with its place in the chain.
#[derive(Debug, thiserror::Error)]
pub enum Reason {
    #[error("not a JSON object: {0}")]
    Unparsable(String),
    #[error("field `{0}` is missing or has the wrong type")]
    Field(&'static str),
    #[error("`hash` is missing or is not the last field")]
    HashPlacement,
    #[error("row hashes to {computed} but says {stored}")]
    Hash { computed: String, stored: String },
    #[error("seq is {found}, expected {expected}")]
    Seq { expected: u64, found: u64 },
    #[error("prev is {found}, but the previous row's hash is {expected}")]
    Prev { expected: String, found: String },
    #[error("the file is missing: {0}")]
    Missing(String),
    #[error("line has no trailing newline (torn write)")]
    Torn,
    #[error("{0}")]
    Io(#[source] std::io::Error),
}

/// The chain fields of a stored row that checked out on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub seq: u64,
    pub prev: String,
    pub hash: String,
}

/// A row sealed into the chain: the line to write (with its newline) and its hash.
pub struct Sealed {
    pub line: Vec<u8>,
    pub hash: String,
}

/// Adds `seq`, `ts` and `prev` to `row`, hashes it and renders its line. The caller has
/// checked that `row` carries no reserved field.
pub fn seal(mut row: Map<String, Value>, seq: u64, ts: String, prev: &str) -> Sealed {
    row.insert("seq".into(), seq.into());
    row.insert("ts".into(), ts.into());
    row.insert("prev".into(), prev.into());
    let mut text = canonical(&Value::Object(row));
    let hash = sha256_hex(text.as_bytes());
    // `text` ends with the object's `}` and the object is not empty (it has `seq`).
    text.pop();
    let mut line = text.into_bytes();
    line.extend_from_slice(b",\"hash\":\"");
    line.extend_from_slice(hash.as_bytes());
    line.extend_from_slice(b"\"}\n");
    Sealed { line, hash }
}

/// Checks one stored line (without its newline) on its own: it parses, carries `seq` and a
/// well-formed `prev`, and its `hash` matches its bytes. Its links to neighbours are the
/// caller's to check.
pub fn check_line(line: &[u8]) -> Result<(Link, Map<String, Value>), Reason> {
    let row: Map<String, Value> =
        serde_json::from_slice(line).map_err(|e| Reason::Unparsable(e.to_string()))?;
    let seq = row
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or(Reason::Field("seq"))?;
    let prev = row
        .get("prev")
        .and_then(Value::as_str)
        .filter(|p| is_hash(p));
    let prev = prev.ok_or(Reason::Field("prev"))?.to_owned();
    row.get("ts")
        .and_then(Value::as_str)
        .ok_or(Reason::Field("ts"))?;

    // The stored hash must be the last field, exactly as `seal` writes it.
    const TAIL: usize = r#","hash":""}"#.len() + 64;
    let split = line.len().checked_sub(TAIL).ok_or(Reason::HashPlacement)?;
    let (body, tail) = line.split_at(split);
    let stored = tail
        .strip_prefix(br#","hash":""#)
        .and_then(|t| t.strip_suffix(br#""}"#))
        .and_then(|h| std::str::from_utf8(h).ok())
        .filter(|h| is_hash(h))
        .ok_or(Reason::HashPlacement)?;
    let mut hasher = Sha256::new();
    hasher.update(body);
    hasher.update(b"}");
    let computed = hex(&hasher.finalize());
    if computed != stored {
        return Err(Reason::Hash {
            computed,
            stored: stored.to_owned(),
        });
    }
    Ok((
        Link {
            seq,
            prev,
            hash: computed,
        },
        row,
    ))
}

/// Canonical JSON text of `v`: keys sorted at every level, no whitespace. Sorted explicitly so
/// the hash does not depend on whether some crate turns on serde_json's `preserve_order`.
pub fn canonical(v: &Value) -> String {
    Canonical(v).to_string()
}

struct Canonical<'a>(&'a Value);

impl fmt::Display for Canonical<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                f.write_char('{')?;
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    // serde_json's own escaping, so keys read back as they were.
                    f.write_str(&serde_json::to_string(k).map_err(|_| fmt::Error)?)?;
                    write!(f, ":{}", Canonical(v))?;
                }
                f.write_char('}')
            }
            Value::Array(items) => {
                f.write_char('[')?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{}", Canonical(v))?;
                }
                f.write_char(']')
            }
            // Scalars: serde_json's compact Display.
            scalar => write!(f, "{scalar}"),
        }
    }
}

/// True for 64 lowercase hex digits.
pub fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn canonical_sorts_nested_keys_without_whitespace() {
        let v = json!({"b": 1, "a": {"z": [3, {"y": null, "x": "q\"\n"}], "c": true}, "é": 1.5});
        assert_eq!(
            canonical(&v),
            r#"{"a":{"c":true,"z":[3,{"x":"q\"\n","y":null}]},"b":1,"é":1.5}"#
        );
    }

    #[test]
    fn hash_covers_the_canonical_row_without_hash() {
        let sealed = seal(
            row(json!({"kind": "decision", "call_id": "c1"})),
            7,
            "T".into(),
            ZERO_HASH,
        );
        let expected = sha256_hex(
            format!(
                r#"{{"call_id":"c1","kind":"decision","prev":"{ZERO_HASH}","seq":7,"ts":"T"}}"#
            )
            .as_bytes(),
        );
        assert_eq!(sealed.hash, expected);
        let line = sealed.line.strip_suffix(b"\n").expect("newline");
        let (link, parsed) = check_line(line).expect("checks");
        assert_eq!(
            link,
            Link {
                seq: 7,
                prev: ZERO_HASH.into(),
                hash: expected.clone()
            }
        );
        // Re-serializing the parsed row without `hash` gives the same hash (no floats here).
        let mut parsed = parsed;
        parsed.remove("hash");
        assert_eq!(
            sha256_hex(canonical(&Value::Object(parsed)).as_bytes()),
            expected
        );
    }

    #[test]
    fn any_changed_byte_is_caught() {
        let sealed = seal(
            row(json!({"tool": "ls", "n": 0.1})),
            0,
            "T".into(),
            ZERO_HASH,
        );
        let line = sealed.line.strip_suffix(b"\n").expect("newline");
        for i in 0..line.len() {
            let mut bad = line.to_vec();
            bad[i] ^= 0x01;
            assert!(check_line(&bad).is_err(), "flip at {i} went unnoticed");
        }
    }

    #[test]
    fn hash_must_be_last() {
        let h = "a".repeat(64);
        let line = format!(r#"{{"hash":"{h}","prev":"{ZERO_HASH}","seq":0,"ts":"T"}}"#);
        assert!(matches!(
            check_line(line.as_bytes()),
            Err(Reason::HashPlacement)
        ));
        assert!(matches!(
            check_line(b"{\"seq\":1"),
            Err(Reason::Unparsable(_))
        ));
        assert!(matches!(check_line(b"{}"), Err(Reason::Field("seq"))));
    }
}
