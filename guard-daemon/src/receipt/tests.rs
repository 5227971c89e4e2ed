//! A receipt's unit tests: how each kind of effect and count folds in, and what it publishes.

use guard_common::event::{ACTION_ALLOWED, ACTION_DENIED, KIND_CONNECT, KIND_PACKET, KIND_SOCKET};

use super::*;
use crate::bus::{Action, What};

fn call() -> ReceiptFor {
    ReceiptFor {
        call_id: "c1".into(),
        tool: "fetch".into(),
        cgroup: "/nonexistent".into(),
        kill_on_divergence: false,
        files: false,
        shadow: false,
        masks: None,
        pinned: None,
    }
}

fn connect_event(cgroup_id: u64, action: u32) -> KernelEvent {
    // SAFETY: Event is plain old data; all-zero is a valid value.
    let mut e: KernelEvent = unsafe { std::mem::zeroed() };
    e.kind = KIND_CONNECT;
    e.action = action;
    e.cgroup_id = cgroup_id;
    e.family = libc::AF_INET as u16;
    e.port = 9;
    e.proto = guard_common::net::PROTO_TCP;
    e.addr[..4].copy_from_slice(&[127, 0, 0, 1]);
    e
}

#[test]
fn a_denied_effect_makes_the_receipt_diverge_and_is_published() {
    let (tracker, bus) = (Receipts::default(), Bus::default());
    let mut rx = bus.subscribe();
    tracker.begin(5, call());
    tracker.record(&connect_event(5, ACTION_ALLOWED), &bus);
    assert!(!tracker.diverged(5));
    tracker.record(&connect_event(5, ACTION_DENIED), &bus);
    tracker.record(&connect_event(6, ACTION_DENIED), &bus); // not ours: ignored
    let ev = rx.try_recv().expect("divergence published");
    assert_eq!(
        (ev.kind(), ev.call_id.as_deref()),
        ("divergence", Some("c1"))
    );
    let What::Divergence(d) = &ev.what else {
        panic!("a divergence: {ev:?}")
    };
    assert_eq!(d.action, Action::Deny);
    assert!(rx.try_recv().is_err(), "only one event expected");
    let receipt = tracker.finish(5).expect("receipt");
    assert_eq!(
        (receipt.verdict, receipt.denied, receipt.connects.len()),
        (Verdict::Diverged, 1, 2)
    );
    assert_eq!(receipt.connects[1].addr, "127.0.0.1");
    // The receipt keeps the divergence as published, for a reader of the audit log.
    assert_eq!(receipt.divergences, std::slice::from_ref(d));
}

#[test]
fn dns_questions_left_unlisted_unread_or_unjudged_make_the_receipt_say_so() {
    use crate::monitor::dns::{Asked, Questions};
    let answered = Asked {
        name: "api.example.com".into(),
        qtype: "A".into(),
        approved: true,
    };
    let receipt_of = |questions: Questions| {
        let (tracker, bus) = (Receipts::default(), Bus::default());
        tracker.begin(5, call());
        tracker.asked(5, questions, &bus);
        tracker.finish(5).expect("receipt")
    };
    // Control: answered questions, some not listed, is conformed, and says how many.
    let r = receipt_of(Questions {
        listed: vec![answered.clone()],
        judged: 70,
        unlisted: 6,
        ..Questions::default()
    });
    assert_eq!(
        (r.verdict, r.dns_judged, r.dns_unlisted),
        (Verdict::Conformed, 70, 6)
    );
    assert!(
        r.verified
            .dns
            .contains("70 questions judged, 1 distinct listed; 6 more not listed"),
        "{}",
        r.verified.dns
    );
    // Each count of what was refused, unread or unjudged is a divergence of its own.
    for (questions, effect) in [
        (
            Questions {
                unlisted: 1,
                unlisted_refused: 1,
                ..Questions::default()
            },
            Effect::DnsUnlisted { refused: 1 },
        ),
        (
            Questions {
                unreadable: 2,
                ..Questions::default()
            },
            Effect::DnsUnreadable { messages: 2 },
        ),
        (
            Questions {
                unjudged: 3,
                ..Questions::default()
            },
            Effect::DnsUnjudged { messages: 3 },
        ),
    ] {
        let r = receipt_of(Questions {
            listed: vec![answered.clone()],
            judged: 1,
            ..questions
        });
        assert_eq!(r.verdict, Verdict::Diverged, "{effect:?}");
        assert_eq!(r.divergences[0].effect, effect);
    }
    let r = receipt_of(Questions {
        unjudged: 3,
        ..Questions::default()
    });
    assert!(
        r.verified.dns.contains("not observed: 3 messages"),
        "{}",
        r.verified.dns
    );
    // A call without a responder says it had none.
    let r = Receipts::default();
    r.begin(5, call());
    let r = r.finish(5).expect("receipt");
    assert!(
        r.verified.dns.starts_with("no responder"),
        "{}",
        r.verified.dns
    );
}

#[test]
fn a_refused_socket_is_a_divergence_named_by_family_and_type() {
    let (tracker, bus) = (Receipts::default(), Bus::default());
    let mut rx = bus.subscribe();
    tracker.begin(5, call());
    // SAFETY: Event is plain old data; all-zero is a valid value.
    let mut e: KernelEvent = unsafe { std::mem::zeroed() };
    e.kind = KIND_SOCKET;
    e.action = ACTION_DENIED;
    e.cgroup_id = 5;
    e.family = libc::AF_PACKET as u16;
    e.sock_type = libc::SOCK_RAW as u32;
    e.sock_protocol = 0x0300;
    tracker.record(&e, &bus);
    let ev = rx.try_recv().expect("divergence published");
    let What::Divergence(d) = &ev.what else {
        panic!("a divergence: {ev:?}")
    };
    let Effect::Socket { family, ty, .. } = &d.effect else {
        panic!("a socket: {d:?}")
    };
    assert_eq!((family.as_str(), ty.as_str()), ("packet", "raw"));
    let receipt = tracker.finish(5).expect("receipt");
    assert_eq!((receipt.verdict, receipt.denied), (Verdict::Diverged, 1));
    assert_eq!(receipt.sockets[0].protocol, 0x0300);
}

#[test]
fn a_dropped_packet_is_a_divergence_with_its_destination_and_options() {
    let (tracker, bus) = (Receipts::default(), Bus::default());
    let mut rx = bus.subscribe();
    tracker.begin(5, call());
    let mut e = connect_event(5, ACTION_DENIED);
    e.kind = KIND_PACKET;
    e.proto = libc::IPPROTO_UDP as u8;
    e.sock_type = 1; // the packet carried IP options
    tracker.record(&e, &bus);
    let ev = rx.try_recv().expect("divergence published");
    let What::Divergence(d) = &ev.what else {
        panic!("a divergence: {ev:?}")
    };
    // Seen in softirq: no task of the call's, so no pid.
    assert_eq!(d.pid, None);
    assert_eq!(
        d.effect,
        Effect::Packet {
            addr: "127.0.0.1".into(),
            port: 9,
            protocol: libc::IPPROTO_UDP as u8,
            options: true,
        }
    );
    // A packet whose header could not be read names no address.
    e.family = 0;
    tracker.record(&e, &bus);
    let ev = rx.try_recv().expect("second divergence");
    let What::Divergence(d) = &ev.what else {
        panic!("a divergence: {ev:?}")
    };
    assert!(matches!(&d.effect, Effect::Packet { addr, .. } if addr == "?"));
    let receipt = tracker.finish(5).expect("receipt");
    assert_eq!((receipt.verdict, receipt.denied), (Verdict::Diverged, 2));
}
