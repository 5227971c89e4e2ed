//! The static part of a tool's confinement, as its policy writes it: the user it runs as, its
//! limits, its syscall lists and the capabilities a root tool keeps.

use std::time::Duration;

use crate::{
    call::plan::{Confinement, RUN_AS_OWNER},
    policy::{
        parse::valid_account_name,
        raw::RawTool,
        source::{Diag, S},
    },
    sandbox::caps,
};

/// The static part of the tool's confinement: user, limits, syscall lists, capabilities.
pub(super) fn confinement(d: &mut Diag, tk: &str, t: &RawTool) -> Confinement {
    let mut conf = Confinement::default();
    if let Some(r) = &t.run_as {
        if valid_account_name(&r.v) || r.v == RUN_AS_OWNER {
            conf.run_as = Some(r.v.clone());
        } else {
            d.err(
                &r.at,
                &format!("{tk}.run_as"),
                format!("'{}' is not a valid user name", r.v),
            );
        }
    }
    if let Some(s) = &t.timeout {
        if (1..=86_400).contains(&s.v) {
            conf.timeout = Duration::from_secs(s.v as u64);
        } else {
            d.err(
                &s.at,
                &format!("{tk}.timeout"),
                "timeout is 1 to 86400 seconds",
            );
        }
    }
    conf.memory_max = t.memory;
    if let Some(p) = &t.pids {
        if p.v > 0 {
            conf.pids_max = Some(p.v as u64);
        } else {
            d.err(&p.at, &format!("{tk}.limits.pids"), "must be positive");
        }
    }
    syscall_names(d, tk, &t.syscalls, "syscalls");
    syscall_names(d, tk, &t.allow_syscalls, "allow_syscalls");
    conf.syscalls = t.syscalls.iter().map(|s| s.v.clone()).collect();
    conf.allow_syscalls = t.allow_syscalls.iter().map(|s| s.v.clone()).collect();
    let mut keep = 0;
    for s in &t.capabilities {
        match caps::number(&s.v) {
            Some(n) => keep |= 1 << n,
            None => d.err(
                &s.at,
                &format!("{tk}.capabilities"),
                format!(
                    "'{}' is not a capability (capabilities(7) names, as CAP_CHOWN)",
                    s.v
                ),
            ),
        }
    }
    conf.capabilities = caps::names(keep);
    conf
}

/// Syscall names as the kernel's tables spell them; anything else cannot name a syscall.
fn syscall_names(d: &mut Diag, tk: &str, list: &[S<String>], name: &str) {
    for s in list {
        if s.v.is_empty()
            || !s
                .v
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            d.err(
                &s.at,
                &format!("{tk}.{name}"),
                format!("'{}' is not a syscall name", s.v),
            );
        }
    }
}
