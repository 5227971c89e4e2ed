//! The answers that list what the policy in force offers: its tools (as a caller may call them)
//! and its agents.

use crate::{
    call::peer::Peer,
    daemon::Daemon,
    protocol::{
        Reply,
        reply::{AgentList, AgentStatus, ToolList},
    },
};

/// The tools a client may call under the policy in force: its agent's, where the policy names
/// agents (none for a caller that is no agent).
pub(super) fn tools(daemon: &Daemon, peer: &Peer) -> Reply {
    let policy = daemon.policy();
    let mut tools = policy.listing();
    if !policy.agents().is_empty() {
        match crate::callers::agents::of(&policy, peer) {
            Ok(Some(agent)) => {
                tools.retain(|t| agent.refuses(&t.name, Some(t.tier), None).is_none())
            }
            _ => tools.clear(),
        }
    }
    Reply::Tools(ToolList { tools })
}

/// `agents`: the policy's agents in the order they are tried, with their counts.
pub(super) fn agents(daemon: &Daemon) -> Reply {
    let policy = daemon.policy();
    let agents = policy
        .agents()
        .iter()
        .map(|a| AgentStatus {
            name: a.name.clone(),
            uids: a.uids_written.iter().map(principal).collect(),
            cgroups: a.cgroups.clone(),
            tools: a.tools.clone(),
            max_tier: a.max_tier,
            max_running: a.max_running,
            rate: a.rate.map(|r| r.to_string()),
            counts: daemon.agents.counts(&a.name),
        })
        .collect();
    Reply::Agents(AgentList { agents })
}

fn principal(p: &crate::policy::Principal) -> String {
    match p {
        crate::policy::Principal::Id(id) => id.to_string(),
        crate::policy::Principal::Name(name) => name.clone(),
    }
}
