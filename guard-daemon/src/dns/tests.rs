//! The responder's unit tests: its answers, its judgement of floods, and its end.

use super::{
    wire::{RCODE_FORMERR, RCODE_REFUSED, TYPE_A, TYPE_AAAA, answer, u16_at},
    *,
};

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
    let (reply, asked) = answer(&query(1, "c2VjcmV0.attacker.example", TYPE_A), &table()).unwrap();
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

/// A query for `name` of `qtype`, class IN, recursion desired.
fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
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
    q.extend(1u16.to_be_bytes());
    q
}
