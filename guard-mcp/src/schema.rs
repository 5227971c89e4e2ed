//! A tool as guardd lists it, as an MCP tool: its `inputSchema` generated from the policy's
//! argument specs, and its annotations from the registry. The schema tells an agent what guardd
//! will accept; guardd still checks every call (a schema is advice to the client, not a guard).

use std::sync::Arc;

use guard::{
    call::{decision::RiskTier, plan::OnDivergence},
    policy::{ArgDoc, ArgType, StdinSpec, ToolSpec},
};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// The MCP tool for one listed tool.
pub fn tool(spec: &ToolSpec) -> Tool {
    let mut description = spec.description.clone().unwrap_or_default();
    let mut notes = vec![format!("risk tier {}", spec.tier.as_upper())];
    if spec.held {
        notes.push("every call waits for a human's approval".to_owned());
    }
    if spec.on_divergence == OnDivergence::Kill {
        notes.push("killed if it does anything its policy does not approve".to_owned());
    }
    if !description.is_empty() {
        description.push_str(". ");
    }
    description.push_str(&format!("Runs confined by guard ({}).", notes.join("; ")));
    let mut tool = Tool::new(spec.name.clone(), description, Arc::new(input_schema(spec)));
    tool.output_schema = Some(Arc::new(output_schema()));
    tool.annotations = Some(annotations(spec));
    if spec.tier >= RiskTier::High {
        tool.title = Some(format!("{} ({})", spec.name, spec.tier.as_upper()));
    }
    tool
}

/// Whether every call of the tool provably only reads: no write effect (so no program of its
/// own writing either), not irreversible, of the LOW tier, no connect (what it sends may change
/// the world elsewhere), no Unix socket (the services behind them act for it: one made a file
/// for such a tool), not root (its capabilities, and root's sockets and files) and not in
/// shadow (where what its effects do not allow is let through).
fn only_reads(spec: &ToolSpec) -> bool {
    spec.read_only
        && !spec.irreversible
        && spec.tier == RiskTier::Low
        && !spec.network
        && !spec.unix
        && !spec.exec_writes
        && !spec.root
        && !spec.shadow
}

/// The tool's annotations (MCP 2025-11-25, `ToolAnnotations`). A client may skip its user's
/// confirmation on a `readOnlyHint` tool, so the hints never understate: read-only only for a
/// tool that [`only_reads`], destructive for every other one (a tool that may write may also
/// remove and truncate), `idempotentHint` left at its default, false, and `openWorldHint` for
/// one that may reach what lies outside the host's files: hosts, or the services behind the
/// host's Unix sockets.
fn annotations(spec: &ToolSpec) -> ToolAnnotations {
    let read_only = only_reads(spec);
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(!read_only)
        .open_world(spec.network || spec.unix)
}

/// `{"type":"object","properties":{..},"required":[..],"additionalProperties":false}`: an
/// argument the policy does not declare blocks the call, so the schema admits none.
pub fn input_schema(spec: &ToolSpec) -> JsonObject {
    let mut properties = JsonObject::new();
    let mut required = Vec::new();
    let input = match &spec.stdin {
        Some(StdinSpec::Arg(name)) => Some(name.as_str()),
        _ => None,
    };
    for arg in &spec.args {
        let mut p = property(arg);
        if input == Some(arg.name.as_str()) {
            let about = p
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let said = "the tool's input (guardd writes it to the tool's stdin)";
            let about = about.map_or_else(|| said.to_owned(), |a| format!("{said}; {a}"));
            p.insert("description".into(), about.into());
        }
        properties.insert(arg.name.clone(), Value::Object(p));
        if arg.required {
            required.push(Value::String(arg.name.clone()));
        }
    }
    let mut schema = JsonObject::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    schema.insert("additionalProperties".into(), false.into());
    schema
}

/// The schema of every result's `structuredContent` (`call::Outcome`): the same keys in every
/// result, whether the call ran or not, each `null` where it does not apply (no call id when
/// guardd was not reached, no exit code for a call that did not run, no receipt without a run).
pub fn output_schema() -> JsonObject {
    let nullable = |ty: &str, about: &str| json!({"type": [ty, "null"], "description": about});
    let decision = json!({
        "type": ["string", "null"],
        "enum": ["allow", "escalate", "quarantine", "block", null],
        "description": "the policy's decision (allow for a call that ran); null when none was made",
    });
    let flag = |about: &str| json!({"type": "boolean", "description": about});
    let mut properties = JsonObject::new();
    for (key, schema) in [
        (
            "call_id",
            nullable(
                "string",
                "the call's id in guardd's audit log (guardctl show \
            ID); null when guardd was not reached",
            ),
        ),
        ("decision", decision),
        (
            "exit_code",
            nullable(
                "integer",
                "the tool's exit code (128+N for signal N, 137 when \
            guard stopped it); null when it did not run",
            ),
        ),
        (
            "diverged",
            flag("it did or tried something it was not approved to do"),
        ),
        (
            "stopped",
            flag("guard killed it: for a divergence, its timeout, or its caller gone"),
        ),
        (
            "error",
            nullable(
                "string",
                "what went wrong outside the tool (a refusal, guardd \
            unreachable...); null when nothing did",
            ),
        ),
        (
            "receipt",
            nullable(
                "object",
                "what the call was seen doing, as the audit log records \
            it; null when it did not run",
            ),
        ),
    ] {
        properties.insert(key.into(), schema);
    }
    let required: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
    let mut schema = JsonObject::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), Value::Array(required));
    schema.insert("additionalProperties".into(), false.into());
    schema
}

/// The JSON Schema of one argument.
fn property(arg: &ArgDoc) -> JsonObject {
    let mut p = JsonObject::new();
    let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
    let mut about = Vec::new();
    match arg.ty {
        ArgType::Integer => {
            p.insert("type".into(), "integer".into());
            if let Some(min) = arg.min {
                p.insert("minimum".into(), min.into());
            }
            if let Some(max) = arg.max {
                p.insert("maximum".into(), max.into());
            }
        }
        ArgType::Boolean => {
            p.insert("type".into(), "boolean".into());
        }
        ArgType::String | ArgType::Enum | ArgType::Path | ArgType::Url => {
            p.insert("type".into(), "string".into());
        }
    }
    if !arg.values.is_empty() {
        p.insert("enum".into(), strings(&arg.values));
    }
    if let Some(pattern) = &arg.pattern {
        p.insert("pattern".into(), pattern.clone().into());
    }
    if let Some(max_len) = arg.max_len {
        // The policy counts bytes; a schema counts characters, so this is the looser bound.
        p.insert("maxLength".into(), max_len.into());
    }
    match arg.ty {
        ArgType::Path => {
            about.push("a path".to_owned());
            if let Some(base) = &arg.base {
                about.push(format!("relative to {base}"));
            }
            if !arg.within.is_empty() {
                about.push(format!("beneath {}", arg.within.join(" or ")));
            }
        }
        ArgType::Url => {
            p.insert("format".into(), "uri".into());
            about.push("a URL".to_owned());
            if !arg.schemes.is_empty() {
                about.push(format!("scheme {}", arg.schemes.join(" or ")));
            }
            if !arg.hosts.is_empty() {
                about.push(format!("host {}", arg.hosts.join(", ")));
            }
        }
        _ => {}
    }
    if !about.is_empty() {
        p.insert("description".into(), about.join(", ").into());
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::arg;

    #[test]
    fn schema_carries_types_required_enums_patterns_and_lengths() {
        let mut to = arg("to", ArgType::String);
        to.pattern = Some("^(?:[^@]+@[^@]+)$".into());
        to.max_len = Some(254);
        let mut mode = arg("mode", ArgType::Enum);
        mode.values = vec!["a".into(), "b".into()];
        mode.required = false;
        let mut n = arg("n", ArgType::Integer);
        n.min = Some(1);
        n.max = Some(9);
        let spec = ToolSpec {
            name: "t".into(),
            description: Some("does t".into()),
            tier: RiskTier::High,
            irreversible: true,
            held: true,
            read_only: false,
            on_divergence: OnDivergence::Kill,
            args: vec![to, mode, n],
            ..crate::fixtures::tool("t")
        };
        let tool = tool(&spec);
        let s = Value::Object((*tool.input_schema).clone());
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["required"], serde_json::json!(["to", "n"]));
        assert_eq!(s["properties"]["to"]["pattern"], "^(?:[^@]+@[^@]+)$");
        assert_eq!(s["properties"]["to"]["maxLength"], 254);
        assert_eq!(
            s["properties"]["mode"]["enum"],
            serde_json::json!(["a", "b"])
        );
        assert_eq!(s["properties"]["n"]["type"], "integer");
        assert_eq!(s["properties"]["n"]["maximum"], 9);
        let a = tool.annotations.expect("annotations");
        assert_eq!(
            (a.read_only_hint, a.destructive_hint),
            (Some(false), Some(true))
        );
        assert!(tool.description.expect("description").contains("approval"));
    }

    #[test]
    fn no_hint_understates_a_tool() {
        let hints = |spec: &ToolSpec| {
            let a = tool(spec).annotations.expect("annotations");
            (a.read_only_hint, a.destructive_hint, a.open_world_hint)
        };
        let reads = crate::fixtures::tool("look");
        assert_eq!(hints(&reads), (Some(true), Some(false), Some(false)));
        /// One fact more than reading, named.
        type More = (&'static str, fn(&mut ToolSpec));
        let more: [More; 8] = [
            ("unix", |t| t.unix = true),
            ("exec_writes", |t| t.exec_writes = true),
            ("root", |t| t.root = true),
            ("shadow", |t| t.shadow = true),
            ("network", |t| t.network = true),
            ("a write effect", |t| t.read_only = false),
            ("irreversible", |t| t.irreversible = true),
            ("MEDIUM", |t| t.tier = RiskTier::Medium),
        ];
        for (what, make) in more {
            let mut spec = reads.clone();
            make(&mut spec);
            let (read_only, destructive, open_world) = hints(&spec);
            assert_eq!(
                (read_only, destructive),
                (Some(false), Some(true)),
                "{what}"
            );
            let reaches = matches!(what, "unix" | "network");
            assert_eq!(open_world, Some(reaches), "{what}");
        }
    }
}
