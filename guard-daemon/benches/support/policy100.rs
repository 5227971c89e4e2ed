//! The decision workload shared by the divan `decide` bench and `guard-bench` (which includes this
//! file with `#[path]`, so both measure the same thing): a generated policy of 100 tools and 100
//! rules (regexes, detectors, exact matches), and calls that are allowed, blocked by rules, and
//! blocked by their arguments.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

/// The policy's TOML text.
pub fn policy_text() -> String {
    let mut t = String::new();
    for i in 0..100 {
        let _ = write!(
            t,
            "[tools.tool_{i}]\ntier = \"{}\"\ncommand = [\"/bin/echo\", \"{{msg}}\", \"{{n}}\"]\n\
             [tools.tool_{i}.args.msg]\ntype = \"string\"\nmax_len = 200\n\
             [tools.tool_{i}.args.n]\ntype = \"integer\"\nmin = 0\nmax = 1000\n",
            if i % 2 == 0 { "low" } else { "medium" }
        );
    }
    for i in 0..100 {
        let target = if i % 4 == 0 {
            "*".to_string()
        } else {
            format!("tool_{}", i % 100)
        };
        let cond = match i % 3 {
            0 => format!("regex = '.*forbidden_{i}.*'"),
            1 => "detect = [\"aws_access_key\", \"credit_card\"]".to_string(),
            _ => format!("arg = \"msg\"\nequals = \"exact_{i}\""),
        };
        let _ = write!(
            t,
            "[[rules]]\nid = \"r{i}\"\ntools = [\"{target}\"]\n{cond}\naction = \"block\"\n"
        );
    }
    t
}

/// The calls, as (tool, arguments): two allowed, four blocked.
pub fn calls() -> Vec<(&'static str, Map<String, Value>)> {
    let mk = |tool, v: Value| match v {
        Value::Object(m) => (tool, m),
        _ => unreachable!("literal object"),
    };
    vec![
        mk(
            "tool_3",
            json!({"msg": "hello world, nothing to see", "n": 7}),
        ),
        mk(
            "tool_10",
            json!({"msg": "this is forbidden_0 text", "n": 1}),
        ),
        mk(
            "tool_55",
            json!({"msg": "key AKIAIOSFODNN7EXAMPLE", "n": 2}),
        ),
        mk("tool_42", json!({"msg": "ok", "n": 5000})),
        mk("unknown", json!({})),
        mk(
            "tool_98",
            json!({"msg": "an ordinary sentence about builds", "n": 3}),
        ),
    ]
}
