mod support;

mod ebpf;
mod sandbox;
