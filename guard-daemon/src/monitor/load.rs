//! Which kernel programs guard loads and how each is attached: the object built by `build.rs`,
//! its globals set for this kernel, the cgroup programs on the guard's root cgroup, and the
//! tracepoints.

use std::{fs, os::fd::AsFd as _, path::Path};

use aya::{
    Ebpf, EbpfLoader,
    maps::MapError,
    programs::{
        BtfTracePoint, CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, CgroupSock,
        CgroupSockAddr, ProgramError, TracePoint,
    },
};

use super::{
    MonitorError,
    keys::exec_layout,
    tracefs::{ensure_tracefs, field_offset},
};

/// The kernel programs, as built by `build.rs`.
static PROGRAMS: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/guard"));

const SOCKET_FORMAT: &str = "/sys/kernel/tracing/events/syscalls/sys_enter_socket/format";
const NEWTASK_FORMAT: &str = "/sys/kernel/tracing/events/task/task_newtask/format";
const SIGNAL_FORMAT: &str = "/sys/kernel/tracing/events/signal/signal_generate/format";

/// The cgroup sock_addr programs (each names its hook).
const CGROUP_PROGRAMS: &[&str] = &[
    "connect4", "connect6", "sendmsg4", "sendmsg6", "recvmsg4", "bind4", "bind6",
];
/// The cgroup sock programs (each names its hook).
const CGROUP_SOCK_PROGRAMS: &[&str] = &["sock_create"];
/// The cgroup skb programs: what reaches a call's sockets comes from its approved destinations,
/// and what leaves them goes there, as the connect and send programs judged.
const SKB_PROGRAMS: &[(&str, CgroupSkbAttachType)] = &[
    ("ingress", CgroupSkbAttachType::Ingress),
    ("egress", CgroupSkbAttachType::Egress),
];
/// The tracepoint programs: (program, category, name).
const TRACEPOINTS: &[(&str, &str, &str)] = &[
    ("task_newtask", "task", "task_newtask"),
    ("signal_generate", "signal", "signal_generate"),
];

/// The BTF tracepoint programs (each named for its tracepoint): they read kernel structs. The
/// lock ones run for every record lock on the host (one cgroup lookup for a task the guard does
/// not watch), not for other syscalls.
const BTF_TRACEPOINTS: &[&str] = &["sched_process_exec", "posix_lock_inode", "flock_lock_inode"];

pub(super) fn map_err(name: &'static str) -> impl FnOnce(MapError) -> MonitorError {
    move |source| MonitorError::Map { name, source }
}

pub(super) fn prog_err(name: &'static str) -> impl FnOnce(ProgramError) -> MonitorError {
    move |source| MonitorError::Program { name, source }
}

/// The kernel programs of `PROGRAMS`, their globals set for this kernel (struct layouts,
/// tracepoint record offsets) and the event ring `ring_bytes` long, not loaded yet.
pub(super) fn loaded(ring_bytes: u32) -> Result<Ebpf, MonitorError> {
    if PROGRAMS.is_empty() {
        return Err(MonitorError::NotBuilt);
    }
    ensure_tracefs()?;
    let layout = exec_layout()?;
    let family_offset = field_offset(SOCKET_FORMAT, "family")?;
    let clone_flags_offset = field_offset(NEWTASK_FORMAT, "clone_flags")?;
    let sig_offset = field_offset(SIGNAL_FORMAT, "sig")?;
    let code_offset = field_offset(SIGNAL_FORMAT, "code")?;
    Ok(EbpfLoader::new()
        .override_global("LAYOUT", &layout, true)
        .override_global("SOCKET_FAMILY_OFFSET", &family_offset, true)
        .override_global("CLONE_FLAGS_OFFSET", &clone_flags_offset, true)
        .override_global("SIGNAL_SIG_OFFSET", &sig_offset, true)
        .override_global("SIGNAL_CODE_OFFSET", &code_offset, true)
        .map_max_entries("EVENTS", ring_bytes)
        .load(PROGRAMS)?)
}

/// Loads the cgroup programs and attaches them to `root`, the guard's cgroup, then the
/// tracepoints (exec, new task, signal, locks); the names of those attached.
pub(super) fn attach(ebpf: &mut Ebpf, root: &Path) -> Result<Vec<&'static str>, MonitorError> {
    let cgroup = fs::File::open(root).map_err(|source| MonitorError::Cgroup {
        path: root.to_owned(),
        source,
    })?;
    let mut programs = Vec::new();
    // Finds program `name` as a `$kind`, loads it into the kernel and attaches it with
    // `$attach` (aya has no common trait for `load`, hence a macro).
    macro_rules! load_and_attach {
        ($kind:ty, $name:expr, |$p:ident| $attach:expr) => {{
            let name = $name;
            let $p: &mut $kind = program(ebpf, name)?;
            $p.load().map_err(prog_err(name))?;
            $attach.map_err(prog_err(name))?;
            programs.push(name);
        }};
    }
    // A bpf_link (the kernel has them since 5.7) co-exists with other programs on the same
    // cgroup and takes no multi-attach flags: the link API refuses any with EINVAL.
    let mode = CgroupAttachMode::default;
    for &name in CGROUP_PROGRAMS {
        load_and_attach!(CgroupSockAddr, name, |p| p.attach(cgroup.as_fd(), mode()));
    }
    for &name in CGROUP_SOCK_PROGRAMS {
        load_and_attach!(CgroupSock, name, |p| p.attach(cgroup.as_fd(), mode()));
    }
    for &(name, direction) in SKB_PROGRAMS {
        load_and_attach!(CgroupSkb, name, |p| p.attach(
            cgroup.as_fd(),
            direction,
            mode()
        ));
    }
    for &(name, category, event) in TRACEPOINTS {
        load_and_attach!(TracePoint, name, |p| p.attach(category, event));
    }
    if !BTF_TRACEPOINTS.is_empty() {
        let btf = aya::Btf::from_sys_fs().map_err(|e| MonitorError::Btf(e.to_string()))?;
        for &name in BTF_TRACEPOINTS {
            let p: &mut BtfTracePoint = program(ebpf, name)?;
            p.load(name, &btf).map_err(prog_err(name))?;
            p.attach().map_err(prog_err(name))?;
            programs.push(name);
        }
    }
    Ok(programs)
}

/// Map `name` of the loaded object, taken out of it as a `T`.
pub(super) fn map<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, MonitorError>
where
    T: TryFrom<aya::maps::Map, Error = MapError>,
{
    let taken = ebpf
        .take_map(name)
        .ok_or(MonitorError::MissingMap { name })?;
    T::try_from(taken).map_err(map_err(name))
}

/// Program `name` of the object, as a `P`.
pub(super) fn program<'a, P>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut P, MonitorError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(MonitorError::MissingProgram { name })?
        .try_into()
        .map_err(prog_err(name))
}
