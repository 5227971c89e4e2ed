//! The syscall tracepoints (`--trace-syscalls`, and every call in shadow): per-call syscall
//! sets, opens, refusals and the socket-family kill, loaded once and attached only while a
//! traced call runs.

use aya::{
    Ebpf,
    programs::{
        RawTracePoint, TracePoint, raw_trace_point::RawTracePointLinkId,
        trace_point::TracePointLinkId,
    },
};

use super::{MonitorError, prog_err, program};

/// Syscall tracepoints, only when the operator asks (`--trace-syscalls`), and then attached only
/// while at least one call runs: enabling any syscall tracepoint moves every task on the host to
/// the slow syscall path (measured: +280 ns on a 250 ns syscall), which breaks "no cost for
/// processes the guard does not watch".
pub(super) const SYSCALL_TRACEPOINTS: &[(&str, &str, &str)] =
    &[("sys_enter_socket", "syscalls", "sys_enter_socket")];

/// The raw tracepoint programs: (program, tracepoint); syscall tracing, like the above: per-call
/// syscall sets, and opens (entry and exit).
pub(super) const RAW_TRACEPOINTS: &[(&str, &str)] =
    &[("sys_enter", "sys_enter"), ("sys_exit", "sys_exit")];

/// Loads the syscall tracepoints into the kernel (they attach while traced calls run).
pub(super) fn load(ebpf: &mut Ebpf) -> Result<(), MonitorError> {
    for &(name, ..) in SYSCALL_TRACEPOINTS {
        program::<TracePoint>(ebpf, name)?
            .load()
            .map_err(prog_err(name))?;
    }
    for &(name, _) in RAW_TRACEPOINTS {
        program::<RawTracePoint>(ebpf, name)?
            .load()
            .map_err(prog_err(name))?;
    }
    Ok(())
}

fn attach_syscall_tracing(
    ebpf: &mut Ebpf,
    links: &mut Vec<SyscallLink>,
) -> Result<(), MonitorError> {
    for &(name, category, event) in SYSCALL_TRACEPOINTS {
        let p = program::<TracePoint>(ebpf, name)?;
        links.push(SyscallLink::Tp(
            name,
            p.attach(category, event).map_err(prog_err(name))?,
        ));
    }
    for &(name, tracepoint) in RAW_TRACEPOINTS {
        let p = program::<RawTracePoint>(ebpf, name)?;
        links.push(SyscallLink::Raw(
            name,
            p.attach(tracepoint).map_err(prog_err(name))?,
        ));
    }
    Ok(())
}

fn detach_syscall_tracing(
    ebpf: &mut Ebpf,
    links: &mut Vec<SyscallLink>,
) -> Result<(), MonitorError> {
    let mut result = Ok(());
    for link in links.drain(..) {
        let detached = match link {
            SyscallLink::Tp(name, id) => {
                program::<TracePoint>(ebpf, name).and_then(|p| p.detach(id).map_err(prog_err(name)))
            }
            SyscallLink::Raw(name, id) => program::<RawTracePoint>(ebpf, name)
                .and_then(|p| p.detach(id).map_err(prog_err(name))),
        };
        result = result.and(detached);
    }
    result
}

/// The syscall tracepoints' state: loaded at start with `--trace-syscalls` (every call is
/// traced), else at the first call in shadow (which is traced whatever the flag); attached
/// while traced calls run.
#[derive(Default)]
pub(super) struct SyscallTracing {
    /// Every call is traced (`--trace-syscalls`).
    pub(super) every_call: bool,
    pub(super) loaded: bool,
    /// Traced calls running; the programs are attached while this is above zero.
    calls: usize,
    links: Vec<SyscallLink>,
}

enum SyscallLink {
    Tp(&'static str, TracePointLinkId),
    Raw(&'static str, RawTracePointLinkId),
}

impl SyscallTracing {
    /// Tracing of every call (`--trace-syscalls`, its programs loaded at start), or only of
    /// calls that ask for it.
    pub(super) fn new(every_call: bool) -> Self {
        Self {
            every_call,
            loaded: every_call,
            ..Self::default()
        }
    }

    /// Counts one more traced call, attaching the syscall tracepoints for the first (loading
    /// them first if no call has needed them yet).
    pub(super) fn one_more(&mut self, ebpf: &mut Ebpf) -> Result<(), MonitorError> {
        let tracing = self;
        if !tracing.loaded {
            load(ebpf)?;
            tracing.loaded = true;
        }
        if tracing.calls == 0 {
            let attached = attach_syscall_tracing(ebpf, &mut tracing.links);
            if attached.is_err() {
                // All or nothing: the next call starts from a clean slate.
                let _ = detach_syscall_tracing(ebpf, &mut tracing.links);
                return attached;
            }
        }
        tracing.calls += 1;
        Ok(())
    }

    /// Counts one traced call less, detaching the syscall tracepoints after the last: the host
    /// pays for them only while calls run.
    pub(super) fn one_less(&mut self, ebpf: &mut Ebpf) -> Result<(), MonitorError> {
        let tracing = self;
        tracing.calls = tracing.calls.saturating_sub(1);
        if tracing.calls > 0 {
            return Ok(());
        }
        detach_syscall_tracing(ebpf, &mut tracing.links)
    }
}
