//! The launch's preparation: the strings of its exec, and the user it runs as.

use super::{command::environment, *};
use crate::call::plan::{Confinement, Effects};

fn plan() -> LaunchPlan {
    LaunchPlan {
        tool: "t".into(),
        argv: vec!["/bin/true".into()],
        effects: Effects::default(),
        confinement: Confinement::default(),
        enforce: Default::default(),
    }
}

#[test]
fn environment_is_clean_and_extended() {
    let mut p = plan();
    p.confinement.env = vec![("LANG".into(), "C".into()), ("X".into(), "1".into())];
    let env: Vec<String> = environment(&p, "dev")
        .expect("env")
        .into_iter()
        .map(|c| c.into_string().expect("utf8"))
        .collect();
    assert_eq!(
        env,
        [
            "PATH=/usr/bin:/bin",
            "HOME=/nonexistent",
            "USER=dev",
            "LOGNAME=dev",
            "LANG=C",
            "X=1"
        ]
    );
    p.confinement.env = vec![("A=B".into(), "1".into())];
    assert!(matches!(
        environment(&p, "dev"),
        Err(SandboxError::EnvName(_))
    ));
}

#[test]
fn root_only_when_named() {
    let mut p = plan();
    let mut opts = LaunchOptions {
        default_user: "root".into(),
        limits: LimitsMode::CgroupV2,
        ..LaunchOptions::default()
    };
    assert!(matches!(
        resolve_user(&p, &opts),
        Err(SandboxError::ImplicitRoot(_))
    ));
    p.confinement.run_as = Some("root".into());
    assert_eq!(resolve_user(&p, &opts).expect("root").uid.as_raw(), 0);
    // RLIMIT_NPROC does not bind uid 0: under rlimits alone, no root call.
    opts.limits = LimitsMode::Rlimit;
    assert!(matches!(
        resolve_user(&p, &opts),
        Err(SandboxError::RootUnlimited)
    ));
    p.confinement.run_as = Some("no-such-user-here".into());
    assert!(matches!(
        resolve_user(&p, &opts),
        Err(SandboxError::UnknownUser(_))
    ));
}
