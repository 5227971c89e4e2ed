//! The DNS a call gets: answers for the host names of its approved connects, nothing else.
//!
//! A call that connects to a host by name needs to resolve it, and a resolver that forwards any
//! name is a channel out (`<data>.attacker.example`). So guardd resolves the call's names itself
//! before launch (pinning the addresses the kernel allows), runs a [`Responder`] on a loopback
//! UDP port for the call, and the `connect4`/`sendmsg4` programs send every DNS query of the call
//! (UDP to port 53, whatever the server) there; `recvmsg4` makes the answer look as if it came
//! from the server the call asked. The responder answers A and AAAA for the approved names with
//! the pinned addresses and refuses every other name; the receipt lists every name asked, and
//! one outside the approved names is a divergence. Nothing the call asks leaves the host.
//!
//! The wire format is the one question of RFC 1035 section 4: small enough to read by hand, and
//! read defensively (a malformed query gets FORMERR, or nothing when even its header is short).

use std::{
    collections::HashMap,
    io,
    net::{IpAddr, Ipv4Addr},
    sync::{Arc, Mutex},
};

use serde::Serialize;
use tokio::{net::UdpSocket, task::JoinHandle};

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const RCODE_FORMERR: u16 = 1;
const RCODE_REFUSED: u16 = 5;
/// Seconds a resolver may keep an answer: short, the call is short.
const TTL: u32 = 30;
/// Names kept per receipt.
const LISTED: usize = 64;

/// One question a call asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Asked {
    /// Lowercase, without the trailing dot.
    pub name: String,
    /// "A", "AAAA", or the type's number.
    #[serde(rename = "type")]
    pub qtype: String,
    /// Whether the name is one of the call's approved hosts (answered), or was refused.
    pub approved: bool,
}

/// A call's resolver: a task answering on a loopback UDP port until it is finished.
pub struct Responder {
    port: u16,
    asked: Arc<Mutex<Vec<Asked>>>,
    task: JoinHandle<()>,
}

impl Responder {
    /// Starts answering `names` (host name -> its pinned addresses) on 127.0.0.1.
    pub async fn start(names: HashMap<String, Vec<IpAddr>>) -> io::Result<Self> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = socket.local_addr()?.port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let names: HashMap<String, Vec<IpAddr>> =
            names.into_iter().map(|(k, v)| (normalize(&k), v)).collect();
        let log = asked.clone();
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                    continue;
                };
                let Some((reply, question)) = answer(&buf[..n], &names) else {
                    continue;
                };
                if let Some(q) = question {
                    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                    if log.len() < LISTED && !log.contains(&q) {
                        log.push(q);
                    }
                }
                let _ = socket.send_to(&reply, peer).await;
            }
        });
        Ok(Self { port, asked, task })
    }

    /// The port the kernel sends the call's queries to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops answering and hands back what was asked.
    pub fn finish(self) -> Vec<Asked> {
        self.task.abort();
        let asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.clone()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The reply to one query, and the question it asked when it could be read. `None` when the
/// message is no query at all (too short for a header, or a response).
pub fn answer(
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
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63
            || at + len > query.len()
            || labels.iter().map(|l: &String| l.len() + 1).sum::<usize>() + len > 253
        {
            return formerr();
        }
        let Ok(label) = std::str::from_utf8(&query[at..at + len]) else {
            return formerr();
        };
        labels.push(label.to_ascii_lowercase());
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

/// A query for `name` of `qtype` (for tests and the test tool's kind).
pub fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = Vec::new();
    for w in [id, 0x0100, 1, 0, 0, 0] {
        q.extend(w.to_be_bytes());
    }
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend(label.as_bytes());
    }
    q.push(0);
    q.extend(qtype.to_be_bytes());
    q.extend(CLASS_IN.to_be_bytes());
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> HashMap<String, Vec<IpAddr>> {
        HashMap::from([(
            "api.example.com".into(),
            vec!["192.0.2.7".parse().unwrap(), "2001:db8::7".parse().unwrap()],
        )])
    }

    fn rcode(reply: &[u8]) -> u16 {
        u16_at(reply, 2).unwrap() & 0xf
    }

    #[test]
    fn approved_names_get_their_pinned_addresses_whatever_their_case() {
        let (reply, asked) = answer(&query(7, "API.Example.com.", TYPE_A), &table()).unwrap();
        assert_eq!(u16_at(&reply, 0), Some(7));
        assert_eq!(rcode(&reply), 0);
        assert_eq!(u16_at(&reply, 6), Some(1), "one answer");
        assert!(reply.ends_with(&[0, 4, 192, 0, 2, 7]));
        let asked = asked.unwrap();
        assert_eq!(
            (asked.name.as_str(), asked.qtype.as_str(), asked.approved),
            ("api.example.com", "A", true)
        );
        let (reply, _) = answer(&query(8, "api.example.com", TYPE_AAAA), &table()).unwrap();
        assert_eq!(u16_at(&reply, 6), Some(1));
        assert!(
            reply.ends_with(
                &"2001:db8::7"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets()
            )
        );
        // Another type of an approved name: no data, not refused.
        let (reply, _) = answer(&query(9, "api.example.com", 16), &table()).unwrap();
        assert_eq!((rcode(&reply), u16_at(&reply, 6)), (0, Some(0)));
    }

    #[test]
    fn other_names_are_refused_and_recorded() {
        let (reply, asked) =
            answer(&query(1, "c2VjcmV0.attacker.example", TYPE_A), &table()).unwrap();
        assert_eq!(rcode(&reply), RCODE_REFUSED);
        assert_eq!(u16_at(&reply, 6), Some(0));
        let asked = asked.unwrap();
        assert_eq!(asked.name, "c2vjcmv0.attacker.example");
        assert!(!asked.approved);
    }

    #[test]
    fn malformed_queries_get_formerr_or_nothing_and_never_panic() {
        assert!(answer(&[1, 2, 3], &table()).is_none());
        let mut q = query(1, "api.example.com", TYPE_A);
        q[2] |= 0x80; // a response
        assert!(answer(&q, &table()).is_none());
        let mut q = query(1, "api.example.com", TYPE_A);
        q[12] = 200; // a label longer than the message
        assert_eq!(rcode(&answer(&q, &table()).unwrap().0), RCODE_FORMERR);
        let q = query(1, "api.example.com", TYPE_A);
        assert_eq!(
            rcode(&answer(&q[..q.len() - 3], &table()).unwrap().0),
            RCODE_FORMERR
        );
        // Every prefix and a few bit flips of a real query: an answer or nothing.
        for n in 0..q.len() {
            let _ = answer(&q[..n], &table());
            let mut f = q.clone();
            f[n] ^= 0xff;
            let _ = answer(&f, &table());
        }
    }
}
