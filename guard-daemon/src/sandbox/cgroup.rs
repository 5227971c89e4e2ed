//! The guard's cgroup v2 subtree: one directory per call under the guard's root.
//!
//! A call's cgroup id (the directory's inode number) is the key of every per-call map in the
//! kernel, so creating the cgroup is the first step of a launch and removing it the last.

use std::{
    fs,
    io::{self, Write as _},
    os::{fd::OwnedFd, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

/// Where the cgroup v2 hierarchy is mounted on a hybrid host (systemd's layout).
pub const UNIFIED_HYBRID: &str = "/sys/fs/cgroup/unified";
/// Where the cgroup v2 hierarchy is mounted on a pure v2 host.
pub const UNIFIED_PURE: &str = "/sys/fs/cgroup";

/// A call cgroup a guardd that died left, removed at the next start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    /// Its name (`call-ID`).
    pub name: String,
    /// The processes it still had, killed with it.
    pub processes: usize,
}

/// Errors of cgroup management, each naming the path involved.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup v2 hierarchy mounted at {UNIFIED_HYBRID} or {UNIFIED_PURE}")]
    NoUnified,
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cgroup {path} still has processes after {waited:?}")]
    Busy { path: PathBuf, waited: Duration },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// The mount point of the cgroup v2 hierarchy.
pub fn unified_mount() -> Result<PathBuf, CgroupError> {
    for candidate in [UNIFIED_HYBRID, UNIFIED_PURE] {
        if Path::new(candidate).join("cgroup.procs").exists()
            && Path::new(candidate).join("cgroup.controllers").exists()
        {
            return Ok(candidate.into());
        }
    }
    Err(CgroupError::NoUnified)
}

/// The guard's cgroup when guardd runs in a cgroup systemd delegated to it (`Delegate=yes`): the
/// calls' parent, beside the leaf [`DELEGATED_SELF`] guardd moves itself into.
pub const DELEGATED_CALLS: &str = "calls";
/// The leaf of a delegated cgroup that guardd's own process moves into: cgroup v2 enables a
/// controller for children only in a cgroup that holds no process itself.
pub const DELEGATED_SELF: &str = "guardd";
/// The guard's cgroup under the v2 mount otherwise.
pub const DEFAULT_NAME: &str = "guard";

/// The v2 cgroup this process is in, as `/proc/self/cgroup` names it (`/system.slice/x.service`).
pub fn own_path() -> Result<String, CgroupError> {
    let file = Path::new("/proc/self/cgroup");
    let text = fs::read_to_string(file).map_err(io_err("read", file))?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
        .ok_or(CgroupError::NoUnified)
}

/// Whether systemd delegated the cgroup `dir` (`Delegate=yes`): it marks such a cgroup with the
/// `trusted.delegate` attribute, which only root can set.
pub fn delegated(dir: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    let mut value = [0u8; 8];
    // SAFETY: both strings are NUL-terminated; the kernel writes at most `value.len()` bytes.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"trusted.delegate".as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    usize::try_from(n).is_ok_and(|n| &value[..n] == b"1")
}

/// Where the guard's cgroup goes, relative to the v2 mount `unified`: `setting` when the
/// operator gave one; else, in a cgroup systemd delegated to guardd, [`DELEGATED_CALLS`] beneath
/// it, with guardd itself moved into the leaf [`DELEGATED_SELF`] and memory and pids enabled for
/// the calls when offered, so that systemd accounts for, limits and cleans up the calls as part
/// of guardd's unit; else [`DEFAULT_NAME`] at the root.
pub fn place(unified: &Path, setting: Option<&str>) -> Result<String, CgroupError> {
    if let Some(name) = setting {
        return Ok(name.trim_matches('/').to_owned());
    }
    let own = own_path()?;
    let own_rel = own.trim_matches('/');
    let own_dir = unified.join(own_rel);
    if own_rel.is_empty() || !delegated(&own_dir) {
        return Ok(DEFAULT_NAME.to_owned());
    }
    let leaf = own_dir.join(DELEGATED_SELF);
    match fs::create_dir(&leaf) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(io_err("create", &leaf)(e));
        }
        _ => {}
    }
    let procs = leaf.join("cgroup.procs");
    fs::write(&procs, "0").map_err(io_err("write", &procs))?;
    let offered = fs::read_to_string(own_dir.join("cgroup.controllers")).unwrap_or_default();
    let wanted: Vec<&str> = offered
        .split_whitespace()
        .filter(|c| matches!(*c, "memory" | "pids"))
        .collect();
    if !wanted.is_empty() {
        let control = own_dir.join("cgroup.subtree_control");
        let enable: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
        if let Err(e) = fs::write(&control, enable.join(" ")) {
            tracing::warn!("cannot enable {wanted:?} in {}: {e}", control.display());
        }
    }
    Ok(format!("{own_rel}/{DELEGATED_CALLS}"))
}

/// A cgroup directory that this process created and removes when dropped.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
    id: u64,
}

impl Cgroup {
    /// Creates `parent/name`, or adopts it if it exists and is empty of processes.
    pub fn create(parent: &Path, name: &str) -> Result<Self, CgroupError> {
        let path = parent.join(name);
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create", &path)(e)),
        }
        let id = fs::metadata(&path).map_err(io_err("stat", &path))?.ino();
        Ok(Self { path, id })
    }

    /// The cgroup id, as `bpf_get_current_cgroup_id()` reports it for tasks inside.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `cgroup.procs` for writing: a child writes "0" to it between fork and exec to move
    /// itself in, without allocating.
    pub fn procs_fd(&self) -> Result<OwnedFd, CgroupError> {
        let procs = self.path.join("cgroup.procs");
        let file = fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .map_err(io_err("open", &procs))?;
        Ok(file.into())
    }

    /// Opens the directory itself, for `clone3(CLONE_INTO_CGROUP)`.
    pub fn dir_fd(&self) -> Result<OwnedFd, CgroupError> {
        let file = fs::File::open(&self.path).map_err(io_err("open", &self.path))?;
        Ok(file.into())
    }

    /// Writes `value` to the control file `name` (e.g. `pids.max`).
    pub fn set(&self, name: &str, value: &str) -> Result<(), CgroupError> {
        let file = self.path.join(name);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .map_err(io_err("open", &file))?;
        f.write_all(value.as_bytes())
            .map_err(io_err("write", &file))
    }

    /// The pids of the processes in this cgroup (not in its children).
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        let procs = self.path.join("cgroup.procs");
        let text = fs::read_to_string(&procs).map_err(io_err("read", &procs))?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Kills and removes the child cgroups a guardd of this cgroup left behind when it died
    /// without cleaning up (kill -9), each with how many processes it still had. Only the
    /// holder of this cgroup's lock may call this.
    pub fn sweep_children(&self) -> Vec<Swept> {
        let Ok(entries) = fs::read_dir(&self.path) else {
            return Vec::new();
        };
        let mut swept = Vec::new();
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let child = Cgroup {
                path: entry.path(),
                id: entry.metadata().map(|m| m.ino()).unwrap_or_default(),
            };
            let processes = child.pids().map_or(0, |p| p.len());
            match child.remove() {
                Ok(()) => swept.push(Swept {
                    name: entry.file_name().to_string_lossy().into_owned(),
                    processes,
                }),
                Err(e) => tracing::warn!("leaving a dead guardd's cgroup behind: {e}"),
            }
        }
        swept
    }

    /// Kills every process in the cgroup and its descendants at once (`cgroup.kill`).
    pub fn kill(&self) -> Result<(), CgroupError> {
        self.set("cgroup.kill", "1")
    }

    /// Kills what is left, waits for the cgroup to empty, and removes it.
    pub fn remove(self) -> Result<(), CgroupError> {
        let result = self.remove_inner();
        self.forget();
        result
    }

    /// Skips the removal on drop (it was done or given up on), freeing the path: a plain
    /// `mem::forget` would leak its allocation, once per call.
    fn forget(mut self) {
        drop(std::mem::take(&mut self.path));
        std::mem::forget(self);
    }

    /// [`Cgroup::remove`] without holding up the runtime: an empty cgroup goes at once, and the
    /// wait for processes still exiting (up to 5 s, for one stuck in the kernel) runs on a
    /// blocking thread. guardd may have a single worker thread, which every caller shares.
    pub async fn remove_async(self) -> Result<(), CgroupError> {
        match fs::remove_dir(&self.path) {
            Ok(()) => {
                self.forget();
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                let path = self.path.clone();
                tokio::task::spawn_blocking(move || self.remove())
                    .await
                    .unwrap_or_else(|e| Err(io_err("remove", &path)(io::Error::other(e))))
            }
            // Gone already, or an error the blocking retry would only repeat.
            Err(_) => self.remove(),
        }
    }

    fn remove_inner(&self) -> Result<(), CgroupError> {
        let waited = Duration::from_secs(5);
        let deadline = Instant::now() + waited;
        loop {
            match fs::remove_dir(&self.path) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                // EBUSY: processes remain (or are still exiting after cgroup.kill).
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    let _ = self.kill();
                    if Instant::now() >= deadline {
                        return Err(CgroupError::Busy {
                            path: self.path.clone(),
                            waited,
                        });
                    }
                    thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(io_err("remove", &self.path)(e)),
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove_inner() {
            tracing::warn!("leaving cgroup behind: {e}");
        }
    }
}
