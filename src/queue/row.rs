//! Stored rows into the queue's types (and the queue's own events into rows), the same for every backend.
//!
//! A backend reads its columns into a [`TaskRow`] or [`LeaseRow`], converting only what is its own (times
//! kept as milliseconds or as `timestamptz`, integer widths); the JSON columns are parsed here, and what
//! cannot be read back is [`QueueError::Corrupt`] naming the column.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use time::OffsetDateTime;

use super::transitions::{Expired, Takeover};
use super::{Lease, ListFilter, QueueError};
use crate::record::events::{Event, EventKind};
use crate::record::{HandBack, RECORD_VERSION, StepRecord, TaskState};
use crate::status::{ListedTask, TaskRecord, UnreadableTask};
use crate::task::TaskSpec;

pub(super) fn corrupt(what: &str, e: impl std::fmt::Display) -> QueueError {
    QueueError::Corrupt(format!("{what}: {e}"))
}

pub(super) fn json<T: serde::Serialize>(value: &T) -> Result<String, QueueError> {
    serde_json::to_string(value).map_err(|e| corrupt("serialize", e))
}

/// A stored JSON column.
fn parse<T: serde::de::DeserializeOwned>(column: &str, text: &str) -> Result<T, QueueError> {
    serde_json::from_str(text).map_err(|e| corrupt(column, e))
}

fn parse_optional<T: serde::de::DeserializeOwned>(column: &str, text: Option<&str>) -> Result<Option<T>, QueueError> {
    text.map(|t| parse(column, t)).transpose()
}

pub(super) fn state(text: &str) -> Result<TaskState, QueueError> {
    TaskState::from_str(text).map_err(|e| corrupt("state", e))
}

pub(super) fn step(text: &str) -> Result<StepRecord, QueueError> {
    parse("step", text)
}

/// A stored step of the journal, `idx` its index column: one that cannot be decoded names its index.
pub(super) fn step_at(idx: i64, text: &str) -> Result<StepRecord, QueueError> {
    parse(&format!("steps[{idx}]"), text)
}

/// What [`super::Queue::get`] answers when task `id`'s row or steps cannot be decoded: the task named, so that
/// the API and the CLI can say which record is broken.
pub(super) fn unreadable(id: &str, e: QueueError) -> QueueError {
    match e {
        QueueError::Corrupt(reason) => QueueError::Unreadable { id: id.to_string(), reason },
        other => other,
    }
}

pub(super) fn event(text: &str) -> Result<Event, QueueError> {
    parse("event", text)
}

/// An event the queue itself emits, numbered `seq` (after the task's last event): its seq and stored text.
pub(super) fn own_event(
    task_id: &str,
    seq: i64,
    ts: OffsetDateTime,
    kind: EventKind,
) -> Result<(i64, String), QueueError> {
    let seq = seq.max(1);
    let event = Event { seq: seq as u64, task_id: task_id.to_string(), ts, kind };
    Ok((seq, json(&event)?))
}

/// `(state, number of tasks)` rows into [`super::Queue::counts`]'s answer.
pub(super) fn counts(rows: Vec<(String, i64)>) -> Result<BTreeMap<TaskState, u64>, QueueError> {
    rows.into_iter().map(|(text, n)| Ok((state(&text)?, n.max(0) as u64))).collect()
}

/// The rescuer's facts of an expired lease, from its row's `attempt`, `max_attempts`, `cancel_requested`
/// and `takeover`.
pub(super) fn expired(attempt: i64, max_attempts: i64, cancel_requested: bool, takeover: Option<&str>) -> Expired {
    let count = |n: i64| n.clamp(0, i64::from(u32::MAX)) as u32;
    Expired {
        cancel_requested,
        pause_requested: Takeover::parse(takeover) == Some(Takeover::Requested),
        attempt: count(attempt),
        max_attempts: count(max_attempts),
    }
}

/// How many tasks [`super::Queue::list`] returns: 100 unless asked, at most 10 000.
pub(super) fn list_limit(filter: &ListFilter) -> i64 {
    i64::from(if filter.limit == 0 { 100 } else { filter.limit.min(10_000) })
}

/// A task's row as a backend read it.
pub(super) struct TaskRow {
    pub id: String,
    pub spec: String,
    pub state: String,
    pub created_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    pub attempt: i64,
    pub worker: Option<String>,
    pub outcome: Option<String>,
    pub usage: Option<String>,
    pub final_screenshot: Option<String>,
    pub computer_state: Option<String>,
    pub waiting_reason: Option<String>,
    /// The stored turns (docs/humans.md): `NULL` for a task that was never sent a message.
    pub turns: Option<String>,
    /// The take-over marker (`takeover` column).
    pub takeover: Option<String>,
    /// The pool desktop the latest attempt ran on (`desktop_name` column, docs/providers.md).
    pub desktop_name: Option<String>,
    /// The last failure of a pool desktop given to the task (`desktop_failure` column, JSON, docs/providers.md).
    pub desktop_failure: Option<String>,
}

impl TaskRow {
    /// The task as a listing shows it: its record without steps, or, when the row cannot be decoded, its id,
    /// state (if that column reads), creation time and why the rest does not read.
    pub fn listed(self) -> ListedTask {
        let (id, state_text, created_at) = (self.id.clone(), self.state.clone(), self.created_at);
        match self.decode() {
            Ok(record) => ListedTask::Record(Box::new(record)),
            Err(e) => {
                let reason = match e {
                    QueueError::Corrupt(reason) => reason,
                    other => other.to_string(),
                };
                ListedTask::Unreadable(UnreadableTask {
                    state: state(&state_text).ok(),
                    error: format!("the stored task cannot be read: {reason}"),
                    id,
                    created_at,
                })
            }
        }
    }

    /// The task's record, without its steps.
    pub fn decode(self) -> Result<TaskRecord, QueueError> {
        let mut record = TaskRecord {
            version: RECORD_VERSION,
            id: self.id,
            state: state(&self.state)?,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            attempt: self.attempt.max(0) as u32,
            worker: self.worker,
            task: parse::<TaskSpec>("spec", &self.spec)?,
            outcome: parse_optional("outcome", self.outcome.as_deref())?,
            usage: parse_optional("usage", self.usage.as_deref())?.unwrap_or_default(),
            steps: Vec::new(),
            final_screenshot: parse_optional("final_screenshot", self.final_screenshot.as_deref())?,
            computer_state: parse_optional("computer_state", self.computer_state.as_deref())?,
            waiting_reason: self.waiting_reason,
            pending_tool_calls: Vec::new(),
            replay: None,
            waiting: None,
            turns: parse_optional("turns", self.turns.as_deref())?.unwrap_or_default(),
            taken_over: Takeover::parse(self.takeover.as_deref()) == Some(Takeover::Parked),
            desktop: self.desktop_name,
            desktop_failure: parse_optional("desktop_failure", self.desktop_failure.as_deref())?,
        };
        record.derive_turns();
        Ok(record)
    }
}

/// A task's row as a claim left it, with its journal and the seq its next event gets.
pub(super) struct LeaseRow {
    pub id: String,
    pub spec: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub token: i64,
    pub elapsed_ms: i64,
    pub steps: Vec<StepRecord>,
    pub next_seq: i64,
    /// The stored turns (docs/humans.md), `NULL` for a task never sent a message.
    pub turns: Option<String>,
    /// The take-over marker and note as they were before the claim cleared them.
    pub takeover: Option<String>,
    pub takeover_note: Option<String>,
    /// The pool desktop the claim chose (docs/providers.md).
    pub desktop: Option<String>,
}

impl LeaseRow {
    pub fn decode(self) -> Result<Lease, QueueError> {
        Ok(Lease {
            spec: parse("spec", &self.spec)?,
            task_id: self.id,
            token: self.token,
            attempt: self.attempt.max(0) as u32,
            max_attempts: self.max_attempts.max(0) as u32,
            steps: self.steps,
            next_seq: self.next_seq.max(1) as u64,
            elapsed: Duration::from_millis(self.elapsed_ms.max(0) as u64),
            turns: parse_optional("turns", self.turns.as_deref())?.unwrap_or_default(),
            handed_back: (Takeover::parse(self.takeover.as_deref()) == Some(Takeover::Resumed))
                .then_some(HandBack { note: self.takeover_note }),
            desktop: self.desktop,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> TaskRow {
        TaskRow {
            id: "t".into(),
            spec: r#"{"id": "t", "instructions": "x"}"#.into(),
            state: "failed".into(),
            created_at: OffsetDateTime::UNIX_EPOCH,
            started_at: None,
            finished_at: None,
            attempt: 2,
            worker: Some("w".into()),
            outcome: Some(r#"{"success": false, "summary": "no", "reason": "error"}"#.into()),
            usage: None,
            final_screenshot: None,
            computer_state: Some(r#"{"screen": "end"}"#.into()),
            waiting_reason: None,
            turns: None,
            takeover: None,
            desktop_name: None,
            desktop_failure: None,
        }
    }

    #[test]
    fn a_task_row_decodes_and_names_the_column_it_cannot_read() {
        let record = row().decode().expect("decodes");
        assert_eq!((record.state, record.attempt, record.usage.input_tokens), (TaskState::Failed, 2, 0));
        assert_eq!(record.computer_state, Some(serde_json::json!({"screen": "end"})));
        // (the broken row, the column the error names)
        type Breaks = fn(&mut TaskRow);
        let broken: [(Breaks, &str); 5] = [
            (|r| r.spec = "{".into(), "spec"),
            (|r| r.state = "sleeping".into(), "state"),
            (|r| r.outcome = Some("[]".into()), "outcome"),
            (|r| r.usage = Some("1".into()), "usage"),
            (|r| r.computer_state = Some("{".into()), "computer_state"),
        ];
        for (breaks, column) in broken {
            let mut bad = row();
            breaks(&mut bad);
            match bad.decode() {
                Err(QueueError::Corrupt(message)) => assert!(message.starts_with(column), "{message}"),
                other => panic!("{column}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_row_that_cannot_be_decoded_is_listed_with_what_reads_and_why() {
        assert!(matches!(row().listed(), ListedTask::Record(record) if record.id == "t"));
        let mut bad = row();
        bad.spec = "{".into();
        match bad.listed() {
            ListedTask::Unreadable(task) => {
                assert_eq!(
                    (task.id.as_str(), task.state, task.created_at),
                    ("t", Some(TaskState::Failed), OffsetDateTime::UNIX_EPOCH)
                );
                assert!(task.error.contains("spec: "), "{}", task.error);
            }
            other => panic!("{other:?}"),
        }
        // The state itself unreadable: left out, and named.
        let mut bad = row();
        bad.state = "sleeping".into();
        match bad.listed() {
            ListedTask::Unreadable(task) => assert!(task.state.is_none() && task.error.contains("state: "), "{task:?}"),
            other => panic!("{other:?}"),
        }
        // What `get` says names the task and the step.
        let said = unreadable("t", step_at(3, "{").map(drop).unwrap_err());
        assert!(
            matches!(&said, QueueError::Unreadable { id, reason } if id == "t" && reason.starts_with("steps[3]: ")),
            "{said:?}"
        );
        assert!(matches!(unreadable("t", QueueError::NotFound("t".into())), QueueError::NotFound(_)));
    }

    #[test]
    fn counts_and_expired_leases_read_back() {
        let counts = counts(vec![("queued".into(), 2), ("failed".into(), 1)]).expect("counts");
        assert_eq!(counts, BTreeMap::from([(TaskState::Queued, 2), (TaskState::Failed, 1)]));
        assert!(matches!(counts_err(), Err(QueueError::Corrupt(m)) if m.starts_with("state")));
        let facts = expired(-1, i64::MAX, true, Some("requested"));
        assert_eq!(
            facts,
            Expired { cancel_requested: true, pause_requested: true, attempt: 0, max_attempts: u32::MAX }
        );
        assert!(!expired(1, 2, false, Some("parked")).pause_requested);
    }

    fn counts_err() -> Result<BTreeMap<TaskState, u64>, QueueError> {
        counts(vec![("sleeping".into(), 1)])
    }

    #[test]
    fn own_events_are_numbered_from_one() {
        let (seq, text) = own_event("t", 0, OffsetDateTime::UNIX_EPOCH, EventKind::TaskQueued {}).expect("serializes");
        assert_eq!(seq, 1);
        assert_eq!(event(&text).expect("reads back").seq, 1);
    }
}
