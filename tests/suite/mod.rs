mod support;

mod ebpf;
mod policy;
