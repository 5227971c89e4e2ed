mod support;

mod audit;
mod daemon;
mod ebpf;
mod policy;
mod sandbox;
