//! Putting an edited policy in force (`guardctl reload`, SIGHUP): parsed off the runtime,
//! checked against what this guardd cannot change while running, recorded, then swapped in.

use std::{path::PathBuf, sync::Arc};

use super::{Daemon, check_audit_fs, socket_gid, socket_group};
use crate::{
    audit::{AuditError, Row},
    bus::{Event, What},
    callers::access::Access,
    policy::{Policy, PolicyErrors},
};

/// Why a reload left the policy in force as it was.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("policy {}: invalid:\n{errors}", path.display())]
    Invalid { path: PathBuf, errors: PolicyErrors },
    #[error("policy {}: not parsed: {source}", path.display())]
    NotParsed {
        path: PathBuf,
        source: tokio::task::JoinError,
    },
    /// What the policy asks of guardd cannot be had: writes on the audit log's file system,
    /// users or groups that do not exist, another socket group than the one in force.
    #[error("{0}")]
    Settings(String),
    #[error(
        "the policy now names a socket_group, and the socket is bound once: restart guardd to \
         apply it"
    )]
    SocketGroup,
    /// A policy change nobody can audit does not happen.
    #[error("not reloaded: the audit log is unavailable: {0}")]
    Unrecorded(AuditError),
}

impl Daemon {
    /// Loads the policy file again and puts it in force, with the access lists it sets; on any
    /// error the policy in force stays, whole. Calls already decided keep their plans. The
    /// outcome is an audit row (`by`: the admin's uid, `None` for SIGHUP) and an event.
    pub async fn reload(&self, by: Option<u32>) -> Result<usize, ReloadError> {
        let _one_at_a_time = self.reloading.lock().await;
        let path = &self.options.policy;
        // Parsed on a blocking thread: a policy of thousands of tools and patterns takes a
        // good part of a second, and with one worker every other request would wait for it.
        let parse = tokio::task::spawn_blocking({
            let path = path.clone();
            move || Policy::load(&path)
        });
        let loaded = match parse.await {
            Ok(parsed) => parsed.map_err(|errors| ReloadError::Invalid {
                path: path.clone(),
                errors,
            }),
            Err(source) => Err(ReloadError::NotParsed {
                path: path.clone(),
                source,
            }),
        };
        let loaded = loaded.and_then(|policy| {
            check_audit_fs(&policy, &self.options).map_err(ReloadError::Settings)?;
            let in_force = self.options.socket_group.as_deref();
            let group = socket_group(in_force, policy.settings()).map_err(ReloadError::Settings)?;
            if group.as_deref() != in_force {
                return Err(ReloadError::SocketGroup);
            }
            let gid = socket_gid(&self.options).map_err(ReloadError::Settings)?;
            let access = Access::new(policy.settings(), gid).map_err(ReloadError::Settings)?;
            Ok((policy, access))
        });
        let tools = loaded.as_ref().map(|(p, _)| p.tools().count()).ok();
        let version = loaded.as_ref().map(|(p, _)| p.version().to_owned()).ok();
        let error = loaded.as_ref().err().map(ToString::to_string);
        let row = Row::Reload {
            policy: path.clone(),
            by,
            tools,
            error: error.clone(),
            version,
        };
        if let Err(e) = self.audit.record(&row).await {
            return Err(ReloadError::Unrecorded(e));
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
