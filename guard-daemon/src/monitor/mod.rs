//! The kernel side of guard, seen from user space: loads and attaches the programs of
//! `guard-ebpf`, tells them which cgroups are guarded calls and what each may do, and reads
//! back what they observed.
//!
//! The cgroup programs attach once, to the guard's root cgroup, so processes elsewhere on the
//! host never run them; the tracepoints (exec, new task, signal) are global and cost an unwatched
//! process one map lookup when it executes, forks or sends a signal.

use std::{
    collections::HashMap as StdHashMap,
    fs, io,
    net::IpAddr,
    path::{Path, PathBuf},
};

use aya::{
    Ebpf,
    maps::{HashMap, MapData, MapError, PerCpuArray, RingBuf},
    programs::ProgramError,
};
use guard_common::{
    call::{CallConfig, CallStats, FLAG_TRACED},
    event::{COUNTER_DROPPED, Event},
    file::{FILE_CHILD, FILE_DIR, FILE_SELF, FileKey, Layout, kernel_dev, name_hash},
    syscall::{SyscallSet, syscall_numbers},
};
use tokio::io::unix::AsyncFd;

pub mod btf;
mod call;
mod dests;
pub mod dns;
mod keys;
mod load;
mod stream;
mod syscalls;
mod tracefs;

pub use call::{WatchError, watch_of};
use keys::*;
pub use keys::{Destination, Watch};
use load::{attach, loaded, map, map_err, prog_err, program};
pub use stream::EventStream;
use syscalls::{RAW_TRACEPOINTS, SYSCALL_TRACEPOINTS, SyscallTracing};
pub use tracefs::ensure_tracefs;

/// Why the kernel layer could not be set up or updated; each names the program or map.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error(
        "guardd was built without its kernel programs (AYA_BUILD_SKIP); rebuild with `cargo xtask build`"
    )]
    NotBuilt,
    #[error("loading the kernel programs: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("program {name}: {source}")]
    Program {
        name: &'static str,
        source: ProgramError,
    },
    #[error("program {name} is missing from the object")]
    MissingProgram { name: &'static str },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        source: MapError,
    },
    #[error("map {name} is missing from the object")]
    MissingMap { name: &'static str },
    #[error("tracefs: {0}")]
    Tracefs(String),
    #[error("kernel struct layout: {0}")]
    Btf(String),
    #[error("cgroup {path}: {source}")]
    Cgroup { path: PathBuf, source: io::Error },
    #[error("registering the event ring buffer with tokio: {0}")]
    Events(io::Error),
    #[error("a call's name key from getrandom: {0}")]
    Random(io::Error),
    /// A path of the call's allow-lists that exists but could not be identified: leaving it
    /// out would refuse what the policy approves, or take an error for "not there".
    #[error("identifying {path} for the kernel's allow-list: {source}")]
    Identify {
        path: PathBuf,
        source: crate::sandbox::resolve::ResolveError,
    },
}

/// The loaded, attached kernel programs and their maps.
pub struct Monitor {
    // Dropping the Ebpf detaches every program.
    ebpf: Ebpf,
    tracing: SyscallTracing,
    calls: HashMap<MapData, u64, CallConfig>,
    dests: dests::DestMaps,
    exec_allow: HashMap<MapData, FileKey, u8>,
    write_allow: HashMap<MapData, FileKey, u8>,
    call_stats: HashMap<MapData, u64, CallStats>,
    syscall_sets: HashMap<MapData, u64, SyscallSet>,
    forks: HashMap<MapData, u64, u64>,
    installed: StdHashMap<u64, Installed>,
    counters: PerCpuArray<MapData, u64>,
    events: Option<RingBuf<MapData>>,
    programs: Vec<&'static str>,
}

/// The event ring buffer's default size: about 3,400 events before the pump must drain it.
pub const DEFAULT_RING_BYTES: u32 = 1 << 20;

/// Checks a size for the event ring buffer: the kernel takes a power of two of whole pages.
pub fn ring_bytes(size: u64) -> Result<u32, String> {
    let page = 4096;
    match u32::try_from(size) {
        Ok(n) if n >= page && n.is_power_of_two() => Ok(n),
        _ => Err(format!(
            "{size}: the event ring buffer's size must be a power of two from {page} to 2^31 bytes"
        )),
    }
}

impl Monitor {
    /// Loads the programs and attaches the cgroup programs to `root`, the guard's cgroup. The
    /// syscall tracepoints (per-call syscall sets, opens, the socket-family kill) are loaded
    /// only with `trace_syscalls`, and attached by `watch` while calls run.
    pub fn load(root: &Path, trace_syscalls: bool, ring_bytes: u32) -> Result<Self, MonitorError> {
        let mut ebpf = loaded(ring_bytes)?;
        let programs = attach(&mut ebpf, root)?;
        if trace_syscalls {
            syscalls::load(&mut ebpf)?;
        }
        let dests = dests::DestMaps::take(&mut ebpf)?;
        let events = Some(map(&mut ebpf, "EVENTS")?);
        Ok(Self {
            tracing: SyscallTracing::new(trace_syscalls),
            calls: map(&mut ebpf, "CALLS")?,
            dests,
            exec_allow: map(&mut ebpf, "EXEC_ALLOW")?,
            write_allow: map(&mut ebpf, "WRITE_ALLOW")?,
            call_stats: map(&mut ebpf, "CALL_STATS")?,
            syscall_sets: map(&mut ebpf, "SYSCALL_SETS")?,
            forks: map(&mut ebpf, "FORKS")?,
            installed: StdHashMap::new(),
            counters: map(&mut ebpf, "COUNTERS")?,
            events,
            programs,
            ebpf,
        })
    }

    /// The names of the attached programs.
    pub fn programs(&self) -> &[&'static str] {
        &self.programs
    }

    /// The names of the programs attached while traced calls run (`--trace-syscalls`, or a
    /// call in shadow), once loaded.
    pub fn on_demand(&self) -> Vec<&'static str> {
        if !self.tracing.loaded {
            return Vec::new();
        }
        let tps = SYSCALL_TRACEPOINTS.iter().map(|&(name, ..)| name);
        tps.chain(RAW_TRACEPOINTS.iter().map(|&(name, _)| name))
            .collect()
    }

    /// Starts guarding the cgroup `cgroup_id`. Install before the call's first process enters
    /// the cgroup; on error, whatever was installed is removed again.
    pub fn watch(&mut self, cgroup_id: u64, watch: &Watch) -> Result<(), MonitorError> {
        let traced = self.tracing.every_call || watch.traced;
        let mut config = CallConfig {
            name_key: random_key()?,
            ..watch.config
        };
        if traced {
            config.flags |= FLAG_TRACED;
        }
        let installed = Installed {
            dests: watch
                .destinations
                .iter()
                .map(|d| d.key(cgroup_id))
                .collect(),
            execs: file_keys(cgroup_id, watch.execs.iter().map(PathBuf::as_path), None)?,
            // The open observer's (--trace-syscalls) and the lock programs'.
            writes: {
                let paths = watch.writes.iter().map(PathBuf::as_path);
                let paths = paths.chain([Path::new("/dev/null")]);
                file_keys(cgroup_id, paths, Some(config.name_key))?
            },
            traced: false,
        };
        self.installed.insert(cgroup_id, installed);
        let result = self.install(cgroup_id, config).and_then(|()| {
            if traced {
                self.tracing.one_more(&mut self.ebpf)
            } else {
                Ok(())
            }
        });
        match (&result, self.installed.get_mut(&cgroup_id)) {
            (Ok(()), Some(installed)) => installed.traced = traced,
            _ => {
                let _ = self.unwatch(cgroup_id);
            }
        }
        result
    }

    fn install(&mut self, cgroup_id: u64, config: CallConfig) -> Result<(), MonitorError> {
        let installed = &self.installed[&cgroup_id];
        for key in &installed.dests {
            self.dests.insert(key)?;
        }
        for (key, kind) in &installed.execs {
            self.exec_allow
                .insert(*key, *kind, 0)
                .map_err(map_err("EXEC_ALLOW"))?;
        }
        for (key, kind) in &installed.writes {
            self.write_allow
                .insert(*key, *kind, 0)
                .map_err(map_err("WRITE_ALLOW"))?;
        }
        self.call_stats
            .insert(cgroup_id, CallStats::default(), 0)
            .map_err(map_err("CALL_STATS"))?;
        // Only a traced call has a set: the syscall tracepoints, attached while any traced call
        // runs, pass by the others, whose receipts stay what they would be alone (attack39).
        if config.flags & FLAG_TRACED != 0 {
            self.syscall_sets
                .insert(cgroup_id, SyscallSet::default(), 0)
                .map_err(map_err("SYSCALL_SETS"))?;
        }
        self.forks
            .insert(cgroup_id, 0, 0)
            .map_err(map_err("FORKS"))?;
        // Last: until the call is in CALLS, its cgroup is not guarded and is empty anyway.
        self.calls
            .insert(cgroup_id, config, 0)
            .map_err(map_err("CALLS"))
    }

    /// Stops guarding `cgroup_id` and removes everything `watch` installed for it.
    pub fn unwatch(&mut self, cgroup_id: u64) -> Result<(), MonitorError> {
        let mut result = match self.calls.remove(&cgroup_id) {
            Err(MapError::KeyNotFound) => Ok(()),
            other => other.map_err(map_err("CALLS")),
        };
        let installed = self.installed.remove(&cgroup_id).unwrap_or_default();
        if installed.traced {
            result = result.and(self.tracing.one_less(&mut self.ebpf));
        }
        // A key never inserted (a launch that failed before its kernel watch was whole) is
        // gone already: ENOENT from the delete.
        let gone = |r: Result<(), MapError>| match r {
            Err(MapError::KeyNotFound) => Ok(()),
            Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => {
                Ok(())
            }
            other => other,
        };
        for key in installed.dests {
            result = result.and(self.dests.remove(&key));
        }
        for (key, _) in installed.execs {
            result = result.and(gone(self.exec_allow.remove(&key)).map_err(map_err("EXEC_ALLOW")));
        }
        for (key, _) in installed.writes {
            let removed = gone(self.write_allow.remove(&key)).map_err(map_err("WRITE_ALLOW"));
            result = result.and(removed);
        }
        result =
            result.and(gone(self.call_stats.remove(&cgroup_id)).map_err(map_err("CALL_STATS")));
        result
            .and(gone(self.syscall_sets.remove(&cgroup_id)).map_err(map_err("SYSCALL_SETS")))
            .and(gone(self.forks.remove(&cgroup_id)).map_err(map_err("FORKS")))
    }

    /// How many processes the call in `cgroup_id` has started so far (threads not counted; its
    /// first process, which guardd started, not included). Read it before `unwatch`.
    pub fn forks(&self, cgroup_id: u64) -> Result<u64, MonitorError> {
        match self.forks.get(&cgroup_id, 0) {
            Ok(n) => Ok(n),
            Err(MapError::KeyNotFound) => Ok(0),
            Err(e) => Err(map_err("FORKS")(e)),
        }
    }

    /// What the kernel counted of the call in `cgroup_id` so far (writes outside its effects,
    /// events lost). Read it before `unwatch`.
    pub fn stats(&self, cgroup_id: u64) -> Result<CallStats, MonitorError> {
        match self.call_stats.get(&cgroup_id, 0) {
            Ok(s) => Ok(s),
            Err(MapError::KeyNotFound) => Ok(CallStats::default()),
            Err(e) => Err(map_err("CALL_STATS")(e)),
        }
    }

    /// The numbers of the syscalls the call in `cgroup_id` has made so far, ascending; empty for
    /// a cgroup the guard does not watch. Read it before `unwatch`, which forgets the set.
    pub fn syscalls(&self, cgroup_id: u64) -> Result<Vec<u32>, MonitorError> {
        match self.syscall_sets.get(&cgroup_id, 0) {
            Ok(set) => Ok(syscall_numbers(&set).collect()),
            Err(MapError::KeyNotFound) => Ok(Vec::new()),
            Err(e) => Err(map_err("SYSCALL_SETS")(e)),
        }
    }

    /// Events lost because the ring buffer was full, summed over CPUs.
    pub fn dropped(&self) -> Result<u64, MonitorError> {
        let values = self
            .counters
            .get(&COUNTER_DROPPED, 0)
            .map_err(map_err("COUNTERS"))?;
        Ok(values.iter().sum())
    }

    /// The stream of events; can be taken once.
    pub fn take_events(&mut self) -> Option<Result<EventStream, MonitorError>> {
        let ring = self.events.take()?;
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged, until it is dropped
        // with the AsyncFd that owns it.
        let fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) };
        Some(
            fd.map(|fd| EventStream { fd })
                .map_err(|e| MonitorError::Events(e.into())),
        )
    }
}
