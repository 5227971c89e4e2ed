//! One decision against a generated policy of 100 tools and 100 rules (regexes and detectors),
//! over a mix of calls that are allowed, blocked by rules, and blocked by arguments.

use std::{fmt::Write, path::Path};

use guard::{intent::Intent, policy::Policy};
use serde_json::json;

fn main() {
    divan::main();
}

fn generated() -> Policy {
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
    match Policy::parse(Path::new("bench.toml"), &t) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

fn intents() -> Vec<Intent> {
    let mk = |tool: &str, v: serde_json::Value| match v {
        serde_json::Value::Object(m) => Intent::new(tool, m),
        _ => unreachable!(),
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

#[divan::bench]
fn decide(bencher: divan::Bencher) {
    let policy = generated();
    let intents = intents();
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 1) % intents.len();
        divan::black_box(policy.decide(divan::black_box(&intents[i])))
    });
}
