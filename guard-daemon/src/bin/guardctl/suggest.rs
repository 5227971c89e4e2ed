//! `guardctl policy suggest`: the narrowest effects that would have let every chosen call of
//! each tool conform, from their receipts in the audit log. Only what was observed: the
//! programs run, the addresses connected to and the names asked, and, where guardd traced
//! syscalls, the files opened. Each line names the calls that needed it; what was refused is
//! printed commented out, so the operator sees it without granting it; what no receipt could
//! show (opens without `--trace-syscalls`, events lost) is said, and that key left out. Nothing
//! widens: what calls used that [`Fence`] keeps out (`/`, a top-level directory, a home,
//! guard's own places) is said in a comment, with why, and not proposed.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::Path,
    process::ExitCode,
    time::Duration,
};

use guard::policy::glob_match;
use serde_json::Value;

use crate::term::{hidden, printable, say_err};

mod fence;

pub use fence::Fence;

/// What the calls of one tool were seen doing; each value the ids of the calls that did it.
#[derive(Default)]
struct Seen {
    calls: BTreeSet<String>,
    exec: Calls,
    connect: Calls,
    dns: Calls,
    read: Calls,
    write: Calls,
    /// Directories whose names were read: never proposed (a `read` of a directory grants
    /// everything beneath it), said in a comment.
    listed: Calls,
    /// Names looked up with `O_PATH`, nothing read: never proposed, said in a comment.
    looked_up: Calls,
    refused: Calls,
    /// Calls whose opens were not traced.
    untraced: BTreeSet<String>,
    /// Calls whose receipts lost events.
    lost: BTreeSet<String>,
}

/// `guardctl policy suggest`; with `diff`, only what changes against that policy. Nothing
/// `fence` keeps out is proposed.
pub fn run(
    audit: &Path,
    tool: &str,
    since: Option<Duration>,
    diff: Option<&Path>,
    fence: &Fence,
) -> ExitCode {
    let against = match diff.map(guard::policy::Policy::load) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            say_err!("guardctl: {e}");
            return ExitCode::from(1);
        }
    };
    let cutoff = since.map(|d| guard::audit::ts::format(std::time::SystemTime::now() - d));
    let rows = match guard::audit::read::read_rows(audit) {
        Ok(rows) => rows,
        Err(e) => {
            say_err!("guardctl: {}: {e}", audit.display());
            return ExitCode::from(1);
        }
    };
    let mut tools: BTreeMap<String, Seen> = BTreeMap::new();
    for row in rows.flatten() {
        let Some(name) = row.get("tool").and_then(Value::as_str) else {
            continue;
        };
        let finished = row.get("kind").and_then(Value::as_str) == Some("finished");
        let ts = row.get("ts").and_then(Value::as_str).unwrap_or_default();
        if !finished || !glob_match(tool, name) || cutoff.as_deref().is_some_and(|c| ts < c) {
            continue;
        }
        let id = row.get("call_id").and_then(Value::as_str).unwrap_or("?");
        let receipt = row.get("effects_observed").unwrap_or(&Value::Null);
        let shadow = row.get("enforce").and_then(Value::as_str) == Some("shadow");
        tools
            .entry(name.to_owned())
            .or_default()
            .add(id, receipt, shadow);
    }
    if tools.is_empty() {
        say_err!(
            "guardctl: no finished call of `{tool}` in {}",
            audit.display()
        );
        return ExitCode::from(1);
    }
    for (name, seen) in &tools {
        match &against {
            Some(policy) => print!("{}", seen.diff(name, policy, fence)),
            None => print!("{}", seen.effects(name, fence)),
        }
    }
    ExitCode::SUCCESS
}

impl Seen {
    /// Folds in the receipt of call `id`, which ran in `shadow` or not.
    fn add(&mut self, id: &str, r: &Value, shadow: bool) {
        let by = |map: &mut Calls, key: String| {
            map.entry(key).or_default().insert(id.to_owned());
        };
        self.calls.insert(id.to_owned());
        for e in strings(&r["execs"]) {
            by(&mut self.exec, e.to_owned());
        }
        for c in r["connects"].as_array().into_iter().flatten() {
            let (addr, port) = (c["addr"].as_str().unwrap_or_default(), &c["port"]);
            let shown = if addr.contains(':') {
                format!("[{addr}]:{port}")
            } else {
                format!("{addr}:{port}")
            };
            if c["allowed"] == true {
                by(&mut self.connect, shown);
            }
        }
        // In shadow every name asked was answered: each one is what the tool needed.
        for d in r["dns"].as_array().into_iter().flatten() {
            if let Some(name) = d["name"]
                .as_str()
                .filter(|_| shadow || d["approved"] == true)
            {
                by(&mut self.dns, name.to_owned());
            }
        }
        match r["files"]["paths"].as_array() {
            Some(paths) => {
                for f in paths {
                    let path = f["path"].as_str().unwrap_or_default().to_owned();
                    let access = f["access"].as_str().unwrap_or("?");
                    match f["result"].as_str() {
                        Some("ok") if access == "read" => by(&mut self.read, path),
                        Some("ok") if access == "list" => by(&mut self.listed, path),
                        Some("ok") if access == "path" => by(&mut self.looked_up, path),
                        Some("ok") => by(&mut self.write, path),
                        // Refused by a layer (what no such file answers is no attempt's end).
                        Some(errno @ ("EACCES" | "EPERM" | "EROFS")) => {
                            by(&mut self.refused, format!("{access} {path} ({errno})"));
                        }
                        _ => {}
                    }
                }
            }
            None => {
                self.untraced.insert(id.to_owned());
            }
        }
        if r["events_lost"].as_u64().unwrap_or(0) > 0 {
            self.lost.insert(id.to_owned());
        }
        // Let through in shadow: what it reached is in the lists above, granted, not refused.
        let refused = |d: &&Value| d["action"] != "allowed";
        for d in r["divergences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(refused)
        {
            let effect = d["effect"].as_str().unwrap_or("?");
            let target = match (d["path"].as_str(), d["addr"].as_str(), d["name"].as_str()) {
                (Some(path), ..) => path.to_owned(),
                (_, Some(addr), _) => format!("{addr}:{}", d["port"]),
                (.., Some(name)) => name.to_owned(),
                _ => String::new(),
            };
            by(&mut self.refused, format!("{effect} {target}"));
        }
    }

    /// What of it may be proposed, key by key, and what may not, with why (`fence`).
    fn proposal(&self, fence: &Fence) -> Proposal {
        let mut withheld = Vec::new();
        let mut fenced =
            |key: &'static str, items: &Calls, why: &dyn Fn(&str) -> Option<String>| {
                let mut kept = Calls::new();
                for (item, ids) in items {
                    match why(item) {
                        None => {
                            kept.insert(item.clone(), ids.clone());
                        }
                        Some(reason) => withheld.push(format!(
                            "not proposed: {key} {}: {reason}  # {}",
                            printable(item),
                            listed(ids)
                        )),
                    }
                }
                kept
            };
        let path = |p: &str| fence.refuses(p);
        // A directory opened without O_DIRECTORY (`openat(fd, ".")`, a plain open, a link
        // named like a file) is a directory all the same: a read of it grants all beneath it.
        let file = |p: &str| {
            fence.refuses(p).or_else(|| {
                Path::new(p).is_dir().then(|| {
                    "a directory (a read of it grants all beneath it; its files are proposed \
                     one by one)"
                        .to_owned()
                })
            })
        };
        let shows = |s: &str| {
            s.chars()
                .any(hidden)
                .then(|| "it holds characters that do not show as themselves".to_owned())
        };
        let exec = fenced("exec", &self.exec, &path);
        let connect = fenced("connect", &self.connect, &shows);
        let traced = self.untraced.is_empty();
        let (read, write) = if traced {
            (
                fenced("read", &self.read, &file),
                fenced("write", &self.write, &path),
            )
        } else {
            Default::default()
        };
        Proposal {
            exec,
            connect,
            read,
            write,
            traced,
            withheld,
        }
    }

    /// The tool's effects table, as policy text.
    fn effects(&self, name: &str, fence: &Fence) -> String {
        let mut out = String::new();
        let p = self.proposal(fence);
        let name = printable(name);
        let _ = writeln!(out, "[tools.{name}.effects]");
        let _ = writeln!(
            out,
            "# from {} call(s): {}",
            self.calls.len(),
            listed(&self.calls)
        );
        if !self.lost.is_empty() {
            let _ = writeln!(
                out,
                "# events lost in {}: these lists may miss what they did",
                listed(&self.lost)
            );
        }
        list(&mut out, "exec", &p.exec);
        if !self.dns.is_empty() {
            let names: Vec<String> = self.dns.keys().map(|n| printable(n).into()).collect();
            let _ = writeln!(
                out,
                "# names asked (connect by name:port to follow their addresses instead): {}",
                names.join(" ")
            );
        }
        list(&mut out, "connect", &p.connect);
        if p.traced {
            list(&mut out, "read", &p.read);
            list(&mut out, "write", &p.write);
        } else {
            let _ = writeln!(
                out,
                "# read and write not suggested: {} call(s) ran without --trace-syscalls, so \
                 their opens were not seen",
                self.untraced.len()
            );
        }
        for line in &p.withheld {
            let _ = writeln!(out, "# {line}");
        }
        for (dir, ids) in &self.listed {
            let dir = printable(dir);
            let _ = writeln!(
                out,
                "# listed, not proposed (a read of a directory grants all beneath it): {dir}  \
                 # {}",
                listed(ids)
            );
        }
        for (name, ids) in &self.looked_up {
            let name = printable(name);
            let _ = writeln!(
                out,
                "# looked up (O_PATH), nothing read, not proposed: {name}  # {}",
                listed(ids)
            );
        }
        for (what, ids) in &self.refused {
            let what = printable(what);
            let _ = writeln!(out, "# refused, not granted: {what}  # {}", listed(ids));
        }
        out.push('\n');
        out
    }
}

/// What calls needed: each element with the ids of the calls that needed it.
type Calls = BTreeMap<String, BTreeSet<String>>;

/// What a suggestion proposes of a tool's effects, and the comments on what it does not.
struct Proposal {
    exec: Calls,
    connect: Calls,
    read: Calls,
    write: Calls,
    /// Whether every call's opens were traced (else read and write are empty, not proposed).
    traced: bool,
    /// `not proposed: ...`, for comments: what calls used that the fence keeps out.
    withheld: Vec<String>,
}

impl Seen {
    /// What the suggestion changes in `policy`'s effects of tool `name`: each key's elements
    /// in force that no call needed (`-`), and those calls needed that it does not name (`+`).
    /// A placeholder (`{workspace}`, `{path}`) is compared as written.
    fn diff(&self, name: &str, policy: &guard::policy::Policy, fence: &Fence) -> String {
        let mut out = String::new();
        let Some(written) = policy.effects_written(name) else {
            let _ = writeln!(
                out,
                "# {}: not in the policy; its suggestion:",
                printable(name)
            );
            return out + &self.effects(name, fence);
        };
        let p = self.proposal(fence);
        let name = printable(name);
        for (key, now) in written {
            let needed = match key {
                "exec" => &p.exec,
                "connect" => &p.connect,
                "read" if p.traced => &p.read,
                "write" if p.traced => &p.write,
                _ => continue,
            };
            let dropped: Vec<&String> = now.iter().filter(|e| !needed.contains_key(*e)).collect();
            let added: Vec<_> = needed.iter().filter(|(e, _)| !now.contains(e)).collect();
            if dropped.is_empty() && added.is_empty() {
                continue;
            }
            let _ = writeln!(out, "tools.{name}.effects.{key}");
            for e in dropped {
                let quoted = serde_json::to_string(e).unwrap_or_default();
                let _ = writeln!(out, "- {}", printable(&quoted));
            }
            for (e, ids) in added {
                let quoted = serde_json::to_string(e).unwrap_or_default();
                let _ = writeln!(out, "+ {quoted}  # {}", listed(ids));
            }
        }
        for line in &p.withheld {
            let _ = writeln!(out, "# tools.{name}: {line}");
        }
        if !p.traced {
            let _ = writeln!(
                out,
                "# tools.{name}: read and write not compared (no --trace-syscalls)"
            );
        }
        out
    }
}

/// `key = [...]`, one element a line with the calls that needed it; nothing when none. Every
/// element passed the fence, so it shows as it is.
fn list(out: &mut String, key: &str, items: &Calls) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "{key} = [");
    for (item, ids) in items {
        let quoted = serde_json::to_string(item).unwrap_or_default();
        let _ = writeln!(out, "  {quoted},  # {}", listed(ids));
    }
    let _ = writeln!(out, "]");
}

/// Call ids for a comment, escaped: an id read from the log is text like any other.
fn listed(ids: &BTreeSet<String>) -> String {
    let ids: Vec<String> = ids.iter().map(|i| printable(i).into_owned()).collect();
    ids.join(" ")
}

/// The strings of a JSON array.
fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> Fence {
        Fence::new(
            Path::new("/var/lib/guard/audit.jsonl"),
            Path::new("/run/guard/guard.sock"),
        )
    }

    #[test]
    fn what_the_fence_keeps_out_is_said_and_not_proposed() {
        let mut s = Seen::default();
        let receipt = serde_json::json!({
            "execs": ["/usr/bin/ls", "/srv/ws/\u{202e}gnp.sh"],
            "files": {"paths": [
                {"path": "/home", "access": "read", "result": "ok"},
                {"path": "/etc", "access": "read", "result": "ok"},
                {"path": "/etc/hostname", "access": "read", "result": "ok"},
                {"path": "/var/lib/guard/audit.jsonl", "access": "write", "result": "ok"},
                {"path": "/srv/ws/out", "access": "write", "result": "ok"},
                {"path": "/srv/ws/src", "access": "list", "result": "ok"},
                {"path": "/usr/share", "access": "read", "result": "ok"},
                {"path": "/etc/ssh", "access": "path", "result": "ok"}]},
        });
        s.add("c1", &receipt, true);
        let text = s.effects("t", &fence());
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        let effects = &parsed["tools"]["t"]["effects"];
        let strings = |key: &str| -> Vec<&str> {
            effects[key]
                .as_array()
                .map(|a| a.iter().filter_map(toml::Value::as_str).collect())
                .unwrap_or_default()
        };
        assert_eq!(strings("read"), ["/etc/hostname"], "{text}");
        assert_eq!(strings("write"), ["/srv/ws/out"], "{text}");
        assert_eq!(strings("exec"), ["/usr/bin/ls"], "{text}");
        for said in [
            "# not proposed: read /home: every home  # c1",
            "# not proposed: read /etc: a top-level directory, as a whole  # c1",
            "# not proposed: write /var/lib/guard/audit.jsonl: guard's state (/var/lib/guard)  # c1",
            "# not proposed: exec /srv/ws/\\u{202e}gnp.sh: it holds characters",
            "# listed, not proposed (a read of a directory grants all beneath it): /srv/ws/src  # c1",
            "# not proposed: read /usr/share: a directory",
            "# looked up (O_PATH), nothing read, not proposed: /etc/ssh  # c1",
        ] {
            assert!(text.contains(said), "{said} not in:\n{text}");
        }
        assert!(!text.contains('\u{202e}'), "{text}");
    }

    #[test]
    fn each_line_names_its_calls_and_reads_back_as_toml() {
        let mut s = Seen::default();
        let receipt = serde_json::json!({
            "execs": ["/usr/bin/git"],
            "connects": [{"addr": "::1", "port": 443, "allowed": true},
                         {"addr": "10.0.0.9", "port": 22, "allowed": false}],
            "files": {"paths": [{"path": "/etc/x", "access": "read", "result": "ok"},
                                {"path": "/etc/shadow", "access": "read", "result": "EACCES"}]},
        });
        s.add("c1", &receipt, false);
        let text = s.effects("t", &fence());
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        let effects = &parsed["tools"]["t"]["effects"];
        assert_eq!(effects["exec"][0].as_str(), Some("/usr/bin/git"));
        assert_eq!(effects["connect"][0].as_str(), Some("[::1]:443"));
        assert_eq!(effects["read"][0].as_str(), Some("/etc/x"));
        assert!(
            text.contains("# refused, not granted: read /etc/shadow (EACCES)"),
            "{text}"
        );
        assert!(
            !text.contains("10.0.0.9:22\","),
            "a refused connect granted: {text}"
        );
        // A path a call chose, with a line break, stays inside its comment.
        let mut s = Seen::default();
        let evil = "/tmp/x\nwrite = [\"/\"]\n[agents.evil]\nuids = [0]";
        let receipt = serde_json::json!({"files": {"paths": [
            {"path": evil, "access": "write", "result": "EACCES"},
            {"path": evil, "access": "write", "result": "ok"}]}});
        s.add("c2", &receipt, false);
        let text = s.effects("t", &fence());
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert!(parsed.get("agents").is_none(), "{text}");
        assert!(
            parsed["tools"]["t"]["effects"].get("write").is_none(),
            "{text}"
        );
    }
}
