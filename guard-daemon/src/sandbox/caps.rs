//! A root tool's capabilities: none but those its policy names (`capabilities`).
//!
//! A tool run as root (`run_as = "root"`) runs as uid 0 for what it owns, not with root's
//! privileges. Its capabilities would reach past every other layer: `CAP_SYS_RESOURCE` raises
//! the call's hard limits, `CAP_NET_ADMIN` reconfigures the host's network (a call shares its
//! network namespace), `CAP_SYS_ADMIN` renames the host, `CAP_SYS_TIME` sets its clock,
//! `CAP_SETUID` makes the tool any user. So the child empties its bounding set but for the
//! kept ones (an exec as uid 0 gets the bounding set, whatever its files say) and its own sets
//! to those, before the rest of its confinement runs with them. A tool run as another user has
//! none already: its setuid cleared them, and no_new_privs keeps exec from adding any.

/// The kernel's capabilities by number (`capabilities(7)`, `linux/capability.h`), as policies
/// name them.
const NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The number of the capability `name` (`CAP_NET_BIND_SERVICE`, …).
pub fn number(name: &str) -> Option<u32> {
    NAMES.iter().position(|c| *c == name).map(|n| n as u32)
}

/// The set named by `names`, or the first name that is no capability.
pub fn set<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<u64, &'a str> {
    names
        .into_iter()
        .try_fold(0u64, |set, name| Ok(set | 1 << number(name).ok_or(name)?))
}

/// The names in `set`, in the kernel's order.
pub fn names(set: u64) -> Vec<String> {
    NAMES
        .iter()
        .enumerate()
        .filter(|(n, _)| set & 1 << n != 0)
        .map(|(_, c)| (*c).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_kernel_s_numbers() {
        assert_eq!(set(["CAP_CHOWN"]), Ok(1));
        assert_eq!(set(["CAP_NET_BIND_SERVICE"]), Ok(1 << 10));
        assert_eq!(set(["CAP_SYS_ADMIN"]), Ok(1 << 21));
        assert_eq!(set(["CAP_SYS_RESOURCE"]), Ok(1 << 24));
        assert_eq!(set(["CAP_CHECKPOINT_RESTORE"]), Ok(1 << 40));
        assert_eq!(set([]), Ok(0));
        assert_eq!(
            names(1 << 10 | 1 << 24),
            ["CAP_NET_BIND_SERVICE", "CAP_SYS_RESOURCE"]
        );
    }

    #[test]
    fn an_unknown_or_lowercase_name_is_named() {
        assert_eq!(set(["CAP_CHOWN", "net_admin"]), Err("net_admin"));
        assert_eq!(set(["CAP_FLY"]), Err("CAP_FLY"));
    }
}
