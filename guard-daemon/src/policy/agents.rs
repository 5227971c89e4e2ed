//! `[agents.NAME]`: who a caller is, from what the kernel says of it (its uid, its cgroup v2
//! path), never from what it says of itself; and what that agent may call (`tools`, `max_tier`)
//! and how much (`max_running`, `rate`). A policy without agents serves every caller as before;
//! one with agents refuses a caller that none of them matches, or that more than one matches
//! (the policy must say which it is, not the order of the names).

use std::time::Duration;

use super::{
    raw::{Principal, RawAgent},
    rules::glob_match,
    source::{Diag, S},
};
use crate::call::decision::RiskTier;

/// One agent of the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    pub name: String,
    /// Its callers' uids, names resolved when the policy was loaded (none: any uid its
    /// cgroups admit).
    pub uids: Vec<u32>,
    /// The uids as the policy wrote them, for listings.
    pub uids_written: Vec<Principal>,
    /// Globs of its callers' cgroup v2 paths, one component per `/` (none: any cgroup).
    pub cgroups: Vec<String>,
    /// Globs of the tools it may call (none: every tool).
    pub tools: Vec<String>,
    /// The highest tier it may call.
    pub max_tier: Option<RiskTier>,
    /// Its calls running at once.
    pub max_running: Option<usize>,
    /// Its calls per period.
    pub rate: Option<Rate>,
    /// What a caller that says it is one of these may call, within the agent's own tools.
    pub labels: Vec<(String, Vec<String>)>,
}

/// `rate = "N/min"`: N calls a period, as a token bucket of N that refills over it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub calls: u32,
    pub per: Duration,
}

impl Rate {
    /// `N/s`, `N/min` or `N/h`, N at least 1.
    fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("rate '{text}': write N/s, N/min or N/h, N at least 1");
        let (n, unit) = text.split_once('/').ok_or_else(bad)?;
        let calls: u32 = n.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "min" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        if calls == 0 {
            return Err(bad());
        }
        Ok(Self { calls, per })
    }
}

impl std::fmt::Display for Rate {
    /// As a policy writes it: `30/min`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.calls)
    }
}

impl Agent {
    /// Whether a caller of `uid` in `cgroup` is this agent's.
    pub fn matches(&self, uid: u32, cgroup: &str) -> bool {
        let uid_ok = self.uids.is_empty() || self.uids.contains(&uid);
        let cgroup_ok =
            self.cgroups.is_empty() || self.cgroups.iter().any(|g| path_glob(g, cgroup));
        uid_ok && cgroup_ok
    }

    /// Why this agent, its caller saying it is `label`, may not call `tool` of `tier`, if it
    /// may not. A label narrows: the tool must be both the agent's and the label's; a label the
    /// agent does not declare narrows nothing and widens nothing.
    pub fn refuses(
        &self,
        tool: &str,
        tier: Option<RiskTier>,
        label: Option<&str>,
    ) -> Option<String> {
        if !self.tools.is_empty() && !self.tools.iter().any(|g| glob_match(g, tool)) {
            return Some(format!("agent '{}' may not call tool '{tool}'", self.name));
        }
        let declared = label.and_then(|l| self.labels.iter().find(|(name, _)| name == l));
        if let Some((name, tools)) = declared
            && !tools.iter().any(|g| glob_match(g, tool))
        {
            return Some(format!(
                "agent '{}' as '{name}' may not call tool '{tool}'",
                self.name
            ));
        }
        match (self.max_tier, tier) {
            (Some(max), Some(tier)) if tier > max => Some(format!(
                "agent '{}' may call tools up to tier {max:?}, and '{tool}' is {tier:?}",
                self.name
            )),
            _ => None,
        }
    }
}

/// The one agent of `agents` whose callers a caller of `uid` in `cgroup` is: `Ok(None)` when
/// none matches, an error naming them when several do.
pub fn of<'a>(agents: &'a [Agent], uid: u32, cgroup: &str) -> Result<Option<&'a Agent>, String> {
    let mut matching = agents.iter().filter(|a| a.matches(uid, cgroup));
    let first = matching.next();
    let others: Vec<&str> = matching.map(|a| a.name.as_str()).collect();
    match (first, others.is_empty()) {
        (first, true) => Ok(first),
        (Some(first), false) => Err(format!(
            "not permitted: uid {uid} in cgroup {cgroup} is agent '{}' and '{}' at once; the \
             policy must make a caller one agent",
            first.name,
            others.join("', '")
        )),
        (None, false) => Ok(None),
    }
}

/// A glob of a path, matched component by component: `*` never crosses a `/`.
fn path_glob(pattern: &str, path: &str) -> bool {
    let (mut p, mut n) = (pattern.split('/'), path.split('/'));
    loop {
        match (p.next(), n.next()) {
            (None, None) => return true,
            (Some(g), Some(c)) if glob_match(g, c) => {}
            _ => return false,
        }
    }
}

/// The agents of every file, checked: a name given twice, an agent that names no uid and no
/// cgroup (it would be everyone), a cgroup glob that is not an absolute path, a bad rate.
pub(super) fn agents(d: &mut Diag, raw: Vec<RawAgent>) -> Vec<Agent> {
    let mut out: Vec<Agent> = Vec::new();
    for a in raw {
        let key = format!("agents.{}", a.name.v);
        if out.iter().any(|o| o.name == a.name.v) {
            d.err(
                &a.name.at,
                &key,
                format!("agent '{}' is defined twice", a.name.v),
            );
            continue;
        }
        if a.uids.is_empty() && a.cgroups.is_empty() {
            let msg = "an agent names its callers: uids, cgroups or both";
            d.err(&a.name.at, &key, msg);
        }
        for g in &a.cgroups {
            let components_ok = g.v == "/" || g.v.split('/').skip(1).all(|c| !c.is_empty());
            if !g.v.starts_with('/') || !components_ok {
                let msg = format!(
                    "cgroup '{}' is not a path from the hierarchy's root (no empty component, \
                     no trailing /)",
                    g.v
                );
                d.err(&g.at, &format!("{key}.cgroups"), msg);
            }
        }
        if a.tools_given && a.tools.is_empty() {
            let msg = "tools = [] would allow no tool: leave it out to allow every tool";
            d.err(&a.name.at, &format!("{key}.tools"), msg);
        }
        let uids = a
            .uids
            .iter()
            .filter_map(|p| match p {
                Principal::Id(id) => Some(*id),
                Principal::Name(name) => {
                    let uid = nix::unistd::User::from_name(name).ok().flatten();
                    if uid.is_none() {
                        let msg = format!("unknown user `{name}`");
                        d.err(&a.name.at, &format!("{key}.uids"), msg);
                    }
                    uid.map(|u| u.uid.as_raw())
                }
            })
            .collect();
        let rate = a.rate.as_ref().and_then(|r| {
            Rate::parse(&r.v)
                .map_err(|e| d.err(&r.at, &format!("{key}.rate"), e))
                .ok()
        });
        let max_running = a
            .max_running
            .as_ref()
            .and_then(|m| match usize::try_from(m.v) {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    d.err(&m.at, &format!("{key}.max_running"), "at least 1");
                    None
                }
            });
        out.push(Agent {
            name: a.name.v,
            uids,
            uids_written: a.uids,
            cgroups: a.cgroups.into_iter().map(|g| g.v).collect(),
            tools: a.tools.into_iter().map(|t: S<String>| t.v).collect(),
            max_tier: a.max_tier.map(|t| t.v),
            max_running,
            rate,
            labels: a
                .labels
                .into_iter()
                .map(|(name, tools)| (name.v, tools.into_iter().map(|t| t.v).collect()))
                .collect(),
        });
    }
    // Listed in name order, whatever the files' order.
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(uids: &[u32], cgroups: &[&str]) -> Agent {
        Agent {
            name: "a".into(),
            uids: uids.to_vec(),
            uids_written: uids.iter().map(|u| Principal::Id(*u)).collect(),
            cgroups: cgroups.iter().map(|c| (*c).to_owned()).collect(),
            tools: vec!["read_*".into()],
            max_tier: Some(RiskTier::Medium),
            max_running: None,
            rate: None,
            labels: vec![("reviewer".into(), vec!["read_file".into()])],
        }
    }

    #[test]
    fn an_agent_is_its_uids_and_its_cgroups_whole_components_at_a_time() {
        let a = agent(&[1000], &["/user.slice/*/claude-*.scope"]);
        let claude = "/user.slice/user-1000.slice/claude-42.scope";
        assert!(a.matches(1000, claude));
        assert!(!a.matches(1001, claude), "another uid");
        assert!(!a.matches(1000, "/user.slice/user-1000.slice/session-2.scope"));
        // `*` is one component, not a run of them.
        assert!(!a.matches(1000, "/user.slice/a/b/claude-1.scope"));
        assert!(agent(&[], &["/x/*"]).matches(7, "/x/y"));
        // A caller two agents match is neither.
        let mut b = agent(&[1000], &[]);
        b.name = "b".into();
        let both = [a.clone(), b];
        assert!(of(&both, 1000, claude).is_err_and(|e| e.contains("'a' and 'b'")));
        assert_eq!(
            of(&both, 1000, "/other").map(|a| a.map(|a| a.name.clone())),
            Ok(Some("b".into()))
        );
        assert_eq!(of(&both, 7, claude), Ok(None));
    }

    #[test]
    fn an_agent_calls_its_tools_up_to_its_tier() {
        let a = agent(&[1], &[]);
        assert_eq!(a.refuses("read_file", Some(RiskTier::Low), None), None);
        let shell = a.refuses("shell", Some(RiskTier::Low), None);
        assert!(shell.is_some_and(|m| m.contains("shell")));
        let high = a.refuses("read_all", Some(RiskTier::High), None);
        assert!(high.is_some_and(|m| m.contains("High")));
        // A label narrows, and never widens: an undeclared one changes nothing.
        let as_reviewer = a.refuses("read_dir", Some(RiskTier::Low), Some("reviewer"));
        assert!(as_reviewer.is_some_and(|m| m.contains("as 'reviewer'")));
        assert_eq!(
            a.refuses("read_file", Some(RiskTier::Low), Some("reviewer")),
            None
        );
        assert_eq!(
            a.refuses("read_dir", Some(RiskTier::Low), Some("admin")),
            None
        );
        assert!(
            a.refuses("shell", Some(RiskTier::Low), Some("admin"))
                .is_some()
        );
    }

    #[test]
    fn a_bad_agent_is_a_load_error_naming_its_line_and_key() {
        let text = "[agents.a]\ntools = [\"x\"]\n\n[agents.b]\nuids = [1, \"no-such-user-x\"]\n\
                    rate = \"5/day\"\ncgroups = [\"user.slice\", \"/a/\"]\nmax_running = 0\n\
                    tools = []\nfavourite = 1\n";
        let errors: Vec<String> =
            match super::super::Policy::parse(std::path::Path::new("p.toml"), text) {
                Ok(_) => panic!("should not load"),
                Err(e) => e.iter().map(|e| e.to_string()).collect(),
            };
        let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
        assert!(has("p.toml:1") && has("names its callers"), "{errors:#?}");
        assert!(has("agents.b.rate") && has("5/day"), "{errors:#?}");
        assert!(has("agents.b.cgroups"), "{errors:#?}");
        assert!(has("agents.b.max_running"), "{errors:#?}");
        assert!(has("unknown user `no-such-user-x`"), "{errors:#?}");
        assert!(has("'/a/'"), "{errors:#?}");
        assert!(has("tools = [] would allow no tool"), "{errors:#?}");
        assert!(has("favourite"), "{errors:#?}");
    }

    #[test]
    fn rates_are_calls_per_second_minute_or_hour() {
        assert_eq!(
            Rate::parse("30/min"),
            Ok(Rate {
                calls: 30,
                per: Duration::from_secs(60)
            })
        );
        assert!(Rate::parse("0/s").is_err());
        assert!(Rate::parse("5/day").is_err());
        assert!(Rate::parse("many").is_err());
    }
}
