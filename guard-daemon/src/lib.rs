//! guard: decide, confine and watch the tool calls of AI agents.
pub mod audit;
pub mod cgroup;
pub mod client;
pub mod conn;
pub mod decision;
pub mod detect;
pub mod events;
pub mod intent;
pub mod monitor;
pub mod plan;
pub mod policy;
pub mod protocol;
pub mod sandbox;
