mod support;

mod ebpf;
mod policy;
mod sandbox;
