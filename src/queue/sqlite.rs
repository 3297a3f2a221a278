//! The embedded queue: SQLite in WAL mode under `data_dir`, durable across restarts.
//!
//! One database file holds tasks, the step journal and the event log. Claims run in `BEGIN IMMEDIATE`
//! transactions (SQLite has one writer, so a claim can never race another); every worker write checks the
//! lease token in the same statement. Times are milliseconds since the epoch, read from one clock (this
//! process's; a SQLite queue is never shared across machines).
//!
//! Durability: submissions, claims, a step's journal entry before its actions, and endings commit on a
//! `synchronous = FULL` connection, so they survive a power cut (a step is on disk before its actions run);
//! the entry after the actions, events and heartbeats commit with `NORMAL`, durable across process crashes
//! and made durable by the next FULL commit (losing one to a power cut leaves the step "interrupted", which
//! is safe). Writes are serialized in-process, so no writer ever meets `SQLITE_BUSY`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use super::row::{LeaseRow, TaskRow, corrupt, json};
use super::transitions::{self, Change, Handback};
use super::{
    Cancelled, Decision, Finish, Lease, LeaseStatus, ListFilter, NewTask, Queue, QueueError, Release, Rescued,
    Submitted, WorkerIdentity, body_hash, from_ms, labels_match, now_ms, row,
};
use crate::record::events::{Event, EventKind};
use crate::record::{StepRecord, TaskState};
use crate::status::TaskRecord;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS tasks (
        id TEXT PRIMARY KEY,
        spec TEXT NOT NULL,
        body_hash TEXT NOT NULL,
        labels TEXT NOT NULL,
        state TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        started_ms INTEGER,
        finished_ms INTEGER,
        attempt INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        worker TEXT,
        lease_token INTEGER NOT NULL DEFAULT 0,
        lease_until_ms INTEGER,
        not_before_ms INTEGER NOT NULL DEFAULT 0,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        approved INTEGER NOT NULL DEFAULT 0,
        same_attempt INTEGER NOT NULL DEFAULT 0,
        waiting_reason TEXT,
        elapsed_ms INTEGER NOT NULL DEFAULT 0,
        outcome TEXT,
        usage TEXT,
        final_screenshot TEXT,
        computer_state TEXT
    )",
    "CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks(state, created_ms)",
    "CREATE TABLE IF NOT EXISTS steps (
        task_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (task_id, idx)
    )",
    "CREATE TABLE IF NOT EXISTS events (
        task_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (task_id, seq)
    )",
];

pub struct SqliteQueue {
    /// Reads, and the writes that may be lost to a power cut without harm (events, heartbeats):
    /// `synchronous = NORMAL`, durable across process crashes.
    pool: SqlitePool,
    /// The writes that must survive a power cut too (submissions, claims, the step journal, endings):
    /// `synchronous = FULL`, so a step journaled before its actions is on disk before they run.
    durable: SqlitePool,
    path: String,
    /// Every write goes through this lock, one at a time, in the order asked. SQLite has one writer; without
    /// it, concurrent writers meet `SQLITE_BUSY` and sleep in the busy handler's growing steps (up to 100 ms
    /// each), which under load made a submission wait seconds behind the workers' journal writes.
    writes: tokio::sync::Mutex<()>,
}

fn db_error(e: sqlx::Error) -> QueueError {
    QueueError::Unavailable(e.to_string())
}

impl SqliteQueue {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub async fn open(path: &Path) -> Result<Self, QueueError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| QueueError::Unavailable(format!("{}: {e}", parent.display())))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options.clone()).await.map_err(db_error)?;
        for statement in SCHEMA {
            sqlx::query(*statement).execute(&pool).await.map_err(db_error)?;
        }
        // In WAL mode a commit on a FULL connection syncs the log, with every commit before it.
        let durable = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.synchronous(SqliteSynchronous::Full))
            .await
            .map_err(db_error)?;
        Ok(Self { pool, durable, path: path.display().to_string(), writes: tokio::sync::Mutex::new(()) })
    }

    fn record_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<TaskRecord, QueueError> {
        let get = |column: &str| row.try_get::<Option<String>, _>(column).map_err(db_error);
        let started: Option<i64> = row.try_get("started_ms").map_err(db_error)?;
        let finished: Option<i64> = row.try_get("finished_ms").map_err(db_error)?;
        TaskRow {
            id: row.try_get("id").map_err(db_error)?,
            spec: row.try_get("spec").map_err(db_error)?,
            state: row.try_get("state").map_err(db_error)?,
            created_at: from_ms(row.try_get("created_ms").map_err(db_error)?),
            started_at: started.map(from_ms),
            finished_at: finished.map(from_ms),
            attempt: row.try_get("attempt").map_err(db_error)?,
            worker: get("worker")?,
            outcome: get("outcome")?,
            usage: get("usage")?,
            final_screenshot: get("final_screenshot")?,
            computer_state: get("computer_state")?,
            waiting_reason: get("waiting_reason")?,
        }
        .decode()
    }

    async fn steps(&self, executor: impl sqlx::SqliteExecutor<'_>, id: &str) -> Result<Vec<StepRecord>, QueueError> {
        let rows = sqlx::query("SELECT record FROM steps WHERE task_id = ?1 ORDER BY idx")
            .bind(id)
            .fetch_all(executor)
            .await
            .map_err(db_error)?;
        rows.iter().map(|r| row::step(&r.try_get::<String, _>("record").map_err(db_error)?)).collect()
    }

    /// Appends an event the queue itself emits, numbered after the task's last event.
    async fn own_event(tx: &mut sqlx::SqliteConnection, task_id: &str, kind: EventKind) -> Result<(), QueueError> {
        let next = Self::next_seq(&mut *tx, task_id).await?;
        let (seq, text) = row::own_event(task_id, next, from_ms(now_ms()), kind)?;
        sqlx::query("INSERT INTO events (task_id, seq, event) VALUES (?1, ?2, ?3)")
            .bind(task_id)
            .bind(seq)
            .bind(text)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn next_seq(executor: impl sqlx::SqliteExecutor<'_>, task_id: &str) -> Result<i64, QueueError> {
        sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE task_id = ?1")
            .bind(task_id)
            .fetch_one(executor)
            .await
            .map_err(db_error)
    }

    /// Writes a decision about a task no worker may write to now; the caller holds the write transaction.
    async fn apply(tx: &mut sqlx::SqliteConnection, id: &str, change: &Change) -> Result<(), QueueError> {
        let update = match change {
            Change::End { outcome, fence } => sqlx::query(
                "UPDATE tasks SET state = ?2, finished_ms = ?3, outcome = ?4, waiting_reason = NULL,
                    lease_until_ms = NULL, lease_token = lease_token + CASE WHEN ?5 THEN 1 ELSE 0 END
                 WHERE id = ?1",
            )
            .bind(id)
            .bind(outcome.state().as_str())
            .bind(now_ms())
            .bind(json(outcome)?)
            .bind(*fence),
            Change::RequestCancel => sqlx::query("UPDATE tasks SET cancel_requested = 1 WHERE id = ?1").bind(id),
            Change::Approve => sqlx::query(
                "UPDATE tasks SET state = 'queued', approved = 1, same_attempt = 1, waiting_reason = NULL,
                    not_before_ms = 0
                 WHERE id = ?1",
            )
            .bind(id),
            // Bumping the token fences the lost worker out even before anyone claims the task again.
            Change::Requeue => sqlx::query(
                "UPDATE tasks SET state = 'queued', lease_until_ms = NULL, worker = NULL,
                    lease_token = lease_token + 1
                 WHERE id = ?1",
            )
            .bind(id),
        };
        update.execute(&mut *tx).await.map_err(db_error)?;
        if let Some(kind) = change.event() {
            Self::own_event(tx, id, kind).await?;
        }
        Ok(())
    }

    /// The state of a task, read inside the caller's write transaction.
    async fn state(tx: &mut sqlx::SqliteConnection, id: &str) -> Result<TaskState, QueueError> {
        let state: String = sqlx::query_scalar("SELECT state FROM tasks WHERE id = ?1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        row::state(&state)
    }
}

#[async_trait]
impl Queue for SqliteQueue {
    fn describe(&self) -> String {
        format!("sqlite:{}", self.path)
    }

    async fn submit(&self, task: NewTask) -> Result<Submitted, QueueError> {
        let _write = self.writes.lock().await;
        let id = task.id().to_string();
        let hash = body_hash(&task.spec);
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let existing = sqlx::query("SELECT body_hash FROM tasks WHERE id = ?1")
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        if let Some(row) = existing {
            let stored: String = row.try_get("body_hash").map_err(db_error)?;
            drop(tx);
            transitions::resubmit(&id, &stored, &hash)?;
            return Ok(Submitted::Existing(self.get(&id).await?));
        }
        let labels: BTreeMap<&str, &str> = task.spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        sqlx::query(
            "INSERT INTO tasks (id, spec, body_hash, labels, state, created_ms, max_attempts)
             VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?6)",
        )
        .bind(&id)
        .bind(json(&task.spec)?)
        .bind(&hash)
        .bind(json(&labels)?)
        .bind(now_ms())
        .bind(i64::from(task.max_attempts.max(1)))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        Self::own_event(&mut tx, &id, EventKind::TaskQueued {}).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(Submitted::Created(self.get(&id).await?))
    }

    async fn get(&self, id: &str) -> Result<TaskRecord, QueueError> {
        let row = sqlx::query("SELECT * FROM tasks WHERE id = ?1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        let mut record = Self::record_from_row(&row)?;
        record.steps = self.steps(&self.pool, id).await?;
        Ok(record)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskRecord>, QueueError> {
        let limit = row::list_limit(filter);
        let rows = match filter.state {
            Some(state) => {
                sqlx::query("SELECT * FROM tasks WHERE state = ?1 ORDER BY created_ms DESC, id DESC LIMIT ?2")
                    .bind(state.as_str())
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await
            }
            None => {
                sqlx::query("SELECT * FROM tasks ORDER BY created_ms DESC, id DESC LIMIT ?1")
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await
            }
        }
        .map_err(db_error)?;
        rows.iter().map(Self::record_from_row).collect()
    }

    async fn claim(&self, worker: &WorkerIdentity, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        let _write = self.writes.lock().await;
        let now = now_ms();
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let candidates = sqlx::query(
            "SELECT id, labels FROM tasks WHERE state = 'queued' AND not_before_ms <= ?1
             ORDER BY created_ms, id LIMIT 200",
        )
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut chosen = None;
        for row in &candidates {
            let labels_text: String = row.try_get("labels").map_err(db_error)?;
            let labels: BTreeMap<String, String> =
                serde_json::from_str(&labels_text).map_err(|e| corrupt("labels", e))?;
            if labels_match(&labels, &worker.labels) {
                chosen = Some(row.try_get::<String, _>("id").map_err(db_error)?);
                break;
            }
        }
        let Some(id) = chosen else {
            return Ok(None);
        };
        let row = sqlx::query(
            "UPDATE tasks SET state = 'running', attempt = attempt + 1 - same_attempt, same_attempt = 0,
                worker = ?2, lease_token = lease_token + 1,
                lease_until_ms = ?3, started_ms = COALESCE(started_ms, ?4), cancel_requested = 0,
                waiting_reason = NULL
             WHERE id = ?1 AND state = 'queued'
             RETURNING spec, attempt, max_attempts, lease_token, elapsed_ms, approved",
        )
        .bind(&id)
        .bind(&worker.name)
        .bind(now + lease_for.as_millis() as i64)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        let approved: i64 = row.try_get("approved").map_err(db_error)?;
        let lease = LeaseRow {
            spec: row.try_get("spec").map_err(db_error)?,
            attempt: row.try_get("attempt").map_err(db_error)?,
            max_attempts: row.try_get("max_attempts").map_err(db_error)?,
            token: row.try_get("lease_token").map_err(db_error)?,
            elapsed_ms: row.try_get("elapsed_ms").map_err(db_error)?,
            approved: approved != 0,
            steps: self.steps(&mut *tx, &id).await?,
            next_seq: Self::next_seq(&mut *tx, &id).await?,
            id,
        }
        .decode()?;
        tx.commit().await.map_err(db_error)?;
        Ok(Some(lease))
    }

    async fn heartbeat(&self, task_id: &str, token: i64, lease_for: Duration) -> Result<LeaseStatus, QueueError> {
        let _write = self.writes.lock().await;
        let row = sqlx::query(
            "UPDATE tasks SET lease_until_ms = ?3 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
             RETURNING cancel_requested",
        )
        .bind(task_id)
        .bind(token)
        .bind(now_ms() + lease_for.as_millis() as i64)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(match row {
            Some(row) => {
                let cancel: i64 = row.try_get("cancel_requested").map_err(db_error)?;
                LeaseStatus::Held { cancel_requested: cancel != 0 }
            }
            None => LeaseStatus::Lost,
        })
    }

    async fn record_step(
        &self,
        task_id: &str,
        token: i64,
        step: &StepRecord,
        elapsed: Duration,
    ) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        // The write before a step's actions must survive a power cut (it is what keeps them from being run
        // again); the one after may be lost with it: the step then reads as interrupted, which is safe.
        let pool = if step.finished { &self.pool } else { &self.durable };
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let held =
            sqlx::query("UPDATE tasks SET elapsed_ms = ?3 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'")
                .bind(task_id)
                .bind(token)
                .bind(elapsed.as_millis() as i64)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?
                .rows_affected();
        transitions::fenced(task_id, held)?;
        sqlx::query(
            "INSERT INTO steps (task_id, idx, record) VALUES (?1, ?2, ?3)
             ON CONFLICT (task_id, idx) DO UPDATE SET record = excluded.record",
        )
        .bind(task_id)
        .bind(i64::from(step.index))
        .bind(json(step)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn append_events(&self, task_id: &str, token: Option<i64>, events: &[Event]) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        if events.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
        if let Some(token) = token {
            let held = sqlx::query("SELECT 1 FROM tasks WHERE id = ?1 AND lease_token = ?2")
                .bind(task_id)
                .bind(token)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
            if held.is_none() {
                return Err(QueueError::LeaseLost(task_id.to_string()));
            }
        }
        for event in events {
            sqlx::query("INSERT OR REPLACE INTO events (task_id, seq, event) VALUES (?1, ?2, ?3)")
                .bind(task_id)
                .bind(event.seq as i64)
                .bind(json(event)?)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn events_after(&self, task_id: &str, after: u64, limit: u32) -> Result<Vec<Event>, QueueError> {
        let rows = sqlx::query("SELECT event FROM events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")
            .bind(task_id)
            .bind(after as i64)
            .bind(i64::from(limit.max(1)))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(|r| row::event(&r.try_get::<String, _>("event").map_err(db_error)?)).collect()
    }

    async fn finish(&self, task_id: &str, token: i64, finish: &Finish) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        let done = sqlx::query(
            "UPDATE tasks SET state = ?3, finished_ms = ?4, outcome = ?5, usage = ?6, final_screenshot = ?7,
                computer_state = ?8, lease_until_ms = NULL, waiting_reason = NULL
             WHERE id = ?1 AND lease_token = ?2 AND state = 'running'",
        )
        .bind(task_id)
        .bind(token)
        .bind(finish.outcome.state().as_str())
        .bind(now_ms())
        .bind(json(&finish.outcome)?)
        .bind(json(&finish.usage)?)
        .bind(finish.final_screenshot.as_ref().map(json).transpose()?)
        .bind(finish.computer_state.as_ref().map(json).transpose()?)
        .execute(&self.durable)
        .await
        .map_err(db_error)?
        .rows_affected();
        transitions::fenced(task_id, done)
    }

    async fn release(&self, task_id: &str, token: i64, release: &Release) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        let result = match transitions::release(release) {
            Handback::Requeue { same_attempt, delay, .. } => {
                sqlx::query(
                    "UPDATE tasks SET state = 'queued', lease_until_ms = NULL, worker = NULL,
                    same_attempt = ?3, not_before_ms = ?4
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'",
                )
                .bind(task_id)
                .bind(token)
                .bind(same_attempt)
                .bind(now_ms() + delay.as_millis() as i64)
                .execute(&self.durable)
                .await
            }
            Handback::WaitForHuman { reason } => {
                sqlx::query(
                    "UPDATE tasks SET state = 'waiting_for_human', lease_until_ms = NULL, worker = NULL,
                    waiting_reason = ?3, approved = 0
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'",
                )
                .bind(task_id)
                .bind(token)
                .bind(reason)
                .execute(&self.durable)
                .await
            }
        };
        transitions::fenced(task_id, result.map_err(db_error)?.rows_affected())
    }

    async fn cancel(&self, id: &str) -> Result<Cancelled, QueueError> {
        let _write = self.writes.lock().await;
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let change = transitions::cancel(id, Self::state(&mut tx, id).await?)?;
        Self::apply(&mut tx, id, &change).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(transitions::cancelled(&change))
    }

    async fn decide(&self, id: &str, decision: &Decision) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let change = transitions::decide(id, Self::state(&mut tx, id).await?, decision)?;
        Self::apply(&mut tx, id, &change).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn rescue_expired(&self) -> Result<Vec<Rescued>, QueueError> {
        let _write = self.writes.lock().await;
        let now = now_ms();
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
        let expired: Vec<(String, i64, i64, bool)> = sqlx::query_as(
            "SELECT id, attempt, max_attempts, cancel_requested FROM tasks
             WHERE state = 'running' AND lease_until_ms < ?1",
        )
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut rescued = Vec::new();
        for (id, attempt, max_attempts, cancel_requested) in expired {
            let change = transitions::rescue(&row::expired(attempt, max_attempts, cancel_requested));
            Self::apply(&mut tx, &id, &change).await?;
            rescued.push(Rescued { task_id: id, new_state: change.state() });
        }
        tx.commit().await.map_err(db_error)?;
        Ok(rescued)
    }

    async fn counts(&self) -> Result<BTreeMap<TaskState, u64>, QueueError> {
        let rows = sqlx::query_as("SELECT state, COUNT(*) AS n FROM tasks GROUP BY state")
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        row::counts(rows)
    }

    async fn health(&self) -> Result<(), QueueError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map_err(db_error).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskSpec;

    #[tokio::test]
    async fn tasks_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        {
            let queue = SqliteQueue::open(&path).await.unwrap();
            let spec = TaskSpec::parse(r#"{"id": "durable", "instructions": "x"}"#, "t").unwrap();
            queue.submit(NewTask { spec, max_attempts: 3 }).await.unwrap();
        }
        let queue = SqliteQueue::open(&path).await.unwrap();
        assert_eq!(queue.get("durable").await.unwrap().state, TaskState::Queued);
    }
}
