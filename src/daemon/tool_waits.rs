//! The end of a `remote` tool call's wait: a task parked in `awaiting_tool` waits for its API client at most
//! the tool's `timeout_secs` (default a day). The rescuer's round answers the calls of a turn whose wait is
//! over with failed results — "no answer from the API client within N s" — and the task goes on: the model
//! reads that the call did not run, as for any failed tool call.
//!
//! The wait is measured from the moment the step parked (its `started_at` plus its `duration_ms`), so it
//! holds across daemon restarts. A turn's calls wait together and are answered together, so the turn's wait
//! ends at the earliest of its calls' timeouts. The queue checks the calls are still pending under the row's
//! lock: a client that answered meanwhile (or another node's round) wins, and nothing is answered twice.

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;

use crate::queue::{ListFilter, Queue, QueueError, ToolAnswer};
use crate::record::TaskState;
use crate::task::TaskSpec;
use crate::task::tools::{DEFAULT_REMOTE_TIMEOUT_SECS, TaskTool, ToolDecl, ToolKind};

/// How many parked tasks one round looks at.
const ROUND: u32 = 10_000;

/// How long the `remote` tool `name` of `task` waits for its answer.
fn timeout_of(task: &TaskSpec, catalog: &BTreeMap<String, ToolDecl>, name: &str) -> Duration {
    let declared = task.tools.iter().find_map(|tool| match tool {
        TaskTool::Declared(decl) if decl.name.as_str() == name => Some(decl),
        TaskTool::Use { name: used } if used.as_str() == name => catalog.get(name),
        _ => None,
    });
    match declared.map(|decl| &decl.kind) {
        Some(ToolKind::Remote(remote)) => remote.timeout(),
        _ => Duration::from_secs(DEFAULT_REMOTE_TIMEOUT_SECS),
    }
}

/// Answers the `remote` calls whose wait is over; `catalog` is the config's `[tools]`. Returns the tasks
/// that go on.
pub async fn time_out(queue: &dyn Queue, catalog: &BTreeMap<String, ToolDecl>) -> Result<Vec<String>, QueueError> {
    let parked =
        queue.list(&ListFilter { state: Some(TaskState::AwaitingTool), limit: ROUND, ..ListFilter::default() }).await?;
    let now = OffsetDateTime::now_utc();
    let mut ended = Vec::new();
    for task in parked {
        // A task that cannot be read is left as it is (its listing and status say why); the others go on.
        let Some(task) = super::readable(task) else { continue };
        let mut record = match queue.get(&task.id).await {
            Ok(record) => record,
            Err(QueueError::NotFound(_)) => continue,
            Err(e @ QueueError::Unreadable { .. }) => {
                tracing::debug!(task = %task.id, error = %e, "a task awaiting tools cannot be read; its wait is not timed");
                continue;
            }
            Err(e) => return Err(e),
        };
        record.derive_pending_tool_calls();
        let Some(step) = record.steps.last() else { continue };
        let Some(after) = record.pending_tool_calls.iter().map(|c| timeout_of(&record.task, catalog, &c.name)).min()
        else {
            continue;
        };
        let since = step.started_at + time::Duration::milliseconds(step.duration_ms.min(i64::MAX as u64) as i64);
        if now - since < after {
            continue;
        }
        let answers: Vec<ToolAnswer> = record
            .pending_tool_calls
            .iter()
            .map(|call| ToolAnswer {
                id: call.id.clone(),
                ok: false,
                output: format!(
                    "no answer from the API client within {} s (the remote tool's timeout_secs): the call did not run",
                    after.as_secs()
                ),
                details: None,
            })
            .collect();
        match queue.answer_tools(&task.id, &answers).await {
            Ok(()) => ended.push(task.id),
            // Answered meanwhile, by the client or another node's round.
            Err(QueueError::WrongState { .. } | QueueError::NotFound(_) | QueueError::Invalid { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ended)
}
