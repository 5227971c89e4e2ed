//! What the child execs, made before the clone: the program, argv, environment and working
//! directory as C strings with the pointer arrays `execve` takes, and the seccomp programs in
//! the form seccomp(2) takes. Nothing here runs in the child.

use std::{ffi::CString, os::unix::ffi::OsStrExt as _, path::Path};

use super::SandboxError;
use crate::{call::plan::LaunchPlan, sandbox::seccomp::BpfProgram};

/// The clean environment every tool starts with, before `confinement.env`.
const BASE_ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/bin:/bin"),
    ("LANG", "C.UTF-8"),
    ("HOME", "/nonexistent"),
];

fn cstring(bytes: &[u8], what: &'static str) -> Result<CString, SandboxError> {
    CString::new(bytes).map_err(|_| SandboxError::Nul { what })
}

/// The clean environment of `plan`, run as `user`: [`BASE_ENV`] with `USER` and `LOGNAME`
/// (scripts and tools that ask who they are: git's and ssh's defaults, `whoami`-less shells),
/// overridden or extended by `confinement.env`.
pub(super) fn environment(plan: &LaunchPlan, user: &str) -> Result<Vec<CString>, SandboxError> {
    let mut vars: Vec<(String, String)> = BASE_ENV
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .chain(["USER", "LOGNAME"].map(|k| (k.to_owned(), user.to_owned())))
        .collect();
    for (k, v) in &plan.confinement.env {
        if k.is_empty() || k.contains('=') {
            return Err(SandboxError::EnvName(k.clone()));
        }
        vars.retain(|(name, _)| name != k);
        vars.push((k.clone(), v.clone()));
    }
    vars.iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes(), "environment"))
        .collect()
}

/// The program, argv, environment and working directory as C strings, with the NULL-terminated
/// pointer arrays `execve` takes. The pointers point into the `CString`s' own heap buffers, which
/// stay where they are when this struct moves.
pub(super) struct Command {
    pub(super) program: CString,
    pub(super) cwd: CString,
    pub(super) argv: Vec<*const libc::c_char>,
    pub(super) envp: Vec<*const libc::c_char>,
    /// The strings `argv` and `envp` point into.
    _strings: [Vec<CString>; 2],
}

// SAFETY: the raw pointers point into the heap buffers of the `CString`s this struct owns, which
// move with it to another thread and are freed only when it is dropped; nothing else holds them.
unsafe impl Send for Command {}

impl Command {
    /// Checks argv[0] is an absolute path and that no string holds a NUL; `user` is whom it
    /// runs as.
    pub(super) fn new(plan: &LaunchPlan, user: &str) -> Result<Self, SandboxError> {
        let program_path = plan.argv.first().ok_or(SandboxError::EmptyArgv)?;
        if !Path::new(program_path).is_absolute() {
            return Err(SandboxError::RelativeProgram(program_path.into()));
        }
        let program = cstring(program_path.as_bytes(), "argv")?;
        let argv_c: Vec<CString> = plan
            .argv
            .iter()
            .map(|a| cstring(a.as_bytes(), "argv"))
            .collect::<Result<_, _>>()?;
        let env_c = environment(plan, user)?;
        let cwd_path = plan.confinement.cwd.as_deref().unwrap_or(Path::new("/"));
        let cwd = cstring(cwd_path.as_os_str().as_bytes(), "cwd")?;
        Ok(Self {
            program,
            cwd,
            argv: null_terminated(&argv_c),
            envp: null_terminated(&env_c),
            _strings: [argv_c, env_c],
        })
    }
}

/// The pointers of `strings` followed by a NULL, as argv and envp are passed.
fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain([std::ptr::null()])
        .collect()
}

/// The compiled programs in the form seccomp(2) takes; they point into `programs`.
pub(super) fn sock_fprogs(programs: &[BpfProgram]) -> Vec<libc::sock_fprog> {
    programs
        .iter()
        .map(|p| libc::sock_fprog {
            // A table's program is a few hundred instructions at most (BPF_MAXINSNS is 4096).
            len: p.len() as u16,
            // `Insn` is #[repr(C)] with the kernel's layout, as libc's sock_filter is.
            filter: p.as_ptr() as *mut libc::sock_filter,
        })
        .collect()
}
