//! The rules on socket(2) and socketpair(2): which address families and socket types a call may
//! create, by its effects; and on setsockopt(2), the options that open a socket's error queue
//! to ICMP errors from anyone, and those that join a multicast group.

use super::{Action, Cond, EPERM, Op, Rule, int_eq, int_ne};

/// The socket type lives in the low 4 bits of socket(2)'s `type`; SOCK_NONBLOCK and SOCK_CLOEXEC
/// sit above (the kernel's SOCK_TYPE_MASK).
const SOCK_TYPE_MASK: u64 = 0xf;

/// Every socket type but SOCK_STREAM (1) and SOCK_DGRAM (2), as (mask, value) pairs on the
/// type's low four bits: 0, 3, 4-7, 8-11 and 12-15. Five rules where one per type took
/// fourteen: each rule is instructions the kernel checks and compiles at every launch.
const NOT_STREAM_OR_DGRAM: &[(u64, u64)] = &[
    (SOCK_TYPE_MASK, 0),
    (SOCK_TYPE_MASK, 3),
    (0xc, 0x4),
    (0xc, 0x8),
    (0xc, 0xc),
];

/// The socket options that queue ICMP errors, with the datagram they quote, on a socket's error
/// queue (`MSG_ERRQUEUE`): IP_RECVERR, IP_RECVERR_RFC4884, IPV6_RECVERR and
/// IPV6_RECVERR_RFC4884, as (level, name). Anyone who can send the host an ICMP error that quotes
/// a call's socket reaches it there with bytes of their choosing, and the queue is filled past
/// the `cgroup_skb` ingress program that keeps every other packet from anyone else out. The
/// pairs, not every level with every name: IPV6_V6ONLY is 26 and IPV6_FLOWINFO 11.
///
/// Nothing else puts what a remote host sent on the queue of a socket a call may have (TCP or
/// UDP; raw and ping sockets it has none): with these options off the kernel queues no ICMP
/// error there, nor a local one (`ip_local_error`, `ipv6_local_error` check the same bit), and
/// what SO_TIMESTAMPING and SO_ZEROCOPY queue is the call's own: its sent packets (or none,
/// with OPT_TSONLY), times taken on the host and the ranges of its own sends.
const RECVERR: &[(i32, i32)] = &[
    (libc::SOL_IP, 11),
    (libc::SOL_IP, 26),
    (libc::SOL_IPV6, 25),
    (libc::SOL_IPV6, 31),
];

/// The `setsockopt` options that join a multicast (or IPv6 anycast) group or lease an IPv6
/// flow label, by (level, name).
/// A join is neither a connect nor a send, yet it speaks: the kernel itself sends the IGMP or
/// MLD report, which leaves the host with the group's address (data a call chose) and no cgroup
/// program sees, and `/proc/net/igmp` and `igmp6` show every group joined to every local user.
/// (The source filters, `IP_MSFILTER` and `MCAST_MSFILTER`, change a group already joined.)
const GROUP_JOINS: &[(i32, i32)] = &[
    (libc::SOL_IP, libc::IP_ADD_MEMBERSHIP),
    (libc::SOL_IP, libc::IP_ADD_SOURCE_MEMBERSHIP),
    (libc::SOL_IP, libc::MCAST_JOIN_GROUP),
    (libc::SOL_IP, libc::MCAST_JOIN_SOURCE_GROUP),
    (libc::SOL_IPV6, libc::IPV6_ADD_MEMBERSHIP),
    (libc::SOL_IPV6, libc::IPV6_JOIN_ANYCAST),
    (libc::SOL_IPV6, libc::MCAST_JOIN_GROUP),
    (libc::SOL_IPV6, libc::MCAST_JOIN_SOURCE_GROUP),
    // A flow label leased (`IPV6_FLOWLABEL_MGR`): 20 bits of the call's choosing, with its
    // options, kept by the kernel for a minute and listed to every local user in
    // `/proc/net/ip6_flowlabel`.
    (libc::SOL_IPV6, IPV6_FLOWLABEL_MGR),
];

/// `IPV6_FLOWLABEL_MGR` (linux/in6.h), which libc does not name.
const IPV6_FLOWLABEL_MGR: i32 = 32;

/// setsockopt(2) of [`GROUP_JOINS`]: EPERM, for every call and whatever `allow_syscalls` says
/// (it names a syscall, not these options). No effect declares a group.
pub(super) fn group_join_rules() -> Vec<Rule> {
    GROUP_JOINS
        .iter()
        .map(|&(level, name)| Rule {
            name: "setsockopt",
            nr: libc::SYS_setsockopt,
            action: EPERM,
            when: vec![int_eq(1, level), int_eq(2, name)],
        })
        .collect()
}

/// socket(2): AF_UNIX only with the `unix` effect, or, in a network namespace of the call's own
/// (`own_network`), of type SOCK_STREAM or SOCK_SEQPACKET, whose connects guardd makes for it
/// (`sandbox::writes::unix`; a datagram socket's sendto reaches any path with no connect);
/// AF_INET/AF_INET6 only with connect effects and then of type SOCK_STREAM or SOCK_DGRAM. Never
/// AF_PACKET, AF_NETLINK or SOCK_RAW.
/// socketpair(2) of datagram sockets (SOCK_DGRAM, and SOCK_RAW, which AF_UNIX makes a datagram
/// socket) needs the `unix` effect too: sendto(2) on one reaches any pathname datagram socket
/// (syslog, journald). Each rule below matches a denied case.
pub(super) fn socket_rules(may_connect: bool, may_unix: bool, own_network: bool) -> Vec<Rule> {
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
    if may_unix || own_network {
        families.push(libc::AF_UNIX);
    }
    if may_connect {
        families.extend([libc::AF_INET, libc::AF_INET6]);
    }
    let mut rules = vec![rule(
        libc::SYS_socket,
        families.iter().map(|&f| int_ne(0, f)).collect(),
    )];
    let type_is = |mask: u64, ty: u64| Cond {
        arg: 1,
        dword: true,
        op: Op::MaskedEq(mask),
        value: ty,
    };
    if may_connect {
        for family in [libc::AF_INET, libc::AF_INET6] {
            for &(mask, ty) in NOT_STREAM_OR_DGRAM {
                rules.push(rule(
                    libc::SYS_socket,
                    vec![int_eq(0, family), type_is(mask, ty)],
                ));
            }
        }
    }
    if !may_unix {
        // Types 2 and 3: AF_UNIX makes a SOCK_RAW socket a SOCK_DGRAM one (unix_create).
        let datagram = || type_is(SOCK_TYPE_MASK & !1, libc::SOCK_DGRAM as u64);
        rules.push(rule(libc::SYS_socketpair, vec![datagram()]));
        if own_network {
            rules.push(rule(
                libc::SYS_socket,
                vec![int_eq(0, libc::AF_UNIX), datagram()],
            ));
        }
    }
    // A pair of any other family reaches that family's code (and, on a kernel with modules, the
    // loading of its module), which socket(2)'s rules keep from a call.
    rules.push(rule(libc::SYS_socketpair, vec![int_ne(0, libc::AF_UNIX)]));
    rules
}

/// setsockopt(2) of [`RECVERR`]: answered 0, and the option is not set (`SECCOMP_RET_ERRNO` with
/// errno 0 skips the syscall). Not EPERM: glibc's resolver asks for IP_RECVERR or IPV6_RECVERR on
/// every DNS socket and gives the lookup up when it is refused, so no call could resolve a name;
/// without the option it still learns of a refused query, from the connected socket's error.
/// For every call, whatever its effects (a socket may come with its stdio), and not lifted by
/// `allow_syscalls = ["setsockopt"]`, which names a syscall, not these options: nothing from
/// anyone but an approved destination reaches a call, whatever its policy.
pub(super) fn error_queue_rules() -> Vec<Rule> {
    RECVERR
        .iter()
        .map(|&(level, name)| Rule {
            name: "setsockopt",
            nr: libc::SYS_setsockopt,
            action: Action::Errno(0),
            when: vec![int_eq(1, level), int_eq(2, name)],
        })
        .collect()
}
