//! guard's end-to-end tests. Privileged tests skip with a reason when not root, and fail
//! instead of skipping under `CI=true`.
#![allow(
    clippy::too_many_lines,
    reason = "a test reads as its scenario, each attack beside its control"
)]
mod suite;
