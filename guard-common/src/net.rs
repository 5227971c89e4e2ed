//! Keys of the per-call destination allow-lists read by the `cgroup/connect*` programs.
//!
//! Addresses and ports are stored exactly as `bpf_sock_addr` holds them: addresses in network
//! byte order, as the raw words read from the context, so the kernel side compares without
//! swapping. Ports are kept in host order.

/// IPPROTO_TCP.
pub const PROTO_TCP: u8 = 6;
/// IPPROTO_UDP.
pub const PROTO_UDP: u8 = 17;

/// One allowed IPv4 destination of one call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dest4 {
    pub cgroup_id: u64,
    /// `user_ip4`: the address in network byte order.
    pub addr: u32,
    /// Host byte order.
    pub port: u16,
    /// `PROTO_TCP` or `PROTO_UDP`.
    pub proto: u8,
    pub _pad: u8,
}
const _: () = assert!(core::mem::size_of::<Dest4>() == 16);

/// One allowed IPv6 destination of one call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dest6 {
    pub cgroup_id: u64,
    /// `user_ip6`: four words in network byte order.
    pub addr: [u32; 4],
    /// Host byte order.
    pub port: u16,
    pub proto: u8,
    pub _pad: [u8; 5],
}
const _: () = assert!(core::mem::size_of::<Dest6>() == 32);

/// Size of each allow-list map.
pub const MAX_DESTS: u32 = 16384;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), plain integers, explicit padding fields (sizes asserted above).
    unsafe impl aya::Pod for super::Dest4 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Dest6 {}
}
