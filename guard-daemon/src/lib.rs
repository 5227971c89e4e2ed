//! guard: decide, confine and watch the tool calls of AI agents.
pub mod cgroup;
pub mod client;
pub mod conn;
pub mod events;
pub mod monitor;
pub mod plan;
pub mod protocol;
pub mod sandbox;
