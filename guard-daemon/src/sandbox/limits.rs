//! Memory and task limits of a call, by whichever mechanism this host offers.
//!
//! [`detect`] runs once at startup and picks, in order of preference: the cgroup v2 `memory` and
//! `pids` controllers, if they are (or can be) enabled in the guard root's `subtree_control`; the
//! cgroup v1 `memory` and `pids` hierarchies, if mounted (hybrid hosts where systemd keeps the
//! controllers on v1); else rlimits, a weak last resort (`RLIMIT_AS` is not resident memory, and
//! `RLIMIT_NPROC` counts every process of the user, across calls). [`CallLimits`] sets up one
//! call's limits before fork; the child joins what it must between fork and exec.

use std::{
    fmt, fs,
    io::{self, Write as _},
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    thread,
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::{call::plan::Confinement, sandbox::cgroup::Cgroup};

/// Where the cgroup v1 hierarchies are mounted on a hybrid host.
pub const V1_ROOT: &str = "/sys/fs/cgroup";
/// The v1 hierarchies a call may get a directory in.
const V1_CONTROLLERS: &[&str] = &["memory", "pids"];

/// Errors of setting up a call's limits, each naming the file involved.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(transparent)]
    Cgroup(#[from] crate::sandbox::cgroup::CgroupError),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LimitsError + 'a {
    move |source| LimitsError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// How memory and task limits are enforced on this host (shown by `guardctl status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitsMode {
    /// `memory.max` and `pids.max` in the call's own cgroup v2.
    CgroupV2,
    /// `memory.limit_in_bytes` and `pids.max` in per-call cgroups of the v1 hierarchies.
    CgroupV1,
    /// `RLIMIT_AS` and `RLIMIT_NPROC` on the tool process.
    Rlimit,
}

impl fmt::Display for LimitsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitsMode::CgroupV2 => "cgroup-v2 (memory.max, pids.max)",
            LimitsMode::CgroupV1 => "cgroup-v1 (memory, pids hierarchies)",
            LimitsMode::Rlimit => "rlimit (RLIMIT_AS, RLIMIT_NPROC per user; weak)",
        })
    }
}

fn has_controllers(list: &str, wanted: &[&str]) -> bool {
    wanted
        .iter()
        .all(|w| list.split_whitespace().any(|c| c == *w))
}

/// Picks the limits mode for calls created under `guard_root` (a cgroup v2 directory), enabling
/// the v2 controllers in its `subtree_control` when they are delegated to it.
pub fn detect(guard_root: &Path) -> LimitsMode {
    let available = fs::read_to_string(guard_root.join("cgroup.controllers")).unwrap_or_default();
    if has_controllers(&available, &["memory", "pids"]) {
        let control = guard_root.join("cgroup.subtree_control");
        let enabled = fs::read_to_string(&control).unwrap_or_default();
        if has_controllers(&enabled, &["memory", "pids"])
            || fs::OpenOptions::new()
                .write(true)
                .open(&control)
                .and_then(|mut f| f.write_all(b"+memory +pids"))
                .is_ok()
        {
            return LimitsMode::CgroupV2;
        }
        // EBUSY: the guard root holds processes itself (cgroup v2's no-internal-process rule).
        tracing::warn!("cannot enable memory and pids in {}", control.display());
    }
    let v1 = |c: &str| Path::new(V1_ROOT).join(c).join("tasks").exists();
    if v1("memory") && v1("pids") {
        return LimitsMode::CgroupV1;
    }
    LimitsMode::Rlimit
}

/// How many processes `uid` owns now, by their `/proc` entries.
pub fn processes_of(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .count() as u64
}

/// Rlimits the child sets on itself (rlimit mode only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rlimits {
    pub address_space: Option<u64>,
    pub nproc: Option<u64>,
}

/// One call's limits: the v1 cgroup directories it joins (kept for the next call, or removed,
/// on drop), or rlimits for the child.
#[derive(Debug)]
pub struct CallLimits {
    pub mode: LimitsMode,
    v1: Option<(V1Set, Arc<Spares>)>,
    /// Which of the set's directories ([`V1_CONTROLLERS`]) the call joins.
    joined: [bool; 2],
    pub rlimits: Rlimits,
}

impl CallLimits {
    /// Sets up the limits of `confinement` for the call whose cgroup is `cgroup`; v1 directories
    /// come from `spares`, or are made under `instance` (the guard's cgroup name) in each
    /// hierarchy.
    pub fn setup(
        mode: LimitsMode,
        spares: &Arc<Spares>,
        cgroup: &Cgroup,
        confinement: &Confinement,
    ) -> Result<Self, LimitsError> {
        let mut me = Self {
            mode,
            v1: None,
            joined: [false; 2],
            rlimits: Rlimits::default(),
        };
        let (mem, pids) = (confinement.memory_max, confinement.pids_max);
        match mode {
            LimitsMode::CgroupV2 => {
                if let Some(m) = mem {
                    cgroup.set("memory.max", &m.to_string())?;
                    // No swap either, or memory.max only moves the pages to swap.
                    let _ = cgroup.set("memory.swap.max", "0");
                }
                if let Some(p) = pids {
                    cgroup.set("pids.max", &p.to_string())?;
                }
            }
            LimitsMode::CgroupV1 if mem.is_some() || pids.is_some() => {
                let limits = [("memory.limit_in_bytes", mem), ("pids.max", pids)];
                me.v1 = Some((spares.take(cgroup, &limits)?, spares.clone()));
                me.joined = [mem.is_some(), pids.is_some()];
            }
            LimitsMode::CgroupV1 => {}
            LimitsMode::Rlimit => {
                me.rlimits = Rlimits {
                    address_space: mem,
                    nproc: pids,
                };
            }
        }
        Ok(me)
    }

    /// `tasks` files the child writes "0" to, to join the v1 cgroups (see `child::join_cgroup`).
    pub fn procs_fds(&self) -> impl Iterator<Item = &OwnedFd> {
        self.joined().map(|d| &d.tasks)
    }

    /// The v1 directories of this call.
    pub fn v1_dirs(&self) -> impl Iterator<Item = &Path> {
        self.joined().map(|d| d.path.as_path())
    }

    /// The directories of its set that the call joins.
    fn joined(&self) -> impl Iterator<Item = &V1Dir> {
        let dirs = self.v1.iter().flat_map(|(set, _)| &set.dirs);
        dirs.zip(self.joined).filter(|(_, j)| *j).map(|(d, _)| d)
    }
}

impl Drop for CallLimits {
    fn drop(&mut self) {
        if let Some((set, spares)) = self.v1.take() {
            spares.keep(set);
        }
    }
}

/// v1 limit directories kept for the next calls once a call has left them: making and removing
/// a v1 memory cgroup (the kernel's files of each controller) was most of what v1 limits cost a
/// launch, about 0.1 ms. A directory set is handed to a call only when nothing of the call
/// before is left in it and what is still charged there is little and reclaimable
/// (`V1Set::reusable`, asked as the set is taken): the next call's limit is not eaten by its
/// predecessor. One that is not goes then.
#[derive(Debug)]
pub struct Spares {
    instance: String,
    kept: Mutex<Vec<V1Set>>,
}

/// At most this many sets are kept: enough for the calls an agent or two run side by side.
const SPARES_KEPT: usize = 8;
/// A set is handed on with at most this much memory still charged to it: the kernel's own
/// objects of a call's processes (freed later) and the files it wrote (until they go) stay
/// charged to its memory cgroup, a few hundred KiB for a `git status`. The next call reclaims
/// it as it needs room below its limit (and a set holding memory that cannot be reclaimed is
/// not handed on: `V1Set::reusable`).
const STALE_CHARGE: u64 = 8 << 20;

/// Each v1 controller's limit file and the call's limit there, in [`V1_CONTROLLERS`]' order.
type V1Limits = [(&'static str, Option<u64>); 2];

impl Spares {
    /// Spares of the guard whose cgroup name is `instance` (their directories go under it).
    pub fn new(instance: &str) -> Arc<Self> {
        Arc::new(Self {
            instance: instance.to_owned(),
            kept: Mutex::new(Vec::new()),
        })
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<V1Set>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A set with `limits`, for the call whose cgroup is `cgroup`: a kept one, else one made
    /// and named after the cgroup (unique, as call cgroups are).
    fn take(&self, cgroup: &Cgroup, limits: &V1Limits) -> Result<V1Set, LimitsError> {
        loop {
            // Not `while let`: its guard would hold the lock while the set is looked at.
            let Some(set) = self.kept().pop() else {
                break;
            };
            // Looked at now, not at its call's end: the caller of that call waited for its
            // end, this launch's worker waits for its files anyway (about 65 µs). A limit
            // below what is still charged there may be refused (EBUSY): another set.
            if set.reusable() && set.limit(limits).is_ok() {
                return Ok(set);
            }
            // Off the launch's way: a process of the call before still in it (one no kill
            // could end, stuck in the kernel) holds the removal up to 5 s, and the runtime's
            // worker is every caller's.
            super::off_the_runtime(move || set.remove());
        }
        let name = cgroup.path().file_name();
        let name = name.map_or_else(|| cgroup.id().to_string(), |n| n.to_string_lossy().into());
        let mut set = V1Set { dirs: Vec::new() };
        for ctrl in V1_CONTROLLERS {
            let dir = Path::new(V1_ROOT)
                .join(ctrl)
                .join(&self.instance)
                .join(&name);
            if let Err(e) = fs::create_dir_all(&dir) {
                set.remove();
                return Err(io_err("create", &dir)(e));
            }
            let tasks = dir.join("tasks");
            let opened = fs::OpenOptions::new().write(true).open(&tasks);
            match opened {
                Ok(f) => set.dirs.push(V1Dir {
                    path: dir,
                    tasks: f.into(),
                }),
                Err(e) => {
                    remove_v1_dir(&dir);
                    set.remove();
                    return Err(io_err("open", &tasks)(e));
                }
            }
        }
        match set.limit(limits) {
            Ok(()) => Ok(set),
            Err(e) => {
                set.remove();
                Err(e)
            }
        }
    }

    /// Keeps `set`, which its call has left, when there is room, else removes it. Whether it
    /// may serve another call is asked when one takes it ([`Spares::take`]).
    fn keep(&self, set: V1Set) {
        let mut kept = self.kept();
        if kept.len() < SPARES_KEPT {
            kept.push(set);
            return;
        }
        drop(kept);
        set.remove();
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        for set in self.kept().drain(..) {
            set.remove();
        }
    }
}

/// One directory in each v1 hierarchy of [`V1_CONTROLLERS`], in that order.
#[derive(Debug)]
struct V1Set {
    dirs: Vec<V1Dir>,
}

#[derive(Debug)]
struct V1Dir {
    path: PathBuf,
    /// Its `tasks`, open for the child to join through.
    tasks: OwnedFd,
}

impl V1Set {
    /// Writes each limit given to its file (over a previous call's: only the directories a
    /// call joins matter to it, and it is given each of their limits).
    fn limit(&self, limits: &V1Limits) -> Result<(), LimitsError> {
        for (dir, (file, value)) in self.dirs.iter().zip(limits) {
            if let Some(value) = value {
                let path = dir.path.join(file);
                fs::write(&path, value.to_string()).map_err(io_err("write", &path))?;
            }
        }
        Ok(())
    }

    /// Whether the next call may have it: no process is left in it, at most [`STALE_CHARGE`]
    /// of memory is charged there, and none of that is memory the kernel cannot reclaim
    /// without swap (files a call left on a tmpfs, `/dev/shm`: attack41) or at all
    /// (unevictable): a call holding its successor's limit down would have it killed below
    /// what its policy gives. Its high-water mark and failure count are reset for the next
    /// call, which sees its own.
    fn reusable(&self) -> bool {
        let [memory, pids] = &self.dirs[..] else {
            return false;
        };
        let empty = |d: &V1Dir| fs::read(d.path.join("cgroup.procs")).is_ok_and(|p| p.is_empty());
        let read = |file: &str| fs::read_to_string(memory.path.join(file)).ok();
        let charged = read("memory.usage_in_bytes").and_then(|u| u.trim().parse::<u64>().ok());
        let stat = read("memory.stat").unwrap_or_default();
        let pinned = ["active_anon", "inactive_anon", "unevictable"]
            .iter()
            .any(|counter| {
                let line = stat
                    .lines()
                    .find_map(|l| l.strip_prefix(counter)?.strip_prefix(' '));
                line.is_none_or(|n| n.trim() != "0")
            });
        let reset = |file: &str| fs::write(memory.path.join(file), "0").is_ok();
        empty(memory)
            && empty(pids)
            && charged.is_some_and(|c| c <= STALE_CHARGE)
            && !pinned
            && reset("memory.max_usage_in_bytes")
            && reset("memory.failcnt")
    }

    fn remove(self) {
        for dir in self.dirs.iter().rev() {
            remove_v1_dir(&dir.path);
        }
    }
}

/// Removes a v1 cgroup directory. v1 has no cgroup.kill: the call's v2 cgroup kill ends the
/// processes; a straggler (e.g. still exiting) is killed here by pid and waited for.
fn remove_v1_dir(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    // SAFETY: kill has no memory effects; the pid is in this call's cgroup.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                tracing::warn!("leaving v1 cgroup {} behind: {e}", dir.display());
                break;
            }
        }
    }
}

/// Removes what a guardd of this `instance` left in the v1 hierarchies: the calls' directories
/// of one that died without cleaning up (kill -9), and with `and_instance` the instance's own
/// directories, at shutdown. Only a guardd that holds the instance's lock may call this.
pub fn sweep_v1(instance: &str, and_instance: bool) {
    for ctrl in V1_CONTROLLERS {
        let dir = Path::new(V1_ROOT).join(ctrl).join(instance);
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    remove_v1_dir(&entry.path());
                }
            }
        }
        if and_instance {
            remove_v1_dir(&dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_lists_are_matched_by_word() {
        assert!(has_controllers("cpu io memory pids", &["memory", "pids"]));
        assert!(!has_controllers("hugetlb", &["memory", "pids"]));
        assert!(!has_controllers("memoryx pids", &["memory", "pids"]));
    }

    #[test]
    fn mode_display_names_the_mechanism() {
        assert!(LimitsMode::CgroupV1.to_string().starts_with("cgroup-v1"));
        assert!(LimitsMode::CgroupV2.to_string().starts_with("cgroup-v2"));
        assert!(LimitsMode::Rlimit.to_string().starts_with("rlimit"));
    }
}
