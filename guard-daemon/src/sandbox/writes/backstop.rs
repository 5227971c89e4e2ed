//! The kernel's backstop behind guardd's Unix connects ([`super::unix`]): a
//! `cgroup/connect_unix` program (Linux 6.7), linked to the cgroup of each call whose connects
//! guardd makes, refuses (EPERM) every Unix connect on a socket the call made by a task other
//! than guardd's own. guardd makes each connect such a call may have, by the file it found;
//! whatever reaches the kernel from the call itself (a descriptor swapped under guardd's check,
//! a thread guardd could not take the socket of) is refused there, not left to chance. A tool
//! with `unix = true` shares the host's network and has no such link.
//!
//! Seven instructions, loaded by hand: aya 0.14 has no attach type for it. Without it (an
//! older kernel), calls get no Unix sockets at all, as before.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

/// `BPF_PROG_TYPE_CGROUP_SOCK_ADDR`.
const PROG_TYPE: u32 = 18;
/// `BPF_CGROUP_UNIX_CONNECT`.
const ATTACH_TYPE: u32 = 49;
/// `BPF_FUNC_get_current_cgroup_id`.
const GET_CURRENT_CGROUP_ID: i32 = 80;
/// `BPF_PROG_LOAD`, `BPF_LINK_CREATE`.
const PROG_LOAD: libc::c_long = 5;
const LINK_CREATE: libc::c_long = 28;

/// One BPF instruction.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    /// dst in the low four bits, src in the high.
    regs: u8,
    off: i16,
    imm: i32,
}

/// The loaded program, linked to each such call's cgroup ([`UnixBackstop::link`]).
#[derive(Debug)]
pub struct UnixBackstop {
    prog: OwnedFd,
}

/// Why the backstop is not there.
#[derive(Debug, thiserror::Error)]
#[error("the cgroup/connect_unix backstop: {step}: {source}")]
pub struct BackstopError {
    step: &'static str,
    source: std::io::Error,
}

impl UnixBackstop {
    /// Loads the program, which lets only tasks of cgroup `guardd` (guardd's own, by id)
    /// connect a socket made where it is linked.
    pub fn load(guardd: u64) -> Result<Self, BackstopError> {
        Ok(Self {
            prog: load(guardd)?,
        })
    }

    /// Links it to the cgroup directory `cgroup` (a call's), until the returned link closes or
    /// the cgroup goes.
    pub fn link(&self, cgroup: std::os::fd::BorrowedFd<'_>) -> Result<OwnedFd, BackstopError> {
        link(&self.prog, cgroup)
    }
}

/// `r0 = get_current_cgroup_id(); return r0 == guardd ? 1 : 0`.
fn program(guardd: u64) -> [Insn; 8] {
    let insn = |code, regs, off, imm| Insn {
        code,
        regs,
        off,
        imm,
    };
    [
        insn(0x85, 0, 0, GET_CURRENT_CGROUP_ID),     // call
        insn(0x18, 0x01, 0, guardd as u32 as i32),   // r1 = imm64 (low half)
        insn(0, 0, 0, (guardd >> 32) as u32 as i32), // (high half)
        insn(0x1d, 0x10, 2, 0),                      // if r0 == r1 goto +2
        insn(0xb7, 0, 0, 0),                         // r0 = 0: refused
        insn(0x95, 0, 0, 0),                         // exit
        insn(0xb7, 0, 0, 1),                         // r0 = 1: let through
        insn(0x95, 0, 0, 0),                         // exit
    ]
}

fn load(guardd: u64) -> Result<OwnedFd, BackstopError> {
    let insns = program(guardd);
    let license = c"GPL";
    // union bpf_attr for BPF_PROG_LOAD, up to expected_attach_type (offset 68).
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&PROG_TYPE.to_ne_bytes());
    attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    attr[68..72].copy_from_slice(&ATTACH_TYPE.to_ne_bytes());
    bpf(PROG_LOAD, &attr).map_err(|source| BackstopError {
        step: "loading",
        source,
    })
}

fn link(prog: &OwnedFd, cgroup: std::os::fd::BorrowedFd<'_>) -> Result<OwnedFd, BackstopError> {
    // union bpf_attr for BPF_LINK_CREATE: prog_fd, target_fd, attach_type, flags.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(cgroup.as_raw_fd() as u32).to_ne_bytes());
    attr[8..12].copy_from_slice(&ATTACH_TYPE.to_ne_bytes());
    bpf(LINK_CREATE, &attr).map_err(|source| BackstopError {
        step: "linking it to a call's cgroup",
        source,
    })
}

/// bpf(2) with `attr`; the descriptor it returns.
fn bpf(cmd: libc::c_long, attr: &[u8; 128]) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a zeroed bpf_attr of the size given, whose pointers (instructions,
    // license) outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_ptr(), attr.len()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor bpf(2) just returned, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The cgroup v2 id of this process (the inode of its directory on the cgroup v2 mount
/// `mount`): what `bpf_get_current_cgroup_id` answers for guardd's tasks.
pub fn own_cgroup_id(mount: &std::path::Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(path.trim_start_matches('/'));
    std::fs::metadata(dir).ok().map(|m| m.ino())
}
