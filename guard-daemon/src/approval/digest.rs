//! What an approval binds to: a held call's canonical form (tool, arguments as sent, the plan it
//! will run with its resolved command, the identity of its program, the policy's version, the
//! input it reads when its tool reads the caller's stream) and the SHA-256 of that form. The admin is shown the digest, the approval names it, and the call
//! runs only while the program on disk is still the one held.

use std::{io, path::PathBuf};

use super::input::HeldInput;
use crate::{
    audit::chain::canonical,
    call::{
        hash::sha256_hex,
        plan::{LaunchPlan, Stdin},
    },
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A held call, whole: everything the digest covers, and everything needed to run it after a
/// restart of guardd.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallForm {
    pub tool: String,
    /// The arguments as the caller sent them (not redacted: the store is root's alone).
    pub args: Map<String, Value>,
    /// The plan fixed at hold time: the resolved command, effects and confinement.
    pub plan: LaunchPlan,
    /// The plan's (path, root) pairs opened beneath their roots at launch (not part of the
    /// plan's own serialised form).
    pub beneath: Vec<(PathBuf, PathBuf)>,
    /// The program the plan runs.
    pub program: Program,
    /// SHA-256 of the policy files the call was decided under.
    pub policy: String,
    /// The caller's working directory, which picked the call's workspace: a call decided again
    /// (after a reload) is placed where it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The caller's stream as read when the call was held (`stdin = "caller"`): the bytes the
    /// approved call reads, whatever the caller sends then. Absent from the canonical form
    /// when there is none, so the digests of other calls stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<HeldInput>,
}

/// A program by content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    pub path: PathBuf,
    /// SHA-256 of the file's bytes.
    pub sha256: String,
}

impl Program {
    /// Reads the program at `path` and names it by its content.
    pub fn identify(path: PathBuf) -> io::Result<Self> {
        let bytes = std::fs::read(&path)?;
        Ok(Self {
            path,
            sha256: sha256_hex(&bytes),
        })
    }

    /// Why the file at this path is no longer the program that was held, if it is not.
    pub fn changed(&self) -> Option<String> {
        match Self::identify(self.path.clone()) {
            Ok(now) if now.sha256 == self.sha256 => None,
            Ok(_) => Some(format!(
                "the program {} changed since the call was held",
                self.path.display()
            )),
            Err(e) => Some(format!(
                "the program {} cannot be read: {e}",
                self.path.display()
            )),
        }
    }
}

impl CallForm {
    /// The form of a call about to be held: its plan, its program's identity now, the policy's
    /// version.
    pub fn new(
        tool: &str,
        args: &Map<String, Value>,
        plan: &LaunchPlan,
        policy: &str,
    ) -> io::Result<Self> {
        let program = plan.argv.first().map(PathBuf::from).unwrap_or_default();
        Ok(Self {
            tool: tool.to_owned(),
            args: args.clone(),
            plan: plan.clone(),
            beneath: plan.effects.beneath.clone(),
            program: Program::identify(program)?,
            cwd: None,
            policy: policy.to_owned(),
            input: None,
        })
    }

    /// `sha256:` and the hex SHA-256 of the canonical JSON of the form.
    pub fn digest(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        format!("sha256:{}", sha256_hex(canonical(&value).as_bytes()))
    }

    /// The plan as the policy decided it, with what its serialised form leaves out: what a
    /// policy in force since must still grant.
    pub fn decided_plan(&self) -> LaunchPlan {
        let mut plan = self.plan.clone();
        plan.effects.beneath.clone_from(&self.beneath);
        plan
    }

    /// The plan to run: as decided, with the held input in place of the caller's stream. A
    /// tool that reads no input gets an empty one, not the caller's descriptor as it is when
    /// the call runs, which nobody approved (an outside pass's F4: text sent after the
    /// approval was read by the approved call).
    pub fn launch_plan(&self) -> LaunchPlan {
        let mut plan = self.decided_plan();
        if let Some(input) = &self.input {
            plan.confinement.stdin = Stdin::Held(input.bytes.clone());
        } else if matches!(plan.confinement.stdin, Stdin::Passed) {
            plan.confinement.stdin = Stdin::Held(Vec::new());
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::plan::{Confinement, Effects};

    fn form() -> CallForm {
        let plan = LaunchPlan {
            tool: "deploy".into(),
            argv: vec!["/bin/true".into(), "x".into()],
            effects: Effects::default(),
            confinement: Confinement::default(),
            enforce: Default::default(),
        };
        let mut args = Map::new();
        args.insert("target".into(), "x".into());
        CallForm::new("deploy", &args, &plan, "sha256:p").expect("form")
    }

    #[test]
    fn the_digest_covers_the_arguments_the_command_and_the_policy() {
        let a = form();
        assert_eq!(a.digest(), form().digest());
        assert!(a.digest().starts_with("sha256:") && a.digest().len() == 71);
        let mut b = a.clone();
        b.args.insert("target".into(), "y".into());
        assert_ne!(a.digest(), b.digest());
        let mut c = a.clone();
        c.plan.argv[1] = "y".into();
        assert_ne!(a.digest(), c.digest());
        let mut d = a.clone();
        d.policy = "sha256:q".into();
        assert_ne!(a.digest(), d.digest());
        assert_eq!(a.program.changed(), None);
        let mut e = a.clone();
        e.program.sha256 = "0".into();
        assert!(e.program.changed().is_some_and(|w| w.contains("changed")));
    }

    #[test]
    fn the_digest_covers_a_held_input_and_the_call_runs_with_it() {
        let plain = form();
        let mut held = form();
        held.plan.confinement.stdin = Stdin::Caller;
        let without = held.digest();
        held.input = Some(HeldInput::new(b"approved".to_vec()));
        assert_ne!(held.digest(), without, "the input is under the digest");
        let mut other = held.clone();
        other.input = Some(HeldInput::new(b"swapped".to_vec()));
        assert_ne!(held.digest(), other.digest());
        // A form with no input is digested as before this field was (no `input` key).
        let text = serde_json::to_string(&plain).expect("json");
        assert!(!text.contains("\"input\""), "{text}");
        // What runs reads the held bytes, not the caller's stream.
        assert_eq!(
            held.launch_plan().confinement.stdin,
            Stdin::Held(b"approved".to_vec())
        );
        // One that reads no input gets an empty one, not the caller's descriptor at run time.
        assert_eq!(plain.decided_plan().confinement.stdin, Stdin::Passed);
        assert_eq!(
            plain.launch_plan().confinement.stdin,
            Stdin::Held(Vec::new())
        );
        // What a later policy is held to is the plan it would decide: the caller's stream.
        assert_eq!(held.decided_plan().confinement.stdin, Stdin::Caller);
        // The record keeps them, and reads them back.
        let back: CallForm =
            serde_json::from_str(&serde_json::to_string(&held).expect("json")).expect("back");
        assert_eq!(back, held);
        assert_eq!(back.digest(), held.digest());
    }
}
