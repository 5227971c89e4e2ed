//! The gate a call's process waits at before it execs the tool, until the call's decision row
//! is durable. The child is cloned and confines itself while the row's `fdatasync` runs; the
//! audit writer opens the gate once the row is on disk, and shuts it when the row could not be
//! written (or when it drops the row unwritten). The child waits on the gate's word with a
//! futex: until its `execve` it shares guardd's memory (`sandbox::clone`), so the writer's wake
//! reaches it there.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

/// Neither opened nor shut yet.
const WAITING: u32 = 0;
const OPEN: u32 = 1;
const SHUT: u32 = 2;

/// What the launch holds: the word its child waits on.
#[derive(Clone, Debug)]
pub struct Gate(Arc<AtomicU32>);

/// What the audit writer holds: it opens the gate, or shuts it by dropping it.
#[derive(Debug)]
pub struct Opener(Option<Arc<AtomicU32>>);

/// A new gate, shut to the child until its opener opens it.
pub fn new() -> (Gate, Opener) {
    let word = Arc::new(AtomicU32::new(WAITING));
    (Gate(word.clone()), Opener(Some(word)))
}

impl Gate {
    /// The word the child waits on ([`wait`]); it lives as long as this gate.
    pub fn word(&self) -> &AtomicU32 {
        &self.0
    }
}

impl Opener {
    /// Opens the gate: the row is durable.
    pub fn open(mut self) {
        self.settle(OPEN);
    }

    fn settle(&mut self, state: u32) {
        if let Some(word) = self.0.take() {
            word.store(state, Ordering::Release);
            // SAFETY: FUTEX_WAKE on a word this Arc keeps alive; it reads no other memory.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    i32::MAX,
                )
            };
        }
    }
}

/// Dropped without being opened (the row could not be written, or the writer is gone): shut.
impl Drop for Opener {
    fn drop(&mut self) {
        self.settle(SHUT);
    }
}

/// The moment `within` from now on CLOCK_MONOTONIC, as [`wait`] takes it: taken before the
/// child's clone, since the child's filters may not let it read the clock.
pub fn deadline(within: Duration) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the timespec on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let ns = ts.tv_nsec as u64 + within.subsec_nanos() as u64;
    let secs = within.as_secs() + ns / 1_000_000_000;
    let mut at = ts;
    // Typed through the fields (`libc::time_t` is deprecated on musl). A wait too long to
    // count ends now: the gate then counts as late, and the launch goes the slow, safe way.
    at.tv_sec = at.tv_sec.saturating_add(secs.try_into().unwrap_or(0));
    at.tv_nsec = (ns % 1_000_000_000).try_into().unwrap_or(0);
    at
}

/// In the child, before its `execve`: waits until the gate opens, or until `deadline`
/// ([`deadline`]). One system call, futex, which every seccomp filter of guard's allows: no
/// clock read, no allocation (it runs between clone and exec). `Err` is the errno to report:
/// EPERM when the gate was shut (the row was not written), ETIMEDOUT when it did not open in
/// time.
pub fn wait(word: &AtomicU32, deadline: &libc::timespec) -> Result<(), i32> {
    let mut late = false;
    loop {
        match word.load(Ordering::Acquire) {
            OPEN => return Ok(()),
            SHUT => return Err(libc::EPERM),
            _ if late => return Err(libc::ETIMEDOUT),
            _ => {}
        }
        // SAFETY: FUTEX_WAIT_BITSET on a word guardd keeps alive until this child has exec'd or
        // exited, until the absolute CLOCK_MONOTONIC `deadline`; FUTEX_WAKE wakes it (its
        // bitset matches any). EAGAIN (the word changed) and EINTR lead back to the check.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
                WAITING,
                deadline as *const libc::timespec,
                std::ptr::null::<u32>(),
                libc::FUTEX_BITSET_MATCH_ANY,
            )
        };
        // Past the deadline, the word is looked at once more: it may have changed just then.
        late = rc < 0 && nix::errno::Errno::last_raw() == libc::ETIMEDOUT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_passes_once_opened_stops_when_shut_and_gives_up_in_time() {
        let (gate, opener) = new();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || wait(gate.word(), &deadline(Duration::from_secs(10))))
        };
        std::thread::sleep(Duration::from_millis(20));
        opener.open();
        assert_eq!(waiter.join().expect("waiter"), Ok(()));

        let (gate, opener) = new();
        drop(opener);
        let ten = deadline(Duration::from_secs(10));
        assert_eq!(wait(gate.word(), &ten), Err(libc::EPERM));

        let (gate, _opener) = new();
        let started = std::time::Instant::now();
        assert_eq!(
            wait(gate.word(), &deadline(Duration::from_millis(30))),
            Err(libc::ETIMEDOUT)
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
