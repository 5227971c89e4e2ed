//! Empty on the host: this crate exists as a build-dependency of `guard-daemon` so that cargo
//! rebuilds the daemon when the kernel programs (the `guard` binary target) change.
#![no_std]
