//! Resolving a task against the config: `TaskDefaults` (the config's `[defaults]`), the built-in defaults,
//! and `ResolvedTask`, the task with every default applied that the agent loop runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::approval;
use super::guard::{Guard, GuardSpec};
use super::secrets::{SecretName, SecretSource};
use super::tools::{JsonSchema, TaskTool};
use super::verify;
use super::{
    Bounded, ComputerSpec, ContextSpec, Cost, HistoryBudget, Limit, LimitsSpec, MockSpec, ModelSpec, Positive,
    TaskSpec, VendorModelSpec,
};

/// Built-in limits and context defaults (used when neither the task nor the config says).
pub const DEFAULT_MAX_STEPS: u32 = 50;
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;
pub const DEFAULT_MAX_COST_USD: f64 = 2.0;
pub const DEFAULT_KEEP_SCREENSHOTS: u32 = 3;

/// A task with every default applied: what the agent loop runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedTask {
    pub instructions: String,
    /// The task's tools as written (`use` entries are resolved against config when the toolbox is built).
    pub tools: Vec<TaskTool>,
    pub output_schema: Option<JsonSchema>,
    pub secrets: BTreeMap<SecretName, SecretSource>,
    pub computer: ComputerSpec,
    pub model: ModelSpec,
    pub limits: Limits,
    pub keep_screenshots: u32,
    /// The rest of the history budget (`context.keep_steps`, `max_tokens`, `compaction`).
    pub history: HistoryBudget,
    pub guard: Guard,
    /// The task's verifier checks (docs/replay-and-verify.md).
    pub verify: Vec<verify::Check>,
    /// `limits.verify_retries`: failed verification rounds the model may fix before the task fails
    /// (docs/replay-and-verify.md).
    pub verify_retries: u32,
    /// The model is given the `ask_human` tool (docs/humans.md).
    pub ask_human: bool,
    /// The approval rules (docs/humans.md): the task's own here; the attempt's builder puts the config's first.
    pub approval: Vec<approval::ApprovalRule>,
}

/// Concrete limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_steps: u32,
    pub timeout_secs: u64,
    pub max_cost_usd: f64,
}

/// Task defaults as the config's `[defaults]` gives them (same shape as the task file, all optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskDefaults {
    #[serde(default)]
    pub computer: Option<ComputerSpec>,
    #[serde(default)]
    pub model: Option<ModelSpec>,
    #[serde(default)]
    pub limits: LimitsSpec,
    #[serde(default)]
    pub context: ContextSpec,
}

impl TaskSpec {
    /// Applies config defaults, then built-in defaults (mock `blank` desktop, Anthropic model).
    /// The model the task runs with: its own, else the config's `[defaults]`, else Anthropic's default.
    pub fn model_spec(&self, defaults: &TaskDefaults) -> ModelSpec {
        self.model
            .clone()
            .or_else(|| defaults.model.clone())
            .unwrap_or_else(|| ModelSpec::Anthropic(VendorModelSpec::default()))
    }

    /// The task with the config's `[defaults]` and `[guard]` (then the built-in defaults) filling what it
    /// leaves out.
    pub fn resolve(&self, defaults: &TaskDefaults, guard: &GuardSpec) -> ResolvedTask {
        let computer = self
            .computer
            .clone()
            .or_else(|| defaults.computer.clone())
            .unwrap_or_else(|| ComputerSpec::Mock(MockSpec::default()));
        let model = self.model_spec(defaults);
        let limits = Limits {
            max_steps: self.limits.max_steps.or(defaults.limits.max_steps).map_or(DEFAULT_MAX_STEPS, Limit::get),
            timeout_secs: self
                .limits
                .timeout_secs
                .or(defaults.limits.timeout_secs)
                .map_or(DEFAULT_TIMEOUT_SECS, Limit::get),
            max_cost_usd: self
                .limits
                .max_cost_usd
                .or(defaults.limits.max_cost_usd)
                .map_or(DEFAULT_MAX_COST_USD, Cost::get),
        };
        let verify_retries =
            self.limits.verify_retries.or(defaults.limits.verify_retries).unwrap_or(verify::DEFAULT_VERIFY_RETRIES);
        let keep_screenshots = self
            .context
            .keep_screenshots
            .or(defaults.context.keep_screenshots)
            .map_or(DEFAULT_KEEP_SCREENSHOTS, Positive::get);
        // A continued conversation (docs/humans.md): the model reads the earlier turns, then the instructions as the
        // user's next message.
        let instructions = match &self.conversation {
            Some(conversation) => format!("{}{}", conversation.preamble(), self.instructions.as_str()),
            None => self.instructions.as_str().to_string(),
        };
        let (context, fallback) = (&self.context, &defaults.context);
        let history = HistoryBudget {
            keep_steps: context.keep_steps.or(fallback.keep_steps).map(Bounded::get),
            max_tokens: context.max_tokens.or(fallback.max_tokens).map(Bounded::get),
            compaction: context.compaction.or(fallback.compaction).unwrap_or_default(),
        };
        ResolvedTask {
            instructions,
            tools: self.tools.clone(),
            output_schema: self.output_schema.clone(),
            secrets: self.secrets.clone(),
            computer,
            model,
            limits,
            keep_screenshots,
            history,
            guard: self.guard.over(guard),
            verify: self.verify.clone(),
            verify_retries,
            ask_human: self.ask_human.unwrap_or(true),
            approval: self.approval.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::task::guard::GuardSpec;
    use crate::task::*;

    fn err(text: &str) -> TaskFileError {
        TaskSpec::parse(text, "t.json").unwrap_err()
    }

    #[test]
    fn minimal_task_gets_defaults() {
        let task = TaskSpec::parse(r#"{"instructions":"x"}"#, "t.json").unwrap();
        let resolved = task.resolve(&TaskDefaults::default(), &GuardSpec::default());
        assert_eq!(resolved.limits.max_steps, DEFAULT_MAX_STEPS);
        assert_eq!(resolved.keep_screenshots, DEFAULT_KEEP_SCREENSHOTS);
        assert_eq!(resolved.history, HistoryBudget::default());
        assert_eq!(resolved.computer.provider(), "mock");
    }

    #[test]
    fn the_history_budget_takes_the_task_then_the_config_defaults() {
        let task = TaskSpec::parse(
            r#"{"instructions":"x","context":{"keep_screenshots":2,"keep_steps":12,"compaction":"model"}}"#,
            "t.json",
        )
        .unwrap();
        let defaults: TaskDefaults =
            serde_json::from_value(serde_json::json!({"context": {"max_tokens": 60000, "keep_steps": 40}})).unwrap();
        let resolved = task.resolve(&defaults, &GuardSpec::default());
        assert_eq!(resolved.keep_screenshots, 2);
        assert_eq!(
            resolved.history,
            HistoryBudget { keep_steps: Some(12), max_tokens: Some(60_000), compaction: Compaction::Model }
        );
        let back = serde_json::to_string(&task).unwrap();
        assert_eq!(TaskSpec::parse(&back, "x").unwrap(), task);

        let e = err(r#"{"instructions":"x","context":{"max_tokens":100}}"#);
        assert_eq!(e.field(), Some("context.max_tokens"), "{e}");
        assert!(e.to_string().contains("at least 8000"), "{e}");
        let e = err(r#"{"instructions":"x","context":{"keep_steps":1}}"#);
        assert_eq!(e.field(), Some("context.keep_steps"), "{e}");
        let e = err(r#"{"instructions":"x","context":{"compaction":"magic"}}"#);
        assert_eq!(e.field(), Some("context.compaction"), "{e}");
    }
}
