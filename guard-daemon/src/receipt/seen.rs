//! What a kernel event says, as a receipt lists it: a connect, a socket, a lock, a refusal.

use std::net::{Ipv4Addr, Ipv6Addr};

use guard_common::event::{Event as KernelEvent, LOCK_FLOCK, LOCK_OFD};
use serde::{Deserialize, Serialize};

use crate::{
    bus::{Effect, Proto, RefusedSeen, StoppedBy},
    receipt::opens::c_str,
};

/// One connect attempt of a call.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ConnectSeen {
    pub addr: String,
    pub port: u16,
    pub proto: Proto,
    pub allowed: bool,
}

/// One socket the kernel refused a call.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SocketSeen {
    /// "unix", "inet", "inet6", "netlink", "packet", or the number.
    pub family: String,
    /// "stream", "dgram", "raw", "seqpacket", or the number.
    #[serde(rename = "type")]
    pub ty: String,
    pub protocol: u32,
}

impl SocketSeen {
    pub(super) fn of(event: &KernelEvent) -> Self {
        let family = match i32::from(event.family) {
            libc::AF_UNIX => "unix".to_owned(),
            libc::AF_INET => "inet".to_owned(),
            libc::AF_INET6 => "inet6".to_owned(),
            libc::AF_NETLINK => "netlink".to_owned(),
            libc::AF_PACKET => "packet".to_owned(),
            n => n.to_string(),
        };
        let ty = match event.sock_type as i32 {
            libc::SOCK_STREAM => "stream".to_owned(),
            libc::SOCK_DGRAM => "dgram".to_owned(),
            libc::SOCK_RAW => "raw".to_owned(),
            libc::SOCK_SEQPACKET => "seqpacket".to_owned(),
            n => n.to_string(),
        };
        Self {
            family,
            ty,
            protocol: event.sock_protocol,
        }
    }
}

/// A lock event's effect: the file's name, the kind of lock and its mode.
pub(super) fn lock_of(event: &KernelEvent) -> Effect {
    let lock = match event.sock_type {
        LOCK_OFD => "ofd",
        LOCK_FLOCK => "flock",
        _ => "posix",
    };
    let mode = if event.open_flags == 1 {
        "write"
    } else {
        "read"
    };
    Effect::Lock {
        name: c_str(&event.path),
        lock: lock.to_owned(),
        mode: mode.to_owned(),
    }
}

/// The transport of a connect or bind event.
pub(super) fn proto_of(event: &KernelEvent) -> Proto {
    if event.proto == guard_common::net::PROTO_UDP {
        Proto::Udp
    } else {
        Proto::Tcp
    }
}

impl RefusedSeen {
    pub(super) fn of(event: &KernelEvent) -> Self {
        let errno = -event.ret;
        Self {
            syscall: syscall_names(&[event.sock_type]).pop().unwrap_or_default(),
            errno: crate::receipt::opens::errno_name(errno),
            stopped_by: if errno == libc::EACCES {
                StoppedBy::Landlock
            } else {
                StoppedBy::Seccomp
            },
        }
    }
}

/// The names of syscall numbers, for a receipt.
pub fn syscall_names(numbers: &[u32]) -> Vec<String> {
    numbers
        .iter()
        .map(|&nr| {
            crate::sandbox::sysname::name(i64::from(nr))
                .map_or_else(|| nr.to_string(), str::to_owned)
        })
        .collect()
}

pub(super) fn addr_of(event: &KernelEvent) -> String {
    if event.family == libc::AF_INET6 as u16 {
        Ipv6Addr::from(event.addr).to_string()
    } else {
        Ipv4Addr::new(event.addr[0], event.addr[1], event.addr[2], event.addr[3]).to_string()
    }
}
