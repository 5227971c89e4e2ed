//! guard: decide, confine and watch the tool calls of AI agents.
pub mod cgroup;
pub mod decision;
pub mod detect;
pub mod intent;
pub mod monitor;
pub mod plan;
pub mod policy;
