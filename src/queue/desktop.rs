//! Which desktop a task drives, as the key the queue uses to run one task per desktop at a time.
//!
//! A desktop (a local X display, a VNC server) takes input from one task at a time: two tasks typing into
//! one screen interleave their keystrokes. Every task gets a key derived from its computer spec when it is
//! submitted ([`template`]); a claim skips a queued task whose key is held by a task running under a live
//! lease, in the claim query of each backend, so the rule holds across a daemon's workers and across the
//! nodes of a fleet sharing one queue.
//!
//! - `mock`: no key — every mock task has a desktop of its own; nor has a `browser` the task starts with a fresh
//!   profile. A `browser` with a kept profile directory is `browser-profile:DIR` on the claiming machine; one
//!   it attaches to (`cdp_url`) is `browser:host:port`, qualified like a VNC server.
//! - `vnc`: the normalized address `vnc:host:port` (host lowercased, brackets of IPv6 literals dropped). A
//!   loopback address names a server on the claiming machine, so it is qualified by its host name.
//! - `local`: the X display number (`:0`, `:0.0` and `unix:0` are one display; `monitor` is a part of the
//!   same screen and input, so it is not part of the key), qualified by the claiming worker's host name,
//!   since `:0` on two machines are two desktops. A display on another machine (`host:0`) is not qualified.
//!
//! A key stored at submission may hold placeholders for what depends on the worker that claims the task:
//! [`HOST`], [`DISPLAY`] (a local task without a display runs on the worker's `$DISPLAY`) and [`DEFAULT`]
//! (a task without a computer runs on the worker's `[defaults] computer`). The claim fills them in for the
//! claiming worker ([`DesktopScope::qualify`], and the same `replace()` in each backend's SQL) and records
//! the filled-in key on the task it runs (`desktop_held`).
//!
//! A task for the desktop pool (docs/providers.md: `{"desktop": …}`/`{"labels": …}`, or no computer on a worker with
//! `[[desktops]]`, whose [`DesktopScope::default`] is then [`POOL`]) is stored as [`POOL`] followed by its
//! request ([`DesktopSpec::encode`]). Such a key is never held; the claim picks one of the worker's free pool
//! desktops ([`PoolOffer`]) the request matches, whose own key ([`template`] of its computer, qualified) no
//! live task holds, and records that key as `desktop_held` and its name as the task's `desktop`.

use crate::task::{ComputerSpec, DesktopSpec};

/// Stands for the claiming worker's host name in a stored key.
pub const HOST: &str = "{host}";
/// Stands for the claiming worker's `$DISPLAY` (its display part, see [`display_part`]) in a stored key.
pub const DISPLAY: &str = "{display}";
/// Stands for the key of the claiming worker's default computer (a task that names none).
pub const DEFAULT: &str = "{default}";

/// Marks a stored key as a request for a desktop of the pool.
pub const POOL: &str = "{pool}";

/// A free desktop of the claiming worker's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolOffer {
    pub name: String,
    pub labels: Vec<String>,
    /// Its key, qualified for this worker (what `desktop_held` records).
    pub key: String,
}

/// The pool request of a qualified key, when it is one.
pub fn pool_request(key: &str) -> Option<DesktopSpec> {
    key.strip_prefix(POOL).map(DesktopSpec::decode)
}

/// The first offer a pool request takes whose key is not `held`; `prefer` (the desktop the task ran on last)
/// first when it is free.
pub fn choose<'a>(
    request: &DesktopSpec,
    offers: &'a [PoolOffer],
    prefer: Option<&str>,
    held: impl Fn(&str) -> bool,
) -> Option<&'a PoolOffer> {
    let takes = |o: &&PoolOffer| request.matches(&o.name, o.labels.iter().map(String::as_str)) && !held(&o.key);
    offers.iter().filter(|o| prefer == Some(o.name.as_str())).find(takes).or_else(|| offers.iter().find(takes))
}

/// What a claiming worker fills into stored keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesktopScope {
    /// The machine's host name.
    pub host: String,
    /// [`display_part`] of the worker's `$DISPLAY`.
    pub display: String,
    /// The [`template`] of the worker's default computer; empty when that is a desktop of its own (mock).
    pub default: String,
}

impl DesktopScope {
    /// This process's scope: the host name, `$DISPLAY`, and the default computer of its config.
    pub fn of_this_process(default_computer: Option<&ComputerSpec>) -> Self {
        Self::new(
            &crate::config::host_name(),
            std::env::var("DISPLAY").ok().as_deref(),
            default_computer.and_then(template).as_deref(),
        )
    }

    pub fn new(host: &str, display: Option<&str>, default: Option<&str>) -> Self {
        Self { host: host.to_string(), display: display_part(display), default: default.unwrap_or("").to_string() }
    }

    /// The key a stored template names for this worker; `None` when the task has a desktop of its own. The
    /// claim queries compute the same in SQL ([`sql_qualify`]); a test checks they agree.
    pub fn qualify(&self, template: Option<&str>) -> Option<String> {
        let key = template
            .unwrap_or("")
            .replace(DEFAULT, &self.default)
            .replace(HOST, &self.host)
            .replace(DISPLAY, &self.display);
        (!key.is_empty()).then_some(key)
    }
}

/// [`DesktopScope::qualify`] as an SQL expression over the column `column`, with the scope's default, host
/// and display bound as the parameters `default`, `host` and `display` (`$n` or `?n`, as the backend spells
/// them). `NULL` when the task has a desktop of its own.
pub fn sql_qualify(column: &str, default: &str, host: &str, display: &str) -> String {
    format!(
        "NULLIF(replace(replace(replace(COALESCE({column}, ''), '{DEFAULT}', {default}), '{HOST}', {host}), \
         '{DISPLAY}', {display}), '')"
    )
}

/// The key of the desktop a task drives, with placeholders for what depends on the worker that claims it;
/// `None` when the task has a desktop of its own (mock).
pub fn of_task(computer: Option<&ComputerSpec>) -> Option<String> {
    match computer {
        Some(computer) => template(computer),
        None => Some(DEFAULT.to_string()),
    }
}

/// The key of the desktop a computer is, with placeholders; `None` for a desktop of its own (mock).
pub fn template(computer: &ComputerSpec) -> Option<String> {
    match computer {
        ComputerSpec::Mock(_) => None,
        ComputerSpec::Local(local) => Some(match &local.display {
            Some(display) => x11_key(display),
            None => format!("{HOST}/x11:{DISPLAY}"),
        }),
        ComputerSpec::Vnc(vnc) => Some(vnc_key(&vnc.address)),
        ComputerSpec::ComputerServer(cua) => Some(cua_key(&cua.url)),
        // The worker's own session: on X11 the display `local` without `display` drives too.
        ComputerSpec::Portable(_) => Some(format!("{HOST}/x11:{DISPLAY}")),
        // A running browser the task attaches to is one computer (one task at a time, as a pool browser); a
        // kept profile directory is held by one browser at a time; a launched browser with a fresh profile is
        // the task's own.
        ComputerSpec::Browser(browser) => match (&browser.cdp_url, browser.profile.as_deref()) {
            (Some(url), _) => Some(browser_key(url)),
            (None, Some(dir)) if dir != "fresh" => Some(format!("{HOST}/browser-profile:{dir}")),
            _ => None,
        },
        ComputerSpec::Desktop(request) => Some(format!("{POOL}{}", request.encode())),
    }
}

/// What stands for a worker's `$DISPLAY` in a key: the display number of a display on this machine, the
/// whole name otherwise, `none` when it has none.
pub fn display_part(display: Option<&str>) -> String {
    match display {
        None => "none".into(),
        Some(display) => match split_display(display) {
            Some((None, number)) => number,
            Some((Some(host), number)) => format!("{host}:{number}"),
            None => display.trim().to_string(),
        },
    }
}

fn x11_key(display: &str) -> String {
    match split_display(display) {
        Some((None, number)) => format!("{HOST}/x11:{number}"),
        Some((Some(host), number)) => format!("x11:{host}:{number}"),
        None => format!("{HOST}/x11:{}", display.trim()),
    }
}

/// `[host]:number[.screen]` → (the host when it is another machine, the number).
fn split_display(display: &str) -> Option<(Option<String>, String)> {
    let (host, rest) = display.trim().rsplit_once(':')?;
    let number = rest.split('.').next().unwrap_or(rest);
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number = number.trim_start_matches('0');
    let number = if number.is_empty() { "0" } else { number }.to_string();
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    if host.is_empty() || host == "unix" || is_loopback(&host) {
        Some((None, number))
    } else {
        Some((Some(host), number))
    }
}

fn vnc_key(address: &str) -> String {
    let address = address.trim();
    let Some((host, port)) = address.rsplit_once(':') else {
        return format!("vnc:{}", address.to_ascii_lowercase());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let port = port.parse::<u16>().map_or_else(|_| port.to_string(), |p| p.to_string());
    if is_loopback(&host) { format!("{HOST}/vnc:localhost:{port}") } else { format!("vnc:{host}:{port}") }
}

/// `cua:host:port` of a computer-server URL (scheme and trailing slash dropped, the scheme's default port
/// filled in), qualified by the host name when it is on the claiming machine, as for VNC.
fn cua_key(url: &str) -> String {
    let url = url.trim().trim_end_matches('/').to_ascii_lowercase();
    let (rest, default_port) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (rest, "80"),
        (_, Some(rest)) => (rest, "443"),
        _ => (url.as_str(), "80"),
    };
    let has_port = rest.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && !p.contains(']'));
    let address = if has_port { rest.to_string() } else { format!("{rest}:{default_port}") };
    let key = vnc_key(&address);
    match key.strip_prefix(HOST) {
        Some(local) => format!("{HOST}/cua:{}", local.trim_start_matches("/vnc:")),
        None => format!("cua:{}", key.trim_start_matches("vnc:")),
    }
}

/// `browser:host:port` of a DevTools URL (`http://host:port`, `ws://host:port/devtools/…`), normalized as a
/// VNC address (a loopback one qualified by the claiming machine).
fn browser_key(url: &str) -> String {
    let lower = url.trim().to_ascii_lowercase();
    let rest = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("ws://")).unwrap_or(&lower);
    let authority = rest.split('/').next().unwrap_or_default();
    let has_port = authority.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && !p.contains(']'));
    let address = if has_port { authority.to_string() } else { format!("{authority}:80") };
    vnc_key(&address).replacen("vnc:", "browser:", 1)
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskSpec;

    fn key(computer: serde_json::Value) -> Option<String> {
        let json = serde_json::json!({"instructions": "x", "computer": computer});
        let spec = TaskSpec::parse(&json.to_string(), "t").unwrap_or_else(|e| panic!("{e}"));
        template(&spec.computer?)
    }

    fn qualify(template: &str, host: &str, display: Option<&str>) -> String {
        DesktopScope::new(host, display, None).qualify(Some(template)).unwrap_or_default()
    }

    #[test]
    fn mock_tasks_have_desktops_of_their_own() {
        assert_eq!(key(serde_json::json!({"provider": "mock", "scene": "login"})), None);
    }

    #[test]
    fn one_local_display_is_one_key_whatever_the_spelling_or_monitor() {
        let zero = key(serde_json::json!({"provider": "local", "display": ":0"}));
        assert_eq!(zero.as_deref(), Some("{host}/x11:0"));
        for same in [":0.0", "unix:0", "localhost:0", ":00", " :0.1 "] {
            assert_eq!(key(serde_json::json!({"provider": "local", "display": same})), zero, "{same}");
        }
        assert_eq!(key(serde_json::json!({"provider": "local", "display": ":0", "monitor": 1})), zero);
        assert_ne!(key(serde_json::json!({"provider": "local", "display": ":1"})), zero);
        assert_eq!(
            key(serde_json::json!({"provider": "local", "display": "Build-Box:3.0"})).as_deref(),
            Some("x11:build-box:3"),
            "a display on another machine is that machine's, whoever claims the task"
        );
    }

    #[test]
    fn local_displays_are_qualified_by_the_claiming_host() {
        let stored = key(serde_json::json!({"provider": "local", "display": ":0"})).unwrap_or_default();
        assert_eq!(qualify(&stored, "node-a", None), "node-a/x11:0");
        assert_ne!(qualify(&stored, "node-a", None), qualify(&stored, "node-b", None));
        // Without a display the task runs on the worker's $DISPLAY: the same desktop as naming it.
        let default = key(serde_json::json!({"provider": "local"})).unwrap_or_default();
        assert_eq!(qualify(&default, "node-a", Some(":0.0")), qualify(&stored, "node-a", Some(":5")));
        assert_eq!(qualify(&default, "node-a", None), "node-a/x11:none");
        // The portable provider drives the worker's own session: the same desktop as local on $DISPLAY,
        // whichever monitor it picks.
        let portable = key(serde_json::json!({"provider": "portable", "monitor": 1})).unwrap_or_default();
        assert_eq!(portable, default);
    }

    #[test]
    fn a_task_without_a_computer_takes_the_workers_default() {
        let stored = of_task(None);
        let default = key(serde_json::json!({"provider": "local", "display": ":0"}));
        let on_local = DesktopScope::new("node-a", Some(":7"), default.as_deref());
        assert_eq!(on_local.qualify(stored.as_deref()).as_deref(), Some("node-a/x11:0"));
        let on_mock = DesktopScope::new("node-a", Some(":7"), None);
        assert_eq!(on_mock.qualify(stored.as_deref()), None);
        assert_eq!(on_local.qualify(None), None, "a mock task holds no desktop");
    }

    #[test]
    fn browsers_are_keyed_by_what_they_share() {
        assert_eq!(key(serde_json::json!({"provider": "browser"})), None, "a fresh browser is the task's own");
        assert_eq!(key(serde_json::json!({"provider": "browser", "profile": "fresh"})), None);
        let kept = key(serde_json::json!({"provider": "browser", "profile": "/var/lib/agentd/p1"}));
        assert_eq!(kept.as_deref(), Some("{host}/browser-profile:/var/lib/agentd/p1"));
        let remote = key(serde_json::json!({"provider": "browser", "cdp_url": "http://Box.example:9222"}));
        assert_eq!(remote.as_deref(), Some("browser:box.example:9222"));
        let ws = key(serde_json::json!({"provider": "browser", "cdp_url": "ws://box.example:9222/devtools/browser/x"}));
        assert_eq!(ws, remote);
        let local = key(serde_json::json!({"provider": "browser", "cdp_url": "http://127.0.0.1:9222"}));
        assert_eq!(local.as_deref(), Some("{host}/browser:localhost:9222"));
    }

    #[test]
    fn computer_server_urls_are_normalized_and_loopback_is_per_host() {
        let remote = key(serde_json::json!({"provider": "computer-server", "url": "HTTP://Box-7.example:08000/"}));
        assert_eq!(remote.as_deref(), Some("cua:box-7.example:8000"));
        let https = key(serde_json::json!({"provider": "computer-server", "url": "https://box.example"}));
        assert_eq!(https.as_deref(), Some("cua:box.example:443"));
        let v6 = key(serde_json::json!({"provider": "computer-server", "url": "http://[fd00::7]:8000"}));
        assert_eq!(v6.as_deref(), Some("cua:fd00::7:8000"));
        let local = key(serde_json::json!({"provider": "computer-server", "url": "http://127.0.0.1:8000"}));
        assert_eq!(local, key(serde_json::json!({"provider": "computer-server", "url": "http://localhost:8000/"})));
        assert_eq!(local.as_deref(), Some("{host}/cua:localhost:8000"));
        let vnc = key(serde_json::json!({"provider": "vnc", "address": "box.example:8000"}));
        assert_ne!(vnc, remote, "a VNC server and a computer-server are different desktops");
    }

    #[test]
    fn vnc_addresses_are_normalized_and_loopback_is_per_host() {
        let remote = key(serde_json::json!({"provider": "vnc", "address": "VM-7.example:5901"}));
        assert_eq!(remote.as_deref(), Some("vnc:vm-7.example:5901"));
        assert_eq!(qualify(remote.as_deref().unwrap_or_default(), "node-a", None), "vnc:vm-7.example:5901");
        let v6 = key(serde_json::json!({"provider": "vnc", "address": "[fd00::7]:05900"}));
        assert_eq!(v6.as_deref(), Some("vnc:fd00::7:5900"));
        let local = key(serde_json::json!({"provider": "vnc", "address": "127.0.0.1:5900"}));
        assert_eq!(local, key(serde_json::json!({"provider": "vnc", "address": "localhost:5900"})));
        assert_eq!(local, key(serde_json::json!({"provider": "vnc", "address": "[::1]:5900"})));
        assert_eq!(local.as_deref(), Some("{host}/vnc:localhost:5900"));
    }
}
