mod support;

mod audit;
mod ebpf;
