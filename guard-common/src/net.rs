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

impl Dest4 {
    /// The key of `addr:port` over `proto` for the call in `cgroup_id`.
    #[inline(always)]
    pub const fn new(cgroup_id: u64, addr: u32, port: u16, proto: u8) -> Self {
        Self {
            cgroup_id,
            addr,
            port,
            proto,
            _pad: 0,
        }
    }
}

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

impl Dest6 {
    /// The key of `[addr]:port` over `proto` for the call in `cgroup_id`.
    #[inline(always)]
    pub const fn new(cgroup_id: u64, addr: [u32; 4], port: u16, proto: u8) -> Self {
        Self {
            cgroup_id,
            addr,
            port,
            proto,
            _pad: [0; 5],
        }
    }
}

/// An IPv4 address as `user_ip4` holds it, in the sixteen address bytes events carry.
#[inline(always)]
pub fn ip4_bytes(addr: u32) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..4].copy_from_slice(&addr.to_ne_bytes());
    bytes
}

/// An IPv6 address as `user_ip6` holds it (four network-order words), in the sixteen address
/// bytes events carry.
#[inline(always)]
pub fn ip6_bytes(addr: [u32; 4]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (i, word) in addr.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    bytes
}

/// Size of each allow-list map.
pub const MAX_DESTS: u32 = 16384;

/// One allowed IPv4 network of one call (`connect = ["10.0.0.0/8:443"]`): the data of a
/// longest-prefix-match key, whose first [`NET_FIXED_BITS`] (the call, port and protocol) are
/// always matched whole and whose address is matched to the network's length. No field is
/// wider than 4 bytes: the kernel's key puts the data right after its 32-bit length.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Net4 {
    /// The cgroup id, as its two native words.
    pub cgroup_id: [u32; 2],
    /// Port (host order) in the high 16 bits, protocol in the next 8.
    pub port_proto: u32,
    /// `user_ip4`: network byte order, so the address's first bits come first.
    pub addr: u32,
}
const _: () = assert!(core::mem::size_of::<Net4>() == 16);

/// One allowed IPv6 network of one call; as [`Net4`].
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Net6 {
    pub cgroup_id: [u32; 2],
    pub port_proto: u32,
    /// `user_ip6`: four words in network byte order.
    pub addr: [u32; 4],
}
const _: () = assert!(core::mem::size_of::<Net6>() == 28);

/// The bits of a network key matched whole: the call, the port and the protocol.
pub const NET_FIXED_BITS: u32 = 96;

/// Size of each network allow-list map.
pub const MAX_NETS: u32 = 4096;

impl Net4 {
    /// The key data of `addr` (all of it) under `port` and `proto` for the call in `cgroup_id`.
    #[inline(always)]
    pub const fn new(cgroup_id: u64, addr: u32, port: u16, proto: u8) -> Self {
        Self {
            cgroup_id: [cgroup_id as u32, (cgroup_id >> 32) as u32],
            port_proto: (port as u32) << 16 | (proto as u32) << 8,
            addr,
        }
    }
}

impl Net6 {
    /// As [`Net4::new`].
    #[inline(always)]
    pub const fn new(cgroup_id: u64, addr: [u32; 4], port: u16, proto: u8) -> Self {
        Self {
            cgroup_id: [cgroup_id as u32, (cgroup_id >> 32) as u32],
            port_proto: (port as u32) << 16 | (proto as u32) << 8,
            addr,
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), plain integers, explicit padding fields (sizes asserted above).
    unsafe impl aya::Pod for super::Dest4 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Dest6 {}
    // SAFETY: repr(C), plain 32-bit words, no padding (sizes asserted above).
    unsafe impl aya::Pod for super::Net4 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Net6 {}
}

/// Where a guarded call's DNS query was addressed before the `connect4`/`sendmsg4` programs sent
/// it to guardd's responder; `recvmsg4` puts it back as the answer's source, which resolvers
/// check. Keyed by socket cookie.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsOrigin {
    /// `user_ip4`, network byte order.
    pub addr: u32,
    /// `user_port` as the context holds it (network byte order in the low 16 bits).
    pub port: u32,
}
const _: () = assert!(core::mem::size_of::<DnsOrigin>() == 8);

/// 127.0.0.1 as `user_ip4` holds it.
pub const LOOPBACK4: u32 = u32::from_ne_bytes([127, 0, 0, 1]);

/// How many DNS sockets of guarded calls are remembered at once (least recently used go).
pub const MAX_DNS_SOCKETS: u32 = 4096;

#[cfg(feature = "user")]
// SAFETY: repr(C), two u32, no padding (size asserted above).
unsafe impl aya::Pod for DnsOrigin {}
