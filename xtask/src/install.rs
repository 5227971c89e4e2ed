//! `cargo xtask install` and `uninstall`: the binaries, their man pages and completions, the
//! book, the systemd unit and the default policy, under a prefix and, for packaging, a staging root
//! (`--root`, like DESTDIR). Install records what it wrote in a manifest; uninstall removes
//! exactly that, and keeps (and names) a file that was changed since, such as an edited policy.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use sha2::{Digest as _, Sha256};

use crate::{docs, repo, run, setup};

/// The binaries, with the man section of each: the pages `guard::client::cli::PAGES` lets a page refer
/// to (a test installs them and checks every reference).
const BINARIES: &[(&str, u8)] = &[
    ("guardd", 8),
    ("guard-exec", 1),
    ("guardctl", 1),
    ("guard-mcp", 1),
];
/// The unit template: `{bin}` is filled in.
const UNIT: &str = include_str!("guardd.service");
/// Where the unit and the policy go (under `--root`); the rest goes under `--prefix`.
const UNIT_PATH: &str = "/etc/systemd/system/guardd.service";
const POLICY_PATH: &str = "/etc/guard/policy.toml";
const POLICY_DIR: &str = "/etc/guard/policies";
/// guardd's settings file, and the two places the default policy's verdict on it depends on.
const SETTINGS_PATH: &str = "/etc/guard/guardd.toml";
const AUDIT_DIR: &str = "/var/lib/guard";
const WORKSPACE: &str = "/srv/agent/workspace";
/// Where the book's HTML goes, under the prefix: the man pages and `--help` texts name it.
const DOC_DIR: &str = "share/doc/guard";

#[derive(clap::Args)]
pub struct InstallOptions {
    /// Install prefix of the binaries, man pages and completions.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// A staging root every path is written beneath (like DESTDIR); the unit still names the
    /// paths as they will be on the target.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Install the debug binaries already built (what the tests use) instead of building and
    /// installing a release.
    #[arg(long)]
    pub prebuilt_debug: bool,
}

#[derive(clap::Args)]
pub struct UninstallOptions {
    /// The prefix given to install.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// The staging root given to install.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

/// `root` joined with an absolute `path`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

fn manifest_path(prefix: &Path) -> PathBuf {
    prefix.join("share/guard/install-manifest")
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What install wrote: files (target path -> SHA-256) and the directories it created.
#[derive(Default)]
struct Manifest {
    files: BTreeMap<PathBuf, String>,
    dirs: Vec<PathBuf>,
    /// The socket's group, when install made it.
    group: Option<String>,
}

impl Manifest {
    fn read(path: &Path) -> Result<Self> {
        let mut m = Manifest::default();
        let Ok(text) = fs::read_to_string(path) else {
            return Ok(m);
        };
        for (n, line) in text.lines().enumerate() {
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("file"), Some(sum), Some(p)) => {
                    m.files.insert(p.into(), sum.into());
                }
                (Some("dir"), Some(p), None) => m.dirs.push(p.into()),
                (Some("group"), Some(g), None) => m.group = Some(g.into()),
                (Some(w), ..) if w.starts_with('#') => {}
                _ => bail!(
                    "{}:{}: not a manifest line: {line:?}",
                    path.display(),
                    n + 1
                ),
            }
        }
        Ok(m)
    }

    fn render(&self) -> String {
        let mut out = String::from(
            "# written by `cargo xtask install`; `cargo xtask uninstall` removes exactly these\n",
        );
        if let Some(g) = &self.group {
            out.push_str(&format!("group {g}\n"));
        }
        for d in &self.dirs {
            out.push_str(&format!("dir {}\n", d.display()));
        }
        for (p, sum) in &self.files {
            out.push_str(&format!("file {sum} {}\n", p.display()));
        }
        out
    }
}

/// Writes files beneath a root and remembers what it wrote.
struct Writer<'a> {
    root: &'a Path,
    manifest: Manifest,
}

impl Writer<'_> {
    /// Creates `dir` (a target path) and its missing parents, recording each one it created.
    fn dirs(&mut self, dir: &Path) -> Result<()> {
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|d| !under(self.root, d).exists())
            .collect();
        for d in missing.into_iter().rev() {
            fs::create_dir(under(self.root, d))
                .with_context(|| format!("creating {}", under(self.root, d).display()))?;
            if !self.manifest.dirs.iter().any(|m| m == d) {
                self.manifest.dirs.push(d.to_owned());
            }
        }
        Ok(())
    }

    fn file(&mut self, target: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        self.put(target, bytes, mode)?;
        println!("install: {}", under(self.root, target).display());
        Ok(())
    }

    /// [`Writer::file`] without its line: for the many files of the book.
    fn put(&mut self, target: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        if let Some(dir) = target.parent() {
            self.dirs(dir)?;
        }
        let dst = under(self.root, target);
        // A new file renamed into place: a running guardd's binary is never written in place.
        let tmp = dst.with_extension("guard-install");
        fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
        fs::rename(&tmp, &dst).with_context(|| format!("installing {}", dst.display()))?;
        self.manifest.files.insert(target.to_owned(), sha256(bytes));
        Ok(())
    }
}

/// What `binary --generate=WHAT` prints (man page or completions).
fn generated(binary: &Path, what: &str) -> Result<Vec<u8>> {
    let out = Command::new(binary)
        .arg(format!("--generate={what}"))
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    if !out.status.success() {
        bail!(
            "{} --generate={what}: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

pub fn install(opts: &InstallOptions) -> Result<()> {
    if !opts.prefix.is_absolute() {
        bail!("--prefix must be absolute: {}", opts.prefix.display());
    }
    let built = if opts.prebuilt_debug {
        repo::target_dir(false)
    } else {
        setup::run(&setup::Options::default())?;
        run::build(&run::BuildOptions { release: true })?;
        repo::target_dir(true)
    };
    let prefix = &opts.prefix;
    let manifest_at = manifest_path(prefix);
    let mut w = Writer {
        root: &opts.root,
        manifest: Manifest::read(&under(&opts.root, &manifest_at))?,
    };
    for &(name, section) in BINARIES {
        let binary = built.join(name);
        let bytes =
            fs::read(&binary).with_context(|| format!("{} is not built", binary.display()))?;
        w.file(&prefix.join("bin").join(name), &bytes, 0o755)?;
        let man = format!("share/man/man{section}/{name}.{section}");
        w.file(&prefix.join(man), &generated(&binary, "man")?, 0o644)?;
        let completions = [
            ("bash", format!("share/bash-completion/completions/{name}")),
            ("zsh", format!("share/zsh/site-functions/_{name}")),
            (
                "fish",
                format!("share/fish/vendor_completions.d/{name}.fish"),
            ),
        ];
        for (shell, path) in completions {
            w.file(&prefix.join(path), &generated(&binary, shell)?, 0o644)?;
        }
    }
    book(&mut w, prefix)?;
    examples(&mut w, prefix)?;
    let unit = UNIT.replace("{bin}", &prefix.join("bin").display().to_string());
    w.file(Path::new(UNIT_PATH), unit.as_bytes(), 0o644)?;
    // Never over an operator's policy: an edited one stays as it is.
    if under(&opts.root, Path::new(POLICY_PATH)).exists()
        || under(&opts.root, Path::new(POLICY_DIR)).exists()
    {
        println!("install: kept the existing policy in /etc/guard");
    } else {
        let policy = fs::read(repo::root().join("policies/default.toml"))?;
        w.file(Path::new(POLICY_PATH), &policy, 0o640)?;
        settings(&mut w)?;
    }
    socket_group(&opts.root, &mut w.manifest)?;
    if let Some(dir) = manifest_at.parent() {
        w.dirs(dir)?;
    }
    fs::write(under(&opts.root, &manifest_at), w.manifest.render())
        .context("writing the install manifest")?;
    println!(
        "install: done; as root: `systemctl daemon-reload && systemctl enable --now guardd`; \
         `cargo xtask uninstall` with the same --prefix and --root removes it"
    );
    Ok(())
}

/// The book's HTML, built now (its links checked), under `PREFIX/share/doc/guard`.
fn book(w: &mut Writer, prefix: &Path) -> Result<()> {
    let staged = repo::root()
        .join("target")
        .join(format!("book.install-{}", std::process::id()));
    let html = docs::build(&staged)?;
    let files = docs::files_beneath(&html)?;
    for rel in &files {
        let bytes = fs::read(html.join(rel))?;
        w.put(&prefix.join(DOC_DIR).join(rel), &bytes, 0o644)?;
    }
    fs::remove_dir_all(&staged).with_context(|| format!("removing {}", staged.display()))?;
    println!(
        "install: the book, {} files, in {}",
        files.len(),
        under(w.root, &prefix.join(DOC_DIR)).display()
    );
    Ok(())
}

/// The example policies (`PREFIX/share/guard/examples`) and the stand-in judges, approver and
/// notifier they name (`PREFIX/libexec/guard`), so that each runs as shipped.
fn examples(w: &mut Writer, prefix: &Path) -> Result<()> {
    let dir = repo::root().join("policies/examples");
    for (from, to, mode) in [
        (dir.join("libexec"), prefix.join("libexec/guard"), 0o755),
        (dir.clone(), prefix.join("share/guard/examples"), 0o644),
    ] {
        for entry in fs::read_dir(&from).with_context(|| format!("{}", from.display()))? {
            let path = entry?.path();
            if path.is_file() {
                let name = path.file_name().context("a file name")?;
                w.file(&to.join(name), &fs::read(&path)?, mode)?;
            }
        }
    }
    Ok(())
}

/// On a host of one file system, the default policy's workspace shares the audit log's, and
/// guardd refuses to start unless the operator opts in: install writes that opt-in, with why,
/// into a new `guardd.toml` (guardd warns of it at each start), rather than leave a unit that
/// fails. A staged install cannot know its host: it only says so.
fn settings(w: &mut Writer) -> Result<()> {
    let (audit, workspace) = (Path::new(AUDIT_DIR), Path::new(WORKSPACE));
    if w.root != Path::new("/") {
        println!(
            "install: where {AUDIT_DIR} and {WORKSPACE} share a file system, guardd starts \
             only with `allow_writes_on_audit_fs = true` in {SETTINGS_PATH} (or the audit log \
             on a file system of its own)"
        );
        return Ok(());
    }
    if Path::new(SETTINGS_PATH).exists() || !one_file_system(audit, workspace)? {
        return Ok(());
    }
    let text = format!(
        "# Written by `cargo xtask install`: on this host the audit log ({AUDIT_DIR}) and the\n\
         # default policy's workspace ({WORKSPACE}) share a file system, and guardd starts\n\
         # only with this opt-in. A call that fills that file system would leave no room for\n\
         # later rows; guardd keeps room for the rows of running calls either way, and warns\n\
         # of this setting at each start. Better: put {AUDIT_DIR} on a file system of its own\n\
         # and remove this line.\n\
         allow_writes_on_audit_fs = true\n"
    );
    w.file(Path::new(SETTINGS_PATH), text.as_bytes(), 0o644)?;
    println!(
        "install: {AUDIT_DIR} and {WORKSPACE} share a file system: {SETTINGS_PATH} opts in \
         to writes there (read its comment)"
    );
    Ok(())
}

/// Whether `a` and `b` (or their nearest existing directories) lie on one file system.
fn one_file_system(a: &Path, b: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = |p: &Path| -> Result<u64> {
        let existing = p.ancestors().find(|d| d.exists()).unwrap_or(Path::new("/"));
        Ok(fs::metadata(existing)
            .with_context(|| format!("reading {}", existing.display()))?
            .dev())
    };
    Ok(dev(a)? == dev(b)?)
}

/// The socket's group (`GUARDD_SOCKET_GROUP` in the unit), made as a system group when the
/// host has none, and recorded so that `uninstall` removes it; a staged install (`--root`)
/// only says so.
fn socket_group(root: &Path, manifest: &mut Manifest) -> Result<()> {
    const GROUP: &str = "guard";
    let exists = Command::new("getent")
        .args(["group", GROUP])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if root != Path::new("/") {
        println!(
            "install: the socket's group is `{GROUP}`; make it on the host (groupadd --system {GROUP})"
        );
        return Ok(());
    }
    if !exists {
        let made = Command::new("groupadd")
            .args(["--system", GROUP])
            .status()
            .context("running groupadd")?;
        if !made.success() {
            bail!("groupadd --system {GROUP} failed");
        }
        manifest.group = Some(GROUP.into());
        println!("install: made the system group {GROUP}");
    }
    println!(
        "install: the socket's group is `{GROUP}`: a user submits calls once in it \
         (`usermod -aG {GROUP} USER`, in effect at their next login); admins are root and \
         the policy's [approvals] admins"
    );
    Ok(())
}

pub fn uninstall(opts: &UninstallOptions) -> Result<()> {
    let manifest_at = under(&opts.root, &manifest_path(&opts.prefix));
    if !manifest_at.exists() {
        bail!(
            "no install manifest at {}: nothing was installed with this --prefix and --root",
            manifest_at.display()
        );
    }
    let manifest = Manifest::read(&manifest_at)?;
    let mut kept = 0;
    for (target, sum) in &manifest.files {
        let path = under(&opts.root, target);
        match fs::read(&path) {
            Ok(bytes) if sha256(&bytes) == *sum => {
                fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
                println!("uninstall: {}", path.display());
            }
            Ok(_) => {
                kept += 1;
                println!("uninstall: kept {} (changed since install)", path.display());
            }
            Err(_) => {}
        }
    }
    fs::remove_file(&manifest_at)?;
    if let Some(group) = &manifest.group {
        let removed = Command::new("groupdel").arg(group).status();
        match removed {
            Ok(s) if s.success() => println!("uninstall: the group {group}"),
            _ => println!("uninstall: kept the group {group} (groupdel failed)"),
        }
    }
    // Deepest first; a directory something else put files in stays.
    let mut dirs = manifest.dirs.clone();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let _ = fs::remove_dir(under(&opts.root, &d));
    }
    if kept > 0 {
        println!("uninstall: {kept} changed file(s) kept");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_system_is_judged_at_the_nearest_existing_directory() {
        let here = repo::root();
        let absent = here.join("no/such/dir");
        assert!(one_file_system(&here, &absent).expect("stat"));
        // /proc is a file system of its own on every Linux host.
        assert!(!one_file_system(Path::new("/proc/self"), &here).expect("stat"));
    }
}
