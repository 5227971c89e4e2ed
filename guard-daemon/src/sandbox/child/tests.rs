//! The child's steps against a recording double: their order, and a launch that stops at the
//! first step that fails.

use std::ptr;

use super::*;
use crate::sandbox::landlock::{self, LandlockRules};

#[test]
fn stages_match_the_enum() {
    assert_eq!(STAGES.len(), Stage::Exec as usize + 1);
    assert_eq!(STAGES[Stage::Landlock as usize], "landlock");
    assert_eq!(STAGES[Stage::Seccomp as usize], "seccomp");
    assert_eq!(STAGES[Stage::Cgroup as usize], "cgroup");
}

/// Records each step it is asked for, and fails the one named, as the kernel would refuse it.
#[derive(Default)]
struct Recorder {
    done: Vec<Stage>,
    fail_at: Option<Stage>,
}

impl Recorder {
    fn step(&mut self, stage: Stage) -> Result<(), Failed> {
        self.done.push(stage);
        match self.fail_at {
            Some(s) if s == stage => Err(Failed {
                stage,
                errno: libc::EPERM,
            }),
            _ => Ok(()),
        }
    }
}

impl Steps for Recorder {
    fn join_cgroup(&mut self, _: RawFd) -> Result<(), Failed> {
        self.step(Stage::Cgroup)
    }
    fn join_limit_cgroups(&mut self, procs: &[RawFd]) -> Result<(), Failed> {
        procs
            .iter()
            .try_for_each(|_| self.step(Stage::LimitsCgroup))
    }
    fn mounts(&mut self, _: &ChildCtx) -> Result<(), Failed> {
        self.step(Stage::Mounts)
    }
    fn loopback(&mut self) -> Result<(), Failed> {
        self.step(Stage::Loopback)
    }
    fn new_session(&mut self) -> Result<(), Failed> {
        self.step(Stage::Setsid)
    }
    fn stdio(&mut self, _: [RawFd; 3]) -> Result<(), Failed> {
        self.step(Stage::Stdio)
    }
    fn close_fds_at_exec(&mut self) -> Result<(), Failed> {
        self.step(Stage::CloseFds)
    }
    fn reset_signals(&mut self) -> Result<(), Failed> {
        self.step(Stage::Signals)
    }
    fn set_rlimits(&mut self, _: &Rlimits) -> Result<(), Failed> {
        self.step(Stage::Rlimit)
    }
    fn setgroups(&mut self) -> Result<(), Failed> {
        self.step(Stage::Setgroups)
    }
    fn setgid(&mut self, _: libc::gid_t) -> Result<(), Failed> {
        self.step(Stage::Setgid)
    }
    fn setuid(&mut self, _: libc::uid_t) -> Result<(), Failed> {
        self.step(Stage::Setuid)
    }
    fn keep_capabilities(&mut self, _: u64) -> Result<(), Failed> {
        self.step(Stage::Capabilities)
    }
    fn no_new_privs(&mut self) -> Result<(), Failed> {
        self.step(Stage::NoNewPrivs)
    }
    fn die_with_parent(&mut self, _: RawFd) -> Result<(), Failed> {
        self.step(Stage::Pdeathsig)
    }
    fn chdir(&mut self, _: &CStr) -> Result<(), Failed> {
        self.step(Stage::Cwd)
    }
    fn landlock(
        &mut self,
        _: &landlock::Prepared,
        _: &CStr,
        _: bool,
        _: Option<landlock::Access>,
    ) -> Result<(), Failed> {
        self.step(Stage::Landlock)
    }
    fn watch_writes(&mut self, _: &libc::sock_fprog, _: RawFd) -> Result<(), Failed> {
        self.step(Stage::Listener)
    }
    fn install_seccomp(&mut self, _: &[libc::sock_fprog]) -> Result<(), Failed> {
        self.step(Stage::Seccomp)
    }
    fn await_decision(
        &mut self,
        _: &std::sync::atomic::AtomicU32,
        _: &libc::timespec,
    ) -> Result<(), Failed> {
        self.step(Stage::Decision)
    }
}

/// Confines a child described by `ctx`'s defaults (one limit cgroup, a write watch when
/// `watched`, a decision row still being written; run as root, keeping no capability, when
/// `root`) with `steps`.
fn confine_with(
    steps: &mut Recorder,
    in_cgroup: bool,
    watched: bool,
    root: bool,
) -> Result<(), Failed> {
    let gate = std::sync::atomic::AtomicU32::new(0);
    // Disabled where the kernel has no landlock; never applied here either way.
    let prepared = landlock::prepare(&LandlockRules::default(), true).expect("prepared");
    let null: [*const libc::c_char; 1] = [ptr::null()];
    let filter = libc::sock_fprog {
        len: 0,
        filter: ptr::null_mut(),
    };
    let ctx = ChildCtx {
        parent: -1,
        report: -1,
        cgroup_dir: -1,
        cgroup_procs: -1,
        limit_procs: vec![-1],
        stdio: [0, 1, 2],
        rlimits: Rlimits::default(),
        uid: if root { 0 } else { 65534 },
        gid: if root { 0 } else { 65534 },
        capabilities: root.then_some(0),
        cwd: c"/",
        program: c"/bin/true",
        program_fd: None,
        argv: &null,
        envp: &null,
        landlock: &prepared,
        proc_self: c"/proc",
        own_network: true,
        tmp: None,
        filters: &[],
        watch: watched.then_some((&filter, -1)),
        writable: &[],
        protected: &[],
        view: true,
        decision: Some((
            &gate,
            libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        )),
    };
    confine(steps, &ctx, in_cgroup)
}

/// Every step but the exec, in [`STAGES`]' order.
fn all_steps() -> Vec<Stage> {
    let all = [
        Stage::Cgroup,
        Stage::LimitsCgroup,
        Stage::Mounts,
        Stage::Loopback,
        Stage::Setsid,
        Stage::Stdio,
        Stage::CloseFds,
        Stage::Signals,
        Stage::Rlimit,
        Stage::Setgroups,
        Stage::Setgid,
        Stage::Setuid,
        Stage::Capabilities,
        Stage::NoNewPrivs,
        Stage::Pdeathsig,
        Stage::Cwd,
        Stage::Landlock,
        Stage::Listener,
        Stage::Seccomp,
        Stage::Decision,
    ];
    for (i, s) in all.iter().enumerate() {
        assert_eq!(*s as usize, i, "{} out of STAGES' order", STAGES[i]);
    }
    all.to_vec()
}

#[test]
fn the_steps_run_in_the_order_each_relies_on() {
    let mut steps = Recorder::default();
    confine_with(&mut steps, false, true, true).expect("confined");
    assert_eq!(steps.done, all_steps());
    // Its loopback is brought up while it is still root, in the namespace it was cloned into.
    let at = |s: Stage| steps.done.iter().position(|d| *d == s);
    assert!(at(Stage::Loopback) < at(Stage::Setuid));
    // What the order is for, said outright: identity dropped before the parent-death signal
    // (setuid clears it), a root tool's capabilities before it enters its working directory
    // (with its own permissions), the filters after landlock, and the wait for the decision
    // row last before the exec, with the child dying with guardd by then.
    let at = |s: Stage| steps.done.iter().position(|&d| d == s).expect("ran");
    assert!(at(Stage::Setuid) < at(Stage::Pdeathsig));
    assert!(at(Stage::Capabilities) < at(Stage::Cwd));
    assert!(at(Stage::Setuid) < at(Stage::NoNewPrivs));
    assert!(at(Stage::Landlock) < at(Stage::Seccomp));
    assert!(at(Stage::Pdeathsig) < at(Stage::Decision));
    assert_eq!(steps.done.last(), Some(&Stage::Decision));
}

#[test]
fn a_step_that_fails_is_the_last_one_taken() {
    for stage in all_steps() {
        let mut steps = Recorder {
            fail_at: Some(stage),
            ..Recorder::default()
        };
        let failed =
            confine_with(&mut steps, false, true, true).expect_err("a failed step went on");
        assert_eq!(failed.stage, stage);
        assert_eq!(failed.errno, libc::EPERM);
        let expected: Vec<Stage> = all_steps()
            .into_iter()
            .take_while(|&s| s != stage)
            .collect();
        assert_eq!(
            steps.done[..steps.done.len() - 1],
            expected[..],
            "{}",
            STAGES[stage as usize]
        );
        assert_eq!(steps.done.last(), Some(&stage));
    }
}

#[test]
fn a_child_cloned_into_its_cgroup_does_not_join_it_again_and_an_unwatched_one_has_no_listener() {
    let mut steps = Recorder::default();
    confine_with(&mut steps, true, false, true).expect("confined");
    let expected: Vec<Stage> = all_steps()
        .into_iter()
        .filter(|&s| s != Stage::Cgroup && s != Stage::Listener)
        .collect();
    assert_eq!(steps.done, expected);
}

#[test]
fn only_a_root_tool_sheds_capabilities_a_setuid_left_it() {
    let mut steps = Recorder::default();
    confine_with(&mut steps, false, true, false).expect("confined");
    let expected: Vec<Stage> = all_steps()
        .into_iter()
        .filter(|&s| s != Stage::Capabilities)
        .collect();
    assert_eq!(steps.done, expected);
}
