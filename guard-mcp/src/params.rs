//! A `tools/call`'s name and arguments against the tool as guardd lists it, before anything
//! reaches guardd. A tool it does not list is a JSON-RPC error (-32602, invalid params), as the
//! MCP specification (2025-11-25) keeps protocol errors; arguments that do not fit the tool (an
//! unknown or a missing one, a value of the wrong JSON type) are a tool result with `isError`,
//! naming what is wrong, since the specification makes input validation errors tool execution
//! errors (SEP-1303): the model reads them and corrects the call. Whether a well-typed value may
//! be used (a pattern, an enum's values, a path's `within`, a rule, a detector) is the policy's
//! to decide, as a call guardd records.

use guard::{
    policy::{ArgType, StdinSpec, ToolSpec},
    protocol::reply::ToolList,
};
use rmcp::{ErrorData, model::JsonObject};
use serde_json::{Value, json};

/// Why a call is not sent to guardd.
#[derive(Debug)]
pub enum Malformed {
    /// A tool guard does not offer: a protocol error.
    Tool(ErrorData),
    /// Arguments that do not fit the tool: a tool result with `isError`, saying this.
    Arguments(String),
}

/// Checks a call of `tool` with `args` against `list`: what to answer when it is malformed.
pub fn check(list: &ToolList, tool: &str, args: &JsonObject) -> Result<(), Malformed> {
    let Some(spec) = list.tools.iter().find(|t| t.name == tool) else {
        let why = format!("unknown tool '{tool}'");
        return Err(Malformed::Tool(invalid(why, tool, None)));
    };
    if spec.stdin == Some(StdinSpec::Caller) {
        // Not offered (see `offered`): its input would be an empty stdin.
        let why = format!(
            "tool '{tool}' reads its caller's stdin, which an MCP client cannot give; it is \
             not offered over MCP"
        );
        return Err(Malformed::Tool(invalid(why, tool, None)));
    }
    if !spec.runnable {
        let why = format!(
            "tool '{tool}' has no command in guard's policy: it can be checked, not run; it is \
             not offered over MCP"
        );
        return Err(Malformed::Tool(invalid(why, tool, None)));
    }
    arguments(spec, args).map_err(Malformed::Arguments)
}

/// Whether `args` fit `spec`'s arguments: why not.
fn arguments(spec: &ToolSpec, args: &JsonObject) -> Result<(), String> {
    let tool = &spec.name;
    if let Some(name) = args
        .keys()
        .find(|k| !spec.args.iter().any(|a| a.name == **k))
    {
        return Err(format!("tool '{tool}': unknown argument '{name}'"));
    }
    for arg in &spec.args {
        // guardd reads a null as an argument left out.
        let value = args.get(&arg.name).filter(|v| !v.is_null());
        match value {
            None if arg.required => {
                return Err(format!(
                    "tool '{tool}': missing required argument '{}'",
                    arg.name
                ));
            }
            Some(v) if !typed(arg.ty, v) => {
                return Err(format!(
                    "tool '{tool}': argument '{}' must be {}",
                    arg.name,
                    expected(arg.ty)
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether a tool is offered over MCP: one that can run (it has a command) and does not read
/// its caller's stdin stream.
pub fn offered(spec: &ToolSpec) -> bool {
    spec.runnable && spec.stdin != Some(StdinSpec::Caller)
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
                ToolSpec {
                    runnable: false,
                    ..fixtures::tool("decided")
                },
            ],
        }
    }

    fn call(tool: &str, args: Value) -> Result<(), Malformed> {
        let Value::Object(args) = args else {
            panic!("an object")
        };
        check(&list(), tool, &args)
    }

    #[test]
    fn a_tool_not_offered_is_invalid_params() {
        for (tool, says) in [
            ("nope", "unknown tool 'nope'"),
            ("cat", "reads its caller's stdin"),
            ("decided", "has no command"),
        ] {
            let Err(Malformed::Tool(e)) = call(tool, json!({})) else {
                panic!("{tool}: not a protocol error");
            };
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{says}");
            assert!(e.message.contains(says), "{} lacks {says}", e.message);
        }
    }

    #[test]
    fn arguments_that_do_not_fit_are_a_tool_error_naming_what_is_wrong() {
        for (tool, args, says) in [
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
            let Err(Malformed::Arguments(e)) = call(tool, args) else {
                panic!("{says}: not an arguments error");
            };
            assert!(e.contains(says), "{e} lacks {says}");
        }
    }

    #[test]
    fn well_typed_calls_pass_whatever_their_values() {
        // The pattern is the policy's to apply: a well-typed value that breaks it is a call.
        call("t", json!({"s": "NOT lowercase", "n": 3, "b": true})).expect("well-typed");
        call("t", json!({"s": "a", "n": null})).expect("null is left out");
        assert!(!offered(&list().tools[1]) && offered(&list().tools[0]));
        assert!(!offered(&list().tools[2]), "a tool without a command");
    }
}
