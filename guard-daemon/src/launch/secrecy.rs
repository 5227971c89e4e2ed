//! What guardd keeps from a call given a secret's caller: the masks its output passes through
//! and that its receipt is written with, all from one policy, the one whose values it is given.

use std::{os::fd::OwnedFd, sync::Arc};

use crate::{
    call::plan::LaunchPlan,
    launch::output::{self, Masked},
    policy::{Policy, secrets::mask::Masks},
    receipt::Receipt,
};

/// The masks of one call: none for a call given no secret.
pub(super) struct Secrecy {
    masks: Option<Arc<Masks>>,
    /// The secrets the call is given.
    names: Vec<String>,
}

impl Secrecy {
    /// For `plan`, launched under `policy`.
    pub fn of(plan: &LaunchPlan, policy: &Policy) -> Self {
        let names: Vec<String> = plan
            .confinement
            .secrets()
            .into_iter()
            .map(str::to_owned)
            .collect();
        let masks = (!names.is_empty()).then(|| policy.masks()).flatten();
        Self { masks, names }
    }

    /// The masks, for the receipt's divergences as they are published.
    pub fn masks(&self) -> Option<Arc<Masks>> {
        self.masks.clone()
    }

    /// The call's stdio: its output through guardd's masks, when it is given a secret.
    pub fn attach(
        &self,
        plan: &LaunchPlan,
        stdio: [OwnedFd; 3],
    ) -> Result<([OwnedFd; 3], Option<Masked>), crate::sandbox::SandboxError> {
        output::attach(self.masks(), &plan.confinement.stdin, stdio)
    }

    /// `receipt` masked (what the call did may hold a value: a path, a name it asked), with
    /// the secrets it was given and those `masked` in its output.
    pub fn seal(&self, receipt: Option<&mut Receipt>, masked: Vec<String>) {
        if let (Some(r), Some(masks)) = (receipt, &self.masks) {
            *r = masks.mask_serde(std::mem::take(r));
            r.secret_exposed.clone_from(&self.names);
            r.secret_masked = masked;
        }
    }
}
