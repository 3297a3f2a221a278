//! The end of a question's wait (docs/humans.md `limits.human_timeout_secs`): the daemon looks at the tasks waiting for
//! the answer to an `ask_human` question and ends the wait of those nobody answered in time — `continue`
//! gives the model "no answer", `fail` ends the task (reason `timeout`).
//!
//! The wait is measured from the moment the step parked (its `started_at` plus its `duration_ms`, both in
//! the step record), so it holds across daemon restarts. The queue decides under the row's lock and the
//! timeout names the call it ends, so with several daemons on one PostgreSQL queue a question is timed out
//! exactly once, and never one answered meanwhile.

use time::OffsetDateTime;

use crate::queue::{HumanAnswer, ListFilter, Queue, QueueError};
use crate::record::{TaskState, Waiting};
use crate::task::{LimitsSpec, OnHumanTimeout, human_timeout};

/// How many waiting tasks one round looks at (listed without their steps; only those with a timeout are
/// read whole).
const ROUND: u32 = 10_000;

/// A question whose wait ended this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    pub task_id: String,
    pub then: OnHumanTimeout,
}

/// Ends the waits that are over; `defaults` are the config's `[defaults.limits]`. A task answered or moved
/// meanwhile (by a person, or by another node's round) is skipped.
pub async fn time_out(queue: &dyn Queue, defaults: &LimitsSpec) -> Result<Vec<TimedOut>, QueueError> {
    let waiting = queue
        .list(&ListFilter { state: Some(TaskState::WaitingForHuman), limit: ROUND, ..ListFilter::default() })
        .await?;
    let now = OffsetDateTime::now_utc();
    let mut ended = Vec::new();
    for task in waiting {
        // A task that cannot be read is left as it is (its listing and status say why); the others go on.
        let Some(task) = super::readable(task) else { continue };
        let Some((after, then)) = human_timeout(&task.task.limits, defaults) else { continue };
        let mut record = match queue.get(&task.id).await {
            Ok(record) => record,
            Err(QueueError::NotFound(_)) => continue,
            Err(e @ QueueError::Unreadable { .. }) => {
                tracing::debug!(task = %task.id, error = %e, "a waiting task cannot be read; its wait is not timed");
                continue;
            }
            Err(e) => return Err(e),
        };
        record.derive_waiting();
        let Some(Waiting::Question { step, call_id, .. }) = record.waiting else { continue };
        let Some(parked) = record.steps.iter().find(|s| s.index == step) else { continue };
        let since = parked.started_at + time::Duration::milliseconds(parked.duration_ms.min(i64::MAX as u64) as i64);
        if now - since < after {
            continue;
        }
        let answer = HumanAnswer::TimedOut { call_id, then, after_secs: after.as_secs() };
        match queue.answer_question(&task.id, &answer).await {
            Ok(()) => ended.push(TimedOut { task_id: task.id, then }),
            Err(QueueError::WrongState { .. } | QueueError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ended)
}
