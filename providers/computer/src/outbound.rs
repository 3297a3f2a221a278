//! Where a task may connect: the one outbound policy for everything a task names that the worker opens a
//! connection to — `http` tools, `http` verifiers, a computer-server's URL, a VNC host.
//!
//! A task run from the command line, and everything the configuration names, may reach any address
//! ([`Outbound::open`]). A task submitted over the API may not reach the machine's inside
//! ([`Outbound::restricted`]): loopback, link-local (cloud metadata services live there), private, shared
//! (carrier-grade NAT), unspecified, broadcast and multicast addresses are refused, unless the operator
//! allows an address range or a host name (`[outbound] allow`).
//!
//! The check is made on the address actually connected to, after name resolution: a caller resolves through
//! [`Outbound::resolve`] (or the HTTP client's resolver of feature `reqwest`) and connects only to what it
//! returns, so a name that resolves to a public address when the task is submitted and to `127.0.0.1` when
//! it runs is still refused. An IPv4 address written in IPv6 form (`::ffff:127.0.0.1`) is judged as the IPv4
//! address it is.
//!
//! A refusal names the host and the address, never anything the destination sent (nothing was sent to it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

/// Why a connection is refused or cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    #[error(
        "{host} is {address}, a {kind} address, which tasks submitted over the API may not reach (the operator \
         can allow it in the configuration: [outbound] allow)"
    )]
    Refused { host: String, address: IpAddr, kind: &'static str },
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
}

/// One entry of `[outbound] allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    /// An address range (`10.1.0.0/16`) or one address.
    Net(ipnet::IpNet),
    /// A host name, lower case: whatever it resolves to.
    Host(String),
}

/// The outbound policy of one task. Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbound {
    /// `None`: open; otherwise what the operator allows besides public addresses.
    restricted: Option<Arc<Vec<Allowed>>>,
}

impl Outbound {
    /// Any address (command-line tasks, what the configuration names).
    pub fn open() -> Self {
        Self { restricted: None }
    }

    /// Public addresses, and the ranges and host names in `allow` (`10.1.0.0/16`, `192.168.1.7`, `::1`,
    /// `orders.internal`). A bad entry is an error naming it.
    pub fn restricted(allow: &[String]) -> Result<Self, String> {
        let mut allowed = Vec::with_capacity(allow.len());
        for entry in allow {
            allowed.push(parse_allowed(entry)?);
        }
        Ok(Self { restricted: Some(Arc::new(allowed)) })
    }

    /// Whether this policy refuses anything.
    pub fn is_restricted(&self) -> bool {
        self.restricted.is_some()
    }

    /// Whether `host` (as the task named it) may be reached at `address`.
    pub fn check(&self, host: &str, address: IpAddr) -> Result<(), OutboundError> {
        let Some(allowed) = &self.restricted else { return Ok(()) };
        let address = canonical(address);
        let Some(kind) = internal_kind(address) else { return Ok(()) };
        let host_lower = host.trim_end_matches('.').to_ascii_lowercase();
        let permitted = allowed.iter().any(|a| match a {
            Allowed::Net(net) => net.contains(&address),
            Allowed::Host(name) => *name == host_lower,
        });
        if permitted { Ok(()) } else { Err(OutboundError::Refused { host: host.to_string(), address, kind }) }
    }

    /// Checks a host written as an address (`127.0.0.1`, `[::1]`); a name passes here and is checked when it
    /// is resolved. For URLs, whose IP-literal hosts an HTTP client connects to without resolving.
    pub fn check_literal(&self, host: &str) -> Result<(), OutboundError> {
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(address) => self.check(host, address),
            Err(_) => Ok(()),
        }
    }

    /// The addresses of `host:port` this policy allows, in the resolver's order (blocking: for a thread that
    /// may block). An error when it resolves to nothing, or to nothing allowed (the first refusal).
    pub fn resolve_blocking(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, OutboundError> {
        let found = (host.trim_start_matches('[').trim_end_matches(']'), port)
            .to_socket_addrs()
            .map_err(|e| OutboundError::Resolve { host: host.to_string(), reason: e.to_string() })?;
        self.keep_allowed(host, found)
    }

    /// As [`Outbound::resolve_blocking`], on the async runtime.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, OutboundError> {
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let found = tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| OutboundError::Resolve { host: host.to_string(), reason: e.to_string() })?;
        self.keep_allowed(host, found)
    }

    fn keep_allowed(
        &self,
        host: &str,
        found: impl Iterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, OutboundError> {
        let mut kept = Vec::new();
        let mut refused = None;
        for address in found {
            match self.check(host, address.ip()) {
                Ok(()) => kept.push(address),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        match (kept.is_empty(), refused) {
            (false, _) => Ok(kept),
            (true, Some(refusal)) => Err(refusal),
            (true, None) => {
                Err(OutboundError::Resolve { host: host.to_string(), reason: "the name resolves to no address".into() })
            }
        }
    }
}

fn parse_allowed(entry: &str) -> Result<Allowed, String> {
    let trimmed = entry.trim();
    if let Ok(net) = trimmed.parse::<ipnet::IpNet>() {
        return Ok(Allowed::Net(net.trunc()));
    }
    if let Ok(address) = trimmed.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(Allowed::Net(ipnet::IpNet::from(canonical(address))));
    }
    let valid_name = !trimmed.is_empty()
        && trimmed.len() <= 253
        && trimmed.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
        });
    if valid_name {
        Ok(Allowed::Host(trimmed.to_ascii_lowercase()))
    } else {
        Err(format!("{entry:?} is neither an address range (10.0.0.0/8), an address nor a host name"))
    }
}

/// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is that IPv4 address.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// What kind of internal address `address` is, or `None` for a public one.
pub fn internal_kind(address: IpAddr) -> Option<&'static str> {
    match canonical(address) {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(a: Ipv4Addr) -> Option<&'static str> {
    let [first, second, ..] = a.octets();
    if a.is_loopback() {
        Some("loopback")
    } else if a.is_unspecified() || first == 0 {
        Some("unspecified")
    } else if a.is_link_local() {
        Some("link-local")
    } else if a.is_private() {
        Some("private")
    } else if first == 100 && (64..128).contains(&second) {
        Some("shared (carrier-grade NAT)")
    } else if a.is_broadcast() {
        Some("broadcast")
    } else if a.is_multicast() {
        Some("multicast")
    } else if first >= 240 {
        Some("reserved")
    } else {
        None
    }
}

fn internal_v6(a: Ipv6Addr) -> Option<&'static str> {
    let first = a.segments()[0];
    if a.is_loopback() {
        Some("loopback")
    } else if a.is_unspecified() {
        Some("unspecified")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private")
    } else if a.is_multicast() {
        Some("multicast")
    } else if let Some(v4) = a.to_ipv4() {
        // The deprecated IPv4-compatible form (`::a.b.c.d`), and NAT64's well-known prefix.
        internal_v4(v4)
    } else if a.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., hi, lo] = a.segments();
        internal_v4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)))
    } else {
        None
    }
}

/// The HTTP client's side of the policy (reqwest): a resolver that returns only allowed addresses, and a
/// redirect check for the hosts a redirect names.
#[cfg(feature = "reqwest")]
pub mod http {
    use super::{Outbound, OutboundError};

    /// Applies `policy` to a client being built: names resolve through it (so the address connected is the
    /// address checked), no proxy from the environment is used (a proxy would connect in the client's
    /// place), and redirects are followed (at most `max_redirects`, 0 for none) only to hosts it allows.
    /// Requests must also pass [`check_url`] before they are sent: an IP-literal URL is not resolved.
    pub fn apply(builder: reqwest::ClientBuilder, policy: &Outbound, max_redirects: usize) -> reqwest::ClientBuilder {
        if !policy.is_restricted() {
            let redirect = match max_redirects {
                0 => reqwest::redirect::Policy::none(),
                n => reqwest::redirect::Policy::limited(n),
            };
            return builder.redirect(redirect);
        }
        let resolver = Resolver(policy.clone());
        let for_redirects = policy.clone();
        builder.no_proxy().dns_resolver(resolver).redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if max_redirects == 0 {
                return attempt.stop();
            }
            if attempt.previous().len() > max_redirects {
                return attempt.error(format!("more than {max_redirects} redirects"));
            }
            match check_url(&for_redirects, attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => {
                    let message = format!("a redirect to {}: {e}", attempt.url());
                    attempt.error(message)
                }
            }
        }))
    }

    /// Checks a URL's host when it is an address (names are checked as they resolve).
    pub fn check_url(policy: &Outbound, url: &reqwest::Url) -> Result<(), OutboundError> {
        match url.host() {
            Some(url::Host::Ipv4(v4)) => policy.check(&v4.to_string(), v4.into()),
            Some(url::Host::Ipv6(v6)) => policy.check(&v6.to_string(), v6.into()),
            _ => Ok(()),
        }
    }

    /// The refusal inside a reqwest error, if the policy is why the request failed.
    pub fn refusal(error: &reqwest::Error) -> Option<&OutboundError> {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = source {
            if let Some(refused) = e.downcast_ref::<OutboundError>() {
                return Some(refused);
            }
            source = e.source();
        }
        None
    }

    struct Resolver(Outbound);

    impl reqwest::dns::Resolve for Resolver {
        fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
            let policy = self.0.clone();
            let host = name.as_str().to_string();
            Box::pin(async move {
                // The port is the URL's: reqwest puts it into the addresses returned.
                let addresses = policy.resolve(&host, 0).await?;
                let addrs: reqwest::dns::Addrs = Box::new(addresses.into_iter());
                Ok(addrs)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api() -> Outbound {
        Outbound::restricted(&[]).unwrap()
    }

    #[test]
    fn an_api_task_may_not_reach_the_inside_in_any_spelling() {
        for address in [
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "::",
            "169.254.169.254",
            "fe80::1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "fd00::1",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert!(api().check("h", ip).is_err(), "{address} was allowed");
            assert!(Outbound::open().check("h", ip).is_ok(), "{address} was refused to an open policy");
        }
        for address in ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111", "100.128.0.1"] {
            assert!(api().check("h", address.parse().unwrap()).is_ok(), "{address} was refused");
        }
    }

    #[test]
    fn the_operator_allows_ranges_addresses_and_names() {
        let policy =
            Outbound::restricted(&["10.1.0.0/16".into(), "127.0.0.1".into(), "Orders.Internal".into()]).unwrap();
        assert!(policy.check("x", "10.1.200.3".parse().unwrap()).is_ok());
        assert!(policy.check("x", "10.2.0.1".parse().unwrap()).is_err());
        assert!(policy.check("x", "::ffff:127.0.0.1".parse().unwrap()).is_ok());
        assert!(policy.check("x", "127.0.0.2".parse().unwrap()).is_err());
        assert!(policy.check("orders.internal.", "192.168.0.9".parse().unwrap()).is_ok());
        let error = Outbound::restricted(&["not a host!".into()]).unwrap_err();
        assert!(error.contains("not a host!"), "{error}");
    }

    #[test]
    fn a_refusal_names_the_host_the_address_and_the_way_out() {
        let error = api().check("metadata", "169.254.169.254".parse().unwrap()).unwrap_err().to_string();
        assert!(error.contains("metadata is 169.254.169.254, a link-local address"), "{error}");
        assert!(error.contains("[outbound] allow"), "{error}");
    }

    #[test]
    fn literals_are_checked_and_names_are_resolved_then_checked() {
        assert!(api().check_literal("[::1]").is_err());
        assert!(api().check_literal("2130706433").is_ok(), "not an address literal: checked when it resolves");
        assert!(api().check_literal("example.org").is_ok());
        let refused = api().resolve_blocking("localhost", 80).unwrap_err();
        assert!(matches!(refused, OutboundError::Refused { .. }), "{refused:?}");
        assert!(Outbound::open().resolve_blocking("localhost", 80).is_ok());
    }

    /// A server on `ip` that answers every request with `reply` (raw HTTP).
    #[cfg(feature = "reqwest")]
    async fn server(ip: &str, reply: String) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer).await;
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        port
    }

    #[cfg(feature = "reqwest")]
    #[tokio::test]
    async fn names_resolve_through_the_policy_and_every_redirect_is_checked() {
        let inside = "HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\ninside".to_string();
        let target = server("127.0.0.2", inside.clone()).await;
        let redirect = format!(
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.2:{target}/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        let start = server("127.0.0.1", redirect).await;
        let plain = server("127.0.0.1", inside).await;
        let policy = Outbound::restricted(&["127.0.0.1".into()]).unwrap();
        let client = http::apply(reqwest::Client::builder(), &policy, 10).build().unwrap();
        // A name that resolves to an allowed address (and to a refused one: `::1`, which is dropped).
        let body = client.get(format!("http://localhost:{plain}/")).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "inside");
        // A redirect to an address the policy refuses ends the request, naming why.
        let error = client.get(format!("http://127.0.0.1:{start}/")).send().await.unwrap_err();
        let message = format!("{error:?}");
        assert!(message.contains("127.0.0.2") && message.contains("loopback"), "{message}");
        // The same redirect is followed by an open client.
        let open = http::apply(reqwest::Client::builder(), &Outbound::open(), 10).build().unwrap();
        let body = open.get(format!("http://127.0.0.1:{start}/")).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "inside");
        // The resolver's refusal is found in the error chain.
        let refused = Outbound::restricted(&[]).unwrap();
        let client = http::apply(reqwest::Client::builder(), &refused, 0).build().unwrap();
        let error = client.get(format!("http://localhost:{plain}/")).send().await.unwrap_err();
        assert!(matches!(http::refusal(&error), Some(OutboundError::Refused { .. })), "{error:?}");
    }
}
