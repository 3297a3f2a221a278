//! `agentd run` on a terminal (stdin and stderr both ttys): the model's `ask_human` questions and the
//! approvals a step waits for (docs/humans.md) are asked on the terminal, and the run goes on with the answer.
//! Elsewhere nobody is asked and such a run ends there, as it always did.

use std::io::IsTerminal;

use super::progress::Progress;
use super::sanitize::sanitize;
use crate::library::Human;
use crate::record::Proposed;

/// Asks on the terminal, above the live progress (once [`TerminalHuman::attach`]ed; plain lines before).
pub struct TerminalHuman {
    progress: std::sync::OnceLock<Progress>,
}

impl TerminalHuman {
    /// A terminal human when stdin and stderr are terminals; `None` otherwise.
    pub fn if_interactive() -> Option<Self> {
        (std::io::stdin().is_terminal() && std::io::stderr().is_terminal())
            .then(|| Self { progress: std::sync::OnceLock::new() })
    }

    /// The progress view the questions are asked above.
    pub fn attach(&self, progress: Progress) {
        let _ = self.progress.set(progress);
    }

    async fn ask(&self, prompt: String) -> Option<String> {
        match self.progress.get() {
            Some(progress) => progress.ask(prompt).await,
            None => Progress::plain().ask(prompt).await,
        }
    }
}

#[async_trait::async_trait]
impl Human for TerminalHuman {
    async fn answer(&self, question: &str) -> Option<String> {
        let mut prompt = format!("agentd: the model asks: {}\nanswer> ", sanitize(question));
        loop {
            let line = self.ask(prompt).await?;
            if !line.trim().is_empty() {
                return Some(line);
            }
            prompt = "answer (not empty)> ".to_string();
        }
    }

    async fn approve(&self, reason: &str, proposed: &Proposed) -> Option<bool> {
        let mut prompt = approval_prompt(reason, proposed);
        loop {
            let line = self.ask(prompt).await?;
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Some(true),
                "n" | "no" => return Some(false),
                _ => prompt = "approve? answer y or n> ".to_string(),
            }
        }
    }
}

/// What an approval asks: the reason and the proposed actions, each made safe for the terminal on its own
/// (the line breaks between them are the prompt's, not escaped).
fn approval_prompt(reason: &str, proposed: &Proposed) -> String {
    let actions: Vec<String> = proposed.actions.iter().map(|a| serde_json::to_string(a).unwrap_or_default()).collect();
    let what =
        if actions.is_empty() { String::new() } else { format!("\n  proposed: {}", sanitize(&actions.join(" "))) };
    format!("agentd: approval needed: {}{what}\napprove? [y/n]> ", sanitize(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approval_prompt_breaks_its_lines_and_escapes_only_what_it_quotes() {
        let proposed: Proposed =
            serde_json::from_value(serde_json::json!({"calls": [], "actions": [{"type": "type", "text": "a\nb"}]}))
                .unwrap();
        let prompt = approval_prompt("rule 1 holds\u{1b}[2J typing", &proposed);
        assert!(!prompt.contains("\\u{a}proposed"), "{prompt}");
        assert!(prompt.contains("\n  proposed: "), "{prompt}");
        assert!(prompt.ends_with("\napprove? [y/n]> "), "{prompt}");
        assert!(!prompt.contains('\u{1b}'), "an escape sequence reached the terminal: {prompt:?}");
    }
}
