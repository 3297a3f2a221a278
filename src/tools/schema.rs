//! Checking values against a declared JSON Schema: a tool's arguments (docs/tools.md) and a task's structured output
//! (docs/task-file.md). The errors are written for the model, which reads them as a tool error and tries again.

use crate::task::tools::JsonSchema;

/// A compiled schema.
pub struct Checker {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Checker")
    }
}

/// At most this many problems are listed in one error.
const MAX_LISTED: usize = 5;

impl Checker {
    /// Compiles a schema that parsing already checked.
    pub fn new(schema: &JsonSchema) -> Result<Self, String> {
        jsonschema::validator_for(schema.as_value())
            .map(|validator| Self { validator })
            .map_err(|e| format!("not a valid JSON Schema: {e}"))
    }

    /// `Ok` when `value` matches; otherwise every problem (up to a few), each with where it is.
    pub fn check(&self, value: &serde_json::Value) -> Result<(), String> {
        let mut problems = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(value) {
            if problems.len() == MAX_LISTED {
                more += 1;
                continue;
            }
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { "the value".to_string() } else { format!("at {at}") };
            problems.push(format!("{at}: {error}"));
        }
        if problems.is_empty() {
            return Ok(());
        }
        if more > 0 {
            problems.push(format!("and {more} more"));
        }
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problems_say_where() {
        let schema = JsonSchema::new(json!({"type": "object", "properties": {"n": {"type": "integer"}},
            "required": ["n", "m"]}))
        .unwrap();
        let checker = Checker::new(&schema).unwrap();
        assert!(checker.check(&json!({"n": 1, "m": 2})).is_ok());
        let e = checker.check(&json!({"n": "one"})).unwrap_err();
        assert!(e.contains("/n") && e.contains("\"m\""), "{e}");
    }
}
