//! The policy a call is decided under: the one in force, or, for a call made in a workspace
//! that has its own `.guard/policy.toml`, that merged in (`policy::project`).

use std::sync::Arc;

use super::Daemon;
use crate::{call::intent::Intent, policy::Policy};

impl Daemon {
    /// The policy `intent` is decided under: the one in force, merged with the project policy
    /// of its caller's workspace when there is one (every call blocked when that is refused).
    pub fn policy_for(&self, intent: &Intent) -> Arc<Policy> {
        self.projects.for_call(&self.policy(), intent)
    }
}
