//! Classes of addresses no call reaches by accident: the cloud metadata endpoints (which hand
//! out the host's own credentials) and, for a host *name*, the host's own and its network's
//! private addresses. A name is the outside world's to answer, and one that answers with
//! `127.0.0.1` or `10.0.0.5` is DNS rebinding: a call approved for `api.example.com` would reach
//! a service on the host or its network. Such answers are a destination only where the tool
//! names the address itself; `localhost` (and `*.localhost`, RFC 6761) is the host's own name.

use std::net::IpAddr;

/// The cloud metadata endpoints: AWS, GCP and Azure (`169.254.169.254`), AWS over IPv6
/// (`fd00:ec2::254`), ECS task credentials (`169.254.170.2`), Alibaba (`100.100.100.200`).
pub fn is_metadata(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => matches!(
            v4.octets(),
            [169, 254, 169, 254] | [169, 254, 170, 2] | [100, 100, 100, 200]
        ),
        IpAddr::V6(v6) => v6.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254],
    }
}

/// Whether the network `net`/`len` holds a cloud metadata endpoint without being that very
/// address.
pub fn holds_metadata(net: IpAddr, len: u8) -> bool {
    const ENDPOINTS: [&str; 4] = [
        "169.254.169.254",
        "169.254.170.2",
        "100.100.100.200",
        "fd00:ec2::254",
    ];
    ENDPOINTS
        .iter()
        .filter_map(|e| e.parse::<IpAddr>().ok())
        .any(|e| holds(net, len, e) && len < full(e))
}

/// Whether `ip` is the host's own or its network's, or no host's: loopback, link-local,
/// private (RFC 1918, RFC 4193), shared (RFC 6598), unspecified, `0.0.0.0/8`, IETF and
/// benchmarking ranges, multicast, reserved and broadcast, a metadata endpoint; and an IPv6
/// address that carries an IPv4 one (mapped, compatible, NAT64 `64:ff9b::/96`, 6to4
/// `2002::/16`) when that one is.
pub fn is_internal(ip: IpAddr) -> bool {
    if is_metadata(ip) {
        return true;
    }
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_private()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (b == 18 || b == 19))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let o = v6.octets();
            let carried = |at: usize| {
                is_internal(IpAddr::V4([o[at], o[at + 1], o[at + 2], o[at + 3]].into()))
            };
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[..6] == [0; 6] && carried(12))
                || (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && carried(12))
                || (s[0] == 0x2002 && carried(2))
        }
    }
}

/// Whether `name`'s answer `ip` may be a destination of a call whose literal addresses and
/// networks are `literal` (an address is a network of its full length): any outside address;
/// an internal one only for `localhost`'s loopback, or where the call names that address or
/// a network that holds it.
pub fn answer_allowed(name: &str, ip: IpAddr, literal: &[(IpAddr, u8)]) -> bool {
    if !is_internal(ip) || literal.iter().any(|&(net, len)| holds(net, len, ip)) {
        return true;
    }
    let localhost = name == "localhost" || name.ends_with(".localhost");
    localhost && ip.to_canonical().is_loopback()
}

/// The length of a network that is `ip` alone.
pub fn full(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// `addr` with all but its first `len` bits zero, when `len` fits its family.
pub fn network(addr: IpAddr, len: u8) -> Option<IpAddr> {
    match addr {
        IpAddr::V4(v4) if len <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            Some(IpAddr::V4((u32::from(v4) & mask).into()))
        }
        IpAddr::V6(v6) if len <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            Some(IpAddr::V6((u128::from(v6) & mask).into()))
        }
        _ => None,
    }
}

/// Whether the network `net`/`len` holds `ip` (of the same family).
pub fn holds(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    let same_family = net.is_ipv4() == ip.is_ipv4();
    same_family && network(ip, len) == network(net, len)
}

/// `"10.0.0.0/8"` or `"fd00::/8"`: the network, its host bits zero, and its length; `Err`
/// for a length past the family's or host bits set (a typo for another network).
pub fn parse_network(text: &str) -> Option<Result<(IpAddr, u8), String>> {
    let (addr, len) = text.split_once('/')?;
    let parsed = addr.parse::<IpAddr>().ok().zip(len.parse::<u8>().ok());
    let Some((addr, len)) = parsed else {
        return Some(Err(format!("{text}: expected an address/length network")));
    };
    Some(match network(addr, len) {
        None => Err(format!(
            "{text}: a network is 0 to 32 (IPv4) or 128 (IPv6) bits long"
        )),
        Some(net) if net != addr => {
            Err(format!("{text}: host bits set; the network is {net}/{len}"))
        }
        Some(net) => Ok((net, len)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn internal_answers_of_a_name_are_refused_unless_named() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.5",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(
                !answer_allowed("api.example.com", ip(internal), &[]),
                "{internal}"
            );
        }
        assert!(answer_allowed("api.example.com", ip("93.184.216.34"), &[]));
        assert!(answer_allowed(
            "db.internal",
            ip("10.0.0.5"),
            &[(ip("10.0.0.5"), 32)]
        ));
        assert!(answer_allowed(
            "db.internal",
            ip("10.0.0.5"),
            &[(ip("10.0.0.0"), 8)]
        ));
        assert!(!answer_allowed(
            "db.internal",
            ip("10.1.0.5"),
            &[(ip("10.0.0.0"), 16)]
        ));
        assert!(answer_allowed("localhost", ip("127.0.0.1"), &[]));
        assert!(answer_allowed("localhost", ip("::1"), &[]));
        assert!(!answer_allowed("localhost", ip("10.0.0.5"), &[]));
        assert!(is_metadata(ip("::ffff:169.254.169.254")));
        for carried in [
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "::127.0.0.1",
            "::a9fe:a9fe",
            "198.18.0.1",
            "240.0.0.1",
            "224.0.0.1",
        ] {
            assert!(is_internal(ip(carried)), "{carried}");
        }
        assert!(
            !is_internal(ip("64:ff9b::5db8:d822")),
            "NAT64 of an outside address"
        );
        assert_eq!(parse_network("10.0.0.0/8"), Some(Ok((ip("10.0.0.0"), 8))));
        assert_eq!(parse_network("fd00::/8"), Some(Ok((ip("fd00::"), 8))));
        assert!(parse_network("10.0.0.1/8").is_some_and(|r| r.is_err()));
        assert!(parse_network("10.0.0.0/33").is_some_and(|r| r.is_err()));
        assert!(parse_network("10.0.0.0").is_none());
        assert!(holds_metadata(ip("0.0.0.0"), 0));
        assert!(holds_metadata(ip("169.254.0.0"), 16));
        assert!(!holds_metadata(ip("169.254.169.254"), 32));
        assert!(!holds_metadata(ip("10.0.0.0"), 8));
        assert!(!is_metadata(ip("169.254.169.253")));
    }
}
