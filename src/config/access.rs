//! What tasks submitted over the API may reach: `[outbound]` (the internal addresses their tools, verifiers
//! and computers may connect to), `[browser]` (what their browsers may open), and the files they may name
//! (`[api] allowed_paths`, `allowed_secret_paths`, as [`FileAccess`]).

use serde::{Deserialize, Serialize};

use super::Config;
use crate::input::FileAccess;

/// `[outbound]`: where tasks submitted over the API may connect. Their `http` tools and `http` verifiers,
/// and the VNC host or computer-server URL they name, reach public addresses only; `allow` adds address
/// ranges (`10.1.0.0/16`), addresses (`127.0.0.1`) or host names (`orders.internal`) of the inside.
/// Tasks run with `agentd run`, the config's own `[tools]`, `[[desktops]]` and `[defaults] computer` are
/// the operator's and reach anything. (`docs/security.md` has the table.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    pub allow: Vec<String>,
}

/// `[browser]`: what a browser computer (`computer.provider = "browser"`) of a task submitted over the API may
/// open. Every request the browser makes is checked before it leaves: its URL must match one of
/// `allowed_urls` (patterns, `*` for any characters; every http(s) and ws(s) URL when empty) and its host
/// must resolve to addresses the task's outbound policy allows (`[outbound]`); `about:`, `data:` and `blob:`
/// URLs are allowed, other schemes (`file:`) refused. Tasks run with `agentd run` open anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BrowserSettings {
    pub allowed_urls: Vec<String>,
}

impl Config {
    /// The outbound policy of a task submitted over the API (`OutboundConfig`); the entries were checked
    /// when the config was loaded.
    pub fn api_outbound(&self) -> agentd_computer::outbound::Outbound {
        agentd_computer::outbound::Outbound::restricted(&self.outbound.allow).unwrap_or_else(|_| {
            // Unreachable after validation; refuse every internal address rather than allow one.
            agentd_computer::outbound::Outbound::restricted(&[]).unwrap_or_default()
        })
    }
}

impl Config {
    /// Which files tasks submitted over the API may name: absolute paths under `[api] allowed_paths`, and the
    /// scene and script the config itself names in `[defaults]`.
    pub fn file_access(&self) -> FileAccess {
        use crate::task::{ComputerSpec, MockSpec, ModelSpec, SceneSource, ScriptSource, ScriptedSpec};
        let mut configured = Vec::new();
        if let Some(ComputerSpec::Mock(MockSpec { scene: Some(SceneSource::Named(scene)), .. })) =
            &self.defaults.computer
        {
            configured.push(scene.clone());
        }
        if let Some(ModelSpec::Scripted(ScriptedSpec { script: ScriptSource::Path(script), .. })) = &self.defaults.model
        {
            configured.push(script.clone());
        }
        FileAccess::Api { allowed: self.api.allowed_paths.clone(), configured }
    }

    /// Which files tasks submitted over the API may name as secrets: those under `[api]
    /// allowed_secret_paths`, nothing else.
    pub fn secret_file_access(&self) -> FileAccess {
        FileAccess::Api { allowed: self.api.allowed_secret_paths.clone(), configured: Vec::new() }
    }
}

/// `[tools] allowed_mcp_commands`, `allowed_mcp_urls`: the MCP servers a task submitted over the API may use
/// as tools (docs/tools.md). By default none: such a task's `{"kind": "mcp"}` tool is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpAllowed {
    /// Programs such a task may start: its `command`'s first element, exactly as written here.
    pub commands: Vec<String>,
    /// URLs it may connect to: exactly, or anything under an entry that ends in `*`.
    pub urls: Vec<String>,
}

impl McpAllowed {
    /// Whether a task submitted over the API may start `command` (its program, exactly as listed).
    pub fn allows_command(&self, command: &[String]) -> bool {
        command.first().is_some_and(|program| self.commands.iter().any(|c| c == program))
    }

    /// Whether it may connect to `url`: listed exactly, or under an entry ending in `*`.
    pub fn allows_url(&self, url: &str) -> bool {
        self.urls.iter().any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => url.starts_with(prefix),
            None => pattern == url,
        })
    }
}

#[cfg(test)]
mod mcp_tests {
    use super::McpAllowed;

    #[test]
    fn urls_match_exactly_or_under_a_star_and_commands_exactly() {
        let allowed = McpAllowed {
            commands: vec!["/usr/bin/mcp-files".into()],
            urls: vec!["https://mcp.example.org/mcp".into(), "https://tools.example.org/*".into()],
        };
        assert!(allowed.allows_url("https://mcp.example.org/mcp"));
        assert!(!allowed.allows_url("https://mcp.example.org/mcp/x"));
        assert!(allowed.allows_url("https://tools.example.org/a/mcp"));
        assert!(!allowed.allows_url("https://tools.example.org.evil/a"));
        assert!(allowed.allows_command(&["/usr/bin/mcp-files".into(), "--root".into()]));
        assert!(!allowed.allows_command(&["mcp-files".into()]));
        assert!(!allowed.allows_command(&[]));
    }
}
