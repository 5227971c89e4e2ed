//! A row's size, whatever its caller sent. The strings a caller names (a tool, a session, a
//! label) are bounded by the protocol (`protocol::limits`); a call's arguments are bounded only
//! by the frame (1 MiB), so a row holds at most [`ARGS_IN_ROW`] bytes of them: past it, their
//! start, each string cut where the room ends (`…` marks a cut), and beside them how long they
//! were and their SHA-256 ([`Cut`]), so that the row still binds the call it records.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Most bytes of a call's arguments (as JSON) a row holds whole.
pub const ARGS_IN_ROW: usize = 64 << 10;

/// What marks a cut: the end of a string, the last item of an array, or the last key of an object.
const MARK: &str = "…";

/// Arguments a row holds cut: how long their JSON was, and its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    pub bytes: usize,
    pub sha256: String,
}

/// `args` as a row holds them: `None` when they fit whole, else their cut and what was cut.
pub fn args(args: &Value) -> Option<(Value, Cut)> {
    let bytes = json_len(args);
    if bytes <= ARGS_IN_ROW {
        return None;
    }
    let whole = serde_json::to_vec(args).unwrap_or_default();
    let cut = Cut {
        bytes,
        sha256: crate::call::hash::sha256_hex(&whole),
    };
    let mut room = ARGS_IN_ROW;
    Some((cut_to(args, &mut room), cut))
}

/// The JSON of `v` (compact, as serde_json writes it), in bytes, without writing it.
fn json_len(v: &Value) -> usize {
    match v {
        Value::String(s) => str_len(s),
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        Value::Object(map) => {
            let entries = map.iter().map(|(k, v)| str_len(k) + 1 + json_len(v));
            2 + map.len().saturating_sub(1) + entries.sum::<usize>()
        }
        other => other.to_string().len(),
    }
}

/// A JSON string's bytes, quotes and escapes included.
fn str_len(s: &str) -> usize {
    2 + s.chars().map(char_len).sum::<usize>()
}

fn char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if c < ' ' => 6,
        c => c.len_utf8(),
    }
}

/// `v` within `room` bytes (about: each cut adds its mark), which it takes from.
fn cut_to(v: &Value, room: &mut usize) -> Value {
    /// Left for a part after its separator, below which the part is not begun.
    const LEAST: usize = 8;
    match v {
        Value::String(s) => {
            let whole = str_len(s);
            if whole <= *room {
                *room -= whole;
                return v.clone();
            }
            let mut used = 2 + MARK.len();
            let mut end = 0;
            for (i, c) in s.char_indices() {
                if used + char_len(c) > *room {
                    break;
                }
                used += char_len(c);
                end = i + c.len_utf8();
            }
            *room = room.saturating_sub(used);
            Value::String(format!("{}{MARK}", &s[..end]))
        }
        Value::Array(items) => {
            *room = room.saturating_sub(2);
            let mut out = Vec::new();
            for item in items {
                if *room < LEAST {
                    out.push(Value::String(MARK.into()));
                    break;
                }
                *room -= 1;
                out.push(cut_to(item, room));
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            *room = room.saturating_sub(2);
            let mut out = Map::new();
            for (k, item) in map {
                let key = str_len(k) + 2;
                if *room < key + LEAST {
                    out.insert(MARK.into(), Value::String(MARK.into()));
                    break;
                }
                *room -= key;
                out.insert(k.clone(), cut_to(item, room));
            }
            Value::Object(out)
        }
        other => {
            *room = room.saturating_sub(json_len(other));
            other.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_length_is_serde_jsons() {
        let v = json!({"a": "x\"\\\n\u{1}é", "b": [1, 2.5, null, true, {"c": []}], "": {}});
        assert_eq!(json_len(&v), serde_json::to_vec(&v).expect("json").len());
    }

    #[test]
    fn small_arguments_are_whole_and_large_ones_cut_within_the_room() {
        assert_eq!(args(&json!({"path": "/srv/x"})), None);
        let big = json!({
            "content": "a".repeat(900_000),
            "path": "/srv/x",
        });
        let (held, cut) = args(&big).expect("cut");
        let len = serde_json::to_vec(&held).expect("json").len();
        assert!(len <= ARGS_IN_ROW + 16, "{len}");
        assert_eq!(cut.bytes, serde_json::to_vec(&big).expect("json").len());
        assert_eq!(cut.sha256.len(), 64);
        assert!(held["content"].as_str().is_some_and(|s| s.ends_with(MARK)));
        // Escapes count as written: control characters are six bytes each in JSON.
        let escaped = json!({"s": "\u{1}".repeat(100_000)});
        let (held, _) = args(&escaped).expect("cut");
        let len = serde_json::to_vec(&held).expect("json").len();
        assert!(len <= ARGS_IN_ROW + 16, "{len}");
        // Many small parts: the row holds the first, and a mark.
        let many: Map<String, Value> = (0..50_000).map(|i| (format!("k{i}"), json!(i))).collect();
        let (held, _) = args(&Value::Object(many)).expect("cut");
        let len = serde_json::to_vec(&held).expect("json").len();
        assert!(len <= ARGS_IN_ROW + 16, "{len}");
        assert_eq!(held[MARK], MARK);
        let deep = json!([[["x".repeat(70_000)], "y".repeat(70_000)]]);
        let (held, _) = args(&deep).expect("cut");
        let len = serde_json::to_vec(&held).expect("json").len();
        assert!(len <= ARGS_IN_ROW + 16, "{len}");
    }
}
