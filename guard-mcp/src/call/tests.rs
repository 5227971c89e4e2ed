//! A tool call's arguments and results as the MCP client sends and reads them.

use serde_json::Value;

use super::*;

/// The JSON type names `v` answers to in a schema's `type`.
fn is(v: &Value, ty: &str) -> bool {
    match ty {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "integer" => v.is_i64(),
        "object" => v.is_object(),
        _ => false,
    }
}

#[test]
fn every_exec_says_it_has_no_stdin_to_give() {
    for no_wait in [false, true] {
        let request = exec("t".into(), JsonObject::new(), Some("/srv".into()), no_wait);
        let sent: Value = serde_json::from_slice(&protocol::frame(&request)).expect("JSON");
        assert_eq!(sent["stdin"], "none", "{sent}");
        assert_eq!(sent["type"], "exec", "{sent}");
        assert_eq!(sent["cwd"], "/srv", "{sent}");
        // A call released later stays held when guard-mcp leaves.
        assert_eq!(sent["no_wait"] == true, no_wait, "{sent}");
    }
}

#[test]
fn every_result_has_the_keys_and_types_its_output_schema_declares() {
    let schema = Value::Object(crate::schema::output_schema());
    let exit = |code, error: Option<&str>| Exit {
        call_id: "c-1".into(),
        code,
        diverged: code == Some(137),
        stopped: code == Some(137),
        killed: None,
        error: error.map(Into::into),
        receipt: code.map(|_| Box::default()),
        unrecorded: None,
    };
    let out = || ("out".to_owned(), 0);
    let results = [
        result(Vec::new(), Outcome::failed("guardd unreachable"), None),
        refused(CallDecision {
            call_id: "c-2".into(),
            decision: Decision::Block,
            message: None,
            approved_by: None,
            terminated: false,
        }),
        ended(exit(Some(0), None), out(), out()),
        ended(exit(Some(137), None), out(), out()),
        ended(exit(None, Some("launch: no such user")), out(), out()),
    ];
    let properties = schema["properties"].as_object().expect("properties");
    let required = schema["required"].as_array().expect("required");
    assert_eq!(required.len(), properties.len());
    for r in results {
        let s = r.structured_content.expect("structured content");
        let keys: Vec<&String> = s.as_object().expect("an object").keys().collect();
        assert_eq!(keys, properties.keys().collect::<Vec<_>>(), "{s}");
        for (key, p) in properties {
            let types: Vec<&str> = match &p["type"] {
                Value::String(t) => vec![t.as_str()],
                t => t
                    .as_array()
                    .expect("types")
                    .iter()
                    .flat_map(Value::as_str)
                    .collect(),
            };
            assert!(types.iter().any(|t| is(&s[key], t)), "{key}: {s}");
        }
    }
}
