//! A `tools/call`'s name and arguments against the tool as guardd lists it. What the MCP
//! specification calls invalid parameters (an unknown tool, an unknown or a missing argument, a
//! value of the wrong JSON type) is a JSON-RPC error (-32602) for the client to fix, not a call:
//! nothing reaches guardd. Whether a well-typed value may be used (a pattern, an enum's values,
//! a path's `within`, a rule, a detector) is the policy's to decide, as a call guardd records.

use guard::{
    policy::{ArgType, StdinSpec, ToolSpec},
    protocol::reply::ToolList,
};
use rmcp::{ErrorData, model::JsonObject};
use serde_json::{Value, json};

/// Checks a call of `tool` with `args` against `list`; the error to answer with when it is
/// malformed.
pub fn check(list: &ToolList, tool: &str, args: &JsonObject) -> Result<(), ErrorData> {
    let Some(spec) = list.tools.iter().find(|t| t.name == tool) else {
        return Err(invalid(format!("unknown tool '{tool}'"), tool, None));
    };
    if spec.stdin == Some(StdinSpec::Caller) {
        // Not offered (see `offered`): its input would be an empty stdin.
        let why = format!(
            "tool '{tool}' reads its caller's stdin, which an MCP client cannot give; it is \
             not offered over MCP"
        );
        return Err(invalid(why, tool, None));
    }
    if let Some(name) = args
        .keys()
        .find(|k| !spec.args.iter().any(|a| a.name == **k))
    {
        let why = format!("tool '{tool}': unknown argument '{name}'");
        return Err(invalid(why, tool, Some(name)));
    }
    for arg in &spec.args {
        // guardd reads a null as an argument left out.
        let value = args.get(&arg.name).filter(|v| !v.is_null());
        match value {
            None if arg.required => {
                let why = format!("tool '{tool}': missing required argument '{}'", arg.name);
                return Err(invalid(why, tool, Some(&arg.name)));
            }
            Some(v) if !typed(arg.ty, v) => {
                let why = format!(
                    "tool '{tool}': argument '{}' must be {}",
                    arg.name,
                    expected(arg.ty)
                );
                return Err(invalid(why, tool, Some(&arg.name)));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether a tool is offered over MCP: not one that reads its caller's stdin stream.
pub fn offered(spec: &ToolSpec) -> bool {
    spec.stdin != Some(StdinSpec::Caller)
}

/// Whether `v` has the JSON type guardd accepts for `ty` (as `policy::args` reads it).
fn typed(ty: ArgType, v: &Value) -> bool {
    match ty {
        ArgType::Integer => v.as_i64().is_some(),
        ArgType::Boolean => v.is_boolean(),
        ArgType::String | ArgType::Enum | ArgType::Path | ArgType::Url => v.is_string(),
    }
}

fn expected(ty: ArgType) -> &'static str {
    match ty {
        ArgType::Integer => "an integer",
        ArgType::Boolean => "true or false",
        ArgType::String | ArgType::Enum | ArgType::Path | ArgType::Url => "a string",
    }
}

fn invalid(message: String, tool: &str, argument: Option<&str>) -> ErrorData {
    let mut data = json!({ "tool": tool });
    if let Some(a) = argument {
        data["argument"] = a.into();
    }
    ErrorData::invalid_params(message, Some(data))
}

#[cfg(test)]
mod tests {
    use guard::policy::ArgDoc;
    use rmcp::model::ErrorCode;

    use super::*;
    use crate::fixtures;

    fn arg(name: &str, ty: ArgType, required: bool) -> ArgDoc {
        ArgDoc {
            required,
            pattern: Some("^(?:[a-z]+)$".into()),
            ..fixtures::arg(name, ty)
        }
    }

    fn tool(name: &str, args: Vec<ArgDoc>, stdin: Option<StdinSpec>) -> ToolSpec {
        ToolSpec {
            args,
            stdin,
            ..fixtures::tool(name)
        }
    }

    fn list() -> ToolList {
        ToolList {
            tools: vec![
                tool(
                    "t",
                    vec![
                        arg("s", ArgType::String, true),
                        arg("n", ArgType::Integer, false),
                        arg("b", ArgType::Boolean, false),
                    ],
                    None,
                ),
                tool("cat", Vec::new(), Some(StdinSpec::Caller)),
            ],
        }
    }

    fn call(tool: &str, args: Value) -> Result<(), ErrorData> {
        let Value::Object(args) = args else {
            panic!("an object")
        };
        check(&list(), tool, &args)
    }

    #[test]
    fn malformed_calls_are_invalid_params_naming_what_is_wrong() {
        for (tool, args, says) in [
            ("nope", json!({}), "unknown tool 'nope'"),
            ("cat", json!({}), "reads its caller's stdin"),
            ("t", json!({"s": "a", "x": 1}), "unknown argument 'x'"),
            ("t", json!({}), "missing required argument 's'"),
            ("t", json!({"s": null}), "missing required argument 's'"),
            ("t", json!({"s": 1}), "'s' must be a string"),
            ("t", json!({"s": "a", "n": "3"}), "'n' must be an integer"),
            ("t", json!({"s": "a", "n": 3.5}), "'n' must be an integer"),
            (
                "t",
                json!({"s": "a", "b": "yes"}),
                "'b' must be true or false",
            ),
        ] {
            let e = call(tool, args).expect_err(says);
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{says}");
            assert!(e.message.contains(says), "{} lacks {says}", e.message);
        }
    }

    #[test]
    fn well_typed_calls_pass_whatever_their_values() {
        // The pattern is the policy's to apply: a well-typed value that breaks it is a call.
        call("t", json!({"s": "NOT lowercase", "n": 3, "b": true})).expect("well-typed");
        call("t", json!({"s": "a", "n": null})).expect("null is left out");
        assert!(!offered(&list().tools[1]) && offered(&list().tools[0]));
    }
}
