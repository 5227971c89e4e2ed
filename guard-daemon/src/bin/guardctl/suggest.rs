//! `guardctl policy suggest`: the narrowest effects that would have let every chosen call of
//! each tool conform, from their receipts in the audit log. Only what was observed: the
//! programs run, the addresses connected to and the names asked, and, where guardd traced
//! syscalls, the files opened. Each line names the calls that needed it; what was refused is
//! printed commented out, so the operator sees it without granting it; what no receipt could
//! show (opens without `--trace-syscalls`, events lost) is said, and that key left out.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::Path,
    process::ExitCode,
    time::Duration,
};

use guard::{policy::glob_match, sandbox::protected::NAMES};
use serde_json::Value;

/// What the calls of one tool were seen doing; each value the ids of the calls that did it.
#[derive(Default)]
struct Seen {
    calls: BTreeSet<String>,
    exec: BTreeMap<String, BTreeSet<String>>,
    connect: BTreeMap<String, BTreeSet<String>>,
    dns: BTreeMap<String, BTreeSet<String>>,
    read: BTreeMap<String, BTreeSet<String>>,
    write: BTreeMap<String, BTreeSet<String>>,
    refused: BTreeMap<String, BTreeSet<String>>,
    /// Calls whose opens were not traced.
    untraced: BTreeSet<String>,
    /// Calls whose receipts lost events.
    lost: BTreeSet<String>,
}

/// `guardctl policy suggest`; with `diff`, only what changes against that policy.
pub fn run(audit: &Path, tool: &str, since: Option<Duration>, diff: Option<&Path>) -> ExitCode {
    let against = match diff.map(guard::policy::Policy::load) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            eprintln!("guardctl: {e}");
            return ExitCode::from(1);
        }
    };
    let cutoff = since.map(|d| guard::audit::ts::format(std::time::SystemTime::now() - d));
    let rows = match guard::audit::read::read_rows(audit) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("guardctl: {}: {e}", audit.display());
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
        eprintln!(
            "guardctl: no finished call of `{tool}` in {}",
            audit.display()
        );
        return ExitCode::from(1);
    }
    for (name, seen) in &tools {
        match &against {
            Some(policy) => print!("{}", seen.diff(name, policy)),
            None => print!("{}", seen.effects(name)),
        }
    }
    ExitCode::SUCCESS
}

impl Seen {
    /// Folds in the receipt of call `id`, which ran in `shadow` or not.
    fn add(&mut self, id: &str, r: &Value, shadow: bool) {
        let by = |map: &mut BTreeMap<String, BTreeSet<String>>, key: String| {
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

    /// The tool's effects table, as policy text.
    fn effects(&self, name: &str) -> String {
        let mut out = String::new();
        let calls: Vec<String> = self.calls.iter().map(|c| shown(c)).collect();
        let _ = writeln!(out, "[tools.{name}.effects]");
        let _ = writeln!(out, "# from {} call(s): {}", calls.len(), calls.join(" "));
        if !self.lost.is_empty() {
            let lost: Vec<String> = self.lost.iter().map(|c| shown(c)).collect();
            let _ = writeln!(
                out,
                "# events lost in {}: these lists may miss what they did",
                lost.join(" ")
            );
        }
        list(&mut out, "exec", &self.exec);
        if !self.dns.is_empty() {
            let names: Vec<String> = self.dns.keys().map(|n| shown(n)).collect();
            let _ = writeln!(
                out,
                "# names asked (connect by name:port to follow their addresses instead): {}",
                names.join(" ")
            );
        }
        list(&mut out, "connect", &self.connect);
        if self.untraced.is_empty() {
            let (read, write) = (kept(&self.read), kept(&self.write));
            list(&mut out, "read", &read);
            list(&mut out, "write", &write);
        } else {
            let _ = writeln!(
                out,
                "# read and write not suggested: {} call(s) ran without --trace-syscalls, so \
                 their opens were not seen",
                self.untraced.len()
            );
        }
        for (what, ids) in &self.refused {
            let ids: Vec<String> = ids.iter().map(|i| shown(i)).collect();
            let what = shown(what);
            let _ = writeln!(out, "# refused, not granted: {what}  # {}", ids.join(" "));
        }
        out.push('\n');
        out
    }
}

impl Seen {
    /// What the suggestion changes in `policy`'s effects of tool `name`: each key's elements
    /// in force that no call needed (`-`), and those calls needed that it does not name (`+`).
    /// A placeholder (`{workspace}`, `{path}`) is compared as written.
    fn diff(&self, name: &str, policy: &guard::policy::Policy) -> String {
        let mut out = String::new();
        let Some(written) = policy.effects_written(name) else {
            let _ = writeln!(out, "# {name}: not in the policy; its suggestion:");
            return out + &self.effects(name);
        };
        let traced = self.untraced.is_empty();
        let (read, write) = (kept(&self.read), kept(&self.write));
        for (key, now) in written {
            let needed = match key {
                "exec" => &self.exec,
                "connect" => &self.connect,
                "read" if traced => &read,
                "write" if traced => &write,
                _ => continue,
            };
            let dropped: Vec<&String> = now.iter().filter(|e| !needed.contains_key(*e)).collect();
            let added: Vec<_> = needed.iter().filter(|(e, _)| !now.contains(e)).collect();
            if dropped.is_empty() && added.is_empty() {
                continue;
            }
            let _ = writeln!(out, "tools.{name}.effects.{key}");
            for e in dropped {
                let _ = writeln!(out, "- {}", serde_json::to_string(e).unwrap_or_default());
            }
            for (e, ids) in added {
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                let quoted = serde_json::to_string(e).unwrap_or_default();
                let _ = writeln!(out, "+ {quoted}  # {}", ids.join(" "));
            }
        }
        if !traced {
            let _ = writeln!(
                out,
                "# tools.{name}: read and write not compared (no --trace-syscalls)"
            );
        }
        out
    }
}

/// `key = [...]`, one element a line with the calls that needed it; nothing when none.
fn list(out: &mut String, key: &str, items: &BTreeMap<String, BTreeSet<String>>) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "{key} = [");
    for (item, ids) in items {
        let ids: Vec<String> = ids.iter().map(|i| shown(i)).collect();
        let quoted = serde_json::to_string(item).unwrap_or_default();
        let _ = writeln!(out, "  {quoted},  # {}", ids.join(" "));
    }
    let _ = writeln!(out, "]");
}

/// The paths a suggestion may name: never `/`, a home, or a path at or above a protected
/// name (what programs outside guard run later), nor what is no absolute path.
fn kept(paths: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let home = |p: &str| p == "/root" || (p.starts_with("/home/") && p.matches('/').count() == 2);
    let protected = |p: &str| {
        NAMES
            .iter()
            .any(|n| p.contains(&format!("/{n}/")) || p.ends_with(&format!("/{n}")))
    };
    paths
        .iter()
        .filter(|(p, _)| p.starts_with('/') && *p != "/" && !home(p) && !protected(p))
        .filter(|(p, _)| !p.chars().any(char::is_control))
        .map(|(p, ids)| (p.clone(), ids.clone()))
        .collect()
}

/// `text` for a comment line: what a call chose (a path, a name) may hold a line break that
/// would end the comment and start policy of its own, so control characters are escaped.
fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The strings of a JSON array.
fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suggestion_never_names_the_root_a_home_or_a_protected_name() {
        let seen: BTreeMap<String, BTreeSet<String>> = [
            "/",
            "/root",
            "/home/ann",
            "/srv/ws/.git/hooks/pre-commit",
            "/srv/ws/.claude",
            "relative/path",
            "/etc/hostname",
            "/home/ann/src/x.rs",
        ]
        .into_iter()
        .map(|p| (p.to_owned(), BTreeSet::from(["c1".to_owned()])))
        .collect();
        let kept: Vec<String> = kept(&seen).into_keys().collect();
        assert_eq!(kept, ["/etc/hostname", "/home/ann/src/x.rs"]);
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
        let text = s.effects("t");
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
        let text = s.effects("t");
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert!(parsed.get("agents").is_none(), "{text}");
        assert!(
            parsed["tools"]["t"]["effects"].get("write").is_none(),
            "{text}"
        );
    }
}
