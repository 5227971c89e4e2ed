//! Masking secrets' values in a stream of bytes: a tool's output on its way to the caller, an
//! argument or a receipt on its way to the audit log. Each value is looked for as it is and in
//! the forms a program prints it without meaning to hide it (hex, base64 in either alphabet at
//! each of its three alignments, percent-encoded in either case, JSON-escaped), and so is every
//! run of [`run_len`] bytes of the value in each form (a value printed in pieces: paged,
//! wrapped, split between stdout and stderr), each replaced by `[secret:NAME]`, across chunk
//! boundaries. What is let through never depends on whether it could begin a value: the last
//! bytes are held back until more output or its end, whatever they are, so the timing of the
//! output tells nothing of the value.
//!
//! A run is half the value, never less than [`RUN_MIN`] bytes: whether a text holds a run is
//! what a caller learns when it chooses the text (an argument is quarantined, an output it
//! echoes is masked), so a run short enough to guess (8 characters: a few million tries, a
//! character at a time after that) made the masks an oracle that read a value back. Guessing
//! a run of half a value is guessing half the value.

use aho_corasick::{AhoCorasick, MatchKind};

use super::Secret;

/// The fewest bytes of a value a run holds (the whole value when it is shorter): 96 bits of
/// the alphabet of tokens, beyond any guessing.
pub const RUN_MIN: usize = 12;
/// The most bytes a run needs to hold however long the value (a key's 3,000): 32 bytes are
/// beyond guessing too, and the patterns stay few.
const RUN_MAX: usize = 32;

/// The bytes of a value of `len` bytes that a run holds: half of it, within [`RUN_MIN`] and
/// [`RUN_MAX`], and never more than the value. A value printed in pieces shorter than this is
/// not masked (masking is a second line: see `secrets`).
pub fn run_len(len: usize) -> usize {
    len.div_ceil(2).clamp(RUN_MIN, RUN_MAX).min(len)
}

/// What is looked for, built once per policy: every form of every secret's value.
#[derive(Debug)]
pub struct Masks {
    ac: AhoCorasick,
    /// The secret of each pattern, by pattern index.
    of: Vec<usize>,
    /// `[secret:NAME]` of each secret.
    shown: Vec<String>,
    /// The longest pattern less one: bytes kept back until the next chunk shows whether a
    /// value starts in them.
    keep: usize,
}

impl Masks {
    /// The masks of `secrets`' values; `None` when there are none.
    pub fn new(secrets: &[Secret]) -> Option<Self> {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut of = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, s) in secrets.iter().enumerate() {
            let value = s.value.bytes();
            // Each form of the whole value, then of each run of it: every form is made byte by
            // byte (base64 of the bits each byte alone decides), so a run's form is a run of
            // the value's form.
            let runs = value.windows(run_len(value.len()).max(1));
            for p in std::iter::once(value).chain(runs).flat_map(forms) {
                if seen.insert(p.clone()) {
                    patterns.push(p);
                    of.push(i);
                }
            }
        }
        let keep = patterns.iter().map(Vec::len).max()?.saturating_sub(1);
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()?;
        Some(Self {
            ac,
            of,
            shown: secrets
                .iter()
                .map(|s| format!("[secret:{}]", s.name))
                .collect(),
            keep,
        })
    }

    /// The name of the first secret whose value `text` holds, in any form.
    pub fn first_in(&self, text: &str) -> Option<&str> {
        let m = self.ac.find(text)?;
        Some(self.name(self.of[m.pattern().as_usize()]))
    }

    /// `v` with every value masked in each of its strings (keys too) and numbers (a number
    /// holding one becomes the string of its mask).
    pub fn mask_json(&self, v: serde_json::Value) -> serde_json::Value {
        use serde_json::Value as Json;
        match v {
            Json::String(s) => Json::String(self.mask_text(&s)),
            Json::Number(n) => {
                let text = n.to_string();
                let masked = self.mask_text(&text);
                if masked == text {
                    Json::Number(n)
                } else {
                    Json::String(masked)
                }
            }
            Json::Array(a) => Json::Array(a.into_iter().map(|x| self.mask_json(x)).collect()),
            Json::Object(m) => Json::Object(
                m.into_iter()
                    .map(|(k, x)| (self.mask_text(&k), self.mask_json(x)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// `v` (a receipt, a divergence) with every value masked, by way of its JSON form; `v` as
    /// it was where that form does not read back (it holds no string a mask changed).
    pub fn mask_serde<T: serde::Serialize + serde::de::DeserializeOwned>(&self, v: T) -> T {
        let Ok(json) = serde_json::to_value(&v) else {
            return v;
        };
        let masked = self.mask_json(json.clone());
        if masked == json {
            return v;
        }
        serde_json::from_value(masked).unwrap_or_else(|e| {
            // A type whose JSON form does not read back would keep its value: say so loudly.
            tracing::error!("masking a secret's value in a record failed, left as it was: {e}");
            v
        })
    }

    /// `text` with every value masked.
    pub fn mask_text(&self, text: &str) -> String {
        let mut m = Masker::new(self);
        let mut out = Vec::with_capacity(text.len());
        m.push(text.as_bytes(), &mut out);
        m.finish(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn name(&self, i: usize) -> &str {
        let s = &self.shown[i];
        &s["[secret:".len()..s.len() - 1]
    }
}

/// A masker over one stream.
pub struct Masker<'m> {
    masks: &'m Masks,
    carry: Vec<u8>,
    /// Which secrets were found, by index in the policy's list.
    found: Vec<bool>,
}

impl<'m> Masker<'m> {
    /// A masker of one stream.
    pub fn new(masks: &'m Masks) -> Self {
        Self {
            masks,
            carry: Vec::new(),
            found: vec![false; masks.shown.len()],
        }
    }

    /// Masks `chunk`, appending to `out` what can be let through now (the last bytes may be
    /// the start of a value, and wait for the next chunk or [`Masker::finish`]).
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.carry.extend_from_slice(chunk);
        let buf = std::mem::take(&mut self.carry);
        // A match starting before `limit` lies whole in `buf`: no later byte can change it.
        let limit = buf.len().saturating_sub(self.masks.keep);
        let pos = self.mask(&buf, limit, out);
        let from = pos.max(limit);
        out.extend_from_slice(&buf[pos..from]);
        self.carry = buf[from..].to_vec();
    }

    /// What was held back, masked: the stream has ended.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let buf = std::mem::take(&mut self.carry);
        let pos = self.mask(&buf, buf.len(), out);
        out.extend_from_slice(&buf[pos..]);
    }

    /// The names of the secrets found so far.
    pub fn found(&self) -> impl Iterator<Item = &str> {
        (0..self.found.len())
            .filter(|&i| self.found[i])
            .map(|i| self.masks.name(i))
    }

    /// Appends `buf` up to the end of its last match starting before `limit`, masked; returns
    /// where that end is.
    fn mask(&mut self, buf: &[u8], limit: usize, out: &mut Vec<u8>) -> usize {
        let mut pos = 0;
        for m in self.masks.ac.find_iter(buf) {
            if m.start() >= limit {
                break;
            }
            let i = self.masks.of[m.pattern().as_usize()];
            self.found[i] = true;
            out.extend_from_slice(&buf[pos..m.start()]);
            out.extend_from_slice(self.masks.shown[i].as_bytes());
            pos = m.end();
        }
        pos
    }
}

/// The forms of `value` looked for.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![value.to_vec()];
    out.push(hex(value, b"0123456789abcdef"));
    out.push(hex(value, b"0123456789ABCDEF"));
    for alphabet in [STANDARD, URL_SAFE] {
        for shift in 0..3 {
            out.push(base64_inner(value, shift, alphabet));
        }
    }
    out.push(percent(value, b"0123456789ABCDEF"));
    out.push(percent(value, b"0123456789abcdef"));
    out.extend(json_escaped(value));
    // A base64 form of a short value is shorter than it, and would match ordinary text.
    out.retain(|f| f.len() >= value.len().min(RUN_MIN));
    out
}

fn hex(bytes: &[u8], digits: &[u8; 16]) -> Vec<u8> {
    bytes
        .iter()
        .flat_map(|b| [digits[usize::from(b >> 4)], digits[usize::from(b & 15)]])
        .collect()
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The base64 characters that `value` alone decides when it follows `shift` other bytes (0 to
/// 2) in an encoded stream: those mixing its bits with its neighbours' are left out, so the
/// run is found whatever came before and after.
fn base64_inner(value: &[u8], shift: usize, alphabet: &[u8; 64]) -> Vec<u8> {
    let mut bytes = vec![0u8; shift];
    bytes.extend_from_slice(value);
    let mut chars = Vec::with_capacity(bytes.len() * 4 / 3 + 4);
    for group in bytes.chunks(3) {
        let mut n = [0u8; 3];
        n[..group.len()].copy_from_slice(group);
        let v = u32::from(n[0]) << 16 | u32::from(n[1]) << 8 | u32::from(n[2]);
        for k in 0..=group.len() {
            chars.push(alphabet[((v >> (18 - 6 * k)) & 63) as usize]);
        }
    }
    // The first character wholly of the value's bits, and the end of the last one.
    let first = (shift * 8).div_ceil(6);
    let last = ((shift + value.len()) * 8) / 6;
    chars
        .get(first..last.min(chars.len()))
        .unwrap_or_default()
        .to_vec()
}

/// `value` percent-encoded with `digits`: every byte outside RFC 3986's unreserved set as
/// `%XX`.
fn percent(value: &[u8], digits: &[u8; 16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[
                b'%',
                digits[usize::from(b >> 4)],
                digits[usize::from(b & 15)],
            ]);
        }
    }
    out
}

/// `value` inside a JSON string, as serializers print it: `"` and `\` escaped, `/` as is and
/// as `\/`, and every byte outside printable ASCII as `\u00XX`.
fn json_escaped(value: &[u8]) -> [Vec<u8>; 2] {
    let mut plain = Vec::with_capacity(value.len());
    for &b in value {
        match b {
            b'"' | b'\\' => plain.extend_from_slice(&[b'\\', b]),
            0x20..=0x7e => plain.push(b),
            _ => plain.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
        }
    }
    let slashed = plain
        .iter()
        .flat_map(|&b| {
            if b == b'/' {
                vec![b'\\', b'/']
            } else {
                vec![b]
            }
        })
        .collect();
    [plain, slashed]
}

#[cfg(test)]
mod tests {
    use super::{super::Value, *};

    fn secret(name: &str, value: &[u8]) -> Secret {
        Secret {
            name: name.into(),
            hosts: Vec::new(),
            source: String::new(),
            value: Value(value.to_vec()),
        }
    }

    #[test]
    fn each_form_is_masked_in_every_split_of_the_stream() {
        let s = secret("api", b"s3cr3t-T0ken/value+x");
        // As Python's binascii and base64 modules print them.
        let text = "raw s3cr3t-T0ken/value+x hex 7333637233742d54306b656e2f76616c75652b78 \
                    b64 czNjcjN0LVQwa2VuL3ZhbHVlK3g= b64-shifted YWI6czNjcjN0LVQwa2VuL3ZhbHVlK3g= \
                    b64-1 YXMzY3IzdC1UMGtlbi92YWx1ZSt4 url-safe eHlzM2NyM3QtVDBrZW4vdmFsdWUreA== \
                    pct s3cr3t-T0ken%2Fvalue%2Bx end";
        for split in 0..text.len() {
            let masks = Masks::new(std::slice::from_ref(&s)).expect("masks");
            let mut m = Masker::new(&masks);
            let mut out = Vec::new();
            m.push(&text.as_bytes()[..split], &mut out);
            m.push(&text.as_bytes()[split..], &mut out);
            m.finish(&mut out);
            let out = String::from_utf8(out).expect("utf8");
            assert_eq!(
                out.matches("[secret:api]").count(),
                7,
                "split {split}: {out}"
            );
            assert!(out.starts_with("raw [secret:api] hex"), "{out}");
            assert!(out.ends_with(" end"), "{out}");
            for leak in ["T0ken", "LVQwa2Vu", "UMGtlbi", "VDBrZW4", "54306b"] {
                assert!(!out.contains(leak), "split {split}: {leak} in {out}");
            }
            assert_eq!(m.found().collect::<Vec<_>>(), ["api"]);
        }
    }

    #[test]
    fn a_value_printed_in_pieces_is_masked_piece_by_piece() {
        let masks = Masks::new(&[secret("api", b"ghp_A1b2/C3d4+E5f6G7h8")]).expect("masks");
        // Paged, wrapped, lowercase-percent and JSON-escaped.
        for text in [
            "page 1: ghp_A1b2/C3d4 page 2: +E5f6G7h8",
            "ghp_A1b2/C3d4+E5f6\nG7h8",
            "ghp_A1b2%2fC3d4%2bE5f6G7h8",
            "{\"t\":\"ghp_A1b2\\/C3d4+E5f6G7h8\"}",
        ] {
            let out = masks.mask_text(text);
            assert!(out.contains("[secret:api]"), "{text} -> {out}");
            for leak in ["A1b2/C3d4", "C3d4+E5f6", "ghp_A1b2%2f"] {
                assert!(!out.contains(leak), "{text} -> {out}");
            }
        }
        let json = serde_json::json!({"n": 12345678, "s": "x ghp_A1b2/C3d4+E5f6G7h8"});
        let digits = Masks::new(&[secret("pin", b"12345678")]).expect("masks");
        assert_eq!(digits.mask_json(json)["n"], "[secret:pin]");
    }

    #[test]
    fn a_run_is_half_the_value_so_that_guessing_a_run_is_guessing_half() {
        let token = b"ghp_zddppObTpqP9rmBKgzroLD9LFMqIvAwd5Ve2";
        let masks = Masks::new(&[secret("gh", token)]).expect("masks");
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("ascii");
        // What a caller who knows the prefix tries one character at a time: no answer.
        for n in 5..20 {
            let piece = text(&token[..n]);
            assert_eq!(masks.first_in(&piece), None, "{piece}");
            let hex: String = token[..n].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(masks.first_in(&hex), None, "{hex}");
        }
        for at in [0, 7, 20] {
            let piece = text(&token[at..at + 20]);
            assert_eq!(masks.first_in(&piece), Some("gh"), "{piece}");
        }
        assert_eq!(run_len(40), 20);
        assert_eq!(run_len(10), 10);
        assert_eq!(run_len(16), 12);
        assert_eq!(run_len(3000), 32);
    }

    #[test]
    fn text_without_a_value_passes_unchanged_byte_for_byte() {
        let s = secret("api", b"zq9-Xv!7#Lp2");
        let masks = Masks::new(&[s]).expect("masks");
        let mut m = Masker::new(&masks);
        let mut out = Vec::new();
        let text: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        for chunk in text.chunks(777) {
            m.push(chunk, &mut out);
        }
        m.finish(&mut out);
        assert!(out == text, "the text changed");
        assert_eq!(m.found().count(), 0);
    }

    #[test]
    fn text_is_masked_and_the_first_secret_named() {
        let masks = Masks::new(&[
            secret("a", b"aaaa-1111-aaaa"),
            secret("b", b"bbbb-2222-bbbb"),
        ])
        .expect("masks");
        assert_eq!(masks.mask_text("x aaaa-1111-aaaa y"), "x [secret:a] y");
        assert_eq!(masks.first_in("x YmJiYi0yMjIyLWJiYmI= y"), Some("b"));
        assert_eq!(masks.first_in("nothing here"), None);
    }
}
