//! Which network addresses the server may reach: the one place that decides whether an IP
//! address is public. The agent's fetches (`threadstream_agent::fetch`), the resolver webhook
//! deliveries use ([`PublicResolver`], in `resolver.rs`) and the webhook URL check at subscription creation all ask this crate.
//!
//! An address is public unless it falls in one of the classes below; each refusal names its
//! class, as error messages show it (`refused: 127.0.0.1 is a loopback address`). The ranges
//! follow IANA's IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and later), the
//! IPv6 Address Space registry (only 2000::/3 is global unicast) and the multicast ranges.
//!
//! IPv4:
//! - 0.0.0.0/8 ("this network"): unspecified;
//! - 10/8, 172.16/12, 192.168/16: private (RFC 1918);
//! - 100.64/10: shared, CGNAT (RFC 6598);
//! - 127/8: loopback;
//! - 169.254/16: link-local (cloud metadata services live there);
//! - 192.0.0/24: IETF protocol assignments (RFC 6890), the whole block;
//! - 192.0.2/24, 198.51.100/24, 203.0.113/24: documentation (RFC 5737);
//! - 198.18/15: benchmarking (RFC 2544);
//! - 224/4: multicast;
//! - 255.255.255.255: broadcast; the rest of 240/4: reserved.
//!
//! IPv6:
//! - `::`: unspecified; `::1`: loopback;
//! - forms that carry an IPv4 address are judged by that address: IPv4-mapped
//!   (`::ffff:0:0/96`), IPv4-compatible (`::/96`), NAT64's well-known prefix (`64:ff9b::/96`,
//!   RFC 6052) and 6to4 (`2002::/16`, RFC 3056, the IPv4 address in bits 16 to 47);
//! - 64:ff9b:1::/48: local-use NAT64 (RFC 8215), refused whole (where the IPv4 address sits
//!   depends on the local prefix length);
//! - 100::/64: discard-only (RFC 6666);
//! - ff00::/8: multicast; fe80::/10: link-local; fec0::/10: site-local; fc00::/7: unique-local;
//! - anything else outside 2000::/3 (global unicast): reserved (this also covers the rest of
//!   64:ff9b::/32, 100::/8, the SRv6 SIDs of 5f00::/16 and the IPv4-translated ::ffff:0:0:0/96);
//! - 2001:db8::/32 and 3fff::/20: documentation (RFC 3849, RFC 9637);
//! - 2001::/32: Teredo (RFC 4380); 2001:2::/48: benchmarking (RFC 5180); the rest of
//!   2001::/23: IETF protocol assignments (RFC 2928), the whole block, as 192.0.0/24 is.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod resolver;

pub use resolver::{public_addresses, PublicResolver, ResolveError};

/// `None` when `ip` is public and may be reached; otherwise its class, with its article
/// (`"a loopback"`, `"an unspecified"`), to be followed by "address".
pub fn non_public_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

/// Whether `ip` is public: it may be reached.
pub fn is_public(ip: IpAddr) -> bool {
    non_public_class(ip).is_none()
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    Some(match (a, b, c, d) {
        (0, ..) => "an unspecified",
        (10, ..) | (172, 16..=31, ..) | (192, 168, ..) => "a private",
        (100, 64..=127, ..) => "a shared (CGNAT)",
        (127, ..) => "a loopback",
        (169, 254, ..) => "a link-local",
        (192, 0, 0, _) => "an IETF protocol-assignment",
        (192, 0, 2, _) | (198, 51, 100, _) | (203, 0, 113, _) => "a documentation",
        (198, 18..=19, ..) => "a benchmarking",
        (224..=239, ..) => "a multicast",
        (255, 255, 255, 255) => "a broadcast",
        (240..=255, ..) => "a reserved",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 address carries, in the forms that reach it: IPv4-mapped,
/// IPv4-compatible (`::` and `::1` excepted), NAT64's well-known prefix and 6to4.
fn carried_v4(s: [u16; 8]) -> Option<Ipv4Addr> {
    let v4 = |hi: u16, lo: u16| Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => v4(hi, lo),
        [0, 0, 0, 0, 0, 0, 0, 0..=1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => v4(hi, lo),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => v4(hi, lo),
        [0x2002, hi, lo, ..] => v4(hi, lo),
        _ => None,
    }
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("an unspecified");
    }
    if ip.is_loopback() {
        return Some("a loopback");
    }
    if let Some(v4) = carried_v4(s) {
        return v4_class(v4);
    }
    Some(match s {
        [0x64, 0xff9b, 1, ..] => "a local-use NAT64",
        [0x100, 0, 0, 0, ..] => "a discard-only",
        [0xff00..=0xffff, ..] => "a multicast",
        [0xfe80..=0xfebf, ..] => "a link-local",
        [0xfec0..=0xfeff, ..] => "a site-local (private)",
        [0xfc00..=0xfdff, ..] => "a unique-local (private)",
        [first, ..] if !(0x2000..=0x3fff).contains(&first) => "a reserved",
        [0x2001, 0x0db8, ..] | [0x3fff, 0..=0x0fff, ..] => "a documentation",
        [0x2001, 0, ..] => "a Teredo",
        [0x2001, 2, 0, ..] => "a benchmarking",
        [0x2001, 0..=0x01ff, ..] => "an IETF protocol-assignment",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(address, expected class)` pairs: `None` is public.
    fn check(cases: &[(&str, Option<&str>)]) {
        for &(addr, expected) in cases {
            let ip: IpAddr = addr.parse().unwrap_or_else(|_| panic!("{addr} parses"));
            assert_eq!(non_public_class(ip), expected, "{addr}");
            assert_eq!(is_public(ip), expected.is_none(), "{addr}");
        }
    }

    // IPv4, a test per class: its first and last address, and the addresses just outside.

    #[test]
    fn v4_unspecified() {
        check(&[
            ("0.0.0.0", Some("an unspecified")),
            ("0.255.255.255", Some("an unspecified")),
            ("1.0.0.0", None),
        ]);
    }

    #[test]
    fn v4_private() {
        check(&[
            ("10.0.0.0", Some("a private")),
            ("10.255.255.255", Some("a private")),
            ("9.255.255.255", None),
            ("11.0.0.0", None),
            ("172.16.0.0", Some("a private")),
            ("172.31.255.255", Some("a private")),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("192.168.0.0", Some("a private")),
            ("192.168.255.255", Some("a private")),
            ("192.167.255.255", None),
            ("192.169.0.0", None),
        ]);
    }

    #[test]
    fn v4_shared_cgnat() {
        check(&[
            ("100.64.0.0", Some("a shared (CGNAT)")),
            ("100.127.255.255", Some("a shared (CGNAT)")),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
        ]);
    }

    #[test]
    fn v4_loopback() {
        check(&[
            ("127.0.0.0", Some("a loopback")),
            ("127.0.0.1", Some("a loopback")),
            ("127.255.255.255", Some("a loopback")),
            ("126.255.255.255", None),
            ("128.0.0.0", None),
        ]);
    }

    #[test]
    fn v4_link_local() {
        check(&[
            ("169.254.0.0", Some("a link-local")),
            ("169.254.169.254", Some("a link-local")),
            ("169.254.255.255", Some("a link-local")),
            ("169.253.255.255", None),
            ("169.255.0.0", None),
        ]);
    }

    #[test]
    fn v4_ietf_protocol_assignments() {
        check(&[
            ("192.0.0.0", Some("an IETF protocol-assignment")),
            ("192.0.0.9", Some("an IETF protocol-assignment")),
            ("192.0.0.170", Some("an IETF protocol-assignment")),
            ("192.0.0.255", Some("an IETF protocol-assignment")),
            ("191.255.255.255", None),
            ("192.0.1.0", None),
        ]);
    }

    #[test]
    fn v4_documentation() {
        check(&[
            ("192.0.2.0", Some("a documentation")),
            ("192.0.2.255", Some("a documentation")),
            ("192.0.1.255", None),
            ("192.0.3.0", None),
            ("198.51.100.0", Some("a documentation")),
            ("198.51.100.255", Some("a documentation")),
            ("198.51.99.255", None),
            ("198.51.101.0", None),
            ("203.0.113.0", Some("a documentation")),
            ("203.0.113.255", Some("a documentation")),
            ("203.0.112.255", None),
            ("203.0.114.0", None),
        ]);
    }

    #[test]
    fn v4_benchmarking() {
        check(&[
            ("198.18.0.0", Some("a benchmarking")),
            ("198.19.255.255", Some("a benchmarking")),
            ("198.17.255.255", None),
            ("198.20.0.0", None),
        ]);
    }

    #[test]
    fn v4_multicast() {
        check(&[
            ("224.0.0.0", Some("a multicast")),
            ("239.255.255.255", Some("a multicast")),
            ("223.255.255.255", None),
            ("240.0.0.0", Some("a reserved")),
        ]);
    }

    #[test]
    fn v4_reserved_and_broadcast() {
        check(&[
            ("240.0.0.0", Some("a reserved")),
            ("255.255.255.254", Some("a reserved")),
            ("255.255.255.255", Some("a broadcast")),
            ("239.255.255.255", Some("a multicast")),
        ]);
    }

    #[test]
    fn v4_public() {
        check(&[
            ("1.1.1.1", None),
            ("8.8.8.8", None),
            ("93.184.216.34", None),
            ("192.88.99.1", None),
            ("223.255.255.254", None),
        ]);
    }

    // IPv6, a test per class.

    #[test]
    fn v6_unspecified_and_loopback() {
        check(&[
            ("::", Some("an unspecified")),
            ("::1", Some("a loopback")),
            // ::2 is IPv4-compatible 0.0.0.2.
            ("::2", Some("an unspecified")),
        ]);
    }

    #[test]
    fn v6_link_local() {
        check(&[
            ("fe80::", Some("a link-local")),
            ("fe80::1", Some("a link-local")),
            (
                "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a link-local"),
            ),
            (
                "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a reserved"),
            ),
            ("fec0::", Some("a site-local (private)")),
        ]);
    }

    #[test]
    fn v6_site_local() {
        check(&[
            ("fec0::", Some("a site-local (private)")),
            (
                "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a site-local (private)"),
            ),
            ("ff00::", Some("a multicast")),
        ]);
    }

    #[test]
    fn v6_unique_local() {
        check(&[
            ("fc00::", Some("a unique-local (private)")),
            ("fd12:3456::1", Some("a unique-local (private)")),
            (
                "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a unique-local (private)"),
            ),
            (
                "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a reserved"),
            ),
            ("fe00::", Some("a reserved")),
        ]);
    }

    #[test]
    fn v6_multicast() {
        check(&[
            ("ff00::", Some("a multicast")),
            ("ff02::1", Some("a multicast")),
            (
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a multicast"),
            ),
            (
                "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a site-local (private)"),
            ),
        ]);
    }

    #[test]
    fn v6_documentation() {
        check(&[
            ("2001:db8::", Some("a documentation")),
            (
                "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a documentation"),
            ),
            ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", None),
            ("2001:db9::", None),
            ("3fff::", Some("a documentation")),
            (
                "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a documentation"),
            ),
            ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
            ("3fff:1000::", None),
        ]);
    }

    #[test]
    fn v6_teredo() {
        check(&[
            ("2001::", Some("a Teredo")),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some("a Teredo")),
            ("2001:0:ffff:ffff:ffff:ffff:ffff:ffff", Some("a Teredo")),
            ("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
            ("2001:1::", Some("an IETF protocol-assignment")),
        ]);
    }

    #[test]
    fn v6_benchmarking() {
        check(&[
            ("2001:2::", Some("a benchmarking")),
            ("2001:2:0:ffff:ffff:ffff:ffff:ffff", Some("a benchmarking")),
            (
                "2001:1:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("an IETF protocol-assignment"),
            ),
            ("2001:2:1::", Some("an IETF protocol-assignment")),
        ]);
    }

    #[test]
    fn v6_ietf_protocol_assignments() {
        check(&[
            ("2001:1::1", Some("an IETF protocol-assignment")),
            ("2001:4:112::1", Some("an IETF protocol-assignment")),
            ("2001:20::1", Some("an IETF protocol-assignment")),
            (
                "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("an IETF protocol-assignment"),
            ),
            ("2001:200::", None),
        ]);
    }

    #[test]
    fn v6_discard_only() {
        check(&[
            ("100::", Some("a discard-only")),
            ("100::ffff:ffff:ffff:ffff", Some("a discard-only")),
            // Outside the /64 but still outside 2000::/3 (100:0:0:1::/64 is the dummy prefix).
            ("100:0:0:1::", Some("a reserved")),
            ("ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("a reserved")),
        ]);
    }

    #[test]
    fn v6_outside_global_unicast_is_reserved() {
        check(&[
            ("1::1", Some("a reserved")),
            (
                "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("a reserved"),
            ),
            ("2000::", None),
            ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
            ("4000::", Some("a reserved")),
            ("5f00::1", Some("a reserved")),
            // IPv4-translated (SIIT), not a form that reaches the IPv4 address.
            ("::ffff:0:7f00:1", Some("a reserved")),
            ("::1:0:0:0", Some("a reserved")),
        ]);
    }

    #[test]
    fn v6_public() {
        check(&[
            ("2606:4700::1111", None),
            ("2001:4860:4860::8888", None),
            ("2620:4f:8000::1", None),
            ("2a00:1450:4001:80b::200e", None),
        ]);
    }

    #[test]
    fn v6_ipv4_mapped_and_compatible() {
        check(&[
            ("::ffff:127.0.0.1", Some("a loopback")),
            ("::ffff:10.0.0.1", Some("a private")),
            ("::ffff:169.254.169.254", Some("a link-local")),
            ("::ffff:0.0.0.0", Some("an unspecified")),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some("a loopback")),
            ("::10.0.0.1", Some("a private")),
            ("::8.8.8.8", None),
            // Just outside ::ffff:0:0/96: not mapped, outside 2000::/3.
            ("::fffe:808:808", Some("a reserved")),
            ("0:0:0:0:1:ffff:808:808", Some("a reserved")),
        ]);
    }

    #[test]
    fn v6_nat64() {
        check(&[
            ("64:ff9b::7f00:1", Some("a loopback")),
            ("64:ff9b::a00:1", Some("a private")),
            ("64:ff9b::a9fe:a9fe", Some("a link-local")),
            ("64:ff9b::808:808", None),
            ("64:ff9b::8.8.8.8", None),
            // Just outside 64:ff9b::/96: the rest of 64:ff9b::/32 is not global unicast.
            ("64:ff9b::1:808:808", Some("a reserved")),
            ("64:ff9b:0:ffff::808:808", Some("a reserved")),
            ("64:ff9a:ffff:ffff:ffff:ffff:808:808", Some("a reserved")),
            // Local-use NAT64, 64:ff9b:1::/48: refused whatever it carries.
            ("64:ff9b:1::808:808", Some("a local-use NAT64")),
            (
                "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
                Some("a local-use NAT64"),
            ),
            ("64:ff9b:2::808:808", Some("a reserved")),
        ]);
    }

    #[test]
    fn v6_6to4() {
        check(&[
            ("2002:7f00:1::", Some("a loopback")),
            ("2002:a00:1::1", Some("a private")),
            ("2002:a9fe:a9fe::", Some("a link-local")),
            ("2002:c000:204::1", Some("a documentation")),
            ("2002:808:808::1", None),
            ("2002:808:808:ffff:ffff:ffff:ffff:ffff", None),
            // Just outside 2002::/16.
            ("2001:ffff:7f00:1::", None),
            ("2003:7f00:1::", None),
        ]);
    }

    /// Every IPv4 form an IPv6 address can carry is judged as the IPv4 address itself.
    #[test]
    fn carried_ipv4_is_judged_as_itself() {
        let samples = [
            "0.0.0.2",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "1.1.1.1",
            "8.8.8.8",
            "100.128.0.1",
        ];
        for s in samples {
            let v4: Ipv4Addr = s.parse().unwrap();
            let class = non_public_class(IpAddr::V4(v4));
            let [a, b, c, d] = v4.octets();
            let hi = u16::from_be_bytes([a, b]);
            let lo = u16::from_be_bytes([c, d]);
            let forms = [
                ("mapped", v4.to_ipv6_mapped()),
                ("compatible", v4.to_ipv6_compatible()),
                ("NAT64", Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo)),
                ("6to4", Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1)),
            ];
            for (form, v6) in forms {
                assert_eq!(non_public_class(IpAddr::V6(v6)), class, "{s} {form} ({v6})");
            }
        }
    }
}
