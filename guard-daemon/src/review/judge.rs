//! Semantic judges (aegis's tool-call judging): before a call runs, each judge the policy names
//! for its tool is run, confined, with the proposed call on its stdin, and answers with a
//! GradientResult. The call goes on only when every judge's score and confidence reach its
//! thresholds; the first judge that rejects blocks it. A judge that fails in any way (times
//! out, exits non-zero, prints what is no GradientResult, does what it may not) rejects:
//! nobody vouching for a call is not a yes. Every verdict is a `judged` audit row.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    audit::{Row, row::Judged},
    bus::What,
    call::plan::LaunchPlan,
    daemon::Daemon,
    policy::{Policy, helpers::Judge},
    review::confined,
};

/// What aegis's runtime tells its judge this check is.
pub const VALIDATION_CONTEXT: &str = "semantic_judge_pre_execution_inner_loop";

/// A judge's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GradientResult {
    pub score: f64,
    pub confidence: f64,
    #[serde(default)]
    pub reasoning: String,
    #[serde(default)]
    pub signals: Vec<Value>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

/// The call a judge (and an approver program) is shown: as it will run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProposedCall {
    pub tool: String,
    /// As sent, each secret's value as `[secret:NAME]` (`Policy::shown`).
    pub arguments: Value,
    /// The resolved command, shown the same way.
    pub command: Value,
}

impl ProposedCall {
    /// `tool` called with `args`, to run `plan`, as `policy` shows a call to its judges.
    pub fn shown(
        policy: &Policy,
        tool: &str,
        args: &Map<String, Value>,
        plan: &LaunchPlan,
    ) -> Self {
        let command: Value = plan
            .argv
            .iter()
            .map(|a| Value::String(a.to_string_lossy().into_owned()))
            .collect();
        Self {
            tool: tool.to_owned(),
            arguments: policy.shown(Value::Object(args.clone())),
            command: policy.shown(command),
        }
    }
}

/// A path of the judged call, which the judge may read (never write).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mount {
    pub path: PathBuf,
    /// `read` or `write`: what the call may do there.
    pub call_access: &'static str,
    /// What the judge may do there: `ro`.
    pub mode: &'static str,
}

/// The judge's stdin, as aegis's judge contract describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Payload {
    pub task: Option<String>,
    pub proposed_tool_call: ProposedCall,
    pub available_tools: Vec<String>,
    pub worker_mounts: Vec<Mount>,
    /// A serialised preview of the proposed call (aegis's compatibility field).
    pub output: String,
    pub criteria: String,
    pub validation_context: &'static str,
    /// Tools this caller had blocked recently.
    pub policy_violations: Vec<String>,
    /// The model's message with the call and the conversation before it, each secret masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<serde_json::Value>,
}

/// The call under judgement, as every judge of it sees it.
#[derive(Clone, Debug)]
pub struct Subject {
    pub call_id: String,
    pub task: Option<String>,
    pub call: ProposedCall,
    /// What the agent said with the call (`protocol::context`), shown as its arguments are.
    pub conversation: Option<serde_json::Value>,
    pub plan: LaunchPlan,
    pub available_tools: Vec<String>,
    pub policy_violations: Vec<String>,
}

impl Subject {
    /// The paths of the call, which its judges may read.
    fn mounts(&self) -> Vec<Mount> {
        let e = &self.plan.effects;
        let read = e.read.iter().map(|p| (p, "read"));
        let write = e.write.iter().map(|p| (p, "write"));
        read.chain(write)
            .map(|(p, a)| Mount {
                path: p.clone(),
                call_access: a,
                mode: "ro",
            })
            .collect()
    }

    fn payload(&self, judge: &Judge) -> Payload {
        Payload {
            task: self.task.clone(),
            proposed_tool_call: self.call.clone(),
            available_tools: self.available_tools.clone(),
            worker_mounts: self.mounts(),
            output: serde_json::to_string(&self.call).unwrap_or_default(),
            criteria: judge.criteria.clone(),
            validation_context: VALIDATION_CONTEXT,
            policy_violations: self.policy_violations.clone(),
            conversation: self.conversation.clone(),
        }
    }
}

/// A judge's verdict, as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub allowed: bool,
    /// Why it was rejected.
    pub reason: Option<String>,
    /// The judge's reasoning (told to the caller only when the policy discloses reasons).
    pub reasoning: Option<String>,
}

/// Reads a judge's stdout: one JSON object, or, after other output, its last line.
pub fn parse(stdout: &[u8]) -> Result<GradientResult, String> {
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    let whole = serde_json::from_str::<GradientResult>(text);
    let result = whole.or_else(|e| {
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        serde_json::from_str::<GradientResult>(last.trim()).map_err(|_| e)
    });
    let r = result.map_err(|e| {
        let shown: String = text.chars().take(120).collect();
        format!("its output is no GradientResult ({e}): {shown:?}")
    })?;
    for (name, v) in [("score", r.score), ("confidence", r.confidence)] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("its {name} {v} is not in [0, 1]"));
        }
    }
    Ok(r)
}

/// What a judge's answer means under its thresholds.
pub fn weigh(judge: &Judge, r: &GradientResult) -> Option<String> {
    if r.score < judge.min_score {
        return Some(format!(
            "score {} is below min_score {}",
            r.score, judge.min_score
        ));
    }
    if r.confidence < judge.min_confidence {
        return Some(format!(
            "confidence {} is below min_confidence {}",
            r.confidence, judge.min_confidence
        ));
    }
    None
}

/// Runs `judge` on `subject`, confined, and records its verdict; a verdict that cannot be
/// recorded rejects.
pub async fn judge(daemon: &Daemon, judge: &Judge, subject: &Subject) -> Verdict {
    let also_read: Vec<PathBuf> = subject.mounts().into_iter().map(|m| m.path).collect();
    let name = format!("judge:{}", judge.name);
    let plan = judge
        .helper
        .plan(&name, &also_read, &subject.plan.effects.beneath);
    let input = serde_json::to_vec(&subject.payload(judge)).unwrap_or_default();
    let id = format!("{}-judge-{}", subject.call_id, judge.name);
    let ran = confined::run(daemon, &id, &plan, input).await;
    let (exit_code, duration_ms, answer) = match &ran {
        Ok(ran) => {
            let answer = match confined::failure(ran, judge.helper.timeout) {
                Some(why) => Err(why),
                None => parse(&ran.stdout),
            };
            let ms = ran.duration.as_secs_f64() * 1e3;
            (Some(ran.outcome.exit_code), ms, answer)
        }
        Err(e) => (None, 0.0, Err(format!("could not run: {e}"))),
    };
    let reason = match &answer {
        Ok(r) => weigh(judge, r),
        Err(why) => Some(why.clone()),
    }
    .map(|why| format!("judge '{}' rejected the call: {why}", judge.name));
    let verdict = Verdict {
        allowed: reason.is_none(),
        reason: reason.clone(),
        reasoning: answer.as_ref().ok().map(|r| r.reasoning.clone()),
    };
    let what = What::Judged {
        judge: judge.name.clone(),
        allowed: verdict.allowed,
        reason: reason.clone(),
    };
    let (id, tool) = (&subject.call_id, &subject.call.tool);
    daemon.bus.call_in(id, tool, subject.plan.enforce, what);
    let row = Row::Judged(Box::new(Judged {
        call_id: subject.call_id.clone(),
        tool: subject.call.tool.clone(),
        judge: judge.name.clone(),
        allowed: verdict.allowed,
        reason,
        answer: answer.ok().and_then(|r| serde_json::to_value(r).ok()),
        exit_code,
        duration_ms,
    }));
    if let Err(e) = daemon.audit.record(&row).await {
        tracing::error!(call = %subject.call_id, "audit log unavailable for the judged row: {e}");
        return Verdict {
            allowed: false,
            reason: Some("the audit log is unavailable".into()),
            reasoning: None,
        };
    }
    verdict
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::helpers::Helper;

    fn judge() -> Judge {
        Judge {
            name: "j".into(),
            helper: Helper {
                command: vec!["/bin/true".into()],
                read: vec![],
                write: vec![],
                exec: vec![],
                connect: vec![],
                timeout: Duration::from_secs(1),
            },
            criteria: String::new(),
            min_score: 0.7,
            min_confidence: 0.5,
        }
    }

    #[test]
    fn answers_are_read_strictly_and_weighed_conjunctively() {
        let r = parse(br#"{"score":0.9,"confidence":0.6,"reasoning":"ok"}"#).expect("reads");
        assert_eq!(weigh(&judge(), &r), None);
        let r = parse(b"thinking...\n{\"score\":0.9,\"confidence\":0.4}\n").expect("last line");
        assert!(weigh(&judge(), &r).is_some_and(|w| w.contains("confidence")));
        let r = parse(br#"{"score":0.69,"confidence":1}"#).expect("reads");
        assert!(weigh(&judge(), &r).is_some_and(|w| w.contains("score")));
        assert!(parse(b"I approve").is_err());
        assert!(parse(br#"{"score":"high","confidence":1}"#).is_err());
        assert!(parse(br#"{"confidence":1}"#).is_err());
        assert!(parse(br#"{"score":7,"confidence":1}"#).is_err());
        assert!(parse(b"").is_err());
    }
}
