mod support;

mod abuse;
mod approval;
mod audit;
mod daemon;
mod ebpf;
mod escape;
mod events;
mod hook;
mod install;
mod mcp;
mod policy;
mod python;
mod sandbox;
