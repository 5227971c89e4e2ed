//! `[secrets.NAME]`: credentials a tool needs and its caller must never hold. A secret's value
//! is read by guardd from where the service keeps credentials (systemd's `LoadCredential=`,
//! `$CREDENTIALS_DIRECTORY`) or from a root-only file, never from the policy's text; it reaches
//! a call only in the environment of a tool that names it (`env = { T = "{secret:NAME}" }`:
//! argv is readable by every local user), and such a tool may only connect to the secret's
//! `hosts`, touches no workspace and writes nothing (`confines` says why each), and never runs
//! as the caller's own user (whose other processes could read its environment). The plan of a call carries the placeholder, never
//! the value: it is put in at launch, so no row, event, receipt or held call can hold it.

use std::{
    io::Read as _,
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use super::{
    Tool,
    raw::{RawSecret, RawTool},
    source::{Diag, S},
    template::Elem,
};
use crate::call::plan::{Endpoint, RUN_AS_OWNER};

pub mod mask;

/// The shortest value guardd accepts: a shorter one would be masked wherever those few bytes
/// happen to appear in a tool's output, and is no credential worth the name.
pub const MIN_LEN: usize = 8;

/// The longest: a credential, not a file.
const MAX_LEN: u64 = 64 * 1024;

/// The placeholder's opening: `{secret:NAME}`.
use crate::call::plan::SECRET_OPEN as OPEN;
pub use crate::call::plan::secret_names as names;

/// One secret of the policy, its value read.
#[derive(Debug)]
pub struct Secret {
    pub name: String,
    /// The only destinations a tool given it may connect to.
    pub hosts: Vec<Endpoint>,
    /// Where the value was read from (`credential:NAME`, `file:/path`), for listings.
    pub source: String,
    pub value: Value,
}

/// A secret's bytes: never printed, wiped when dropped.
pub struct Value(Vec<u8>);

impl Value {
    /// The bytes, for the launch and the masks only.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference into the vector.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// `text` with each `{secret:NAME}` replaced by its value; `None` when one of them is not a
/// secret of `secrets` (a held call launched after a reload that removed it).
pub fn render(text: &str, secrets: &[Secret]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        out.extend_from_slice(&rest.as_bytes()[..i]);
        let after = &rest[i + OPEN.len()..];
        let end = after.find('}')?;
        let s = secrets.iter().find(|s| s.name == after[..end])?;
        out.extend_from_slice(s.value.bytes());
        rest = &after[end + 1..];
    }
    out.extend_from_slice(rest.as_bytes());
    Some(out)
}

/// `plan` as it is launched: its secrets' values in its environment. `None` for a plan that
/// names none; `Err` names a secret the policy in force no longer has.
pub fn rendered(
    plan: &crate::call::plan::LaunchPlan,
    secrets: &[Secret],
) -> Result<Option<crate::call::plan::LaunchPlan>, String> {
    if plan.confinement.secret_env.is_empty() {
        return Ok(None);
    }
    let mut out = plan.clone();
    for (k, template) in std::mem::take(&mut out.confinement.secret_env) {
        let value = render(&template, secrets)
            .and_then(|v| String::from_utf8(v).ok())
            .ok_or_else(|| format!("{k}: names a secret the policy in force does not have"))?;
        out.confinement.env.retain(|(name, _)| *name != k);
        out.confinement.env.push((k, value));
    }
    Ok(Some(out))
}

/// Whether an env value is a secret's template rather than a literal or an argument.
pub fn is_template(text: &str) -> bool {
    text.contains(OPEN)
}

/// The policy's secrets, each value read; every problem reported at its key.
pub(crate) fn secrets(d: &mut Diag, raw: &[RawSecret]) -> Vec<Secret> {
    let mut out: Vec<Secret> = Vec::new();
    for r in raw {
        let key = format!("secrets.{}", r.name.v);
        if out.iter().any(|s| s.name == r.name.v) {
            d.err(&r.name.at, &key, "this secret is already defined");
            continue;
        }
        if r.name.v.is_empty()
            || !r
                .name
                .v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            d.err(
                &r.name.at,
                &key,
                "secret names are letters, digits and _ - .",
            );
            continue;
        }
        if r.hosts.is_empty() {
            let msg = "a secret needs hosts = [\"host:port\", ...]: where it may be sent";
            d.err(&r.name.at, &format!("{key}.hosts"), msg);
        }
        let hosts = hosts(d, &key, &r.hosts);
        let Some(source) = &r.source else {
            let msg = "a secret needs source = \"credential:NAME\" or \"file:/path\"";
            d.err(&r.name.at, &key, msg);
            continue;
        };
        match read(&source.v) {
            Ok(value) => out.push(Secret {
                name: r.name.v.clone(),
                hosts,
                source: source.v.clone(),
                value,
            }),
            Err(e) => d.err(&source.at, &format!("{key}.source"), e),
        }
    }
    out
}

/// Warns, when the policy gives secrets, that the host's `/proc` shows every process's command
/// line to every user (no `hidepid`): a tool that passes a value to a program of its own on a
/// command line shows it to the agent, which no check of the policy's `command` can see.
pub fn warn_if_proc_shows_command_lines(secrets: &[Secret]) {
    if secrets.is_empty() {
        return;
    }
    // The mounts of pid 1's namespace: the /proc the host's users (the agent) look at.
    let Ok(mounts) = std::fs::read_to_string("/proc/1/mountinfo") else {
        return;
    };
    let hidden = mounts.lines().any(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let sep = fields.iter().position(|f| *f == "-");
        fields.get(4) == Some(&"/proc")
            && sep.is_some_and(|i| {
                fields.get(i + 1) == Some(&"proc")
                    && fields.get(i + 3).is_some_and(|o| {
                        o.split(',')
                            .any(|o| o.starts_with("hidepid=") && !o.ends_with("=0"))
                    })
            })
    });
    if !hidden {
        tracing::warn!(
            "the policy gives secrets, and this host's /proc shows every process's command line \
             to every user: a tool that passes a value on to a program's command line shows it \
             to the agent; mount /proc with hidepid=invisible"
        );
    }
}

/// `hosts`: literal `host:port`s, at least one.
fn hosts(d: &mut Diag, key: &str, raw: &[S<String>]) -> Vec<Endpoint> {
    let key = format!("{key}.hosts");
    raw.iter()
        .filter_map(|h| {
            let e = crate::call::plan::Endpoint::literal(&h.v);
            if e.is_none() {
                d.err(&h.at, &key, "expected \"host:port\"");
            }
            e
        })
        .collect()
}

/// The value `source` names.
fn read(source: &str) -> Result<Value, String> {
    let path = if let Some(name) = source.strip_prefix("credential:") {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(format!("credential name '{name}' is no file name"));
        }
        let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or(
            "$CREDENTIALS_DIRECTORY is not set: guardd runs outside a unit with \
             LoadCredential= (or use file:/path)",
        )?;
        PathBuf::from(dir).join(name)
    } else if let Some(path) = source.strip_prefix("file:") {
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(format!("{}: not an absolute path", path.display()));
        }
        path
    } else {
        return Err("source is \"credential:NAME\" or \"file:/path\"".into());
    };
    let bytes = read_private(&path, !source.starts_with("credential:"))?;
    let value = trim_newline(bytes);
    if value.len() < MIN_LEN {
        return Err(format!(
            "{}: the value is shorter than {MIN_LEN} bytes (it could not be told apart \
             from ordinary output to mask it)",
            path.display()
        ));
    }
    if value.contains(&0) || std::str::from_utf8(&value).is_err() {
        return Err(format!(
            "{}: the value is no text for an environment variable (a NUL byte, or not UTF-8)",
            path.display()
        ));
    }
    Ok(Value(value))
}

/// The file's bytes: a regular file reached without a final symlink; for a `file:` source
/// also owned by guardd's user and readable by no one else (systemd's credentials directory
/// is guardd's alone already, whatever the file's bits).
fn read_private(path: &Path, check_mode: bool) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("{shown}: not a regular file"));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if check_mode && meta.uid() != me {
        return Err(format!(
            "{shown}: owned by uid {}, not by guardd's user ({me})",
            meta.uid()
        ));
    }
    if check_mode && meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{shown}: mode {:o}: a secret's file is readable by its owner alone (0600 or 0400)",
            meta.mode() & 0o777
        ));
    }
    if meta.len() > MAX_LEN {
        return Err(format!("{shown}: larger than {MAX_LEN} bytes"));
    }
    let mut bytes = Vec::new();
    f.by_ref()
        .take(MAX_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: {e}"))?;
    Ok(bytes)
}

/// One final line end dropped, as a file written by `echo` or an editor has it.
fn trim_newline(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    bytes
}

/// Checks each tool that names a secret: the secret exists, and the tool can take it nowhere
/// else (see [`confines`]).
pub(crate) fn check_tools(d: &mut Diag, raw: &[RawTool], tools: &[Tool], secrets: &[Secret]) {
    for (r, t) in raw.iter().zip(tools) {
        for (k, v) in &r.env {
            let Ok(names) = names(&v.v) else { continue };
            let key = format!("tools.{}.env.{}", t.name, k.v);
            for name in names {
                match secrets.iter().find(|s| s.name == name) {
                    None => d.err(&v.at, &key, format!("no [secrets.{name}] in the policy")),
                    Some(s) => {
                        if let Err(why) = confines(t, s, &k.v) {
                            let msg =
                                format!("tool '{}' is given secret '{name}', but {why}", t.name);
                            d.err(&v.at, &key, msg);
                        }
                    }
                }
            }
        }
    }
}

/// Why `t`, given `s` in variable `var`, could carry it out of bounds or hand it to the agent,
/// if it could:
/// - it connects only to the secret's hosts, written literally, and has no Unix sockets;
/// - it neither reads, writes, runs nor works in a workspace, nor takes a path from its
///   arguments: the workspace is the agent's, so what a tool reads there (an interpreter's
///   modules, a `.npmrc`, a git config) may be the agent's code run with the value, and what it
///   writes there the agent reads;
/// - it writes nowhere at all: a file it writes outside is no channel guard can mask;
/// - its command does not expand the variable (`sh -c '... $TOKEN'` puts the value in a
///   child's argv, which every local user reads in `/proc`);
/// - it reads no stream from its caller (whose descriptor may be writable: what a tool wrote
///   back there would skip the masks);
/// - it never runs as the workspace's owner, whose other processes could read its environment.
fn confines(t: &Tool, s: &Secret, var: &str) -> Result<(), String> {
    for c in &t.connect {
        match c {
            Elem::Lit(e) if s.hosts.contains(e) => {}
            Elem::Lit(e) => {
                return Err(format!(
                    "it may connect to {}:{}, not among the secret's hosts",
                    e.host, e.port
                ));
            }
            _ => {
                return Err(
                    "it takes a destination from its arguments; a tool given a secret \
                            connects only to the secret's hosts, written literally"
                        .into(),
                );
            }
        }
    }
    if t.unix {
        return Err("it may use Unix sockets (unix = true), a way around its hosts".into());
    }
    let paths = t.read.iter().chain(&t.exec).chain(&t.cwd);
    if paths.clone().any(|e| !matches!(e, Elem::Lit(_))) || t.in_workspace {
        return Err(
            "it reads, runs or works in a workspace, or in a path its arguments name: \
                    the agent's files there would run with the value, or be read as the tool's"
                .into(),
        );
    }
    if !t.write.is_empty() || t.exec_writes {
        return Err(
            "it may write files, a channel no mask covers; a tool given a secret writes \
                    nothing (its output reaches the caller masked)"
                .into(),
        );
    }
    let expands = |a: &Elem<String>| matches!(a, Elem::Lit(text) if text.contains(&format!("${var}")) || text.contains(&format!("${{{var}}}")));
    if t.command.iter().flatten().any(expands) {
        return Err(format!(
            "its command expands ${var}, which puts the value on a command line every local \
             user reads in /proc; let the program read it from its environment"
        ));
    }
    if t.stdin == super::ToolStdin::Caller {
        return Err(
            "it reads its caller's stdin stream (stdin = \"caller\"), a descriptor it \
                    could write the value back to unmasked"
                .into(),
        );
    }
    if t.confinement.run_as.as_deref() == Some(RUN_AS_OWNER) {
        return Err(
            "it runs as the workspace's owner, whose other processes (the agent's) could read \
             its environment; give it a user of its own"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_and_malformed_ones_refused() {
        assert_eq!(names("Bearer {secret:api}").unwrap(), ["api"]);
        assert_eq!(names("{secret:a}:{secret:b}").unwrap(), ["a", "b"]);
        assert!(names("plain").unwrap().is_empty());
        assert!(names("{secret:api").is_err());
        assert!(names("{secret:}").is_err());
    }

    #[test]
    fn render_puts_values_in_and_refuses_an_unknown_name() {
        let s = [Secret {
            name: "api".into(),
            hosts: Vec::new(),
            source: String::new(),
            value: Value(b"tok-123456".to_vec()),
        }];
        assert_eq!(
            render("Bearer {secret:api}!", &s).unwrap(),
            b"Bearer tok-123456!"
        );
        assert!(render("{secret:other}", &s).is_none());
    }

    #[test]
    fn a_file_others_may_read_is_refused_and_a_private_one_read() {
        let dir = crate::audit::testdir::TestDir::new("secret");
        let p = dir.path().join("tok");
        std::fs::write(&p, "abcdefgh12345\n").expect("write");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let source = format!("file:{}", p.display());
        let e = read(&source).expect_err("0644 refused");
        assert!(e.contains("mode 644"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(read(&source).expect("read").bytes(), b"abcdefgh12345");
        std::fs::write(&p, "short").expect("write");
        assert!(read(&source).expect_err("short").contains("shorter"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        assert!(read(&format!("file:{}", link.display())).is_err());
        assert!(format!("{:?}", Value(b"x".to_vec())) == "[secret]");
    }
}
