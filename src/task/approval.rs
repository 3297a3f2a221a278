//! Approval rules (docs/humans.md): what holds a model's turn for a human's approval before any of its calls run —
//! `[[approval]]` in the config and `"approval": [RULE, …]` in a task file (the task's rules add to the
//! config's). A rule is an object with exactly one matcher and an optional `reason`:
//!
//! - `{"action": "keypress"}`: a computer action of that type (the `type` tags of docs/task-file.md; `key` is taken for
//!   `keypress`);
//! - `{"keys": "ctrl+alt+delete"}`: a `keypress` or `hold_key` of that chord — key names resolved through
//!   `agentd_computer::keys` (so `control`, `ctrl` and `Control_L` are one key), letters without case, in any
//!   order;
//! - `{"tool": "send_email"}`: a call of that declared tool;
//! - `{"secret": true}` or `{"secret": "NAME"}`: typed text (or a tool's arguments) holding a secret's
//!   placeholder (`<secret:NAME>`, docs/security.md), any or that one;
//! - `{"task_completion": true}`: the model's `task_completion`.
//!
//! A rule is checked when it is read: every problem names its field (`approval[1].keys`).

use std::collections::BTreeSet;

use agentd_computer::Action;
use agentd_computer::keys::{Key, split_chord};
use serde::{Deserialize, Deserializer, Serialize};

use super::secrets::SecretName;
use crate::record::{CallKind, ToolCall};

/// The name of the completion call (`model::TASK_COMPLETION`; the task layer cannot see the model's).
const TASK_COMPLETION: &str = "task_completion";

/// The computer action types a rule may name (`Action::kind`), and `key` for `keypress`.
pub const ACTION_TYPES: &[&str] = &[
    "click",
    "double_click",
    "triple_click",
    "mouse_down",
    "mouse_up",
    "move",
    "drag",
    "scroll",
    "type",
    "keypress",
    "hold_key",
    "wait",
    "screenshot",
    "cursor_position",
    "zoom",
];

/// One approval rule, checked ([`ApprovalRule::deserialize`] refuses a rule with no matcher or two).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalRule {
    #[serde(flatten)]
    pub matcher: Matcher,
    /// What the waiting record says (`waiting.reason`); else one made from the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a rule matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Matcher {
    /// A computer action of this type (`Action::kind`).
    Action(String),
    /// A key chord, as written; [`Chord`] is its normal form.
    Keys(Chord),
    /// A declared tool by name.
    Tool(String),
    /// Typed text or tool arguments holding a secret placeholder: any (`true`) or this one.
    Secret(SecretMatch),
    /// The model's `task_completion`.
    TaskCompletion(bool),
}

/// A chord as written and its keys in normal form (key names, letters in lower case, sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chord {
    pub written: String,
    keys: BTreeSet<String>,
}

impl Serialize for Chord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.written)
    }
}

impl Chord {
    pub fn parse(written: &str) -> Result<Self, String> {
        let keys = normal_keys(split_chord(written).iter().map(String::as_str))?;
        if keys.is_empty() {
            return Err("an empty chord; write the keys joined by `+`, e.g. \"ctrl+alt+delete\"".into());
        }
        Ok(Self { written: written.to_string(), keys })
    }

    /// Whether these keys (as an action holds them, each may be a chord itself) are this chord.
    fn matches(&self, keys: &[String]) -> bool {
        normal_keys(keys.iter().flat_map(|k| split_chord(k)).collect::<Vec<_>>().iter().map(String::as_str))
            .is_ok_and(|keys| keys == self.keys)
    }
}

/// Key names in normal form: each resolved to its key, named canonically, a letter in lower case.
fn normal_keys<'a>(names: impl Iterator<Item = &'a str>) -> Result<BTreeSet<String>, String> {
    names
        .map(|name| {
            let name = if name.chars().count() == 1 { name.to_lowercase() } else { name.to_string() };
            Key::parse(&name).map(|key| key.name().to_lowercase()).map_err(|e| e.to_string())
        })
        .collect()
}

/// `secret`: `true` for any placeholder, or a secret's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum SecretMatch {
    Any(bool),
    Named(SecretName),
}

impl SecretMatch {
    fn found_in(&self, text: &str) -> bool {
        match self {
            Self::Any(_) => text.contains("<secret:"),
            Self::Named(name) => text.contains(&name.placeholder()),
        }
    }
}

/// The rule as written, before it is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    keys: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    secret: Option<serde_json::Value>,
    #[serde(default)]
    task_completion: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
}

const MATCHERS: &str = "action, keys, tool, secret or task_completion";

impl<'de> Deserialize<'de> for ApprovalRule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Written::deserialize(d)?;
        // Problems inside a field name it (`field `keys`: …`), so the error's path ends at that field.
        let at = |field: &str, message: String| serde::de::Error::custom(format!("field `{field}`: {message}"));
        let given =
            [w.action.is_some(), w.keys.is_some(), w.tool.is_some(), w.secret.is_some(), w.task_completion.is_some()];
        match given.iter().filter(|g| **g).count() {
            0 => return Err(serde::de::Error::custom(format!("a rule needs one matcher: {MATCHERS}"))),
            1 => {}
            _ => {
                return Err(serde::de::Error::custom(format!(
                    "a rule has exactly one matcher ({MATCHERS}); write two rules to hold either"
                )));
            }
        }
        let matcher = if let Some(action) = w.action {
            let kind = if action == "key" { "keypress".to_string() } else { action };
            if !ACTION_TYPES.contains(&kind.as_str()) {
                return Err(at("action", format!("unknown action type {kind:?}; one of {}", ACTION_TYPES.join(", "))));
            }
            Matcher::Action(kind)
        } else if let Some(keys) = w.keys {
            Matcher::Keys(Chord::parse(&keys).map_err(|e| at("keys", e))?)
        } else if let Some(tool) = w.tool {
            if tool.trim().is_empty() {
                return Err(at("tool", "an empty tool name".into()));
            }
            Matcher::Tool(tool)
        } else if let Some(secret) = w.secret {
            Matcher::Secret(match secret {
                serde_json::Value::Bool(true) => SecretMatch::Any(true),
                serde_json::Value::String(name) => {
                    SecretMatch::Named(SecretName::parse(&name).map_err(|e| at("secret", e))?)
                }
                _ => return Err(at("secret", "true (any secret) or a secret's name".into())),
            })
        } else {
            if w.task_completion != Some(true) {
                return Err(at("task_completion", "only `true` holds the completion; leave the rule out".into()));
            }
            Matcher::TaskCompletion(true)
        };
        Ok(ApprovalRule { matcher, reason: w.reason })
    }
}

/// The first of `rules` a turn's calls match: the rule's position and the reason the record gives.
pub fn first_match(rules: &[ApprovalRule], calls: &[ToolCall]) -> Option<(usize, String)> {
    rules.iter().enumerate().find_map(|(i, rule)| {
        calls.iter().any(|call| rule.matches(call)).then(|| (i, rule.reason.clone().unwrap_or_else(|| rule.describe())))
    })
}

impl ApprovalRule {
    /// Whether one of the model's calls matches this rule.
    pub fn matches(&self, call: &ToolCall) -> bool {
        match (&self.matcher, &call.kind) {
            (Matcher::Action(kind), CallKind::Computer { actions }) => actions.iter().any(|a| a.kind() == kind),
            (Matcher::Keys(chord), CallKind::Computer { actions }) => actions.iter().any(|a| match a {
                Action::Keypress { keys } | Action::HoldKey { keys, .. } => chord.matches(keys),
                _ => false,
            }),
            (Matcher::Secret(secret), CallKind::Computer { actions }) => {
                actions.iter().any(|a| matches!(a, Action::Type { text } if secret.found_in(text)))
            }
            (Matcher::Secret(secret), CallKind::Function { name, arguments }) => {
                name != TASK_COMPLETION && secret.found_in(&arguments.to_string())
            }
            (Matcher::Tool(tool), CallKind::Function { name, .. }) => name == tool,
            (Matcher::TaskCompletion(_), CallKind::Function { name, .. }) => name == TASK_COMPLETION,
            _ => false,
        }
    }

    /// The reason a rule without one gives.
    pub fn describe(&self) -> String {
        let what = match &self.matcher {
            Matcher::Action(kind) => format!("a {kind} action"),
            Matcher::Keys(chord) => format!("the keys {}", chord.written),
            Matcher::Tool(tool) => format!("the tool {tool}"),
            Matcher::Secret(SecretMatch::Any(_)) => "text holding a secret".to_string(),
            Matcher::Secret(SecretMatch::Named(name)) => format!("text holding {}", name.placeholder()),
            Matcher::TaskCompletion(_) => "the task's completion".to_string(),
        };
        format!("approval rule: {what} needs a human's approval")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(value: serde_json::Value) -> Result<ApprovalRule, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    fn computer(actions: Vec<Action>) -> ToolCall {
        ToolCall { id: "c".into(), kind: CallKind::Computer { actions } }
    }

    fn function(name: &str, arguments: serde_json::Value) -> ToolCall {
        ToolCall { id: "f".into(), kind: CallKind::Function { name: name.into(), arguments } }
    }

    fn keys(names: &[&str]) -> ToolCall {
        computer(vec![Action::Keypress { keys: names.iter().map(|k| k.to_string()).collect() }])
    }

    #[test]
    fn each_matcher_holds_what_it_names_and_nothing_else() {
        let typed = |text: &str| computer(vec![Action::Type { text: text.into() }]);
        let click = computer(vec![Action::Click { x: 1, y: 2, button: Default::default(), keys: Vec::new() }]);
        // (rule, calls that match, calls that do not)
        let table = [
            (json!({"action": "click"}), vec![click.clone()], vec![typed("x"), keys(&["a"])]),
            (json!({"action": "key"}), vec![keys(&["Return"])], vec![click.clone()]),
            (
                json!({"keys": "ctrl+alt+delete"}),
                vec![
                    keys(&["Control_L", "Alt", "Delete"]),
                    keys(&["delete", "ALT", "control"]),
                    keys(&["ctrl+alt+Delete"]),
                ],
                vec![keys(&["ctrl", "delete"]), keys(&["ctrl", "alt", "delete", "shift"]), typed("ctrl+alt+delete")],
            ),
            (json!({"keys": "ctrl+T"}), vec![keys(&["ctrl", "t"])], vec![keys(&["ctrl", "shift", "t"])]),
            (
                json!({"tool": "send_email"}),
                vec![function("send_email", json!({}))],
                vec![function("lookup", json!({}))],
            ),
            (
                json!({"secret": true}),
                vec![typed("pw <secret:password>"), function("login", json!({"pw": "<secret:pin>"}))],
                vec![typed("password"), function("task_completion", json!({"summary": "<secret:pin>"}))],
            ),
            (json!({"secret": "pin"}), vec![typed("<secret:pin>")], vec![typed("<secret:password>")]),
            (json!({"task_completion": true}), vec![function("task_completion", json!({}))], vec![click.clone()]),
        ];
        for (written, hold, pass) in table {
            let rule = rule(written.clone()).unwrap_or_else(|e| panic!("{written}: {e}"));
            for call in hold {
                assert!(rule.matches(&call), "{written} should hold {call:?}");
            }
            for call in pass {
                assert!(!rule.matches(&call), "{written} should let {call:?} through");
            }
        }
    }

    #[test]
    fn the_first_matching_rule_gives_the_reason() {
        let rules: Vec<ApprovalRule> = serde_json::from_value(json!([
            {"tool": "send_email", "reason": "mail leaves the building"},
            {"action": "type"}
        ]))
        .expect("rules");
        let calls = [computer(vec![Action::Type { text: "hi".into() }]), function("send_email", json!({}))];
        assert_eq!(first_match(&rules, &calls), Some((0, "mail leaves the building".into())));
        let (i, reason) = first_match(&rules, &calls[..1]).expect("typed");
        assert_eq!(i, 1);
        assert!(reason.contains("a type action"), "{reason}");
        assert_eq!(first_match(&rules, &[keys(&["a"])]), None);
    }

    #[test]
    fn bad_rules_name_what_is_wrong() {
        // (rule, words of the error)
        let table = [
            (json!({}), "needs one matcher"),
            (json!({"reason": "x"}), "needs one matcher"),
            (json!({"action": "click", "tool": "x"}), "exactly one matcher"),
            (json!({"action": "explode"}), "field `action`: unknown action type"),
            (json!({"keys": "ctrl+nosuchkey"}), "field `keys`"),
            (json!({"keys": ""}), "field `keys`: an empty chord"),
            (json!({"tool": " "}), "field `tool`"),
            (json!({"secret": false}), "field `secret`"),
            (json!({"secret": "no spaces"}), "field `secret`: invalid secret name"),
            (json!({"task_completion": false}), "field `task_completion`"),
            (json!({"tools": "x"}), "unknown field `tools`"),
        ];
        for (written, words) in table {
            let error = rule(written.clone()).expect_err("refused");
            assert!(error.contains(words), "{written}: {error}");
        }
    }

    #[test]
    fn a_rule_is_written_back_as_it_was_given() {
        for written in
            [json!({"keys": "Ctrl+Alt+Delete", "reason": "r"}), json!({"secret": "pin"}), json!({"secret": true})]
        {
            let parsed = rule(written.clone()).expect("rule");
            assert_eq!(serde_json::to_value(&parsed).expect("json"), written);
        }
    }
}
