//! A held call's input: a tool that reads its caller's stream (`stdin = "caller"`) and is held
//! for a human would otherwise read that stream only when it runs, after the approval, so the
//! caller could send anything once an admin said yes (issue 49: "what is approved is what
//! runs"). guardd reads the stream whole when it holds the call, bounded in size and time,
//! keeps the bytes in the held record (its digest covers them), shows them to admins, and the
//! approved call reads exactly those bytes from a pipe of guardd's (`Stdin::Held`).

use std::{
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd},
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    fcntl::OFlag,
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::stat::Mode,
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
    #[error(
        "its tool reads the caller's stdin (stdin = \"caller\"), which guardd reads whole when \
         it holds the call: give it a pipe, a file or a socket (a terminal or another kind of \
         stream cannot be read without waiting)"
    )]
    Kind,
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
        let end = masked.len().min(SHOWN);
        Self {
            bytes: input.bytes.len(),
            sha256: input.sha256.clone(),
            text: escaped(&masked[..end]),
            truncated: end < masked.len(),
        }
    }
}

/// `bytes` as text that reads back to them alone: a backslash doubled, a byte that is no UTF-8
/// as `\xNN`. (Lossy text showed every bad byte as one U+FFFD, and guardctl's escapes of
/// controls, `\u{a}`, could be typed: an outside pass's input showed a line break that was
/// none, and a "comment" ran.)
fn escaped(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => text.push_str("\\\\"),
                c => text.push(c),
            }
        }
        for b in chunk.invalid() {
            text.push_str(&format!("\\x{b:02x}"));
        }
    }
    text
}

/// Reads the caller's stream `fd` to its end: at most `max` bytes, within `wait`. Blocking (run
/// it off the runtime), but never in a read that can wait: a pipe is read through a
/// non-blocking description of its own, a socket with `MSG_DONTWAIT`, a file as it is; any
/// other stream (a terminal, an eventfd) is refused. A read on the caller's own blocking
/// description could be parked for good by a process of the caller's that drained the stream
/// between the poll and the read (an outside pass did, two times in three).
pub fn read(fd: BorrowedFd<'_>, max: usize, wait: Duration) -> Result<Vec<u8>, InputError> {
    let source = Source::of(fd)?;
    let deadline = Instant::now() + wait;
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(InputError::Unended(wait.as_secs()));
        }
        let mut fds = [PollFd::new(source.fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, ms) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(InputError::Read(e)),
        }
        let room = (max + 1 - bytes.len()).min(buf.len());
        match source.read(&mut buf[..room]) {
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

/// A caller's stream, as guardd reads it without ever waiting in a read.
enum Source<'a> {
    /// A regular file or `/dev/null`: a read never waits.
    File(BorrowedFd<'a>),
    /// A pipe or FIFO, opened again non-blocking: a description of guardd's own, whose flags
    /// the caller cannot change.
    Pipe(OwnedFd),
    /// A socket, read with `MSG_DONTWAIT`.
    Socket(BorrowedFd<'a>),
}

impl<'a> Source<'a> {
    fn of(fd: BorrowedFd<'a>) -> Result<Self, InputError> {
        let st = nix::sys::stat::fstat(fd).map_err(InputError::Read)?;
        let null = libc::makedev(1, 3);
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Ok(Self::File(fd)),
            libc::S_IFCHR if st.st_rdev == null => Ok(Self::File(fd)),
            libc::S_IFSOCK => Ok(Self::Socket(fd)),
            libc::S_IFIFO => {
                let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
                let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
                nix::fcntl::open(path.as_str(), flags, Mode::empty())
                    .map(Self::Pipe)
                    .map_err(InputError::Read)
            }
            _ => Err(InputError::Kind),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::File(fd) | Self::Socket(fd) => *fd,
            Self::Pipe(fd) => fd.as_fd(),
        }
    }

    fn read(&self, buf: &mut [u8]) -> Result<usize, Errno> {
        match self {
            Self::Socket(fd) => nix::sys::socket::recv(
                fd.as_raw_fd(),
                buf,
                nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            ),
            _ => nix::unistd::read(self.fd(), buf),
        }
    }
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
        // A file reads to its end; /dev/null is an empty input; an eventfd is no stream.
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        assert_eq!(
            read(null.as_fd(), 8, Duration::from_secs(5)),
            Ok(Vec::new())
        );
        // SAFETY: eventfd takes no pointer; the descriptor it returns is owned here.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(efd >= 0, "eventfd");
        // SAFETY: a descriptor just opened, owned by nothing else.
        let efd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
        assert_eq!(
            read(efd.as_fd(), 8, Duration::from_secs(5)),
            Err(InputError::Kind)
        );
    }

    /// An outside pass's F2: the caller drained its pipe between guardd's poll and read, and a
    /// read on the caller's blocking description parked guardd's thread for good. Here a
    /// reader of the caller's drains at once, and the wait still runs out.
    #[test]
    fn a_drained_pipe_never_parks_the_reader() {
        use std::sync::{
            Arc,
            atomic::{AtomicBool, Ordering},
        };
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut w = std::fs::File::from(w);
        let mut drainer = std::fs::File::from(r.try_clone().expect("dup"));
        let stop = Arc::new(AtomicBool::new(false));
        let draining = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                use std::io::Read as _;
                let mut b = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    let _ = drainer.read(&mut b);
                }
            })
        };
        let started = Instant::now();
        let writing = std::thread::spawn(move || {
            for _ in 0..200 {
                let _ = w.write_all(b"x");
                std::thread::sleep(Duration::from_millis(1));
            }
            w
        });
        let got = read(r.as_fd(), 1 << 20, Duration::from_millis(300));
        assert_eq!(got, Err(InputError::Unended(0)));
        assert!(started.elapsed() < Duration::from_secs(5));
        let w = writing.join().expect("writer");
        stop.store(true, Ordering::Relaxed);
        drop(w);
        draining.join().expect("drainer");
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

    /// An outside pass's F3: typed escapes and bad bytes read as themselves, not as the
    /// controls and characters they name.
    #[test]
    fn what_admins_see_reads_back_to_the_bytes_alone() {
        let shown = |b: &[u8]| Shown::of(&HeldInput::new(b.to_vec()), b).text;
        assert_eq!(shown(b"echo ok \\u{a}# x"), "echo ok \\\\u{a}# x");
        assert_ne!(shown(b"a\nb"), shown(b"a\\u{a}b"));
        assert_eq!(shown(b"\xff\xfe\xef\xbf\xbd"), "\\xff\\xfe\u{fffd}");
    }
}
