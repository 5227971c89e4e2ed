//! What an approved call will run and may do: the hand-off from `policy` to `sandbox` and
//! `monitor`. Every path and destination here is already templated from the call's arguments.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

/// Everything needed to launch one approved call and hold it to what was approved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchPlan {
    /// The tool's name in the policy.
    pub tool: String,
    /// argv, `argv[0]` the absolute path of the program; no shell is involved.
    #[serde(with = "os_strings")]
    pub argv: Vec<OsString>,
    /// What the call may do.
    pub effects: Effects,
    /// How it is confined.
    pub confinement: Confinement,
    /// Whether what it does outside its effects is refused or only observed (`enforce`).
    #[serde(default, skip_serializing_if = "Enforce::enforced")]
    pub enforce: Enforce,
}

/// The effects an approved call may have; anything else is denied and reported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Effects {
    /// Paths (files or directory trees) the call may read.
    pub read: Vec<PathBuf>,
    /// Paths (files or directory trees) the call may write, create or remove within.
    pub write: Vec<PathBuf>,
    /// Programs the call may execute besides `argv[0]`.
    pub exec: Vec<PathBuf>,
    /// Destinations the call may connect to.
    pub connect: Vec<Endpoint>,
    /// Whether the call may create AF_UNIX sockets, and so connect to any pathname Unix socket
    /// its user can reach: no kernel layer on this host can tell one socket path from another.
    pub unix: bool,
    /// What happens when the call does something it did not declare.
    pub on_divergence: OnDivergence,
    /// (path, root) for each effect path that came from a path argument with `within`: the
    /// launch opens the path beneath its root (`openat2` with `RESOLVE_BENEATH`) and grants the
    /// inode it finds, so a path re-pointed after the decision (a symlink swapped in) leads
    /// nowhere the call may go.
    #[serde(skip)]
    pub beneath: Vec<(PathBuf, PathBuf)>,
    /// The names kept read-only beneath each directory the call may write (`[workspaces]
    /// protected`); `None`: the default list (`sandbox::protected::NAMES`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected: Option<Vec<String>>,
}

/// A network destination by name or address, and port.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// A host name or an IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// A literal `host:port` (`[v6]:port` too), the host lowercased as urls are compared.
    pub fn literal(s: &str) -> Option<Self> {
        let (h, p) = s.rsplit_once(':')?;
        let h = h.trim_start_matches('[').trim_end_matches(']');
        match p.parse::<u16>() {
            Ok(port) if !h.is_empty() && port != 0 => Some(Endpoint {
                host: h.to_ascii_lowercase(),
                port,
            }),
            _ => None,
        }
    }
}

/// The response to an effect the call did not declare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDivergence {
    /// Deny the operation and kill the call's whole process tree.
    #[default]
    Kill,
    /// Deny the operation and let the call go on.
    Deny,
}

/// Whether a tool's calls are held to their effects, or run in shadow (`enforce`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforce {
    /// What the policy blocks does not run; what a call does outside its effects is refused.
    #[default]
    Enforce,
    /// A dry run: what the policy would block runs and is recorded (`would_block`); what the
    /// call does outside its effects is let through by the kernel layers and reported as what
    /// enforcing would have done. landlock and the mount view are off; the call still runs as
    /// its user, in its cgroup and namespaces, under the seccomp deny-list.
    Shadow,
}

impl LaunchPlan {
    /// Whether the call gets a network namespace of its own, with loopback only: when it may
    /// connect nowhere (no connect effect, no `unix`) and is enforced (a call in shadow shares
    /// the host's, where its attempts and its names are seen).
    pub fn own_network(&self) -> bool {
        self.effects.connect.is_empty() && !self.effects.unix && self.enforce == Enforce::Enforce
    }
}

impl Enforce {
    /// Whether this is the default, enforcing mode.
    pub fn enforced(&self) -> bool {
        *self == Enforce::Enforce
    }

    /// As in the policy and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforce::Enforce => "enforce",
            Enforce::Shadow => "shadow",
        }
    }
}

/// `run_as` for a call that runs as the owner of its workspace: the decision puts the owner's
/// name in its place, so no plan that launches carries it.
pub const RUN_AS_OWNER: &str = "owner";

/// Who the call runs as and with what limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Confinement {
    /// User name to run as; `None` means the guard's dedicated unprivileged user.
    pub run_as: Option<String>,
    /// Wall-clock limit; the call's cgroup is killed when it runs out.
    #[serde(with = "secs")]
    pub timeout: Duration,
    /// Memory limit in bytes.
    pub memory_max: Option<u64>,
    /// Limit on the number of tasks in the call.
    pub pids_max: Option<u64>,
    /// Syscall names to allow on top of the default seccomp filter's allow-set.
    pub allow_syscalls: Vec<String>,
    /// The capabilities a tool run as root keeps (`CAP_…`); it has no others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// When non-empty: strict mode, any syscall outside this set kills the call.
    pub syscalls: Vec<String>,
    /// Extra environment (name, value) on top of the minimal clean environment.
    pub env: Vec<(String, String)>,
    /// Variables whose values name secrets (`{secret:NAME}`), as the policy wrote them: the
    /// values are put in at launch, so a plan (held, shown, recorded) never holds one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<(String, String)>,
    /// Working directory of the tool.
    pub cwd: Option<PathBuf>,
    /// What the tool reads on its stdin.
    #[serde(default, skip_serializing_if = "Stdin::is_passed")]
    pub stdin: Stdin,
    /// The call's own temporary directory (`tmp = true`), made for it at launch, removed at
    /// its end; also among its write effects and its `TMPDIR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<PathBuf>,
}

/// What a call's stdin is: the policy's `stdin` key, with the call's input when it has one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stdin {
    /// The caller's stdin descriptor, passed as it came; the tool needs no input (`stdin` not
    /// given in the policy).
    #[default]
    Passed,
    /// The caller's stdin stream, which the tool reads (`stdin = "caller"`): a caller with no
    /// stream to give (`"stdin": "none"` in its `exec`) is refused.
    Caller,
    /// This input, which guardd writes to a pipe of its own that is the tool's stdin
    /// (`stdin = { arg = "NAME" }`: the argument's value); the caller's descriptor is not given.
    Input(String),
    /// The caller's stream as guardd read it when the call was held for a human (`stdin =
    /// "caller"`, escalated or quarantined): what was approved is what the tool reads, written
    /// as an `Input` is, whatever the caller's stream holds when the call runs.
    Held(#[serde(with = "super::hash::hex_bytes")] Vec<u8>),
}

impl Stdin {
    /// The default: nothing to say in a serialised plan (which keeps the digests of plans held
    /// before this field existed).
    pub fn is_passed(&self) -> bool {
        *self == Stdin::Passed
    }
}

impl Confinement {
    /// The secrets the call is given, each once, in order.
    pub fn secrets(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (_, v) in &self.secret_env {
            for n in secret_names(v).unwrap_or_default() {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }

    /// Whether `allow_syscalls` takes the syscall `name` out of the seccomp deny rules.
    pub fn allows_syscall(&self, name: &str) -> bool {
        self.allow_syscalls.iter().any(|a| a == name)
    }
}

impl Default for Confinement {
    fn default() -> Self {
        Self {
            run_as: None,
            timeout: Duration::from_secs(60),
            memory_max: None,
            pids_max: Some(256),
            allow_syscalls: Vec::new(),
            capabilities: Vec::new(),
            syscalls: Vec::new(),
            env: Vec::new(),
            secret_env: Vec::new(),
            cwd: None,
            tmp: None,
            stdin: Stdin::Passed,
        }
    }
}

/// argv as strings (lossy: a reader sees what the audit row shows).
mod os_strings {
    use std::ffi::OsString;

    use serde::Deserialize as _;

    pub fn serialize<S: serde::Serializer>(argv: &[OsString], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(argv.iter().map(|a| a.to_string_lossy()))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<OsString>, D::Error> {
        Ok(Vec::<String>::deserialize(d)?
            .into_iter()
            .map(OsString::from)
            .collect())
    }
}

/// A duration as fractional seconds.
pub(crate) mod secs {
    use std::time::Duration;

    use serde::Deserialize as _;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// How a plan's environment names a secret, put in at launch: `{secret:NAME}`.
pub const SECRET_OPEN: &str = "{secret:";

/// The secrets `text` names (`{secret:NAME}`), in order; `Err` for an unclosed or empty one.
pub fn secret_names(text: &str) -> Result<Vec<&str>, &'static str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(SECRET_OPEN) {
        let after = &rest[i + SECRET_OPEN.len()..];
        let end = after.find('}').ok_or("an unclosed {secret:NAME}")?;
        let name = &after[..end];
        if name.is_empty() || name.contains(['{', ':']) {
            return Err("a malformed {secret:NAME}");
        }
        out.push(name);
        rest = &after[end + 1..];
    }
    Ok(out)
}
