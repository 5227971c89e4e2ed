//! Names no one can guess: call ids, a call's temporary directory, a planted file's new name.

/// `n` bytes from the kernel's random pool, as lowercase hex. A short read (which getrandom(2)
/// does not give for 256 bytes or fewer from an initialised pool) leaves zeros, so a name made
/// of it is still checked where it is made.
pub fn hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer.
    unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
