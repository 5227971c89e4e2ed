//! The keys of the kernel's per-call maps: destinations, and files by identity.

use guard_common::net::{Dest4, Dest6, Net4, Net6};

use super::*;

/// One destination a guarded call may connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Destination {
    pub addr: IpAddr,
    pub port: u16,
    /// `guard_common::net::PROTO_TCP` or `PROTO_UDP`.
    pub proto: u8,
    /// A network's length (`10.0.0.0/8`: 8); `None` for the one address.
    pub prefix: Option<u8>,
}

#[derive(Clone, Copy)]
pub(super) enum DestKey {
    V4(Dest4),
    V6(Dest6),
    Net4(aya::maps::lpm_trie::Key<Net4>),
    Net6(aya::maps::lpm_trie::Key<Net6>),
}

/// What the kernel holds one guarded call to.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    pub config: CallConfig,
    /// Where it may connect or send.
    pub destinations: Vec<Destination>,
    /// The programs it may execute (enforced with `FLAG_ENFORCE_EXEC`).
    pub execs: Vec<PathBuf>,
    /// What it may write, and so lock (the lock programs), and what the open observer
    /// (`--trace-syscalls`) judges its write-opens by; `/dev/null` always.
    pub writes: Vec<PathBuf>,
    /// Its syscalls are traced (opens, refusals) even without `--trace-syscalls`: a call in
    /// shadow, whose opens are what it is watched for.
    pub traced: bool,
}

/// The keys installed for one call, so that `unwatch` removes exactly them.
#[derive(Default)]
pub(super) struct Installed {
    pub(super) dests: Vec<DestKey>,
    pub(super) execs: Vec<(FileKey, u8)>,
    pub(super) writes: Vec<(FileKey, u8)>,
    /// Counted in `SyscallTracing::calls`.
    pub(super) traced: bool,
}

/// The identity of the file or directory `path` names now, as the kernel sees it: device in
/// the kernel's encoding, inode, and whether it is a directory; `None` when it does not exist.
/// Symlinks are followed as landlock's rules follow them ([`crate::sandbox::resolve`]): root's
/// only, so that no one else's link moves what the kernel approves.
pub(super) fn identity(path: &Path) -> Result<Option<(u32, u64, bool)>, MonitorError> {
    use crate::sandbox::resolve::{self, ResolveError};
    let failed = |source| MonitorError::Identify {
        path: path.to_owned(),
        source,
    };
    let fd = match resolve::open(path, nix::fcntl::OFlag::empty()) {
        Ok(fd) => fd,
        Err(ResolveError::Sys(nix::Error::ENOENT | nix::Error::ENOTDIR)) => return Ok(None),
        Err(e) => return Err(failed(e)),
    };
    let st = nix::sys::stat::fstat(&fd).map_err(|e| failed(e.into()))?;
    Ok(Some((
        kernel_dev(libc::major(st.st_dev), libc::minor(st.st_dev)),
        st.st_ino,
        st.st_mode & libc::S_IFMT == libc::S_IFDIR,
    )))
}

/// A fresh secret key for one call's [`name_hash`], from the kernel's random pool.
pub(super) fn random_key() -> Result<u64, MonitorError> {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(MonitorError::Random(io::Error::last_os_error()));
    }
    Ok(u64::from_ne_bytes(bytes))
}

/// The allow-list key of `path` for the call: a file approves itself, a directory what lies
/// beneath it. A path that does not exist approves nothing, unless `names`: then its name in
/// its (existing) directory is approved, for a write target the call may create: `names` is the
/// call's key of [`name_hash`].
pub(super) fn file_key(
    cgroup_id: u64,
    path: &Path,
    names: Option<u64>,
) -> Result<Option<(FileKey, u8)>, MonitorError> {
    let key = |(dev, ino, _): (u32, u64, bool), name| FileKey {
        cgroup_id,
        ino,
        dev,
        _pad: 0,
        name,
    };
    if let Some(id) = identity(path)? {
        return Ok(Some((key(id, 0), if id.2 { FILE_DIR } else { FILE_SELF })));
    }
    let (Some(name_key), Some(parent), Some(name)) = (names, path.parent(), path.file_name())
    else {
        return Ok(None);
    };
    let Some(dir) = identity(parent)?.filter(|id| id.2) else {
        return Ok(None);
    };
    let name = name.as_encoded_bytes();
    Ok(Some((key(dir, name_hash(name_key, name)), FILE_CHILD)))
}

/// The keys of `paths` ([`file_key`]), each once: a file named twice (argv[0] also in
/// effects.exec, or two spellings of one file such as /bin and /usr/bin) is one key, installed
/// once and so removed once.
pub(super) fn file_keys<'a>(
    cgroup_id: u64,
    paths: impl Iterator<Item = &'a Path>,
    names: Option<u64>,
) -> Result<Vec<(FileKey, u8)>, MonitorError> {
    let mut keys = StdHashMap::new();
    for path in paths {
        if let Some((key, kind)) = file_key(cgroup_id, path, names)? {
            keys.insert(key, kind);
        }
    }
    Ok(keys.into_iter().collect())
}

/// The offsets the exec program reads kernel structs at, from the running kernel's BTF.
pub(super) fn exec_layout() -> Result<Layout, MonitorError> {
    let btf =
        crate::monitor::btf::KernelBtf::load().map_err(|e| MonitorError::Btf(e.to_string()))?;
    let at = |s: &str, m: &str| {
        btf.offset(s, m)
            .map_err(|e| MonitorError::Btf(e.to_string()))
    };
    // `struct file_lock`'s members moved into its `c` (`struct file_lock_core`) in Linux 6.9,
    // `fl_file` becoming `flc_file`; before, they are its own.
    let lock = |core: &str, own: &str| match at("file_lock", "c") {
        Ok(c) => Ok(c + at("file_lock_core", core)?),
        Err(_) => at("file_lock", own),
    };
    Ok(Layout {
        bprm_file: at("linux_binprm", "file")?,
        bprm_filename: at("linux_binprm", "filename")?,
        file_inode: at("file", "f_inode")?,
        file_dentry: at("file", "f_path")? + at("path", "dentry")?,
        inode_ino: at("inode", "i_ino")?,
        inode_sb: at("inode", "i_sb")?,
        sb_dev: at("super_block", "s_dev")?,
        dentry_parent: at("dentry", "d_parent")?,
        dentry_inode: at("dentry", "d_inode")?,
        dentry_name: at("dentry", "d_name")? + at("qstr", "name")?,
        task_files: at("task_struct", "files")?,
        files_fdt: at("files_struct", "fdt")?,
        fdt_fd: at("fdtable", "fd")?,
        fdt_max_fds: at("fdtable", "max_fds")?,
        lock_file: lock("flc_file", "fl_file")?,
        lock_type: lock("flc_type", "fl_type")?,
        lock_flags: lock("flc_flags", "fl_flags")?,
        inode_mode: at("inode", "i_mode")?,
    })
}

impl Destination {
    pub(super) fn key(&self, cgroup_id: u64) -> DestKey {
        let (port, proto) = (self.port, self.proto);
        match (self.addr, self.prefix) {
            (IpAddr::V4(v4), prefix) => {
                let addr = u32::from_ne_bytes(v4.octets());
                match prefix {
                    Some(p) if p < 32 => {
                        let data = Net4::new(cgroup_id, addr, port, proto);
                        DestKey::Net4(net4(data, p))
                    }
                    _ => DestKey::V4(Dest4::new(cgroup_id, addr, port, proto)),
                }
            }
            (IpAddr::V6(v6), prefix) => {
                let o = v6.octets();
                let word = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
                let addr = [word(0), word(4), word(8), word(12)];
                match prefix {
                    Some(p) if p < 128 => {
                        let data = Net6::new(cgroup_id, addr, port, proto);
                        DestKey::Net6(net6(data, p))
                    }
                    _ => DestKey::V6(Dest6::new(cgroup_id, addr, port, proto)),
                }
            }
        }
    }
}

/// An IPv4 network key: `prefix` bits of the address.
fn net4(data: Net4, prefix: u8) -> aya::maps::lpm_trie::Key<Net4> {
    aya::maps::lpm_trie::Key::new(guard_common::net::NET_FIXED_BITS + u32::from(prefix), data)
}

/// An IPv6 network key.
fn net6(data: Net6, prefix: u8) -> aya::maps::lpm_trie::Key<Net6> {
    aya::maps::lpm_trie::Key::new(guard_common::net::NET_FIXED_BITS + u32::from(prefix), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_keys_hold_addresses_in_network_order() {
        let d = Destination {
            addr: "127.0.0.1".parse().unwrap(),
            port: 8080,
            proto: 6,
            prefix: None,
        };
        let DestKey::V4(k) = d.key(7) else {
            panic!("v4 key expected")
        };
        assert_eq!(k.addr.to_ne_bytes(), [127, 0, 0, 1]);
        assert_eq!((k.cgroup_id, k.port, k.proto), (7, 8080, 6));
        let d = Destination {
            addr: "::1".parse().unwrap(),
            port: 1,
            proto: 17,
            prefix: None,
        };
        let DestKey::V6(k) = d.key(7) else {
            panic!("v6 key expected")
        };
        assert_eq!(k.addr[3].to_ne_bytes(), [0, 0, 0, 1]);
    }
}
