//! The input of a call held for a human whose tool reads its caller's stream (`stdin =
//! "caller"`): read whole when the call is held (`approval::input`), and masked as arguments
//! are. A secret's value in it is kept nowhere, the store included: such an input is held
//! masked, and the call can only be denied, as a call whose argument held one.

use std::os::fd::{AsFd as _, OwnedFd};

use crate::{
    approval::input::{self, HeldInput, InputError, Shown},
    daemon::Daemon,
    policy::secrets::mask::Masker,
};

/// A held input, what admins are shown of it, and whether it held a secret's value.
pub struct Read {
    pub input: HeldInput,
    pub shown: Shown,
    pub holds_secret: bool,
}

/// Reads the caller's stream `stdin` whole, within [`input::MAX_INPUT`] and [`input::WAIT`].
pub async fn read(daemon: &Daemon, stdin: &OwnedFd) -> Result<Read, InputError> {
    let fd = stdin.try_clone().map_err(|e| {
        InputError::Read(nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))
    })?;
    // Off the runtime: the read waits for the caller's stream, up to its deadline.
    let bytes =
        tokio::task::spawn_blocking(move || input::read(fd.as_fd(), input::MAX_INPUT, input::WAIT))
            .await
            .map_err(|_| InputError::Read(nix::errno::Errno::EIO))??;
    let (masked, holds_secret) = match daemon.policy().masks() {
        Some(masks) => {
            let mut masker = Masker::new(&masks);
            let mut out = Vec::with_capacity(bytes.len());
            masker.push(&bytes, &mut out);
            masker.finish(&mut out);
            let found = masker.found().next().is_some();
            (out, found)
        }
        None => (bytes.clone(), false),
    };
    let input = HeldInput::new(if holds_secret { masked.clone() } else { bytes });
    let shown = Shown::of(&input, &masked);
    Ok(Read {
        input,
        shown,
        holds_secret,
    })
}
