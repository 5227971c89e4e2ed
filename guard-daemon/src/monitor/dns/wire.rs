//! The wire format of a call's DNS: the one question of RFC 1035 section 4, small enough to
//! read by hand, and read defensively (a malformed query gets FORMERR, or nothing when even its
//! header is short).

use std::{collections::HashMap, fmt::Write as _, net::IpAddr};

use super::Asked;

pub(super) const TYPE_A: u16 = 1;
pub(super) const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
pub(super) const RCODE_FORMERR: u16 = 1;
pub(super) const RCODE_REFUSED: u16 = 5;
/// Seconds a resolver may keep an answer: short, the call is short.
const TTL: u32 = 30;

pub(super) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The reply to one query, and the question it asked when it could be read. `None` when the
/// message is no query at all (too short for a header, or a response).
pub(super) fn answer(
    query: &[u8],
    names: &HashMap<String, Vec<IpAddr>>,
) -> Option<(Vec<u8>, Option<Asked>)> {
    let id = u16_at(query, 0)?;
    let flags = u16_at(query, 2)?;
    if flags & 0x8000 != 0 {
        return None;
    }
    // Opcode and RD are echoed; QR, AA and RA set.
    let reply_flags = |rcode: u16| 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode;
    let header = |rcode: u16, qd: u16, an: u16| {
        let mut h = Vec::with_capacity(512);
        for w in [id, reply_flags(rcode), qd, an, 0, 0] {
            h.extend(w.to_be_bytes());
        }
        h
    };
    let formerr = || Some((header(RCODE_FORMERR, 0, 0), None));
    if u16_at(query, 4)? != 1 || (flags >> 11) & 0xf != 0 {
        return formerr();
    }
    // The question: labels (no compression in a question), then type and class.
    let mut at = 12;
    let mut labels = Vec::new();
    let mut wire = 1; // the name's length on the wire: its labels and the root's 0
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        wire += len + 1;
        if len > 63 || at + len > query.len() || wire > 255 {
            return formerr();
        }
        labels.push(label_text(&query[at..at + len]));
        at += len;
    }
    let (Some(qtype), Some(qclass)) = (u16_at(query, at), u16_at(query, at + 2)) else {
        return formerr();
    };
    let question = &query[12..at + 4];
    let name = labels.join(".");
    let approved = names.get(&name);
    let asked = Asked {
        name: name.clone(),
        qtype: match qtype {
            TYPE_A => "A".into(),
            TYPE_AAAA => "AAAA".into(),
            n => n.to_string(),
        },
        approved: approved.is_some(),
    };
    let Some(addrs) = approved else {
        let mut reply = header(RCODE_REFUSED, 1, 0);
        reply.extend(question);
        return Some((reply, Some(asked)));
    };
    let records: Vec<Vec<u8>> = if qclass == CLASS_IN {
        addrs
            .iter()
            .filter_map(|a| match (a, qtype) {
                (IpAddr::V4(v4), TYPE_A) => Some(v4.octets().to_vec()),
                (IpAddr::V6(v6), TYPE_AAAA) => Some(v6.octets().to_vec()),
                _ => None,
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut reply = header(0, 1, records.len() as u16);
    reply.extend(question);
    for rdata in records {
        // The name as a pointer to the question's (offset 12).
        reply.extend([0xc0, 0x0c]);
        reply.extend(qtype.to_be_bytes());
        reply.extend(CLASS_IN.to_be_bytes());
        reply.extend(TTL.to_be_bytes());
        reply.extend((rdata.len() as u16).to_be_bytes());
        reply.extend(rdata);
    }
    Some((reply, Some(asked)))
}

/// One label as text: lowercase letters, digits, `-` and `_` as they are, any other byte (a dot
/// inside a label, a space, a byte above ASCII) as `\DDD`.
fn label_text(label: &[u8]) -> String {
    let mut text = String::with_capacity(label.len());
    for &b in label {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            text.push(char::from(b.to_ascii_lowercase()));
        } else {
            let _ = write!(text, "\\{b:03}");
        }
    }
    text
}
