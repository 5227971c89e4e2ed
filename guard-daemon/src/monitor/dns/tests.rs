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
fn a_label_holding_a_dot_or_any_other_byte_reads_as_no_other_name() {
    // One label `api.example`, then `com`: on the wire, not the approved name.
    let mut q = query(1, "x.com", TYPE_A);
    q.splice(12..14, [11].into_iter().chain(*b"api.example"));
    let (reply, asked) = answer(&q, &table()).unwrap();
    assert_eq!(rcode(&reply), RCODE_REFUSED);
    assert_eq!(asked.unwrap().name, "api\\046example.com");
    // A byte above ASCII is a name like any other: refused and listed, not FORMERR.
    let mut q = query(1, "a.example", TYPE_A);
    q[13] = 0xff;
    let (reply, asked) = answer(&q, &table()).unwrap();
    assert_eq!(rcode(&reply), RCODE_REFUSED);
    assert_eq!(asked.unwrap().name, "\\255.example");
}

/// A log after `approved` questions for the approved name, each of another type, then one
/// for each of `refused` names outside it.
fn flooded(approved: u16, refused: &[&str]) -> Questions {
    let mut log = Log::default();
    for t in 0..approved {
        log.judge(&query(t, "api.example.com", 1000 + t), &table(), None);
    }
    for name in refused {
        log.judge(&query(0, name, TYPE_A), &table(), None);
    }
    log.questions
}

#[test]
fn a_flood_of_answered_questions_hides_no_refused_one_and_what_is_left_out_is_counted() {
    // Control: 70 answered questions, 64 listed, the other 6 counted.
    let q = flooded(70, &[]);
    assert_eq!((q.judged, q.listed.len(), q.unlisted), (70, 64, 6));
    assert_eq!(q.unlisted_refused, 0);
    assert!(q.listed.iter().all(|a| a.approved));
    // The attack: the refused question takes the last answered one's place.
    let q = flooded(70, &["c2VjcmV0.attacker.example"]);
    assert_eq!((q.judged, q.listed.len(), q.unlisted), (71, 64, 7));
    assert_eq!(q.unlisted_refused, 0);
    let last = q.listed.last().unwrap();
    assert_eq!(
        (last.name.as_str(), last.approved),
        ("c2vjcmv0.attacker.example", false)
    );
    assert_eq!(q.listed[62].qtype, "1062", "the first answered ones stay");
}

#[test]
fn a_list_full_of_refused_names_still_counts_the_next_refused_one() {
    let names: Vec<String> = (0..66).map(|i| format!("d{i}.attacker.example")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let q = flooded(2, &names);
    assert_eq!(q.listed.len(), 64);
    assert!(q.listed.iter().all(|a| !a.approved), "{:?}", q.listed);
    // Two answered ones gave way; two refused ones found no room.
    assert_eq!((q.unlisted, q.unlisted_refused), (4, 2));
    // Repeats of a listed question are counted, and listed once; one evicted counts all
    // its asks.
    let mut log = Log::default();
    for _ in 0..3 {
        log.judge(&query(1, "api.example.com", TYPE_A), &table(), None);
    }
    for name in &names[..64] {
        log.judge(&query(1, name, TYPE_A), &table(), None);
    }
    let q = log.questions;
    assert_eq!((q.judged, q.unlisted, q.unlisted_refused), (67, 3, 0));
}

#[test]
fn a_message_that_is_no_question_is_counted_unreadable() {
    let mut log = Log::default();
    let mut response = query(1, "api.example.com", TYPE_A);
    response[2] |= 0x80;
    let mut two = query(1, "api.example.com", TYPE_A);
    two[5] = 2;
    for message in [&[1u8, 2, 3][..], &response, &two] {
        log.judge(message, &table(), None);
    }
    assert_eq!((log.questions.unreadable, log.questions.judged), (3, 0));
    assert!(log.questions.listed.is_empty());
}

fn sender(responder: &Responder) -> (std::net::UdpSocket, std::net::SocketAddr) {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    (socket, (Ipv4Addr::LOCALHOST, responder.port()).into())
}

#[tokio::test]
async fn what_is_still_queued_at_the_end_is_judged() {
    // The responder's task has not run yet (one thread, no await since it started): all
    // that was sent is still queued when it is finished.
    let responder = Responder::start(table(), false).await.unwrap();
    let (socket, to) = sender(&responder);
    for t in 0..100 {
        socket
            .send_to(&query(t, "api.example.com", TYPE_A), to)
            .unwrap();
    }
    socket
        .send_to(&query(0, "c2VjcmV0.attacker.example", TYPE_A), to)
        .unwrap();
    let q = responder.finish().await;
    assert_eq!((q.judged, q.unjudged), (101, 0));
    assert!(q.listed.iter().any(|a| !a.approved), "{:?}", q.listed);
}

#[tokio::test]
async fn what_the_kernel_dropped_from_a_full_queue_is_counted_unjudged() {
    let responder = Responder::start(table(), false).await.unwrap();
    let (socket, to) = sender(&responder);
    // Far more than the queue holds, with nothing reading it.
    let sent = 3000;
    for t in 0..sent {
        socket
            .send_to(&query(t, "api.example.com", TYPE_A), to)
            .unwrap();
    }
    let q = responder.finish().await;
    assert!(q.unjudged > 0 && q.judged > 0, "{q:?}");
    assert_eq!(q.judged + q.unjudged, u64::from(sent), "{q:?}");
}

#[test]
fn the_read_at_the_end_stops_at_its_bound_and_counts_what_it_left() {
    let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver.set_nonblocking(true).unwrap();
    let to = receiver.local_addr().unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for t in 0..50 {
        socket
            .send_to(&query(t, "api.example.com", TYPE_A), to)
            .unwrap();
    }
    let mut log = Log::default();
    drain(&receiver, &table(), &mut log, 10, Duration::from_secs(5));
    assert_eq!((log.questions.judged, log.questions.unjudged), (10, 1));
    // Without a bound in the way, the rest is read and nothing is counted unjudged.
    let mut log = Log::default();
    drain(&receiver, &table(), &mut log, 100, Duration::from_secs(5));
    assert_eq!((log.questions.judged, log.questions.unjudged), (40, 0));
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
