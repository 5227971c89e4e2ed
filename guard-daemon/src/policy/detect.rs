//! DLP detectors: find sensitive substrings in tool-call arguments.
//!
//! Each detector is a shape (a precompiled regex, or a hand scan) followed by a check that the
//! shape alone cannot do (Luhn, mod-97, a JSON header, entropy), so that near misses such as a
//! 16-digit number failing Luhn are not reported. Every detector documents what it misses:
//! they are a net for accidents and careless exfiltration, not a proof of absence.

use std::{ops::Range, sync::LazyLock};

use regex::Regex;

/// One kind of sensitive content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Detector {
    /// `local@domain.tld`. Misses obfuscated addresses ("alice at mail dot com"), quoted local
    /// parts and addresses in non-ASCII scripts.
    Email,
    /// 10 to 15 digits in the usual groupings (`+41 44 123 45 67`, `(555) 123-4567`). Misses
    /// short local numbers and numbers written in words; may report other 10-15 digit groups.
    Phone,
    /// 13 to 19 digits, optionally grouped by spaces or dashes, passing the Luhn check. Misses
    /// numbers split by other characters or spread over several arguments.
    CreditCard,
    /// Two letters, two check digits and 11-30 alphanumerics, passing ISO 13616 mod-97. Misses
    /// IBANs written in lowercase or grouped with characters other than single spaces.
    Iban,
    /// Dotted quad whose four parts are 0-255 without leading zeros. Misses other notations
    /// (`0x7f.1`, a bare 32-bit integer).
    Ipv4,
    /// What `std::net::Ipv6Addr` parses, with at least two colons. Misses bracketed forms with a
    /// zone id (`fe80::1%eth0`) and addresses split across strings.
    Ipv6,
    /// AWS access key ids: `AKIA` or `ASIA` followed by 16 base32 characters. Does not find the
    /// secret access key itself (40 base64 characters): pair with `secret` for that.
    AwsAccessKey,
    /// GitHub tokens: `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` + 36 alphanumerics, and fine-grained
    /// `github_pat_` + 22 + `_` + 59. Misses legacy 40-hex OAuth tokens (use `secret`).
    GithubToken,
    /// PEM private key blocks: the BEGIN line, base64 lines (after RFC 1421 headers, for
    /// legacy encrypted keys), and the END line of the same label. A BEGIN line without
    /// them is a find of that line alone: what follows it is not recognised as a key, so it
    /// is neither redacted nor hidden from anyone. Misses keys without the header, and keys
    /// whose lines were joined with spaces.
    PrivateKey,
    /// JSON Web Tokens: three base64url parts whose first decodes to a JSON object with `alg`.
    /// Misses JWE (five parts) and tokens whose header was re-encoded with padding.
    Jwt,
    /// Generic secrets: a run of at least 20 characters of `[A-Za-z0-9+=_-]` with at least two
    /// of lower/upper/digit classes and Shannon entropy of at least 3.5 bits per character.
    /// Misses short or low-entropy secrets (passwords like `hunter2`), and base64 split by `/`;
    /// reports random-looking identifiers such as hashes.
    Secret,
}

/// A small set of detectors, as a bit mask: copied freely on the hot path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DetectorSet(u16);

impl DetectorSet {
    pub const EMPTY: DetectorSet = DetectorSet(0);

    /// Detectors whose finds are redacted from every audit row whatever the rules: a
    /// credential or card number must never land in the log in clear.
    pub const SECRET_CLASS: DetectorSet = DetectorSet(
        1 << Detector::AwsAccessKey as u16
            | 1 << Detector::GithubToken as u16
            | 1 << Detector::PrivateKey as u16
            | 1 << Detector::Jwt as u16
            | 1 << Detector::CreditCard as u16
            | 1 << Detector::Iban as u16,
    );

    pub fn insert(&mut self, d: Detector) {
        self.0 |= 1 << d as u16;
    }
    pub fn contains(self, d: Detector) -> bool {
        self.0 & (1 << d as u16) != 0
    }
    pub fn union(self, other: DetectorSet) -> DetectorSet {
        DetectorSet(self.0 | other.0)
    }
    pub fn intersects(self, other: DetectorSet) -> bool {
        self.0 & other.0 != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn iter(self) -> impl Iterator<Item = Detector> {
        Detector::ALL.into_iter().filter(move |d| self.contains(*d))
    }
}

impl FromIterator<Detector> for DetectorSet {
    fn from_iter<I: IntoIterator<Item = Detector>>(iter: I) -> Self {
        let mut s = DetectorSet::EMPTY;
        for d in iter {
            s.insert(d);
        }
        s
    }
}

/// One find: where, and by which detector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    pub range: Range<usize>,
    pub detector: Detector,
}

// Shapes. `(?-u:\b)`-free: boundaries are checked by hand where needed, since a regex crate
// word boundary is unicode-aware and slower.
static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}",
    )
});
static PHONE: LazyLock<Regex> =
    LazyLock::new(|| re(r"\+?\(?[0-9]{1,4}\)?(?:[ .-]?\(?[0-9]{2,4}\)?){2,5}"));
static CARD: LazyLock<Regex> = LazyLock::new(|| re(r"[0-9](?:[ -]?[0-9]){12,18}"));
static IBAN: LazyLock<Regex> = LazyLock::new(|| re(r"[A-Z]{2}[0-9]{2}(?:[ ]?[A-Z0-9]){11,30}"));
static IPV4: LazyLock<Regex> = LazyLock::new(|| re(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}"));
static IPV6: LazyLock<Regex> =
    LazyLock::new(|| re(r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.[0-9]{1,3}){0,3}"));
static AWS: LazyLock<Regex> = LazyLock::new(|| re(r"(?:AKIA|ASIA)[A-Z2-7]{16}"));
static GITHUB: LazyLock<Regex> =
    LazyLock::new(|| re(r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}"));
// A whole block first; else the BEGIN line alone. Nothing between BEGIN and END but RFC 1421's
// two header lines, as OpenSSL writes them, and base64 lines: a redaction must never swallow
// text that is not the key (an approver once saw `echo ok # [REDACTED:private_key]` over a
// hidden `touch` on the next line; then the log showed one over `Proc-Type: x; id`, a header
// line to the regex and a command to bash). `pem_body_ok` checks the lines are a key's.
static PEM: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----\r?\n",
        r"(?:Proc-Type: 4,ENCRYPTED\r?\nDEK-Info: [A-Z0-9-]{1,32},[0-9A-F]{16,64}\r?\n\r?\n)?",
        r"(?:[A-Za-z0-9+/=]{1,100}\r?\n)+",
        r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
        r"|-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    ))
});
static JWT: LazyLock<Regex> =
    LazyLock::new(|| re(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"));
static SECRET: LazyLock<Regex> = LazyLock::new(|| re(r"[A-Za-z0-9+=_-]{20,}"));

fn re(s: &str) -> Regex {
    // The patterns are constants of this file, covered by the tests below.
    #[allow(clippy::unwrap_used)]
    Regex::new(s).expect("detector regex")
}

impl Detector {
    pub const ALL: [Detector; 11] = [
        Detector::Email,
        Detector::Phone,
        Detector::CreditCard,
        Detector::Iban,
        Detector::Ipv4,
        Detector::Ipv6,
        Detector::AwsAccessKey,
        Detector::GithubToken,
        Detector::PrivateKey,
        Detector::Jwt,
        Detector::Secret,
    ];

    /// The policy spelling.
    pub fn name(self) -> &'static str {
        match self {
            Detector::Email => "email",
            Detector::Phone => "phone",
            Detector::CreditCard => "credit_card",
            Detector::Iban => "iban",
            Detector::Ipv4 => "ipv4",
            Detector::Ipv6 => "ipv6",
            Detector::AwsAccessKey => "aws_access_key",
            Detector::GithubToken => "github_token",
            Detector::PrivateKey => "private_key",
            Detector::Jwt => "jwt",
            Detector::Secret => "secret",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Detector::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Compiles every shape now, so the first decision does not pay for it.
    pub fn warm_up() {
        for d in Detector::ALL {
            d.find("", &mut Vec::new());
        }
    }

    /// True when `text` holds at least one find.
    pub fn is_match(self, text: &str) -> bool {
        let mut v = Vec::new();
        self.find(text, &mut v);
        !v.is_empty()
    }

    /// Appends every find in `text` to `out`.
    pub fn find(self, text: &str, out: &mut Vec<Hit>) {
        let b = text.as_bytes();
        // Cheap prefilters keep the common case (short, ordinary text) off the regex engines.
        let shape: &Regex = match self {
            Detector::Email if memchr(b'@', b) => &EMAIL,
            Detector::Phone | Detector::CreditCard if count_digits(b) >= 10 => {
                if self == Detector::Phone {
                    &PHONE
                } else {
                    &CARD
                }
            }
            Detector::Iban if b.len() >= 15 => &IBAN,
            Detector::Ipv4 if memchr(b'.', b) => &IPV4,
            Detector::Ipv6 if b.iter().filter(|&&c| c == b':').count() >= 2 => &IPV6,
            Detector::AwsAccessKey if text.contains("KIA") || text.contains("SIA") => &AWS,
            Detector::GithubToken if text.contains("gh") || text.contains("github_pat_") => &GITHUB,
            Detector::PrivateKey if text.contains("PRIVATE KEY-----") => &PEM,
            Detector::Jwt if text.contains("eyJ") => &JWT,
            Detector::Secret if b.len() >= 20 => &SECRET,
            _ => return,
        };
        for m in shape.find_iter(text) {
            let mut r = m.range();
            if self == Detector::PrivateKey
                && !(pem_labels_agree(m.as_str()) && pem_body_ok(m.as_str()))
            {
                // A block ending with another key's label, or whose lines are no key's: its
                // BEGIN line alone is known.
                r.end = r.start + pem_begin_line(m.as_str()).len();
            }
            if !self.bounded(b, &r) || !self.check(m.as_str()) {
                continue;
            }
            out.push(Hit {
                range: r,
                detector: self,
            });
        }
    }

    /// Whether the find stands alone rather than being part of a longer token: a card number
    /// inside a longer digit run is not a card number.
    fn bounded(self, b: &[u8], r: &Range<usize>) -> bool {
        let before = r.start.checked_sub(1).map(|i| b[i]);
        let after = b.get(r.end).copied();
        let word = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
        match self {
            Detector::Email | Detector::PrivateKey => true,
            Detector::Phone | Detector::CreditCard | Detector::Ipv4 => {
                let digitish = |c: Option<u8>| {
                    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-')
                };
                !digitish(before) && !word(after) && after != Some(b'.') || {
                    // A trailing full stop ends a sentence; accept it if nothing follows it
                    // that continues a number.
                    !digitish(before)
                        && after == Some(b'.')
                        && !b.get(r.end + 1).is_some_and(|c| c.is_ascii_digit())
                }
            }
            Detector::Ipv6 => {
                let hexish = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_hexdigit() || c == b':');
                !hexish(before) && !hexish(after)
            }
            Detector::Jwt => !word(before) && !word(after) && after != Some(b'-'),
            Detector::Secret => true,
            Detector::Iban | Detector::AwsAccessKey | Detector::GithubToken => {
                !word(before) && !word(after)
            }
        }
    }

    /// The check the shape cannot express.
    fn check(self, s: &str) -> bool {
        match self {
            Detector::Email => true,
            Detector::Phone => (10..=15).contains(&count_digits(s.as_bytes())),
            Detector::CreditCard => luhn(s),
            Detector::Iban => iban_ok(s),
            Detector::Ipv4 => s.parse::<std::net::Ipv4Addr>().is_ok(),
            Detector::Ipv6 => s.parse::<std::net::Ipv6Addr>().is_ok(),
            Detector::AwsAccessKey | Detector::GithubToken | Detector::PrivateKey => true,
            Detector::Jwt => jwt_header_ok(s),
            Detector::Secret => looks_secret(s),
        }
    }
}

/// A whole PEM block ends with the label it began with (`RSA PRIVATE KEY` ... `RSA PRIVATE
/// KEY`); a BEGIN line alone agrees with itself.
fn pem_labels_agree(s: &str) -> bool {
    fn label(rest: &str) -> Option<&str> {
        rest.split_once("-----").map(|(l, _)| l)
    }
    let begin = s.strip_prefix("-----BEGIN ").and_then(label);
    match s.rfind("-----END ") {
        Some(i) => begin.is_some() && begin == label(&s[i + "-----END ".len()..]),
        None => true,
    }
}

/// Whether the base64 lines of a find of [`PEM`] are a key's as programs write one: lines of
/// one length (48 to 76: OpenSSL's 64, OpenSSH's 70), the last no longer, a multiple of 4 in
/// all, padding only at the end, and
/// at least 64 characters in all (the shortest key, an Ed25519 one, has more). A line that is
/// a command (`/usr/bin/id`) fails this; a 64-character path of base64's letters would not,
/// and is then also in the receipt's execs, which no detector redacts.
fn pem_body_ok(s: &str) -> bool {
    let Some(end) = s.rfind("-----END ") else {
        return true;
    };
    let lines: Vec<&str> = s[..end]
        .lines()
        .skip(1)
        .map(|l| l.trim_end_matches('\r'))
        .skip_while(|l| l.contains(':') || l.is_empty())
        .filter(|l| !l.is_empty())
        .collect();
    let Some((last, full)) = lines.split_last() else {
        return false;
    };
    let width = full.first().map_or(last.len(), |l| l.len());
    let total: usize = lines.iter().map(|l| l.len()).sum();
    let padded = lines.iter().rev().skip(1).any(|l| l.contains('='))
        || last.trim_end_matches('=').contains('=');
    (48..=76).contains(&width)
        && full.iter().all(|l| l.len() == width)
        && last.len() <= width
        && total >= 64
        && total.is_multiple_of(4)
        && !padded
}

/// `-----BEGIN ... PRIVATE KEY-----`, the first line of a find of [`PEM`].
fn pem_begin_line(s: &str) -> &str {
    let label_end = s["-----BEGIN ".len().min(s.len())..]
        .find("-----")
        .map_or(s.len(), |i| "-----BEGIN ".len() + i + "-----".len());
    &s[..label_end.min(s.len())]
}

fn memchr(c: u8, b: &[u8]) -> bool {
    b.contains(&c)
}

fn count_digits(b: &[u8]) -> usize {
    b.iter().filter(|c| c.is_ascii_digit()).count()
}

/// The Luhn mod-10 check over the digits of `s`.
fn luhn(s: &str) -> bool {
    let digits: Vec<u32> = s
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|c| (c - b'0') as u32)
        .collect();
    if !(13..=19).contains(&digits.len()) || digits.iter().all(|&d| d == digits[0]) {
        // Also rejects 0000 0000 0000 0000, which passes Luhn but is a placeholder.
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// ISO 13616: move the first four characters to the end, letters to 10..35, the number mod 97
/// is 1.
fn iban_ok(s: &str) -> bool {
    let compact: Vec<u8> = s.bytes().filter(|c| *c != b' ').collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let mut rem: u32 = 0;
    for &c in compact[4..].iter().chain(&compact[..4]) {
        let v = match c {
            b'0'..=b'9' => (c - b'0') as u32,
            b'A'..=b'Z' => (c - b'A') as u32 + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

fn jwt_header_ok(s: &str) -> bool {
    let Some(header) = s.split('.').next() else {
        return false;
    };
    let Some(bytes) = base64url_decode(header) else {
        return false;
    };
    matches!(
        serde_json::from_slice::<serde_json::Value>(&bytes),
        Ok(serde_json::Value::Object(m)) if m.contains_key("alg")
    )
}

/// Unpadded base64url (RFC 4648 §5), as JWTs use.
fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Shannon entropy in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for c in s.bytes() {
        counts[c as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

fn looks_secret(s: &str) -> bool {
    let b = s.as_bytes();
    let classes = [
        b.iter().any(u8::is_ascii_lowercase),
        b.iter().any(u8::is_ascii_uppercase),
        b.iter().any(u8::is_ascii_digit),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    classes >= 2 && shannon_entropy(s) >= 3.5
}

#[cfg(test)]
mod tests;
