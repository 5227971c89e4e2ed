//! guard's kernel programs.
//!
//! Every program starts by looking up the current task's cgroup id in `CALLS`. A process the
//! guard does not watch is not found there and returns at once: that lookup is the whole cost
//! guard imposes on the rest of the host.
#![no_std]
#![no_main]
// atomic_or: the BPF target lacks AtomicU64::fetch_or (see syscall.rs). Built with nightly.
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod exec;
mod ident;
mod lock;
mod maps;
mod net;
mod open;
mod packet;
mod refused;
mod signal;
mod sock;
mod syscall;
mod task;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any program that could reach a panic, so this is never called.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
