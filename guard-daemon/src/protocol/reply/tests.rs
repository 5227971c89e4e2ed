//! Replies on the wire: their frames, and what a client reads of them.
use super::*;
use crate::bus::What;

#[test]
fn replies_read_back_as_written_with_version_and_type() {
    let reply = ExecReply::Decision(CallDecision {
        call_id: "c1".into(),
        decision: Decision::Block,
        message: Some("blocked by policy".into()),
        approved_by: None,
        terminated: false,
    });
    let f = frame(&reply);
    assert_eq!(f.last(), Some(&b'\n'));
    let v: serde_json::Value = serde_json::from_slice(&f).unwrap();
    assert_eq!(
        (v["v"].as_u64(), v["type"].as_str(), v["decision"].as_str()),
        (Some(1), Some("decision"), Some("block"))
    );
    assert_eq!(parse_reply::<ExecReply>(&f[..f.len() - 1]), Ok(reply));
    let event = Reply::Event(Event::of(Some("c1"), Some("t"), What::Lagged { missed: 3 }));
    let f = frame(&event);
    assert_eq!(parse_reply::<Reply>(&f), Ok(event));
    let newer = br#"{"v":2,"type":"subscribed"}"#;
    assert!(parse_reply::<Reply>(newer).unwrap_err().contains("v2"));
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one literal per effect, each named in the exhaustive match below"
)]
fn a_divergence_of_every_effect_reads_back_on_the_wire() {
    use crate::bus::{Action, Divergence, Effect, Proto, RefusedSeen, StoppedBy};
    // An effect's fields sit flat beside the frame's own (`type`, `kind`, `effect`): one
    // named like those made a frame with two keys alike, which guardctl refused, and
    // every follower stopped at a call's first socket or DNS divergence.
    let effects = [
        Effect::Exec {
            path: "/x".into(),
            by_landlock: false,
        },
        Effect::Connect {
            addr: "10.1.2.3".into(),
            port: 443,
            proto: Proto::Tcp,
        },
        Effect::Socket {
            family: "inet".into(),
            ty: "stream".into(),
            protocol: 0,
        },
        Effect::Open {
            path: "/x".into(),
            flags: 1,
        },
        Effect::WritesOutside {
            writes: 1,
            events_lost: 0,
        },
        Effect::EventsLost { events_lost: 1 },
        Effect::Refused(RefusedSeen {
            syscall: "openat".into(),
            errno: "EACCES".into(),
            stopped_by: StoppedBy::Landlock,
        }),
        Effect::RefusedUnseen {
            refused: 1,
            events_lost: 1,
        },
        Effect::Syscall {
            signal: "SIGSYS".into(),
        },
        Effect::Guardd {},
        Effect::Bind {
            addr: "0.0.0.0".into(),
            port: 5599,
            proto: Proto::Udp,
        },
        Effect::Packet {
            addr: "10.1.2.3".into(),
            port: 9,
            protocol: 17,
            options: true,
        },
        Effect::Dns {
            name: "example.org".into(),
            qtype: "A".into(),
        },
        Effect::Lock {
            name: "ld.so.cache".into(),
            lock: "ofd".into(),
            mode: "read".into(),
        },
        Effect::DnsUnlisted { refused: 1 },
        Effect::DnsUnreadable { messages: 1 },
        Effect::DnsUnjudged { messages: 1 },
        Effect::WriteOpen {
            path: "/etc/passwd".into(),
            flags: 1,
        },
        Effect::UnixConnect {
            path: "/run/docker.sock".into(),
        },
        Effect::Planted {
            path: "/srv/w/.git/commondir".into(),
            moved_to: Some("/srv/w/.git/commondir.guard-planted-1".into()),
            kept: None,
        },
    ];
    for effect in effects {
        // A variant added without a line above fails to compile here.
        match &effect {
            Effect::Exec { .. }
            | Effect::Connect { .. }
            | Effect::Socket { .. }
            | Effect::Open { .. }
            | Effect::WriteOpen { .. }
            | Effect::UnixConnect { .. }
            | Effect::Planted { .. }
            | Effect::WritesOutside { .. }
            | Effect::EventsLost { .. }
            | Effect::Refused(_)
            | Effect::RefusedUnseen { .. }
            | Effect::Syscall { .. }
            | Effect::Guardd {}
            | Effect::Bind { .. }
            | Effect::Packet { .. }
            | Effect::Dns { .. }
            | Effect::Lock { .. }
            | Effect::DnsUnlisted { .. }
            | Effect::DnsUnreadable { .. }
            | Effect::DnsUnjudged { .. } => {}
        }
        let what = What::Divergence(Divergence::new(effect, Action::Deny, Some(1)));
        reads_back_unique(Reply::Event(Event::of(Some("c1"), Some("t"), what)));
    }
}

/// The reply's frame has no key twice in one object, and reads back as guardctl reads it.
fn reads_back_unique(reply: Reply) {
    let f = frame(&reply);
    let text = String::from_utf8_lossy(&f);
    assert_eq!(no_duplicate_keys(&f), Ok(()), "{text}");
    assert_eq!(parse_reply::<Reply>(&f), Ok(reply), "{text}");
}

/// Err with the first key an object of `json` (at any depth) carries twice: serde_json
/// keeps the last of two into a `Value`, so only a reader of its own sees them.
fn no_duplicate_keys(json: &[u8]) -> Result<(), String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Unique;
    impl<'de> DeserializeSeed<'de> for Unique {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Unique {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    return Err(serde::de::Error::custom(format!("duplicate key {key}")));
                }
                map.next_value_seed(Unique)?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Unique)?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    Unique.deserialize(&mut de).map_err(|e| e.to_string())
}

#[test]
fn the_duplicate_key_check_sees_a_duplicate() {
    assert!(no_duplicate_keys(br#"{"a":1,"b":[{"type":1,"type":2}]}"#).is_err());
    assert_eq!(
        no_duplicate_keys(br#"{"a":1,"b":[{"type":1}],"type":"x"}"#),
        Ok(())
    );
}
