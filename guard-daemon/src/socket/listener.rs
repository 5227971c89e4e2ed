//! guardd's listening socket: bound once at start-up, and accepted from without registering a
//! connection with the runtime until it is admitted.

use std::{
    fs, io,
    os::{fd::AsRawFd as _, unix::fs::PermissionsExt as _},
    path::Path,
};

use tokio::io::unix::AsyncFd;

use super::fair;
use crate::protocol::conn::Deadlines;

/// How many connections wait in the kernel for guardd to accept them. Small on purpose: a
/// connect past it sleeps in the kernel, and such sleepers are woken in turn (exclusive
/// waiters), so a caller behind a flood waits for this many accepts, not for the whole flood.
const BACKLOG: libc::c_int = 64;

/// What the socket holds its connections to: who gets one ([`fair`]), and how long each may
/// keep guardd waiting.
#[derive(Clone, Copy, Debug)]
pub struct Terms {
    pub limits: fair::Limits,
    pub deadlines: Deadlines,
}

/// guardd's listening socket, accepted from without registering a connection with the runtime
/// until it is admitted: a refusal costs an accept, two getsockopts, a send and a close.
pub struct Listener {
    fd: AsyncFd<std::os::unix::net::UnixListener>,
    pub(super) terms: Terms,
}

impl Listener {
    pub(super) async fn accept(&self) -> io::Result<std::os::unix::net::UnixStream> {
        loop {
            let mut ready = self.fd.readable().await?;
            if let Ok(accepted) = ready.try_io(|l| l.get_ref().accept()) {
                return accepted.map(|(stream, _)| stream);
            }
        }
    }
}

/// Binds the socket: removes a stale file, sets mode 0660 and the group.
pub fn bind(path: &Path, gid: Option<u32>, terms: Terms) -> io::Result<Listener> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    if path.exists() {
        // A socket that answers belongs to a running guardd: never steal it.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is in use by a running guardd", path.display()),
            ));
        }
        fs::remove_file(path)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    // listen(2) again on a listening socket sets its backlog anew.
    // SAFETY: a socket of ours, bound and listening.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } < 0 {
        return Err(io::Error::last_os_error());
    }
    listener.set_nonblocking(true)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o660))?;
    if let Some(gid) = gid {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid)))
            .map_err(io::Error::from)?;
    }
    // SAFETY: the listener owns its descriptor, and the AsyncFd owns the listener: neither is
    // closed or replaced while registered.
    let registered = unsafe { AsyncFd::register(listener) }.map_err(io::Error::from)?;
    Ok(Listener {
        fd: registered,
        terms,
    })
}
