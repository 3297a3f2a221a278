//! A task's request for a desktop of the configured pool (docs/providers.md): `{"desktop": "NAME"}`, `{"labels": […]}`
//! (any desktop carrying every label), or both; and the names and labels of `[[desktops]]` in config, checked
//! once here for both sides.

use serde::{Deserialize, Deserializer, Serialize};

/// A desktop's name or one of its labels: 1–63 characters of `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct DesktopName(String);

impl DesktopName {
    pub fn parse(s: &str, what: &str) -> Result<Self, String> {
        let ok_chars = s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if s.is_empty() || s.len() > 63 || !ok_chars {
            return Err(format!("invalid {what} {s:?}: use 1-63 characters of A-Z a-z 0-9 . _ -"));
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for DesktopName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DesktopName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DesktopName::parse(&s, "name").map_err(serde::de::Error::custom)
    }
}

/// Which desktop of the pool a task wants: the one named, or any carrying all `labels`, or (neither) any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desktop: Option<DesktopName>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<DesktopName>,
}

impl DesktopSpec {
    /// Whether the desktop `name` with `labels` is one this request takes.
    pub fn matches<'a>(&self, name: &str, labels: impl Iterator<Item = &'a str> + Clone) -> bool {
        self.desktop.as_ref().is_none_or(|want| want.as_str() == name)
            && self.labels.iter().all(|want| labels.clone().any(|have| have == want.as_str()))
    }

    /// The request as the queue stores it in a desktop key (after [`crate::queue`]'s pool marker):
    /// `desktop=NAME;labels=a,b` (labels sorted), both parts optional.
    pub fn encode(&self) -> String {
        let mut labels: Vec<&str> = self.labels.iter().map(DesktopName::as_str).collect();
        labels.sort_unstable();
        labels.dedup();
        format!("desktop={};labels={}", self.desktop.as_ref().map_or("", DesktopName::as_str), labels.join(","))
    }

    /// The inverse of [`DesktopSpec::encode`]; anything else (a key stored by another version) asks for any
    /// desktop.
    pub fn decode(text: &str) -> Self {
        let mut spec = Self::default();
        for part in text.split(';') {
            if let Some(name) = part.strip_prefix("desktop=") {
                spec.desktop = DesktopName::parse(name, "name").ok();
            } else if let Some(labels) = part.strip_prefix("labels=") {
                spec.labels = labels.split(',').filter_map(|l| DesktopName::parse(l, "label").ok()).collect();
            }
        }
        spec
    }

    /// How messages name the request: `desktop "a"`, `a desktop labelled x, y`, `any desktop`.
    pub fn describe(&self) -> String {
        let labels = self.labels.iter().map(DesktopName::as_str).collect::<Vec<_>>().join(", ");
        match (&self.desktop, labels.is_empty()) {
            (Some(name), true) => format!("desktop {:?}", name.as_str()),
            (Some(name), false) => format!("desktop {:?} labelled {labels}", name.as_str()),
            (None, false) => format!("a desktop labelled {labels}"),
            (None, true) => "any desktop".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(desktop: Option<&str>, labels: &[&str]) -> DesktopSpec {
        DesktopSpec {
            desktop: desktop.map(|d| DesktopName::parse(d, "name").unwrap_or_else(|e| panic!("{e}"))),
            labels: labels.iter().map(|l| DesktopName::parse(l, "label").unwrap_or_else(|e| panic!("{e}"))).collect(),
        }
    }

    #[test]
    fn a_request_matches_by_name_and_every_label() {
        let have = ["linux", "chromium"];
        assert!(spec(None, &[]).matches("d1", have.iter().copied()));
        assert!(spec(Some("d1"), &[]).matches("d1", have.iter().copied()));
        assert!(!spec(Some("d2"), &[]).matches("d1", have.iter().copied()));
        assert!(spec(None, &["chromium"]).matches("d1", have.iter().copied()));
        assert!(spec(None, &["chromium", "linux"]).matches("d1", have.iter().copied()));
        assert!(!spec(None, &["chromium", "gpu"]).matches("d1", have.iter().copied()));
        assert!(!spec(Some("d1"), &["gpu"]).matches("d1", have.iter().copied()));
    }

    #[test]
    fn the_stored_form_round_trips() {
        for s in [spec(None, &[]), spec(Some("xvfb-1"), &[]), spec(None, &["b", "a"]), spec(Some("x"), &["a"])] {
            let decoded = DesktopSpec::decode(&s.encode());
            assert_eq!(decoded.desktop, s.desktop);
            let mut want = s.labels.clone();
            want.sort();
            assert_eq!(decoded.labels, want);
        }
        assert_eq!(spec(None, &["b", "a"]).encode(), "desktop=;labels=a,b");
    }

    #[test]
    fn names_are_checked() {
        assert!(DesktopName::parse("xvfb-1.a_b", "name").is_ok());
        for bad in ["", "a b", "{host}", "a,b", "a;b", "é", &"x".repeat(64)] {
            assert!(DesktopName::parse(bad, "name").is_err(), "{bad:?}");
        }
    }
}
