//! A tool in shadow (`enforce = "shadow"`): what the policy would block is recorded as
//! `would_block` and the call runs all the same, so an operator can see what a policy would do
//! before it does it.
//!
//! Not everything bends. A tool the policy does not name has no effects to run against and
//! stays blocked; an argument holding a secret's value stays quarantined (the agent must never
//! hold it, in shadow or not); in a workspace with its own policy every tool is enforced (the
//! merge sets it: `project::merge`), and tools given a secret or running as root or as the
//! workspace's owner never are in shadow (`validate`); and a call whose arguments do not even
//! fit its command (a missing one, a wrong type, a relative path with no base, a cloud metadata
//! address) cannot be run, so it stays blocked and says why.

use super::{
    Policy, Tool, Verdict, args,
    decide::{plan, row},
    template::Values,
    workspace::Place,
};
use crate::call::{
    decision::{Decision, Stage},
    intent::Intent,
    plan::Enforce,
};

/// Says loudly, at start and at each reload, which tools run in shadow: their calls do what
/// they like within what seccomp, their user and their cgroup allow.
pub fn warn_if_shadow(policy: &Policy) {
    let tools = policy.shadow_tools();
    if !tools.is_empty() {
        tracing::warn!(
            tools = %tools.join(" "),
            "SHADOW: these tools' calls run unconfined by landlock and their effects; what the \
             policy would block and what they do outside their effects is recorded, not refused"
        );
    }
}

impl Policy {
    /// `verdict` for a call of a tool in shadow: marked so in its row and, when enforcing
    /// would refuse it, allowed with `would_block`, its plan made from arguments checked for
    /// form only.
    pub(super) fn shadowed(&self, intent: &Intent, mut verdict: Verdict) -> Verdict {
        let Some(tool) = self
            .by_name
            .get(&intent.tool)
            .map(|&i| &self.tools[i])
            .filter(|t| t.enforce == Enforce::Shadow)
        else {
            return verdict;
        };
        let would = verdict.row.decision;
        if would == Decision::Allow {
            verdict.row.metadata.enforce = Some(Enforce::Shadow);
            return verdict;
        }
        if verdict.row.metadata.stage == Some(Stage::Secret) {
            return verdict;
        }
        let plan = match relaxed_plan(self, tool, intent) {
            Ok(plan) => plan,
            Err(why) => {
                verdict.row.reason =
                    format!("{}; not run in shadow either: {why}", verdict.row.reason);
                return verdict;
            }
        };
        let mut meta = verdict.row.metadata.clone();
        meta.enforce = Some(Enforce::Shadow);
        meta.would_block = Some(would);
        let reason = format!("shadow, would {would}: {}", verdict.row.reason);
        verdict.row = row(&verdict.row.check_name, Decision::Allow, reason, meta);
        verdict.plan = plan;
        verdict
    }
}

/// The call's plan from its arguments checked for form only; `None` for a tool without a
/// command (its caller runs it).
fn relaxed_plan(
    policy: &Policy,
    tool: &Tool,
    intent: &Intent,
) -> Result<Option<crate::call::plan::LaunchPlan>, String> {
    let place = Place::of(policy, tool, intent)?;
    let ctx = place.as_ref().map(Place::context).unwrap_or_default();
    let specs: Vec<_> = tool.args.iter().map(args::ArgSpec::relaxed).collect();
    let vals = args::check(&specs, &intent.args, &ctx).map_err(|e| e.reason)?;
    let values = Values { args: &vals, ctx };
    let owner = place.as_ref().and_then(|p| p.owner.as_deref());
    Ok(tool
        .command
        .as_ref()
        .map(|cmd| plan(tool, cmd, &values, owner)))
}
