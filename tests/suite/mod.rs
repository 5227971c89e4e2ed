mod support;

mod audit;
mod daemon;
mod ebpf;
mod events;
mod policy;
mod sandbox;
