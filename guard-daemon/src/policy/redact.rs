//! What of a call the audit log may keep: its arguments with every find of a detector replaced;
//! and what judges and approvers are shown: the call as it will run, secrets masked.

use serde_json::Value as Json;

use crate::policy::{
    Policy,
    detect::{DetectorSet, Hit},
};

impl Policy {
    /// `value` as it will run, each secret's value shown as `[secret:NAME]`: what judges and
    /// approvers see of a call's arguments and command. No detector redacts it: redaction
    /// keeps values out of the log and the agent's replies, never the shape of what runs from
    /// the one who approves it (a redaction once hid a command from an approver, issue 49).
    pub fn shown(&self, value: Json) -> Json {
        self.without_secrets(value)
    }

    /// `v` (a plan) with each secret's value as `[secret:NAME]`, by way of its JSON form.
    pub fn shown_serde<T: serde::Serialize + serde::de::DeserializeOwned>(&self, v: T) -> T {
        match &self.masks {
            Some(masks) => masks.mask_serde(v),
            None => v,
        }
    }

    /// `v` (a call's conversation: the agent's message and history) as the audit log keeps
    /// `tool`'s arguments: each find of its detectors and of every secret-class one redacted,
    /// each secret's value masked.
    pub fn logged(&self, tool: &str, v: &Json) -> Json {
        let set = (self.by_name.get(tool)).map_or(DetectorSet::SECRET_CLASS, |&i| {
            self.tools[i].redact.union(DetectorSet::SECRET_CLASS)
        });
        match v {
            Json::Object(m) => self.without_secrets(redact(m, set)),
            other => self.without_secrets(other.clone()),
        }
    }

    /// `args` shown as [`Policy::shown`] shows them.
    pub fn shown_args(
        &self,
        args: &serde_json::Map<String, Json>,
    ) -> serde_json::Map<String, Json> {
        match self.shown(Json::Object(args.clone())) {
            Json::Object(m) => m,
            // Masking keeps a value's kind for objects; nothing else comes back.
            _ => serde_json::Map::new(),
        }
    }
}

/// Every string inside a JSON value, keys excluded.
pub(super) fn strings<'a>(v: &'a Json, f: &mut impl FnMut(&'a str)) {
    match v {
        Json::String(s) => f(s),
        Json::Array(a) => a.iter().for_each(|x| strings(x, f)),
        Json::Object(m) => m.values().for_each(|x| strings(x, f)),
        _ => {}
    }
}

/// Every string inside a JSON value, keys included, and every number as it is written.
pub(super) fn all_texts(v: &Json, f: &mut impl FnMut(&str)) {
    match v {
        Json::String(s) => f(s),
        Json::Number(n) => f(&n.to_string()),
        Json::Array(a) => a.iter().for_each(|x| all_texts(x, f)),
        Json::Object(m) => m.iter().for_each(|(k, x)| {
            f(k);
            all_texts(x, f);
        }),
        _ => {}
    }
}

/// A copy of `args` with the finds of `set` replaced by `[REDACTED:<detector>]`.
pub(super) fn redact(args: &serde_json::Map<String, Json>, set: DetectorSet) -> Json {
    fn walk(v: &Json, set: DetectorSet, hits: &mut Vec<Hit>) -> Json {
        match v {
            Json::String(s) => Json::String(redact_str(s, set, hits)),
            Json::Array(a) => Json::Array(a.iter().map(|x| walk(x, set, hits)).collect()),
            Json::Object(m) => Json::Object(
                m.iter()
                    .map(|(k, x)| (redact_str(k, set, hits), walk(x, set, hits)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let mut hits = Vec::new();
    Json::Object(
        args.iter()
            .map(|(k, v)| (redact_str(k, set, &mut hits), walk(v, set, &mut hits)))
            .collect(),
    )
}

fn redact_str(s: &str, set: DetectorSet, hits: &mut Vec<Hit>) -> String {
    hits.clear();
    for d in set.iter() {
        d.find(s, hits);
    }
    if hits.is_empty() {
        return s.to_string();
    }
    // Overlapping finds merge into one redaction named by the earliest.
    hits.sort_by_key(|h| (h.range.start, std::cmp::Reverse(h.range.end)));
    let mut out = String::with_capacity(s.len());
    let mut pos = 0;
    for h in hits.iter() {
        if h.range.end <= pos {
            continue;
        }
        let start = h.range.start.max(pos);
        out.push_str(&s[pos..start]);
        if start == h.range.start {
            out.push_str("[REDACTED:");
            out.push_str(h.detector.name());
            out.push(']');
        }
        pos = h.range.end;
    }
    out.push_str(&s[pos..]);
    out
}
