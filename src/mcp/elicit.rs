//! Asking the person at the MCP client what a task waits for (elicitation, form mode): while `run_task`
//! follows a task of the daemon that stops for a person — the model's `ask_human` question, or actions held for
//! approval — a client that declared the elicitation capability is asked inline (Claude Code shows the form),
//! and what the person says goes to the task as `answer`, `approve` or `reject` would send it. A client
//! without the capability, or a person who dismisses the form, leaves the task waiting as before (the
//! `answer`, `approve` and `reject` tools, the CLI and the console still resume it).

use rmcp::Peer;
use rmcp::service::{ElicitationError, ElicitationMode, RoleServer};

/// The answer to the model's question.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(super) struct Answer {
    /// Your answer to the task's question.
    pub answer: String,
}
rmcp::elicit_safe!(Answer);

/// The decision on actions held for approval.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(super) struct Decision {
    /// Let the held actions run (true) or reject them (false).
    pub approve: bool,
}
rmcp::elicit_safe!(Decision);

/// What the person said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Said {
    Answer(String),
    Approve,
    Reject,
    /// Nothing here: no elicitation, a dismissed form, or a failed request. The task waits on.
    Nothing,
}

/// Whether the client can be asked (it declared form elicitation when it initialized).
pub(super) fn can_ask(peer: &Peer<RoleServer>) -> bool {
    peer.supported_elicitation_modes().contains(&ElicitationMode::Form)
}

/// Asks the person at the client about task `task_id`, waiting for `reason` (`question` when the model asked
/// one, else an approval hold).
pub(super) async fn ask(peer: &Peer<RoleServer>, task_id: &str, reason: &str, question: Option<&str>) -> Said {
    let said = match question {
        Some(question) => peer
            .elicit::<Answer>(format!("agentd task {task_id} asks: {question}"))
            .await
            .map(|answer| answer.map_or(Said::Nothing, |a| Said::Answer(a.answer))),
        None => peer.elicit::<Decision>(format!("agentd task {task_id} waits for approval: {reason}")).await.map(
            |decision| match decision {
                Some(Decision { approve: true }) => Said::Approve,
                Some(Decision { approve: false }) => Said::Reject,
                None => Said::Nothing,
            },
        ),
    };
    match said {
        Ok(said) => said,
        // Declining the approval form is a decision; declining a question is not an answer.
        Err(ElicitationError::UserDeclined) if question.is_none() => Said::Reject,
        Err(e) => {
            tracing::debug!(%task_id, error = %e, "the MCP client did not answer the elicitation");
            Said::Nothing
        }
    }
}
