//! The agents at work: which of the policy's `[agents]` a caller is (from its uid and cgroup,
//! as the kernel reported them), and what each has done since guardd started: calls admitted,
//! calls blocked, calls running, and its rate's token bucket. Counts are by name, so a reload
//! that keeps an agent keeps its counts.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use crate::{
    call::peer::Peer,
    policy::{Policy, Verdict, agents::Agent},
    protocol::reply::AgentCounts,
};

#[derive(Default)]
struct State {
    counts: AgentCounts,
    /// Tokens left, and when they were last counted.
    bucket: Option<(f64, Instant)>,
}

/// Every agent's counts; see the module's doc.
#[derive(Default)]
pub struct Agents {
    state: Mutex<HashMap<String, State>>,
}

/// Why an agent's call was refused unrun: it is at its limit, and when to try again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Busy {
    pub message: String,
    pub retry_after_ms: Option<u64>,
}

/// An agent's call admitted: counted as running until dropped.
pub struct Admitted {
    agents: Arc<Agents>,
    name: String,
}

/// The agent `peer` is, under `policy`: `Ok(None)` when the policy names no agent; an error
/// (the refusal's reason) when it names agents and `peer` is none of them, or several.
pub fn of<'p>(policy: &'p Policy, peer: &Peer) -> Result<Option<&'p Agent>, String> {
    let agents = policy.agents();
    if agents.is_empty() {
        return Ok(None);
    }
    match crate::policy::agents::of(agents, peer.uid, &peer.cgroup)? {
        Some(agent) => Ok(Some(agent)),
        None => Err(format!(
            "not permitted: no agent of the policy is uid {} in cgroup {}",
            peer.uid, peer.cgroup
        )),
    }
}

/// What `peer`'s agent says of a call of `tool` (saying it is `label`) that `verdict` decided:
/// the agent named on its row, and the call blocked (`check_name = "agent"`) when the agent
/// may not make it, or when the policy names agents and `peer` is not exactly one of them.
pub fn rule<'p>(
    policy: &'p Policy,
    peer: &Peer,
    tool: &str,
    label: Option<&str>,
    verdict: &mut Verdict,
) -> Option<&'p Agent> {
    let why = match of(policy, peer) {
        Ok(None) => return None,
        Ok(Some(agent)) => {
            verdict.row.metadata.agent = Some(agent.name.clone());
            verdict.row.metadata.label = label.map(str::to_owned);
            let tier = policy.tool_info(tool).map(|t| t.tier);
            match agent.refuses(tool, tier, label) {
                None => return Some(agent),
                Some(why) => (Some(agent), why),
            }
        }
        Err(why) => (None, why),
    };
    verdict.row.decision = crate::call::decision::Decision::Block;
    verdict.row.check_name = CHECK.into();
    verdict.row.reason = why.1;
    verdict.plan = None;
    why.0
}

/// The name under which agent `name`'s termination is kept among the terminated sessions
/// (`guardctl sessions --clear agent:NAME` lifts it).
pub fn session(name: &str) -> String {
    format!("agent:{name}")
}

/// The `check_name` of a call its caller's agent may not make.
pub const CHECK: &str = "agent";

impl Agents {
    /// Admits a call of `agent` within its `max_running` and `rate`, or says why not.
    pub fn admit(self: &Arc<Self>, agent: &Agent) -> Result<Admitted, Busy> {
        let mut all = self.lock();
        let state = all.entry(agent.name.clone()).or_default();
        if let Some(max) = agent.max_running
            && state.counts.running >= max as u64
        {
            return Err(Busy {
                message: format!(
                    "busy: agent '{}' has {max} calls running (max_running); try again once one \
                     ends",
                    agent.name
                ),
                retry_after_ms: None,
            });
        }
        if let Some(rate) = agent.rate {
            let now = Instant::now();
            let full = f64::from(rate.calls);
            let (tokens, then) = state.bucket.unwrap_or((full, now));
            let refill = now.duration_since(then).as_secs_f64() / rate.per.as_secs_f64() * full;
            let tokens = (tokens + refill).min(full);
            if tokens < 1.0 {
                state.bucket = Some((tokens, now));
                let wait = (1.0 - tokens) / full * rate.per.as_secs_f64();
                let wait = Duration::from_secs_f64(wait);
                return Err(Busy {
                    message: format!(
                        "busy: agent '{}' made its {} calls of the last {} s (rate); try again \
                         in {} ms",
                        agent.name,
                        rate.calls,
                        rate.per.as_secs(),
                        wait.as_millis()
                    ),
                    retry_after_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
                });
            }
            state.bucket = Some((tokens - 1.0, now));
        }
        state.counts.calls += 1;
        state.counts.running += 1;
        Ok(Admitted {
            agents: Arc::clone(self),
            name: agent.name.clone(),
        })
    }

    /// Counts a call of agent `name` that the review did not allow.
    pub fn blocked(&self, name: &str) {
        self.lock()
            .entry(name.to_owned())
            .or_default()
            .counts
            .blocked += 1;
    }

    /// The counts of agent `name` (zero for one that made no call).
    pub fn counts(&self, name: &str) -> AgentCounts {
        self.lock()
            .get(name)
            .map(|s| s.counts.clone())
            .unwrap_or_default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, State>> {
        // Every change is made whole under the lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(s) = self.agents.lock().get_mut(&self.name) {
            s.counts.running = s.counts.running.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::agents::Rate;

    fn agent(max_running: Option<usize>, rate: Option<Rate>) -> Agent {
        Agent {
            name: "bot".into(),
            uids: vec![1],
            uids_written: Vec::new(),
            cgroups: Vec::new(),
            tools: Vec::new(),
            max_tier: None,
            max_running,
            rate,
            labels: Vec::new(),
        }
    }

    #[test]
    fn an_agent_runs_at_most_max_running_calls() {
        let agents = Arc::new(Agents::default());
        let a = agent(Some(2), None);
        let first = agents.admit(&a).expect("first");
        let _second = agents.admit(&a).expect("second");
        let busy = agents.admit(&a).err().expect("third");
        assert!(busy.message.starts_with("busy: agent 'bot'"), "{busy:?}");
        drop(first);
        assert!(agents.admit(&a).is_ok());
        assert_eq!(agents.counts("bot").calls, 3);
    }

    #[test]
    fn an_agent_over_its_rate_is_told_when_to_come_back() {
        let agents = Arc::new(Agents::default());
        let rate = Rate {
            calls: 2,
            per: Duration::from_secs(60),
        };
        let a = agent(None, Some(rate));
        assert!(agents.admit(&a).is_ok() && agents.admit(&a).is_ok());
        let busy = agents.admit(&a).err().expect("over the rate");
        // One token comes back every 30 s.
        let wait = busy.retry_after_ms.expect("retry_after_ms");
        assert!((29_000..=30_000).contains(&wait), "{wait}");
    }
}
