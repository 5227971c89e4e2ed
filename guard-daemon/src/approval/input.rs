//! A held call's input: a tool that reads its caller's stream (`stdin = "caller"`) and is held
//! for a human would otherwise read that stream only when it runs, after the approval, so the
//! caller could send anything once an admin said yes (issue 49: "what is approved is what
//! runs"). guardd reads the stream whole when it holds the call, bounded in size and time,
//! keeps the bytes in the held record (its digest covers them), shows them to admins, and the
//! approved call reads exactly those bytes from a pipe of guardd's (`Stdin::Held`).

use std::{
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd},
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    poll::{PollFd, PollFlags, PollTimeout, poll},
};
use serde::{Deserialize, Serialize};

use crate::call::hash::sha256_hex;

/// The most a held call's input may be; a longer one is refused, nothing held.
pub const MAX_INPUT: usize = 64 << 10;

/// How long guardd waits for the caller's stream to end when it holds the call.
pub const WAIT: Duration = Duration::from_secs(10);

/// The most of an input `guardctl pending` shows.
pub const SHOWN: usize = 2048;

/// Why a held call's input could not be read; the call is then not held.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error(
        "its tool reads the caller's stdin (stdin = \"caller\"), and a held call keeps at most \
         {0} bytes of it for the approver to see: the input is longer"
    )]
    TooLarge(usize),
    #[error(
        "its tool reads the caller's stdin (stdin = \"caller\"), which guardd reads whole when \
         it holds the call: the input did not end within {0} s (close the stream, or pipe a file)"
    )]
    Unended(u64),
    #[error("reading the caller's stdin: {0}")]
    Read(Errno),
}

/// A held input, whole: in the call's form, under its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldInput {
    /// `sha256:` and the hex SHA-256 of the bytes.
    pub sha256: String,
    /// The bytes, in hex in the record.
    #[serde(with = "crate::call::hash::hex_bytes")]
    pub bytes: Vec<u8>,
}

impl HeldInput {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self {
            sha256: format!("sha256:{}", sha256_hex(&bytes)),
            bytes,
        }
    }

    /// Whether the bytes are still the ones its SHA-256 names.
    pub fn intact(&self) -> bool {
        self.sha256 == format!("sha256:{}", sha256_hex(&self.bytes))
    }
}

/// A held input as admins see it (`guardctl pending`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shown {
    /// Its size in bytes.
    pub bytes: usize,
    /// `sha256:` and the hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its first [`SHOWN`] bytes as text (what is no UTF-8 replaced), each secret's value as
    /// `[secret:NAME]`; guardctl escapes what a terminal would act on.
    pub text: String,
    /// `text` is its beginning only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl Shown {
    /// `input` shown as `masked` (its bytes with each secret's value masked).
    pub fn of(input: &HeldInput, masked: &[u8]) -> Self {
        let text = String::from_utf8_lossy(masked);
        let mut end = text.len().min(SHOWN);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            bytes: input.bytes.len(),
            sha256: input.sha256.clone(),
            text: text[..end].to_owned(),
            truncated: end < text.len(),
        }
    }
}

/// Reads the caller's stream `fd` to its end: at most `max` bytes, within `wait`. Blocking (run
/// it off the runtime), but never in a read that can wait: each read takes only the bytes the
/// kernel says are there (`FIONREAD`), so a process of the caller's draining the same stream
/// between the poll and the read cannot park a thread of guardd's.
pub fn read(fd: BorrowedFd<'_>, max: usize, wait: Duration) -> Result<Vec<u8>, InputError> {
    let deadline = Instant::now() + wait;
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(InputError::Unended(wait.as_secs()));
        }
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, ms) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(InputError::Read(e)),
        }
        // A stream that says ready with nothing to read has ended (a pipe's writers closed, a
        // terminal's end of file); a file or device that cannot say reads as it comes.
        let ready = match available(fd) {
            Some(0) => return Ok(bytes),
            Some(n) => n,
            None => buf.len(),
        };
        let room = (max + 1 - bytes.len()).min(ready).min(buf.len());
        match nix::unistd::read(fd, &mut buf[..room]) {
            Ok(0) => return Ok(bytes),
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(e) => return Err(InputError::Read(e)),
        }
        if bytes.len() > max {
            return Err(InputError::TooLarge(max));
        }
    }
}

/// The bytes `fd` holds ready to read, when it can say (pipes, sockets, terminals, files).
fn available(fd: BorrowedFd<'_>) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at `n`; the
    // descriptor is borrowed for the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc < 0 {
        return None;
    }
    usize::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use std::{io::Write as _, os::fd::AsFd as _};

    use super::*;

    #[test]
    fn a_stream_is_read_to_its_end_within_its_bounds() {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut w = std::fs::File::from(w);
        w.write_all(b"four").expect("write");
        drop(w);
        let got = read(r.as_fd(), 8, Duration::from_secs(5));
        assert_eq!(got, Ok(b"four".to_vec()));

        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut w = std::fs::File::from(w);
        w.write_all(&[b'x'; 9]).expect("write");
        drop(w);
        assert_eq!(
            read(r.as_fd(), 8, Duration::from_secs(5)),
            Err(InputError::TooLarge(8))
        );
    }

    #[test]
    fn a_stream_that_does_not_end_is_refused_when_the_wait_runs_out() {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut w = std::fs::File::from(w);
        w.write_all(b"more to come").expect("write");
        let got = read(r.as_fd(), 64, Duration::from_millis(200));
        assert_eq!(got, Err(InputError::Unended(0)));
        drop(w);
        // A file reads to its end; /dev/null is an empty input.
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        assert_eq!(
            read(null.as_fd(), 8, Duration::from_secs(5)),
            Ok(Vec::new())
        );
    }

    #[test]
    fn what_admins_see_is_masked_bounded_and_names_the_bytes() {
        let input = HeldInput::new(vec![b'a'; SHOWN + 10]);
        assert!(input.intact());
        let shown = Shown::of(&input, &input.bytes);
        assert_eq!((shown.bytes, shown.text.len()), (SHOWN + 10, SHOWN));
        assert!(shown.truncated);
        assert_eq!(shown.sha256, input.sha256);
        let mut tampered = input.clone();
        tampered.bytes[0] = b'b';
        assert!(!tampered.intact());
    }
}
