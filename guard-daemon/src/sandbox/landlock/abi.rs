//! What each landlock ABI adds, what a kernel without it loses, and what stands in for it.
//!
//! guard runs on every ABI from 1 (Linux 5.13) with the rights that ABI has: the ruleset is
//! created best effort (`ruleset::prepare`), so a right the kernel lacks is not handled, and
//! [`MISSING`] says, per right, what that means for a call. A right whose loss a substitute
//! covers (the kernel programs for TCP, seccomp and the mount view for truncation, the pid and
//! network namespaces for scopes) costs nothing but a line at start; where no substitute holds
//! for a launch (a directory opened up for a new file on an ABI without TRUNCATE) the launch is
//! refused ([`admit`]), naming the tool and the ABI. Nothing is silently weaker.

use std::path::Path;

use super::{LandlockError, LandlockRules};

/// The first ABI with REFER (Linux 5.19): before it, landlock refuses every rename or link
/// into another directory.
pub const REFER: i32 = 2;
/// The first ABI with TRUNCATE (Linux 6.2).
pub const TRUNCATE: i32 = 3;
/// The first ABI with TCP bind and connect rules (Linux 6.7).
pub const TCP: i32 = 4;
/// The first ABI with IOCTL_DEV (Linux 6.10).
pub const IOCTL_DEV: i32 = 5;
/// The first ABI with scopes: abstract Unix sockets and signals (Linux 6.12).
pub const SCOPES: i32 = 6;

/// A right a kernel's ABI lacks, and what a call loses or keeps without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Missing {
    /// The right's name, as landlock's documentation spells it.
    pub right: &'static str,
    /// The ABI that brought it.
    pub since: i32,
    /// What a call is without it, and what stands in.
    pub meaning: &'static str,
}

/// Every right guard uses that an older ABI lacks, oldest first.
pub const MISSING: &[Missing] = &[
    Missing {
        right: "REFER",
        since: REFER,
        meaning: "renames and links into another directory are refused (EXDEV) even within a \
                  call's write effects: stricter, not weaker (`mv` falls back to copy and delete)",
    },
    Missing {
        right: "TRUNCATE",
        since: TRUNCATE,
        meaning: "landlock does not confine truncation: seccomp still refuses truncate(2), \
                  O_TRUNC on a read-only open and openat2, and the mount view keeps what a call \
                  may not change read-only; a call whose write target does not exist yet (its \
                  directory opened up for it) is refused, as nothing would keep it from \
                  truncating that directory's other files",
    },
    Missing {
        right: "TCP",
        since: TCP,
        meaning: "no TCP rules in landlock: a call's connects and binds are judged by the \
                  kernel programs (cgroup sock_addr), as they are on every kernel for a watched \
                  call; a call they do not watch (--allow-unenforced without them) is refused",
    },
    Missing {
        right: "IOCTL_DEV",
        since: IOCTL_DEV,
        meaning: "landlock does not confine ioctls on device files; a call opens no device \
                  but /dev/null and /dev/urandom (and a terminal it was handed)",
    },
    Missing {
        right: "scopes",
        since: SCOPES,
        meaning: "no landlock scopes: signals to processes outside the call are kept off by \
                  its pid namespace, abstract Unix sockets by its network namespace or \
                  seccomp's refusal of Unix sockets",
    },
];

/// The rights `abi` lacks, oldest first; none at ABI 6 and later.
pub fn missing(abi: i32) -> Vec<Missing> {
    MISSING.iter().filter(|m| abi < m.since).copied().collect()
}

/// One line for the start-up layer: the ABI and the rights it lacks.
pub fn describe(abi: i32) -> String {
    let lacks: Vec<String> = missing(abi)
        .iter()
        .map(|m| format!("{} (ABI {})", m.right, m.since))
        .collect();
    if lacks.is_empty() {
        format!("ABI {abi}")
    } else {
        format!("ABI {abi}, without {}", lacks.join(", "))
    }
}

/// Whether a launch's landlock ruleset is enforced, decided before anything is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Enforce the rules with the rights `abi` has.
    Enforce,
    /// Launch without landlock: the kernel has none and the operator opted out.
    Without,
}

/// Whether `rules` can be enforced on a kernel of landlock `abi` (a negative errno when it has
/// none), or launched without landlock when `allow_without` (the operator's
/// `--allow-unenforced`). Refuses, naming the tool and the ABI, a launch that needs a right
/// the kernel lacks and nothing else covers.
pub fn admit(abi: i32, rules: &LandlockRules, allow_without: bool) -> Result<Admit, LandlockError> {
    if abi < 1 {
        return if allow_without {
            Ok(Admit::Without)
        } else {
            Err(LandlockError::Unavailable { abi })
        };
    }
    if allow_without {
        return Ok(Admit::Enforce);
    }
    if abi < TCP && !rules.kernel_judges {
        return Err(LandlockError::Lacks {
            tool: rules.tool.clone(),
            abi,
            right: "TCP",
            why: "the kernel programs do not watch this call, and landlock cannot confine its \
                  connects"
                .into(),
        });
    }
    if abi < TRUNCATE
        && let Some((target, dir)) = rules.widened.first()
    {
        return Err(LandlockError::Lacks {
            tool: rules.tool.clone(),
            abi,
            right: "TRUNCATE",
            why: widened_why(target, dir),
        });
    }
    Ok(Admit::Enforce)
}

fn widened_why(target: &Path, dir: &Path) -> String {
    format!(
        "{} does not exist, so {} would be opened up for it, and without TRUNCATE nothing keeps \
         the call from truncating the other files there; create it first, or run on Linux 6.2 \
         or later",
        target.display(),
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(kernel_judges: bool, widened: bool) -> LandlockRules {
        LandlockRules {
            tool: "fmt".into(),
            kernel_judges,
            widened: if widened {
                vec![("/w/new".into(), "/w".into())]
            } else {
                Vec::new()
            },
            ..LandlockRules::default()
        }
    }

    #[test]
    fn each_abi_lacks_exactly_the_rights_of_later_abis() {
        let names = |abi| missing(abi).iter().map(|m| m.right).collect::<Vec<_>>();
        assert_eq!(
            names(1),
            ["REFER", "TRUNCATE", "TCP", "IOCTL_DEV", "scopes"]
        );
        assert_eq!(names(2), ["TRUNCATE", "TCP", "IOCTL_DEV", "scopes"]);
        assert_eq!(names(3), ["TCP", "IOCTL_DEV", "scopes"]);
        assert_eq!(names(5), ["scopes"]);
        assert!(names(6).is_empty() && names(7).is_empty());
        assert_eq!(describe(7), "ABI 7");
        assert_eq!(
            describe(3),
            "ABI 3, without TCP (ABI 4), IOCTL_DEV (ABI 5), scopes (ABI 6)"
        );
    }

    #[test]
    fn a_watched_call_runs_on_abi_1_to_3_with_what_the_kernel_has() {
        for abi in 1..=7 {
            assert_eq!(
                admit(abi, &rules(true, false), false).unwrap(),
                Admit::Enforce
            );
        }
    }

    #[test]
    fn no_landlock_is_refused_unless_the_operator_opted_out() {
        let e = admit(-38, &rules(true, false), false).unwrap_err();
        assert!(matches!(e, LandlockError::Unavailable { abi: -38 }), "{e}");
        assert_eq!(
            admit(-38, &rules(true, false), true).unwrap(),
            Admit::Without
        );
    }

    #[test]
    fn an_unwatched_call_needs_landlock_tcp_rules() {
        for abi in 1..TCP {
            let e = admit(abi, &rules(false, false), false)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("fmt") && e.contains(&format!("ABI {abi}")),
                "{e}"
            );
            assert!(e.contains("TCP"), "{e}");
        }
        assert_eq!(
            admit(TCP, &rules(false, false), false).unwrap(),
            Admit::Enforce
        );
    }

    #[test]
    fn a_widened_directory_needs_truncate_and_names_the_tool_the_target_and_the_kernel() {
        for abi in 1..TRUNCATE {
            let e = admit(abi, &rules(true, true), false)
                .unwrap_err()
                .to_string();
            assert!(e.contains("tool fmt"), "{e}");
            assert!(e.contains("ABI 2") || e.contains("ABI 1"), "{e}");
            assert!(e.contains("TRUNCATE") && e.contains("/w/new"), "{e}");
        }
        assert_eq!(
            admit(TRUNCATE, &rules(true, true), false).unwrap(),
            Admit::Enforce
        );
    }
}
