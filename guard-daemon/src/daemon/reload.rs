//! Putting an edited policy in force (`guardctl reload`, SIGHUP): parsed off the runtime,
//! checked against what this guardd cannot change while running, recorded, then swapped in.

use std::sync::Arc;

use super::{Daemon, check_audit_fs, socket_gid, socket_group};
use crate::{
    audit::Row,
    bus::{Event, What},
    callers::access::Access,
    policy::Policy,
};

impl Daemon {
    /// Loads the policy file again and puts it in force, with the access lists it sets; on any
    /// error the policy in force stays, whole. Calls already decided keep their plans. The
    /// outcome is an audit row (`by`: the admin's uid, `None` for SIGHUP) and an event.
    pub async fn reload(&self, by: Option<u32>) -> Result<usize, String> {
        let _one_at_a_time = self.reloading.lock().await;
        let path = &self.options.policy;
        // Parsed on a blocking thread: a policy of thousands of tools and patterns takes a
        // good part of a second, and with one worker every other request would wait for it.
        let parse = tokio::task::spawn_blocking({
            let path = path.clone();
            move || Policy::load(&path)
        });
        let loaded = match parse.await {
            Ok(parsed) => parsed.map_err(|e| format!("policy {}: invalid:\n{e}", path.display())),
            Err(e) => Err(format!("policy {}: not parsed: {e}", path.display())),
        };
        let loaded = loaded.and_then(|policy| {
            check_audit_fs(&policy, &self.options)?;
            let in_force = self.options.socket_group.as_deref();
            if socket_group(in_force, policy.settings())?.as_deref() != in_force {
                return Err(
                    "the policy now names a socket_group, and the socket is bound \
                            once: restart guardd to apply it"
                        .to_owned(),
                );
            }
            let access = Access::new(policy.settings(), socket_gid(&self.options)?)?;
            Ok((policy, access))
        });
        let tools = loaded.as_ref().map(|(p, _)| p.tools().count()).ok();
        let version = loaded.as_ref().map(|(p, _)| p.version().to_owned()).ok();
        let error = loaded.as_ref().err().cloned();
        let row = Row::Reload {
            policy: path.clone(),
            by,
            tools,
            error: error.clone(),
            version,
        };
        if let Err(e) = self.audit.record(&row).await {
            // A policy change nobody can audit does not happen.
            return Err(format!("not reloaded: the audit log is unavailable: {e}"));
        }
        let what = What::Reload { tools, error, by };
        // Published once the new policy is in force: a `tools --follow` client lists it then.
        let in_force = loaded.map(|(policy, access)| {
            crate::policy::secrets::warn_if_proc_shows_command_lines(policy.secrets());
            crate::policy::shadow::warn_if_shadow(&policy);
            *self.access.write().unwrap_or_else(|p| p.into_inner()) = access;
            *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
        });
        self.bus.publish(Event::of(None, None, what));
        in_force.map(|()| tools.unwrap_or(0))
    }
}
