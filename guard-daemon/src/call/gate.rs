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

/// In the child, before its `execve`: waits until the gate opens, or at most `within`. Raw
/// syscalls only (it runs between clone and exec). `Err` is the errno to report: EPERM when the
/// gate was shut (the row was not written), ETIMEDOUT when it did not open in time.
pub fn wait(word: &AtomicU32, within: Duration) -> Result<(), i32> {
    let deadline = now_ns().saturating_add(within.as_nanos() as u64);
    loop {
        match word.load(Ordering::Acquire) {
            OPEN => return Ok(()),
            SHUT => return Err(libc::EPERM),
            _ => {}
        }
        let left = deadline.saturating_sub(now_ns());
        if left == 0 {
            return Err(libc::ETIMEDOUT);
        }
        let timeout = libc::timespec {
            tv_sec: (left / 1_000_000_000) as libc::time_t,
            tv_nsec: (left % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a word guardd keeps alive until this child has exec'd or
        // exited, with a relative timeout on this stack. EAGAIN (the word changed), EINTR and
        // ETIMEDOUT all lead back to the check above.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                WAITING,
                &timeout as *const libc::timespec,
            )
        };
    }
}

/// CLOCK_MONOTONIC in ns (the vDSO's: no system call, no lock).
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the timespec on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_passes_once_opened_stops_when_shut_and_gives_up_in_time() {
        let (gate, opener) = new();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || wait(gate.word(), Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(20));
        opener.open();
        assert_eq!(waiter.join().expect("waiter"), Ok(()));

        let (gate, opener) = new();
        drop(opener);
        assert_eq!(wait(gate.word(), Duration::from_secs(10)), Err(libc::EPERM));

        let (gate, _opener) = new();
        let started = std::time::Instant::now();
        assert_eq!(
            wait(gate.word(), Duration::from_millis(30)),
            Err(libc::ETIMEDOUT)
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
