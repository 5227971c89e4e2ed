//! What guard-mcp concludes of a held call from what it hears: only guardd's own word moves a
//! call's state (an outside pass's F1, F2), the latest results are kept (F3), and the release
//! tool's description stays bounded (F7).

use guard::protocol::reply::CallDecision;
use serde_json::json;

use super::*;

/// A result with `structured` content, as `call` makes them.
fn said(structured: serde_json::Value) -> CallToolResult {
    let mut r = CallToolResult::error(Vec::new());
    r.structured_content = Some(structured);
    r
}

fn outcome(decision: serde_json::Value, exit_code: serde_json::Value) -> CallToolResult {
    said(json!({"call_id": "c", "decision": decision, "exit_code": exit_code}))
}

#[test]
fn only_guardds_own_word_says_what_became_of_a_call() {
    assert_eq!(learnt(&outcome(json!("allow"), json!(0))), Some(State::Ran));
    assert_eq!(learnt(&outcome(json!("allow"), json!(3))), Some(State::Ran));
    // Started, and guardd went away before its end: never "did not run".
    assert_eq!(
        learnt(&outcome(json!("allow"), json!(null))),
        Some(State::Started)
    );
    // Denied or expired: the held call's own decision.
    let denied = call::refused(CallDecision {
        call_id: "c".into(),
        decision: Decision::Escalate,
        message: Some("not approved: no".into()),
        approved_by: None,
        terminated: false,
    });
    assert_eq!(learnt(&denied), Some(State::NotApproved));
    assert_eq!(
        learnt(&outcome(json!("block"), json!(null))),
        Some(State::Gone)
    );
    // guardd away, busy, a refused request: nothing learnt.
    assert_eq!(learnt(&call::malformed("guardd: busy".into())), None);
    assert_eq!(learnt(&outcome(json!(null), json!(null))), None);
}

fn releases_with(n: u64) -> Releases {
    let r = Releases::new(Arc::new(PathBuf::from("/nonexistent.sock")));
    for seq in 0..n {
        let call = Call {
            tool: "mail".into(),
            state: State::Held,
            result: None,
            seq,
        };
        // Ids that sort otherwise than their order, as guardd's counter makes them.
        r.lock().insert(format!("x-{seq}-r"), call);
    }
    r
}

#[test]
fn the_latest_results_are_kept_and_a_forgotten_one_says_so() {
    let r = releases_with(12);
    for seq in 0..12 {
        let id = format!("x-{seq}-r");
        r.settle(&id, State::Ran, Some(outcome(json!("allow"), json!(0))));
    }
    let calls = r.lock();
    for seq in 0..12 {
        let call = &calls[&format!("x-{seq}-r")];
        let kept = seq >= 12 - KEPT_RESULTS as u64;
        assert_eq!(call.result.is_some(), kept, "x-{seq}-r");
        let state = if kept { State::Ran } else { State::Forgotten };
        assert_eq!(call.state, state, "x-{seq}-r");
    }
    drop(calls);
    let again = r.lock().get("x-0-r").map(|c| c.state);
    assert_eq!(again, Some(State::Forgotten));
    // A call that ran stays so, whatever is heard later.
    r.settle("x-11-r", State::NotApproved, None);
    assert_eq!(r.lock()["x-11-r"].state, State::Ran);
}

#[test]
fn the_description_names_the_latest_calls_only() {
    let r = releases_with(300);
    let tool = r.tool();
    let about = tool.description.as_deref().unwrap_or_default();
    assert!(about.contains("x-299-r (mail): held for review"), "{about}");
    assert!(!about.contains("x-283-r"), "{about}");
    assert!(about.contains("and 284 earlier"), "{about}");
    assert!(about.len() < 4096, "{} bytes", about.len());
}
