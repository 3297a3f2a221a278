//! Prices per million tokens, and the cost of a call from its usage.
//!
//! The built-in table holds list prices (USD per million tokens, standard tier, prompts under 200k tokens)
//! as published by the vendors' pricing pages in 2026; a `[models.NAME] prices` table in the config overrides
//! or extends it per model id. A model is matched by the longest table key that is a prefix of its id, so
//! dated snapshots (`claude-sonnet-4-5-20250929`) find their family. A model with no price costs 0 and a
//! warning is logged once: its budget (`max_cost_usd`) then cannot trip, which `agentd config check` and
//! `docs/models.md` point out.
//!
//! Usage is normalised across vendors: `input_tokens` counts every prompt token (cache reads and writes
//! included), `cache_read_tokens` and `cache_write_tokens` are the parts of it that were read from or written
//! to a prompt cache.

use std::collections::BTreeMap;

use crate::config::Price;

/// (provider, model id prefix, price). Anthropic cache: writes 1.25×, reads 0.1× the input price (5-minute
/// cache); OpenAI cached input as listed; Gemini implicit-cache reads at 0.1× (Gemini 3) / 0.25× (2.5).
const BUILT_IN: &[(&str, &str, Price)] = &[
    ("anthropic", "claude-opus-4-7", Price::new(5.0, 25.0, 0.5, 6.25)),
    ("anthropic", "claude-opus-4-6", Price::new(5.0, 25.0, 0.5, 6.25)),
    ("anthropic", "claude-opus-4-5", Price::new(5.0, 25.0, 0.5, 6.25)),
    ("anthropic", "claude-opus-4-1", Price::new(15.0, 75.0, 1.5, 18.75)),
    ("anthropic", "claude-opus-4", Price::new(15.0, 75.0, 1.5, 18.75)),
    ("anthropic", "claude-sonnet-4", Price::new(3.0, 15.0, 0.3, 3.75)),
    ("anthropic", "claude-3-7-sonnet", Price::new(3.0, 15.0, 0.3, 3.75)),
    ("anthropic", "claude-haiku-4-5", Price::new(1.0, 5.0, 0.1, 1.25)),
    ("openai", "computer-use-preview", Price::new(3.0, 12.0, 3.0, 3.0)),
    ("openai", "gpt-5", Price::new(1.25, 10.0, 0.125, 1.25)),
    ("gemini", "gemini-2.5-computer-use-preview", Price::new(1.25, 10.0, 0.3125, 1.25)),
    ("gemini", "gemini-3-flash-preview", Price::new(0.5, 3.0, 0.05, 0.5)),
    ("gemini", "gemini-3-pro-preview", Price::new(2.0, 12.0, 0.2, 2.0)),
];

/// Built-in prices with the config's overrides.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    /// provider → model id prefix → price.
    overrides: BTreeMap<String, BTreeMap<String, Price>>,
}

impl PriceTable {
    pub fn new(overrides: BTreeMap<String, BTreeMap<String, Price>>) -> Self {
        Self { overrides }
    }

    /// The price of `model` at `provider`: a config entry first, then the built-in table; longest prefix wins.
    pub fn price(&self, provider: &str, model: &str) -> Option<Price> {
        if let Some(table) = self.overrides.get(provider)
            && let Some(price) = longest(table.iter().map(|(k, v)| (k.as_str(), *v)), model)
        {
            return Some(price);
        }
        longest(BUILT_IN.iter().filter(|(p, _, _)| *p == provider).map(|(_, k, v)| (*k, *v)), model)
    }
}

fn longest<'a>(entries: impl Iterator<Item = (&'a str, Price)>, model: &str) -> Option<Price> {
    entries.filter(|(prefix, _)| model.starts_with(prefix)).max_by_key(|(prefix, _)| prefix.len()).map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Usage;

    #[test]
    fn prefixes_and_overrides() {
        let table = PriceTable::default();
        let sonnet = table.price("anthropic", "claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(sonnet.input, 3.0);
        assert_eq!(table.price("anthropic", "claude-opus-4-1-20250805").unwrap().input, 15.0);
        assert_eq!(table.price("anthropic", "claude-opus-4-5").unwrap().input, 5.0);
        assert!(table.price("openai-compatible", "ui-tars").is_none());
        let mut overrides = BTreeMap::new();
        overrides.insert(
            "openai-compatible".to_string(),
            BTreeMap::from([(
                "ui-tars".to_string(),
                Price { input: 0.1, output: 0.2, cache_read: None, cache_write: None },
            )]),
        );
        let table = PriceTable::new(overrides);
        assert_eq!(table.price("openai-compatible", "ui-tars-1.5-7b").unwrap().output, 0.2);
    }

    #[test]
    fn cost_counts_cache_parts_at_their_price() {
        let price = Price::new(3.0, 15.0, 0.3, 3.75);
        let usage = Usage {
            input_tokens: 1_000_000,
            cache_read_tokens: 500_000,
            cache_write_tokens: 250_000,
            output_tokens: 100_000,
            cost_usd: 0.0,
        };
        let cost = price.cost(&usage);
        assert!((cost - (0.75 + 0.15 + 0.9375 + 1.5)).abs() < 1e-9, "{cost}");
    }
}
