//! Who may do what over the socket, from the peer's credentials (SO_PEERCRED, SO_PEERGROUPS).
//!
//! Unset lists mean: root and members of the socket's group may submit calls; only root
//! administers (approves, reloads, subscribes to events).

use nix::unistd::{Group, User};

use crate::{
    call::peer::Peer,
    policy::{Principal, Settings},
};

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
