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
mod install;
mod judges;
mod policy;
mod sandbox;
