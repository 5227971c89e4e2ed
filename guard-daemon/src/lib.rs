//! guard: decide, confine and watch the tool calls of AI agents.
pub mod audit;
pub mod cgroup;
pub mod monitor;
pub mod plan;
