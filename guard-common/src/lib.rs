//! Types that cross the kernel boundary between `guard-ebpf` and `guard-daemon`.
//!
//! Every struct here is `#[repr(C)]`, has no implicit padding and no `bool`, and carries a
//! size assertion so that a layout change breaks the build on both sides at once.
#![no_std]

pub mod call;
pub mod event;
pub mod file;
pub mod net;
pub mod syscall;
