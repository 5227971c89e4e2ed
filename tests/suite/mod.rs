mod support;

mod abuse;
mod approval;
mod approvers;
mod audit;
mod daemon;
mod ebpf;
mod escape;
mod events;
mod held;
mod hook;
mod install;
mod judges;
mod mcp;
mod policy;
mod python;
mod sandbox;
