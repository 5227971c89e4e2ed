//! How the child comes to be: cloned as `posix_spawn` does it, with `CLONE_VM | CLONE_VFORK`
//! (it runs on its own small stack in the daemon's memory while the launching thread waits for
//! its `execve` or exit, so no page table is copied and no copy-on-write fault follows in the
//! daemon), straight into the call's cgroup, and into namespaces of its own.

use std::os::fd::RawFd;

use nix::errno::Errno;

use super::child::{ChildCtx, run};

/// The namespaces each call gets. Calls run side by side as one user, and so do judges and
/// approvers, so DAC alone would let one reach the others: lower their limits (`prlimit`) or
/// priority (`setpriority`, `sched_setattr`, `ioprio_set`, each also by user), move their pages,
/// compare their descriptors; and System V IPC objects and POSIX message queues of that user
/// are shared by every call and outlive the one that made them, a channel from a call that may
/// read a secret to one that may send it, which neither landlock nor seccomp's deny list sees.
/// In its own pid namespace a call can name no process but its own (the tool is its pid 1:
/// when it exits, the rest of its tree is killed, as the end of a call does anyway), and the
/// IPC namespace goes away with it. In its own mount namespace everything is read-only but
/// what it may change (see `child::mounts`).
const CALL_NAMESPACES: libc::c_int = libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWNS;

/// The namespaces of a call `ctx` describes: with a network namespace of its own, loopback
/// only, when it connects nowhere (`LaunchPlan::own_network`): the servers its tests start,
/// the sockets its tools probe with, are its own and reach nothing else.
fn namespaces(ctx: &ChildCtx) -> libc::c_int {
    if ctx.own_network {
        CALL_NAMESPACES | libc::CLONE_NEWNET
    } else {
        CALL_NAMESPACES
    }
}

/// The child's stack: the bottom page is a guard, so an overflow faults instead of writing over
/// the daemon's memory.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

/// The child's stack size: its deepest path (landlock's rule, seccomp) uses a few KiB.
const STACK_BYTES: usize = 256 * 1024;

impl Stack {
    fn new() -> Result<Self, Errno> {
        let page = 4096;
        let len = STACK_BYTES + page;
        // SAFETY: an anonymous private mapping at an address the kernel picks; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let stack = Self { base, len };
        // SAFETY: the first page of the mapping made above.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(Errno::last());
        }
        Ok(stack)
    }

    /// The highest address: the stack grows down from it.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is where a downward stack starts.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child that used it has exec'd or exited (the
        // clone waited for that), so nothing runs on it.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Clones the child, which runs [`run`] on `ctx`, and returns once it has exec'd the tool or
/// exited (`CLONE_VFORK`). Every signal is blocked across the clone, so that none runs one of
/// the daemon's handlers on the child's stack before the child has reset them.
pub(super) fn spawn(ctx: &ChildCtx) -> Result<libc::pid_t, Errno> {
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&ChildCtx` passed to clone below, alive in the daemon's memory
        // (shared with the child) until the clone returns, which is after the child's execve.
        let ctx = unsafe { &*arg.cast::<ChildCtx>() };
        run(ctx, false)
    }
    extern "C" fn entry_in_cgroup(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: as in `entry`.
        let ctx = unsafe { &*arg.cast::<ChildCtx>() };
        run(ctx, true)
    }
    // A stack kept for this thread's next launch: mapping one, guarding it and unmapping it
    // again (a TLB flush on every CPU running guardd) cost each launch about 15 µs. One thread
    // launches one child at a time, and the child has left it by the time the clone returns.
    thread_local! {
        static KEPT: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
    }
    let stack = match KEPT.take() {
        Some(stack) => stack,
        None => Stack::new()?,
    };
    // SAFETY: sigset_t is a plain bit array, valid when zeroed; sigfillset initialises it.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    // SAFETY: `all` is a valid sigset_t on this stack.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: reads `all`, writes `old`, both on this stack.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) };
    let arg = std::ptr::from_ref(ctx).cast_mut().cast();
    let mut cloned = clone_into_cgroup(
        ctx.cgroup_dir,
        namespaces(ctx),
        &stack,
        entry_in_cgroup,
        arg,
    );
    if matches!(cloned, Err(Errno::ENOSYS | Errno::EINVAL)) {
        // A kernel without clone3 or CLONE_INTO_CGROUP (before 5.7): the child moves itself.
        // SAFETY: the child runs `entry` on its own stack (`stack`, alive until after the clone
        // returns), shares the daemon's memory but not its fd table or signal handlers, and
        // only makes async-signal-safe calls on `ctx` before execve or _exit; CLONE_VFORK
        // suspends this thread until then, so `ctx` and `stack` outlive its use of them.
        let pid = unsafe {
            libc::clone(
                entry,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | namespaces(ctx) | libc::SIGCHLD,
                arg,
            )
        };
        cloned = if pid < 0 { Err(Errno::last()) } else { Ok(pid) };
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    KEPT.set(Some(stack));
    cloned
}

/// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`); libc has none for glibc.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Clones the child straight into the cgroup `cgroup_dir`, where writing `cgroup.procs` from the
/// child would move it: a move takes the kernel's global threadgroup lock for writing, whose
/// writer waits for an RCU grace period, and with busy CPUs that wait was 10 to 17 ms in one
/// launch of a hundred here (the launch p99; the stage `clone_exec`). A clone into the cgroup
/// takes the read side only. Then `entry(arg)` runs on `stack`, as with `clone(2)`.
#[cfg(target_arch = "x86_64")]
fn clone_into_cgroup(
    cgroup_dir: RawFd,
    namespaces: libc::c_int,
    stack: &Stack,
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> Result<libc::pid_t, Errno> {
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | namespaces) as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: stack.len as u64,
        cgroup: cgroup_dir as u64,
        ..CloneArgs::default()
    };
    let ret: libc::c_long;
    // SAFETY: clone3 as glibc's clone3.S calls it, with what `spawn`'s clone(2) relies on
    // (the child on its own stack, CLONE_VFORK). The child resumes after the syscall with the
    // parent's registers but rax = 0 and rsp at the top of `stack` (16-byte aligned, so `call`
    // leaves it as a function expects), calls entry(arg) from the callee-saved r12 and r13, and
    // never returns to Rust code here: `entry` execs or exits, and exit(2) follows in case it
    // did not. The parent falls through with the pid (or -errno) in rax, r12 and r13 untouched.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &raw const args,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        Err(Errno::from_raw(-ret as i32))
    } else {
        Ok(ret as libc::pid_t)
    }
}

/// Elsewhere the clone(2) path, where the child moves itself.
#[cfg(not(target_arch = "x86_64"))]
fn clone_into_cgroup(
    _: RawFd,
    _: libc::c_int,
    _: &Stack,
    _: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    _: *mut libc::c_void,
) -> Result<libc::pid_t, Errno> {
    Err(Errno::ENOSYS)
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    /// The child's check: exits 0 when /proc/self/cgroup holds `arg`, a NUL-terminated
    /// `0::/PATH\n`, else 1. Raw calls and a stack buffer only: it runs in the test's memory.
    extern "C" fn in_cgroup(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the CString the test passed; the rest reads into a stack buffer.
        unsafe {
            let want = CStr::from_ptr(arg.cast()).to_bytes();
            let mut buf = [0u8; 4096];
            let fd = libc::open(c"/proc/self/cgroup".as_ptr(), libc::O_RDONLY);
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            let got = &buf[..usize::try_from(n).unwrap_or(0)];
            libc::_exit(i32::from(!got.windows(want.len()).any(|w| w == want)))
        }
    }

    #[test]
    fn the_child_is_cloned_into_the_call_s_cgroup() {
        if !crate::sandbox::privileged() {
            return;
        }
        let root = crate::sandbox::cgroup::unified_mount().expect("a cgroup v2 hierarchy");
        let name = format!("guard-unit-clone-{}", std::process::id());
        let cgroup = crate::sandbox::cgroup::Cgroup::create(&root, &name).expect("cgroup");
        let dir = cgroup.dir_fd().expect("cgroup dir");
        let want = std::ffi::CString::new(format!("0::/{name}\n")).expect("no NUL");
        let stack = Stack::new().expect("stack");
        let arg = want.as_ptr().cast_mut().cast();
        // Not the clone(2) fallback: this kernel has clone3 and CLONE_INTO_CGROUP.
        let pid = clone_into_cgroup(
            std::os::fd::AsRawFd::as_raw_fd(&dir),
            CALL_NAMESPACES,
            &stack,
            in_cgroup,
            arg,
        )
        .expect("clone3 into the cgroup");
        let mut status = 0;
        // SAFETY: waits for the child just cloned; status is a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child was not in {name} from its start: {status:#x}"
        );
    }
}
