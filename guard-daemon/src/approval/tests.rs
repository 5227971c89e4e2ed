use std::time::Duration;

use serde_json::{Map, Value};

use super::*;
use crate::call::plan::{Confinement, Effects, LaunchPlan};

fn record(id: &str) -> Record {
    let plan = LaunchPlan {
        tool: "send_email".into(),
        argv: vec!["/bin/true".into()],
        effects: Effects::default(),
        confinement: Confinement::default(),
        enforce: Default::default(),
    };
    let form = CallForm::new("send_email", &Map::new(), &plan, "sha256:p").expect("form");
    Record {
        held: Held {
            call_id: id.into(),
            tool: "send_email".into(),
            decision: Decision::Escalate,
            reason: "irreversible".into(),
            uid: 1000,
            args: Value::Null,
            since: crate::audit::ts::now(),
            digest: form.digest(),
            program: "/bin/true".into(),
            session: None,
            approved_by: None,
            no_wait: false,
            agent: None,
            label: None,
            holds_secret: false,
            input: None,
            choices: crate::policy::helpers::Choices::default(),
            conversation: None,
        },
        form,
        expires: 0,
    }
}

fn waiting(a: &Approvals, id: &str) -> oneshot::Receiver<Resolution> {
    match a.attach(id, 1000, false).expect("attach") {
        Attached::Waiting(rx) => rx,
        Attached::Approved(_) => panic!("not approved yet"),
    }
}

#[test]
fn an_approval_reaches_its_waiter_and_the_call_is_taken_once() {
    let a = Approvals::new(2, Duration::from_secs(60), None);
    a.hold(record("c1"), false).expect("hold");
    // Not listed to admins until its caller has been told.
    assert!(a.list().is_empty());
    a.told("c1");
    let mut rx = waiting(&a, "c1");
    assert_eq!(a.list().len(), 1);
    a.check("c1", Some(0), None, false).expect("may approve");
    a.approve("c1", 0).expect("approve");
    assert_eq!(rx.try_recv(), Ok(Resolution::Approved { by: 0 }));
    assert_eq!(
        a.check("c1", Some(0), None, false),
        Err(ApprovalError::Answered("c1".into()))
    );
    assert!(
        a.check("c1", None, None, false).is_ok(),
        "withdrawn by a denial"
    );
    assert!(a.take("c1").is_ok());
    assert!(a.list().is_empty());
    assert!(a.take("c1").is_err());
}

#[test]
fn capacity_is_bounded_and_an_ended_call_cannot_be_approved() {
    let a = Approvals::new(1, Duration::from_secs(60), None);
    a.hold(record("c1"), false).expect("hold");
    assert_eq!(
        a.hold(record("c2"), false).err(),
        Some(ApprovalError::Full(1))
    );
    let mut rx = waiting(&a, "c1");
    a.end("c1", "the caller left").expect("end");
    assert_eq!(
        rx.try_recv(),
        Ok(Resolution::Denied {
            reason: "the caller left".into()
        })
    );
    assert!(a.check("c1", Some(0), None, false).is_err());
    a.hold(record("c3"), false).expect("room again");
    // Not approved: nothing to take.
    assert!(a.take("c3").is_err());
}

#[test]
fn the_submitter_may_deny_but_not_approve_its_own_call_unless_the_policy_says_so() {
    let a = Approvals::new(4, Duration::from_secs(60), None);
    a.hold(record("c1"), false).expect("hold");
    assert_eq!(
        a.check("c1", Some(1000), None, false),
        Err(ApprovalError::SelfApproval("c1".into()))
    );
    assert!(a.check("c1", Some(1000), None, true).is_ok());
    assert!(a.check("c1", None, None, false).is_ok(), "a denial");
}

#[test]
fn an_approval_binds_to_the_digest_and_only_the_submitter_resumes() {
    let a = Approvals::new(4, Duration::from_secs(60), None);
    let r = record("c1");
    let digest = r.held.digest.clone();
    a.hold(r, false).expect("hold");
    assert!(matches!(
        a.check("c1", Some(0), Some("sha256:other"), false),
        Err(ApprovalError::Digest { .. })
    ));
    assert!(a.check("c1", Some(0), Some(&digest), false).is_ok());
    assert_eq!(
        a.attach("c1", 1001, false).err(),
        Some(ApprovalError::NotYours("c1".into()))
    );
    let _rx = waiting(&a, "c1");
    assert_eq!(
        a.attach("c1", 1000, false).err(),
        Some(ApprovalError::Waited("c1".into()))
    );
    a.detach("c1");
    a.approve("c1", 0).expect("approve without a waiter");
    assert!(matches!(
        a.attach("c1", 1000, false),
        Ok(Attached::Approved(0))
    ));
}

#[test]
fn a_caller_that_would_run_the_call_displaces_a_watcher_and_nothing_else() {
    let a = Approvals::new(4, Duration::from_secs(60), None);
    a.hold(record("c1"), false).expect("hold");
    let Ok(Attached::Waiting(mut watched)) = a.attach("c1", 1000, true) else {
        panic!("a watcher attaches");
    };
    // A second watcher does not displace the first.
    assert_eq!(
        a.attach("c1", 1000, true).err(),
        Some(ApprovalError::Waited("c1".into()))
    );
    // A waiter does: the watcher's channel closes, with the call still held.
    let rx = waiting(&a, "c1");
    assert_eq!(
        watched.try_recv(),
        Err(tokio::sync::oneshot::error::TryRecvError::Closed)
    );
    assert!(a.get("c1").is_some());
    // And a watcher does not displace a waiter.
    assert_eq!(
        a.attach("c1", 1000, true).err(),
        Some(ApprovalError::Waited("c1".into()))
    );
    drop(rx);
}

#[test]
fn held_calls_survive_in_the_store_and_a_tampered_record_is_refused() {
    let dir = std::env::temp_dir().join(format!("guard-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let audit = dir.join("audit.jsonl");
    let a = Approvals::new(
        4,
        Duration::from_secs(60),
        Some(Store::beside(&audit).unwrap()),
    );
    a.hold(record("c1"), false).expect("hold");
    a.hold(record("c2"), false).expect("hold");
    a.approve("c2", 0).expect("approve");
    let mut tampered = record("c3");
    tampered.form.plan.argv.push("--more".into());
    Store::beside(&audit)
        .unwrap()
        .save(&tampered)
        .expect("save");
    drop(a);

    let b = Approvals::new(
        4,
        Duration::from_secs(60),
        Some(Store::beside(&audit).unwrap()),
    );
    // A record guardd did not write there: a symlink to a valid one is not taken in.
    let elsewhere = dir.join("c4.json");
    let valid = record("c4");
    std::fs::write(&elsewhere, serde_json::to_vec(&valid).expect("json")).expect("write");
    std::os::unix::fs::symlink(&elsewhere, dir.join("audit.jsonl.pending/c4.json"))
        .expect("symlink");
    let bad = b.load().expect("load");
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad.iter().any(|b| b.1.contains("digest")), "{bad:?}");
    assert!(
        bad.iter()
            .any(|b| b.0 == "c4.json" && b.1.contains("not a regular file")),
        "{bad:?}"
    );
    let held = b.list();
    assert_eq!(held.len(), 2);
    assert_eq!(
        (held[0].approved_by, held[1].approved_by),
        (None, Some(0)),
        "a restart neither answers a call nor forgets an answer"
    );
    b.take("c2").expect("the approved call");
    let c = Approvals::new(
        4,
        Duration::from_secs(60),
        Some(Store::beside(&audit).unwrap()),
    );
    c.load().expect("load");
    assert_eq!(c.list().len(), 1, "a taken call is gone from the store");
    let _ = std::fs::remove_dir_all(&dir);
}

fn record_of(id: &str, uid: u32) -> Record {
    let mut r = record(id);
    r.held.uid = uid;
    r
}

#[test]
fn one_uid_cannot_take_every_held_slot_and_root_keeps_the_reserve() {
    let a = Approvals::new(6, Duration::from_secs(60), None).per_uid(2);
    a.hold(record_of("a1", 1000), false).expect("hold");
    a.hold(record_of("a2", 1000), false).expect("hold");
    let refused = a.hold(record_of("a3", 1000), false).err();
    assert_eq!(
        refused,
        Some(ApprovalError::PerUid {
            uid: 1000,
            bound: 2
        })
    );
    let message = refused.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("max_held_per_uid"), "{message}");
    assert!(a.get("a3").is_none(), "a refused call is not held");
    // Another uid's call is still held, up to the reserve (2 of 6: the last two).
    a.hold(record_of("b1", 1001), false).expect("another uid");
    a.hold(record_of("c1", 1002), false).expect("a third uid");
    assert!(matches!(
        a.hold(record_of("d1", 1003), false),
        Err(ApprovalError::Reserved { .. })
    ));
    // Root (and an admin) is refused by the total alone.
    a.hold(record_of("r1", 0), true).expect("root");
    a.hold(record_of("r2", 0), true).expect("root");
    assert_eq!(
        a.hold(record_of("r3", 0), true).err(),
        Some(ApprovalError::Full(6))
    );
    // Answered calls give their slots back: the uid's own, and the shared ones.
    for id in ["a1", "r1", "r2"] {
        a.end(id, "denied").expect("end");
    }
    a.hold(record_of("a4", 1000), false)
        .expect("room in its share again");
}

#[test]
fn a_record_larger_than_its_bound_is_refused_and_not_stored() {
    let dir = std::env::temp_dir().join(format!("guard-store-large-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let store = Store::beside(&dir.join("audit.jsonl")).expect("store");
    let a = Approvals::new(4, Duration::from_secs(60), Some(store));
    let mut large = record("c1");
    let big = "x".repeat(bounds::MAX_RECORD_BYTES);
    large.form.args.insert("body".into(), Value::String(big));
    let refused = a.hold(large, true).err();
    assert!(
        matches!(refused, Some(ApprovalError::TooLarge { bound, .. }) if bound == bounds::MAX_RECORD_BYTES),
        "{refused:?}"
    );
    assert!(a.get("c1").is_none());
    assert!(
        !dir.join("audit.jsonl.pending/c1.json").exists(),
        "nothing written"
    );
    let mut fits = record("c2");
    fits.form
        .args
        .insert("body".into(), Value::String("x".repeat(64 << 10)));
    a.hold(fits, false).expect("a call within the bound");
    assert!(dir.join("audit.jsonl.pending/c2.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
