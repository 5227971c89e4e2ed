mod support;

mod audit;
mod ebpf;
mod policy;
mod sandbox;
