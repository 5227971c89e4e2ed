mod support;

mod abuse;
mod audit;
mod daemon;
mod ebpf;
mod escape;
mod policy;
mod sandbox;
