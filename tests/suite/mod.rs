mod support;

mod ebpf;
