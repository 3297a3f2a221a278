//! Which URLs a browser may load, for tasks submitted over the API: the `[browser] allowed_urls` patterns
//! and the task's outbound policy (`agentd_computer::outbound`), checked on every request the browser makes
//! — navigations, redirects (each hop is a request of its own), subresources, `fetch`, frames of other
//! sites, workers — while it is paused (`Fetch.requestPaused`), before it leaves the browser.
//!
//! A URL is allowed when
//! - its scheme is `http`, `https`, `ws` or `wss`, it matches one of the patterns (every such URL when there
//!   are none), and its host resolves only to addresses the outbound policy allows (public ones, and what
//!   `[outbound] allow` adds) — resolved here, at the moment of the request;
//! - or it is `about:`, `data:` or `blob:` (nothing leaves the browser for them).
//!
//! Anything else (`file:`, `chrome:`, `view-source:`, `ftp:` …) is refused. The limit: the browser resolves
//! the name again itself, so a name whose answers change between the two lookups (DNS rebinding with a zero
//! time-to-live) is not caught here; `[outbound] allow` nothing internal and a resolver that refuses private
//! answers for public names close that.

use agentd_computer::outbound::Outbound;

/// The policy of one browser.
#[derive(Debug, Clone)]
pub struct UrlPolicy {
    /// Patterns of allowed URLs: `*` stands for any characters (`https://*.example.com/*`); empty: every
    /// http(s) and ws(s) URL.
    pub allowed: Vec<String>,
    /// Which addresses a URL's host may resolve to.
    pub outbound: Outbound,
}

/// A URL's parts this policy looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

/// The scheme, host and port of `url` (`None` host for URLs without one).
pub fn parts(url: &str) -> Option<Parts> {
    let (scheme, rest) = url.split_once(':')?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.strip_prefix("//")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let default_port = match scheme.as_str() {
        "https" | "wss" => 443,
        _ => 80,
    };
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => default_port,
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, p)) => (host.to_string(), p.parse().ok()?),
            None => (authority.to_string(), default_port),
        }
    };
    Some(Parts { scheme, host: host.to_ascii_lowercase(), port })
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters (ASCII case ignored).
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) =
        (pattern.to_ascii_lowercase().chars().collect(), text.to_ascii_lowercase().chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

impl UrlPolicy {
    /// The check that needs no lookup: the scheme, and the patterns. `Ok(None)` for a URL that leaves
    /// nothing to resolve (`about:`, `data:`, `blob:`), `Ok(Some(parts))` for one whose host is still to be
    /// checked.
    pub fn check_form(&self, url: &str) -> Result<Option<Parts>, String> {
        let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
        match scheme.as_str() {
            "about" | "data" | "blob" => return Ok(None),
            "http" | "https" | "ws" | "wss" => {}
            "" => return Err("it is not an absolute URL".into()),
            other => {
                return Err(format!(
                    "{other}: URLs are not opened for tasks submitted over the API (only http, https, ws, wss)"
                ));
            }
        }
        let parts = parts(url).ok_or_else(|| "it has no host".to_string())?;
        if parts.host.is_empty() {
            return Err("it has no host".into());
        }
        if !self.allowed.is_empty() && !self.allowed.iter().any(|p| glob(p, url)) {
            return Err("it matches none of the daemon's [browser] allowed_urls".into());
        }
        Ok(Some(parts))
    }

    /// The whole check: the form, then the host's addresses now. `Err` says why, for the model and the log.
    pub async fn check(&self, url: &str) -> Result<(), String> {
        let Some(parts) = self.check_form(url)? else { return Ok(()) };
        self.outbound.check_literal(&parts.host).map_err(|e| e.to_string())?;
        self.outbound.resolve(&parts.host, parts.port).await.map(drop).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(allowed: &[&str]) -> UrlPolicy {
        UrlPolicy {
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            outbound: Outbound::restricted(&[]).unwrap(),
        }
    }

    #[test]
    fn urls_come_apart() {
        assert_eq!(
            parts("https://User:pw@Example.ORG:8443/a?b#c"),
            Some(Parts { scheme: "https".into(), host: "example.org".into(), port: 8443 })
        );
        assert_eq!(parts("http://[::1]/x").map(|p| (p.host, p.port)), Some(("::1".into(), 80)));
        assert_eq!(parts("wss://h").map(|p| p.port), Some(443));
        assert_eq!(parts("about:blank"), None);
    }

    #[test]
    fn patterns_are_globs() {
        assert!(glob("https://*.example.com/*", "https://shop.example.com/cart"));
        assert!(!glob("https://*.example.com/*", "https://example.org/"));
        assert!(glob("*", "anything"));
        assert!(glob("HTTP://a/*", "http://a/"));
        assert!(!glob("http://a/b", "http://a/bc"));
        assert!(glob("http://a/*/c", "http://a/x/y/c"));
    }

    #[tokio::test]
    async fn only_the_web_outside_is_opened() {
        let policy = api(&[]);
        for refused in [
            "file:///etc/passwd",
            "chrome://settings",
            "view-source:http://example.org",
            "http://127.0.0.1:8080/",
            "http://[::1]/",
            "http://169.254.169.254/latest/meta-data",
            "https://10.0.0.1/",
            "http://localhost/",
            "relative/path",
        ] {
            assert!(policy.check(refused).await.is_err(), "{refused} was allowed");
        }
        for allowed in ["about:blank", "data:text/html,hi", "blob:https://example.org/1", "http://93.184.216.34/"] {
            assert!(policy.check(allowed).await.is_ok(), "{allowed} was refused");
        }
        let patterned = api(&["https://*.example.org/*"]);
        let refusal = patterned.check("http://93.184.216.34/").await.unwrap_err();
        assert!(refusal.contains("allowed_urls"), "{refusal}");
        let inside = UrlPolicy { allowed: vec![], outbound: Outbound::restricted(&["127.0.0.1".into()]).unwrap() };
        assert!(inside.check("http://127.0.0.1:9/").await.is_ok());
        assert!(inside.check("http://127.0.0.2:9/").await.is_err());
    }
}
