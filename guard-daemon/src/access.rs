//! Who may do what over the socket, from the peer's credentials (SO_PEERCRED).
//!
//! Unset lists mean: root and members of the socket's group may submit calls; only root
//! administers (approves, reloads, subscribes to events).

use std::fs;

use nix::unistd::{Group, User};

use crate::policy::{Principal, Settings};

/// The credentials of a connected peer, with its groups.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, from /proc/PID/status at connect time.
    #[serde(skip, default)]
    pub groups: Vec<u32>,
    /// The peer's cgroup v2 path (from /proc/PID/cgroup), e.g. `/guard/call-17`.
    #[serde(skip, default)]
    pub cgroup: String,
}

impl Peer {
    /// Reads the peer's credentials from a connected socket.
    pub fn of(stream: &tokio::net::UnixStream) -> std::io::Result<Self> {
        let cred = stream.peer_cred()?;
        let pid = cred.pid().unwrap_or(0);
        Ok(Self {
            pid,
            uid: cred.uid(),
            gid: cred.gid(),
            groups: supplementary_groups(pid),
            cgroup: cgroup_of(pid),
        })
    }

    /// Whether the peer runs inside the cgroup subtree `root` (relative to the v2 mount, e.g.
    /// `/guard`): a confined call talking to guardd.
    pub fn inside(&self, root: &str) -> bool {
        self.cgroup == root
            || self
                .cgroup
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

fn cgroup_of(pid: i32) -> String {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_owned()
}

fn supplementary_groups(pid: i32) -> Vec<u32> {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Resolves ids and names to numeric ids; an unknown name is an error, never a silent skip.
/// An empty list is `None`: unset, so the defaults apply.
fn resolve(
    list: &[Principal],
    what: &str,
    lookup: impl Fn(&str) -> Option<u32>,
) -> Result<Option<Vec<u32>>, String> {
    if list.is_empty() {
        return Ok(None);
    }
    let ids = list.iter().map(|p| match p {
        Principal::Id(id) => Ok(*id),
        Principal::Name(name) => {
            lookup(name).ok_or_else(|| format!("unknown {what} `{name}` in settings"))
        }
    });
    ids.collect::<Result<Vec<_>, _>>().map(Some)
}

/// What a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Submit and check calls, read status.
    Client,
    /// Everything a client may, plus events, approvals and reloads.
    Admin,
}

/// The access rules, resolved once from the policy's settings.
#[derive(Clone, Debug, Default)]
pub struct Access {
    clients: Option<Vec<u32>>,
    client_groups: Option<Vec<u32>>,
    admins: Option<Vec<u32>>,
    admin_groups: Option<Vec<u32>>,
    socket_gid: Option<u32>,
}

impl Access {
    /// Resolves user and group names; a name that does not exist is an error, not a silent skip.
    pub fn new(settings: &Settings, socket_gid: Option<u32>) -> Result<Self, String> {
        let user = |name: &str| User::from_name(name).ok().flatten().map(|u| u.uid.as_raw());
        let group = |name: &str| {
            Group::from_name(name)
                .ok()
                .flatten()
                .map(|g| g.gid.as_raw())
        };
        Ok(Self {
            clients: resolve(&settings.clients, "user", user)?,
            client_groups: resolve(&settings.client_groups, "group", group)?,
            admins: resolve(&settings.admins, "user", user)?,
            admin_groups: resolve(&settings.admin_groups, "group", group)?,
            socket_gid,
        })
    }

    /// Whether `peer` may act in `role`.
    pub fn permits(&self, peer: &Peer, role: Role) -> bool {
        if peer.uid == 0 {
            return true;
        }
        let listed = |uids: &Option<Vec<u32>>, gids: &Option<Vec<u32>>| {
            uids.as_ref().is_some_and(|u| u.contains(&peer.uid))
                || gids
                    .as_ref()
                    .is_some_and(|g| g.iter().any(|&gid| peer.in_group(gid)))
        };
        let admin = listed(&self.admins, &self.admin_groups);
        match role {
            Role::Admin => admin,
            Role::Client => {
                if admin {
                    return true;
                }
                if self.clients.is_none() && self.client_groups.is_none() {
                    self.socket_gid.is_some_and(|gid| peer.in_group(gid))
                } else {
                    listed(&self.clients, &self.client_groups)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            pid: 1,
            uid,
            gid,
            groups: groups.to_vec(),
            cgroup: "/user.slice".into(),
        }
    }

    #[test]
    fn defaults_let_root_and_the_socket_group_submit_and_only_root_administer() {
        let access = Access {
            socket_gid: Some(50),
            ..Access::default()
        };
        assert!(access.permits(&peer(0, 0, &[]), Role::Admin));
        assert!(access.permits(&peer(1000, 1000, &[50]), Role::Client));
        assert!(!access.permits(&peer(1000, 1000, &[50]), Role::Admin));
        assert!(!access.permits(&peer(1001, 1001, &[]), Role::Client));
    }

    #[test]
    fn a_peer_inside_the_guard_subtree_is_recognised() {
        let mut p = peer(0, 0, &[]);
        p.cgroup = "/guard/call-3".into();
        assert!(p.inside("/guard"));
        assert!(!p.inside("/guard-other"));
        p.cgroup = "/guard-other/call-3".into();
        assert!(!p.inside("/guard"));
    }

    #[test]
    fn explicit_lists_replace_the_socket_group() {
        let access = Access {
            clients: Some(vec![1000]),
            admin_groups: Some(vec![60]),
            socket_gid: Some(50),
            ..Access::default()
        };
        assert!(access.permits(&peer(1000, 1000, &[]), Role::Client));
        assert!(!access.permits(&peer(1002, 1002, &[50]), Role::Client));
        assert!(access.permits(&peer(1003, 1003, &[60]), Role::Admin));
        assert!(access.permits(&peer(1003, 1003, &[60]), Role::Client));
    }
}
