//! The address guard: which URLs and addresses `fetch_url_content` may reach.
//!
//! Pure checks (scheme, credentials, port, host name, literal IP) run on every URL before
//! anything is sent, and [`GuardResolver`] vets every address a host name resolves to and
//! hands reqwest only vetted ones, so the address connected to is the address checked (no
//! second lookup, no DNS-rebinding window). The response's peer address is checked once more
//! by the caller. `web.allow` opens hosts or address ranges on purpose (an intranet wiki, a
//! test server). Nothing here decides *whether* a call may run: that is the policy's job.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use url::{Host, Url};

pub use crate::config::AllowEntry;

/// Why a URL or address is refused, in words for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The complete explanation.
    pub message: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refused {}

/// A host name lookup that failed (not a refusal).
#[derive(Debug)]
pub struct DnsFailed {
    pub host: String,
    pub detail: String,
}

impl fmt::Display for DnsFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not resolve the host name \"{}\" ({}). Check the spelling of the URL; the \
             site may not exist",
            self.host, self.detail
        )
    }
}

impl std::error::Error for DnsFailed {}

/// The compiled guard: the allowlist plus the fixed rules.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allow: Vec<AllowEntry>,
}

impl Guard {
    /// Compiles `web.allow` (validated with the configuration; a bad entry is skipped here).
    pub fn new(allow: &[String]) -> Guard {
        Guard {
            allow: allow
                .iter()
                .filter_map(|e| AllowEntry::parse(e).ok())
                .collect(),
        }
    }

    /// Whether `web.allow` names this host.
    fn host_allowed(&self, host: &str) -> bool {
        let host = normalise_host(host);
        self.allow.iter().any(|e| match e {
            AllowEntry::Host(h) => *h == host,
            AllowEntry::Subdomains(d) => host
                .strip_suffix(d.as_str())
                .is_some_and(|rest| rest.ends_with('.')),
            AllowEntry::Range(_) => false,
        })
    }

    /// Whether `web.allow` covers this address.
    fn addr_allowed(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.allow.iter().any(|e| match e {
            AllowEntry::Range(net) => net.contains(&ip),
            _ => false,
        })
    }

    /// Everything that can be said about a URL without a DNS lookup: scheme, credentials,
    /// port, the host name and a literal IP address (which is never resolved, so it is
    /// checked here).
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        check_scheme(url)?;
        check_credentials(url)?;
        let host_text = url.host_str().unwrap_or_default().to_string();
        let literal = match url.host() {
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            _ => None,
        };
        let opened =
            self.host_allowed(&host_text) || literal.is_some_and(|ip| self.addr_allowed(ip));
        if let Some(port) = url.port()
            && BLOCKED_PORTS.contains(&port)
            && !opened
        {
            return Err(Refused {
                message: format!(
                    "refused: {url} uses port {port}, which belongs to a non-web service \
                         (like SSH, mail or IRC); like browsers, fetch_url_content does not \
                         send requests to such ports"
                ),
            });
        }
        match url.host() {
            None => Err(Refused {
                message: format!("refused: {url} has no host"),
            }),
            Some(Host::Ipv4(v4)) => self.check_addr(&v4.to_string(), IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => self.check_addr(&v6.to_string(), IpAddr::V6(v6)),
            Some(Host::Domain(name)) => {
                if self.host_allowed(name) {
                    return Ok(());
                }
                match blocked_name(name) {
                    Some(why) => Err(Refused {
                        message: format!(
                            "refused: the host \"{name}\" is {why}. fetch_url_content only \
                             reaches public internet sites, to protect this machine and its \
                             network.{}",
                            allow_hint(name)
                        ),
                    }),
                    None => Ok(()),
                }
            }
        }
    }

    /// Checks one address `host` resolved to (or is).
    pub fn check_addr(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        if self.host_allowed(host) || self.addr_allowed(ip) {
            return Ok(());
        }
        match classify(ip) {
            None => Ok(()),
            Some(why) => {
                let shown = normalise_host(host);
                let shown = shown.trim_start_matches('[').trim_end_matches(']');
                let target = if shown == ip.to_string() {
                    format!("the address {ip}")
                } else {
                    format!("\"{shown}\", which resolves to {ip},")
                };
                Err(Refused {
                    message: format!(
                        "refused: {target} is {why}. fetch_url_content only reaches public \
                         internet addresses, to protect this machine and its network from \
                         requests it did not mean to make (SSRF).{}",
                        allow_hint(shown)
                    ),
                })
            }
        }
    }
}

fn allow_hint(host: &str) -> String {
    format!(
        " If this host is meant to be reachable, the administrator can add \"{host}\" (or its \
         address range) to web.allow in the toolpilot configuration."
    )
}

/// Only http and https.
pub fn check_scheme(url: &Url) -> Result<(), Refused> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(Refused {
            message: format!(
                "only http:// and https:// URLs can be fetched; {url} is a {other}: URL. Read \
                 workspace files with read_file instead"
            ),
        }),
    }
}

/// URLs with a user name or password are refused: a page has no business asking for them,
/// and they leak to every server on the way.
pub fn check_credentials(url: &Url) -> Result<(), Refused> {
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refused {
            message: "the URL contains a user name or password (\"user:password@host\"); URLs \
                      with credentials are refused. Fetch public pages without credentials"
                .to_string(),
        });
    }
    Ok(())
}

/// Lower-case, without a trailing dot or IPv6 brackets.
fn normalise_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Host names that must never be fetched, whatever they resolve to.
fn blocked_name(name: &str) -> Option<&'static str> {
    let n = normalise_host(name);
    let n = n.as_str();
    if n == "localhost" || n.ends_with(".localhost") {
        return Some("this machine (localhost)");
    }
    if matches!(
        n,
        "metadata.google.internal" | "metadata" | "metadata.goog" | "instance-data"
    ) || n == "instance-data.ec2.internal"
    {
        return Some("a cloud metadata service (it hands out the machine's credentials)");
    }
    if n.ends_with(".internal") {
        return Some("an internal name (.internal is reserved for private networks)");
    }
    None
}

/// Ports of non-web services that browsers refuse to fetch (the Fetch standard's list).
pub const BLOCKED_PORTS: &[u16] = &[
    1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102,
    103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
    512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993,
    995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668,
    6669, 6679, 6697, 10080,
];

/// An IPv4-mapped IPv6 address is the IPv4 address (`::ffff:127.0.0.1` is `127.0.0.1`).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Why an address may not be fetched, or `None` for a public address.
pub fn classify(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4).map(str::to_string),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let table: &[([u8; 4], u8, &'static str)] = &[
        (
            [169, 254, 169, 254],
            32,
            "the cloud metadata service (it hands out the machine's credentials)",
        ),
        (
            [100, 100, 100, 200],
            32,
            "a cloud metadata service (Alibaba Cloud)",
        ),
        (
            [192, 0, 0, 192],
            32,
            "a cloud metadata service (Oracle Cloud)",
        ),
        (
            [168, 63, 129, 16],
            32,
            "Azure's wire server, a cloud metadata service (it hands out the machine's \
             configuration and certificates)",
        ),
        (
            [0, 0, 0, 0],
            8,
            "an unspecified (\"this network\") address, which reaches this machine",
        ),
        ([127, 0, 0, 0], 8, "a loopback address (this machine)"),
        ([10, 0, 0, 0], 8, "a private network address (10.0.0.0/8)"),
        (
            [172, 16, 0, 0],
            12,
            "a private network address (172.16.0.0/12)",
        ),
        (
            [192, 168, 0, 0],
            16,
            "a private network address (192.168.0.0/16)",
        ),
        (
            [100, 64, 0, 0],
            10,
            "a carrier-grade NAT address (100.64.0.0/10), private to a provider's network",
        ),
        (
            [169, 254, 0, 0],
            16,
            "a link-local address (169.254.0.0/16), used by cloud metadata services",
        ),
        (
            [192, 0, 0, 0],
            24,
            "an IETF protocol address (192.0.0.0/24), not a public host",
        ),
        (
            [192, 0, 2, 0],
            24,
            "a documentation address (192.0.2.0/24), not a real host",
        ),
        (
            [198, 51, 100, 0],
            24,
            "a documentation address (198.51.100.0/24), not a real host",
        ),
        (
            [203, 0, 113, 0],
            24,
            "a documentation address (203.0.113.0/24), not a real host",
        ),
        (
            [198, 18, 0, 0],
            15,
            "a benchmarking network address (198.18.0.0/15), not a public host",
        ),
        ([255, 255, 255, 255], 32, "the broadcast address"),
        ([224, 0, 0, 0], 4, "a multicast address (224.0.0.0/4)"),
        ([240, 0, 0, 0], 4, "a reserved address (240.0.0.0/4)"),
    ];
    table
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, why)| *why)
}

fn classify_v6(ip: Ipv6Addr) -> Option<String> {
    let seg = ip.segments();
    let embedded = |v4: Ipv4Addr, form: &str| {
        classify_v4(v4).map(|why| format!("{form} of {v4}, which is {why}"))
    };
    if ip.is_unspecified() {
        return Some("the unspecified address (::), which reaches this machine".into());
    }
    if ip.is_loopback() {
        return Some("the loopback address (::1, this machine)".into());
    }
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
        return Some(
            "the AWS metadata service (fd00:ec2::254; it hands out the machine's credentials)"
                .into(),
        );
    }
    // ::ffff:a.b.c.d, IPv4-mapped: the same as the IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return embedded(v4, "the IPv4-mapped form");
    }
    // ::a.b.c.d, the deprecated IPv4-compatible form.
    if seg[..6] == [0, 0, 0, 0, 0, 0] {
        let v4 = Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        );
        return Some(
            embedded(v4, "the IPv4-compatible form")
                .unwrap_or_else(|| "a deprecated IPv4-compatible address (::/96)".into()),
        );
    }
    // 64:ff9b::/96, NAT64: the IPv4 address in the last 32 bits.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let v4 = Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        );
        return embedded(v4, "the NAT64 form");
    }
    // 64:ff9b:1::/48, local-use NAT64 (RFC 8215): translated inside a private network.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1 {
        return Some(
            "a local-use NAT64 address (64:ff9b:1::/48), translated inside a private network"
                .into(),
        );
    }
    // 2002::/16, 6to4: the IPv4 address in bits 16..48.
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        );
        return embedded(v4, "the 6to4 form");
    }
    let table: &[(u16, u16, &str)] = &[
        // (first segment value, mask over the first segment, why)
        (
            0xfc00,
            0xfe00,
            "a unique local address (fc00::/7), private to a network",
        ),
        (0xfe80, 0xffc0, "a link-local address (fe80::/10)"),
        (
            0xfec0,
            0xffc0,
            "a site-local address (fec0::/10), private to a network",
        ),
        (0xff00, 0xff00, "a multicast address (ff00::/8)"),
    ];
    if let Some((_, _, why)) = table.iter().find(|(v, m, _)| seg[0] & m == *v) {
        return Some((*why).to_string());
    }
    if seg[0] == 0x2001 && seg[1] == 0 {
        return Some(
            "a Teredo tunnel address (2001::/32), which hides the IPv4 address it reaches".into(),
        );
    }
    if seg[0] == 0x2001 && seg[1] == 0x0db8 {
        return Some("a documentation address (2001:db8::/32), not a real host".into());
    }
    if seg[..4] == [0x0100, 0, 0, 0] {
        return Some("a discard-only address (100::/64)".into());
    }
    None
}

/// A DNS resolver for reqwest that returns only vetted addresses.
///
/// It resolves with the system resolver once, refuses the name if *any* answer is disallowed
/// (a name that mixes public and private answers is a rebinding trick, not a web site), and
/// returns the vetted addresses, which reqwest then connects to; there is no second lookup.
pub struct GuardResolver {
    pub guard: Arc<Guard>,
}

impl reqwest::dns::Resolve for GuardResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = Arc::clone(&self.guard);
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), 0)).await {
                Ok(addrs) => addrs.collect(),
                Err(e) => {
                    return Err(Box::new(DnsFailed {
                        host: host.clone(),
                        detail: e.to_string(),
                    })
                        as Box<dyn std::error::Error + Send + Sync>);
                }
            };
            if found.is_empty() {
                return Err(Box::new(DnsFailed {
                    host: host.clone(),
                    detail: "no addresses".into(),
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            for addr in &found {
                guard
                    .check_addr(&host, addr.ip())
                    .map_err(|r| Box::new(r) as Box<dyn std::error::Error + Send + Sync>)?;
            }
            Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(ip: &str, expected: Option<&str>) {
        let ip: IpAddr = ip.parse().unwrap();
        let got = classify(ip);
        match (got.as_deref(), expected) {
            (None, None) => {}
            (Some(g), Some(e)) => assert!(g.contains(e), "{ip}: got {g:?}, expected {e:?}"),
            (g, e) => panic!("{ip}: got {g:?}, expected {e:?}"),
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.215.14",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.255.255",
            "192.0.1.1",
            "198.17.255.255",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            check(ip, None);
        }
    }

    #[test]
    fn ipv4_ranges_are_refused() {
        check("127.0.0.1", Some("loopback"));
        check("127.255.255.254", Some("loopback"));
        check("10.1.2.3", Some("private network address (10.0.0.0/8)"));
        check("172.16.0.1", Some("172.16.0.0/12"));
        check("172.31.255.255", Some("172.16.0.0/12"));
        check("192.168.1.1", Some("192.168.0.0/16"));
        check("169.254.169.254", Some("cloud metadata service"));
        check("169.254.1.1", Some("link-local"));
        check("100.64.0.1", Some("carrier-grade NAT"));
        check("100.127.255.255", Some("carrier-grade NAT"));
        check("100.100.100.200", Some("Alibaba"));
        check("168.63.129.16", Some("Azure's wire server"));
        check("168.63.129.17", None);
        check("0.0.0.0", Some("unspecified"));
        check("0.1.2.3", Some("unspecified"));
        check("224.0.0.1", Some("multicast"));
        check("239.255.255.250", Some("multicast"));
        check("240.0.0.1", Some("reserved"));
        check("255.255.255.255", Some("broadcast"));
        check("192.0.0.8", Some("IETF protocol"));
        check("192.0.0.192", Some("Oracle"));
        check("198.18.0.1", Some("benchmarking"));
        check("198.19.255.255", Some("benchmarking"));
        check("192.0.2.1", Some("documentation"));
    }

    #[test]
    fn ipv6_ranges_and_embedded_ipv4_are_refused() {
        check("::1", Some("loopback"));
        check("::", Some("unspecified"));
        check("fe80::1", Some("link-local"));
        check("febf::1", Some("link-local"));
        check("fc00::1", Some("unique local"));
        check("fd12:3456::1", Some("unique local"));
        check("fd00:ec2::254", Some("AWS metadata"));
        check("ff02::1", Some("multicast"));
        check("fec0::1", Some("site-local"));
        check("::ffff:127.0.0.1", Some("IPv4-mapped form of 127.0.0.1"));
        check("::ffff:169.254.169.254", Some("metadata"));
        check("::ffff:10.0.0.1", Some("10.0.0.0/8"));
        check("::127.0.0.1", Some("IPv4-compatible form of 127.0.0.1"));
        check("::1.2.3.4", Some("IPv4-compatible"));
        check("64:ff9b::7f00:1", Some("NAT64 form of 127.0.0.1"));
        check("64:ff9b::a9fe:a9fe", Some("NAT64 form of 169.254.169.254"));
        check("64:ff9b:1::808:808", Some("local-use NAT64"));
        check("2002:7f00:1::", Some("6to4 form of 127.0.0.1"));
        check("2002:c0a8:101::1", Some("6to4 form of 192.168.1.1"));
        check("2001:0:4136:e378::1", Some("Teredo"));
        check("2001:db8::1", Some("documentation"));
        check("100::1", Some("discard-only"));
    }

    fn url_check(guard: &Guard, url: &str) -> Result<(), String> {
        guard
            .check_url(&Url::parse(url).unwrap())
            .map_err(|r| r.message)
    }

    #[test]
    fn every_spelling_of_loopback_in_a_url_is_refused() {
        let g = Guard::default();
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://017700000001/",
            "http://127.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::1]/",
            "http://0.0.0.0/",
            "http://0/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://api.localhost/",
            "http://169.254.169.254/latest/meta-data/",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://[fd00:ec2::254]/",
            "http://168.63.129.16/machine?comp=goalstate",
            "http://[::ffff:168.63.129.16]/",
        ] {
            let got = url_check(&g, url);
            assert!(
                got.as_ref().is_err_and(|m| m.starts_with("refused:")),
                "{url}: {got:?}"
            );
        }
        assert!(url_check(&g, "https://docs.rs/serde").is_ok());
        assert!(url_check(&g, "http://93.184.215.14:8080/").is_ok());
    }

    #[test]
    fn refusals_say_what_and_how_to_open_it() {
        let g = Guard::default();
        let m = url_check(&g, "http://2130706433/").unwrap_err();
        assert!(
            m.starts_with("refused: the address 127.0.0.1 is a loopback address (this machine)"),
            "{m}"
        );
        assert!(m.contains("web.allow"), "{m}");
        let m = g
            .check_addr("intranet.example", "10.0.0.5".parse().unwrap())
            .unwrap_err()
            .message;
        assert!(
            m.starts_with(
                "refused: \"intranet.example\", which resolves to 10.0.0.5, is a private"
            ),
            "{m}"
        );
    }

    #[test]
    fn literal_addresses_are_named_as_addresses() {
        let g = Guard::default();
        let m = url_check(&g, "http://[::ffff:127.0.0.1]/").unwrap_err();
        assert!(
            m.starts_with(
                "refused: the address ::ffff:127.0.0.1 is the IPv4-mapped form of 127.0.0.1, \
                 which is a loopback address (this machine)"
            ),
            "{m}"
        );
        let m = url_check(&g, "http://[::1]:8080/").unwrap_err();
        assert!(
            m.starts_with("refused: the address ::1 is the loopback address"),
            "{m}"
        );
        let g = Guard::new(&["10.0.0.0/8".into()]);
        assert!(
            url_check(&g, "http://10.1.1.1:22/").is_ok(),
            "an opened address may use any port"
        );
    }

    #[test]
    fn schemes_credentials_and_ports() {
        let g = Guard::default();
        assert!(
            url_check(&g, "file:///etc/passwd")
                .unwrap_err()
                .contains("is a file: URL")
        );
        assert!(
            url_check(&g, "ftp://example.com/x")
                .unwrap_err()
                .contains("only http:// and https://")
        );
        assert!(
            url_check(&g, "http://user:pass@example.com/")
                .unwrap_err()
                .contains("user name or password")
        );
        assert!(
            url_check(&g, "http://user@example.com/")
                .unwrap_err()
                .contains("user name or password")
        );
        assert!(
            url_check(&g, "http://example.com:22/")
                .unwrap_err()
                .contains("port 22")
        );
        assert!(url_check(&g, "http://example.com:8080/").is_ok());
    }

    #[test]
    fn the_allowlist_opens_hosts_and_ranges() {
        let g = Guard::new(&[
            "127.0.0.1".into(),
            "10.1.0.0/16".into(),
            "wiki.corp.example".into(),
            "*.lab.example".into(),
            "localhost".into(),
        ]);
        assert!(url_check(&g, "http://127.0.0.1:8080/").is_ok());
        assert!(
            url_check(&g, "http://2130706433/").is_ok(),
            "the same address"
        );
        assert!(url_check(&g, "http://[::ffff:127.0.0.1]/").is_ok());
        assert!(url_check(&g, "http://127.0.0.2/").is_err());
        assert!(url_check(&g, "http://localhost/").is_ok());
        assert!(g.check_addr("x", "10.1.2.3".parse().unwrap()).is_ok());
        assert!(g.check_addr("x", "10.2.0.1".parse().unwrap()).is_err());
        assert!(
            g.check_addr("wiki.corp.example", "10.9.9.9".parse().unwrap())
                .is_ok()
        );
        assert!(
            g.check_addr("a.lab.example", "192.168.0.1".parse().unwrap())
                .is_ok()
        );
        assert!(
            g.check_addr("lab.example", "192.168.0.1".parse().unwrap())
                .is_err()
        );
        assert!(
            g.check_addr("evil-lab.example", "192.168.0.1".parse().unwrap())
                .is_err()
        );
    }

    #[test]
    fn allow_entries_parse_or_explain() {
        assert_eq!(
            AllowEntry::parse("10.0.0.0/8"),
            Ok(AllowEntry::Range("10.0.0.0/8".parse().unwrap()))
        );
        assert_eq!(
            AllowEntry::parse("[::1]"),
            Ok(AllowEntry::Range("::1/128".parse().unwrap()))
        );
        assert_eq!(
            AllowEntry::parse("Wiki.Corp.Example."),
            Ok(AllowEntry::Host("wiki.corp.example".into()))
        );
        assert_eq!(
            AllowEntry::parse("*.corp.example"),
            Ok(AllowEntry::Subdomains("corp.example".into()))
        );
        assert!(AllowEntry::parse("10.0.0.0/33").is_err());
        assert!(AllowEntry::parse("http://x/").is_err());
        assert!(AllowEntry::parse("").is_err());
        assert!(AllowEntry::parse("a..b").is_err());
    }
}
