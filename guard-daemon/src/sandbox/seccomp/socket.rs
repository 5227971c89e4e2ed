//! The rules on socket(2) and socketpair(2): which address families and socket types a call may
//! create, by its effects.

use super::{
    Cond, Op, Rule,
    rules::{EPERM, int_eq, int_ne},
};

/// The socket type lives in the low 4 bits of socket(2)'s `type`; SOCK_NONBLOCK and SOCK_CLOEXEC
/// sit above (the kernel's SOCK_TYPE_MASK).
const SOCK_TYPE_MASK: u64 = 0xf;

/// socket(2): AF_UNIX only with the `unix` effect, AF_INET/AF_INET6 only with connect effects
/// and then of type SOCK_STREAM or SOCK_DGRAM. Never AF_PACKET, AF_NETLINK or SOCK_RAW.
/// socketpair(2) of datagram sockets needs the `unix` effect too: sendto(2) on one reaches any
/// pathname datagram socket (syslog, journald). Each rule below matches a denied case.
pub(super) fn socket_rules(may_connect: bool, may_unix: bool) -> Vec<Rule> {
    let rule = |nr, when| Rule {
        name: if nr == libc::SYS_socket {
            "socket"
        } else {
            "socketpair"
        },
        nr,
        action: EPERM,
        when,
    };
    let mut families = Vec::new();
    if may_unix {
        families.push(libc::AF_UNIX);
    }
    if may_connect {
        families.extend([libc::AF_INET, libc::AF_INET6]);
    }
    let mut rules = vec![rule(
        libc::SYS_socket,
        families.iter().map(|&f| int_ne(0, f)).collect(),
    )];
    let type_is = |ty: u64| Cond {
        arg: 1,
        dword: true,
        op: Op::MaskedEq(SOCK_TYPE_MASK),
        value: ty,
    };
    if may_connect {
        for family in [libc::AF_INET, libc::AF_INET6] {
            for ty in 0..=SOCK_TYPE_MASK {
                if ty != libc::SOCK_STREAM as u64 && ty != libc::SOCK_DGRAM as u64 {
                    rules.push(rule(libc::SYS_socket, vec![int_eq(0, family), type_is(ty)]));
                }
            }
        }
    }
    if !may_unix {
        rules.push(rule(
            libc::SYS_socketpair,
            vec![type_is(libc::SOCK_DGRAM as u64)],
        ));
    }
    rules
}
