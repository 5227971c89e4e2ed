//! The tools a client may call, as guardd lists them (`tools`): each with what the registry says
//! of it and its arguments' specs, so that a client (guard-mcp) can describe them to an agent
//! without reading the policy file. Read-only over the compiled policy.

use serde::{Deserialize, Serialize};

use super::{ArgType, Policy, Tool, ToolStdin, args::ArgSpec, template::Elem};
use crate::call::{decision::RiskTier, plan::OnDivergence};

/// One tool a client may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub tier: RiskTier,
    /// Its effects cannot be undone.
    pub irreversible: bool,
    /// Every call that passes the rules is held for a human (irreversible at or above the
    /// escalation threshold).
    pub held: bool,
    /// It declares no write effect, is not irreversible, reaches no Unix socket, does not run
    /// as root and is not in shadow: it does not change its world through guard's confinement.
    pub read_only: bool,
    /// It may connect to the network.
    pub network: bool,
    /// It may connect to the host's Unix sockets (`unix = true`): to the services behind them.
    /// A listing without it is read as the worst case.
    #[serde(default = "unknown")]
    pub unix: bool,
    /// Its write effects are also programs it may run (`exec_writes`).
    #[serde(default = "unknown")]
    pub exec_writes: bool,
    /// It runs as root (`run_as = "root"`).
    #[serde(default = "unknown")]
    pub root: bool,
    /// It runs in shadow: what its effects do not allow is let through.
    #[serde(default = "unknown")]
    pub shadow: bool,
    /// What guard does when a call does what it was not approved to do.
    pub on_divergence: OnDivergence,
    /// Its arguments; any other argument blocks the call.
    pub args: Vec<ArgDoc>,
    /// Where the input it reads on stdin comes from; absent: it reads none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinSpec>,
    /// It has a command: without one it can be decided (`check`, a hook) but not run.
    #[serde(default = "unknown")]
    pub runnable: bool,
}

/// A fact a listing does not state (an older guardd's), taken as the worst case: a client must
/// never describe a tool as doing less than it may.
fn unknown() -> bool {
    true
}

/// A listed tool's `stdin`, as the policy writes it: `"caller"` or `{"arg": "NAME"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinSpec {
    /// It reads the caller's stdin stream: a client with none to give cannot call it.
    Caller,
    /// It reads the value of this (string) argument, which guardd writes to its stdin.
    Arg(String),
}

/// One argument of a listed tool: what the policy checks it against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgDoc {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ArgType,
    pub required: bool,
    /// Anchored regular expression (`^(?:...)$`) the value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The allowed values (`enum`, or a string with `values`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Longest value, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_len: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    /// A path must lie beneath one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub within: Vec<String>,
    /// A relative path is taken from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// A URL's allowed hosts (`*.example.com` for any subdomain).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// A URL's allowed schemes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schemes: Vec<String>,
}

impl Policy {
    /// Tool `name`'s effects as the policy writes them (`read`, `write`, `exec`, `connect`),
    /// placeholders as placeholders; `None` for a tool the policy does not name.
    pub fn effects_written(&self, name: &str) -> Option<[(&'static str, Vec<String>); 4]> {
        let tool = &self.tools[*self.by_name.get(name)?];
        let arg = |i: usize| format!("{{{}}}", tool.args[i].name);
        let path = |e: &Elem<std::path::PathBuf>| match e {
            Elem::Lit(p) => p.display().to_string(),
            Elem::Arg(i) => arg(*i),
            Elem::Ctx(c, rest) if rest.as_os_str().is_empty() => c.name().to_owned(),
            Elem::Ctx(c, rest) => format!("{}/{}", c.name(), rest.display()),
        };
        let paths = |l: &[Elem<std::path::PathBuf>]| l.iter().map(path).collect();
        let connect = tool
            .connect
            .iter()
            .map(|e| match e {
                Elem::Lit(ep) if ep.host.contains(':') && !ep.host.contains('/') => {
                    format!("[{}]:{}", ep.host, ep.port)
                }
                Elem::Lit(ep) => format!("{}:{}", ep.host, ep.port),
                Elem::Arg(i) => arg(*i),
                Elem::Ctx(c, _) => c.name().to_owned(),
            })
            .collect();
        Some([
            ("read", paths(&tool.read)),
            ("write", paths(&tool.write)),
            ("exec", paths(&tool.exec)),
            ("connect", connect),
        ])
    }

    /// The tools a client may call, in name order: registered, with a command, and within the
    /// ceiling (a tool the ceiling blocks would only ever be refused, so it is not offered).
    pub fn listing(&self) -> Vec<ToolSpec> {
        let mut out: Vec<ToolSpec> = self
            .tools
            .iter()
            .filter(|t| t.command.is_some() && self.above_ceiling(t).is_none())
            .map(|t| self.spec(t))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn spec(&self, t: &Tool) -> ToolSpec {
        let root = t.confinement.run_as.as_deref() == Some("root");
        let shadow = !t.enforce.enforced();
        ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            tier: t.tier,
            irreversible: t.irreversible,
            held: t.irreversible && t.tier >= self.settings.escalation_threshold,
            read_only: t.write.is_empty() && !t.irreversible && !t.unix && !root && !shadow,
            network: !t.connect.is_empty(),
            unix: t.unix,
            exec_writes: t.exec_writes,
            root,
            shadow,
            on_divergence: t.on_divergence,
            args: t.args.iter().map(doc).collect(),
            stdin: match t.stdin {
                ToolStdin::Passed => None,
                ToolStdin::Caller => Some(StdinSpec::Caller),
                ToolStdin::Arg(i) => t.args.get(i).map(|a| StdinSpec::Arg(a.name.clone())),
            },
            runnable: t.command.is_some(),
        }
    }
}

fn doc(a: &ArgSpec) -> ArgDoc {
    let path = |e: &Elem<std::path::PathBuf>| match e {
        Elem::Lit(p) => p.to_string_lossy().into_owned(),
        Elem::Ctx(c, rest) if rest.as_os_str().is_empty() => c.name().to_owned(),
        Elem::Ctx(c, rest) => format!("{}/{}", c.name(), rest.display()),
        Elem::Arg(_) => String::new(),
    };
    ArgDoc {
        name: a.name.clone(),
        ty: a.ty,
        required: a.required,
        pattern: a.pattern.as_ref().map(|r| r.as_str().to_owned()),
        values: a.values.clone(),
        max_len: a.max_len,
        min: a.min,
        max: a.max,
        within: a.within.iter().map(path).collect(),
        base: a.base.as_ref().map(path),
        hosts: a.hosts.clone(),
        schemes: a.schemes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn lists_runnable_tools_within_the_ceiling_with_their_args() {
        let policy = Policy::parse(
            Path::new("p.toml"),
            r#"
[settings]
max_allowed_tier = "medium"
[tools.a]
tier = "low"
command = ["/bin/echo", "{mode}"]
[tools.a.args.mode]
type = "enum"
values = ["x", "y"]
[tools.b]
tier = "high"
command = ["/bin/true"]
[tools.c]
tier = "low"
"#,
        )
        .unwrap();
        let list = policy.listing();
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].name, "a");
        assert!(list[0].read_only && !list[0].network && !list[0].held);
        assert_eq!(list[0].args[0].ty, ArgType::Enum);
        assert_eq!(list[0].args[0].values, ["x", "y"]);
    }

    #[test]
    fn a_tool_that_reaches_sockets_runs_as_root_or_in_shadow_is_not_read_only() {
        let policy = Policy::parse(
            Path::new("p.toml"),
            r#"
[tools.sock]
tier = "low"
command = ["/bin/true"]
[tools.sock.effects]
unix = true
[tools.rooted]
tier = "low"
command = ["/bin/true"]
run_as = "root"
[tools.seen]
tier = "low"
enforce = "shadow"
command = ["/bin/true"]
"#,
        )
        .unwrap();
        let list = policy.listing();
        let facts: Vec<_> = list
            .iter()
            .map(|t| (t.name.as_str(), t.read_only, t.unix, t.root, t.shadow))
            .collect();
        assert_eq!(
            facts,
            [
                ("rooted", false, false, true, false),
                ("seen", false, false, false, true),
                ("sock", false, true, false, false),
            ]
        );
    }
}
