//! systemd's service notification protocol (`sd_notify`), by hand: one datagram of `KEY=VALUE`
//! lines to the socket named by `$NOTIFY_SOCKET`. Under `Type=notify`, systemd counts guardd as
//! started only on `READY=1`, which guardd sends once every layer is proven and the socket
//! listens, so units ordered after it never meet a guard that cannot enforce yet.

use std::{
    io,
    os::{
        linux::net::SocketAddrExt as _,
        unix::{
            ffi::OsStrExt as _,
            net::{SocketAddr, UnixDatagram},
        },
    },
};

/// Sends `state` (e.g. `"READY=1"`) to the service manager. Ok(false) when guardd does not run
/// under one (no `$NOTIFY_SOCKET`).
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let target = target.as_bytes();
    let addr = match target.strip_prefix(b"@") {
        // An abstract socket: '@' stands for the leading NUL.
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(target))?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}
