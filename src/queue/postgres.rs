//! The fleet queue: PostgreSQL shared by every agentd of a fleet, on the same [`Queue`] contract as SQLite.
//!
//! - **Claims** take the oldest claimable task with `FOR UPDATE SKIP LOCKED`, so workers on many machines
//!   never wait on or double-claim a row; label routing is jsonb containment (`labels <@ worker_labels`).
//! - **Lease times come from the database clock** (`now()`): machines with skewed clocks agree on who holds
//!   a lease. Every worker write is fenced by the lease token in the same statement (or under the task
//!   row's lock), and the rescuer bumps the token, so a worker frozen past its lease can never write again.
//! - **Wake-ups** use `LISTEN/NOTIFY` (channel `agentd_work` when a task becomes claimable, `agentd_cancel`
//!   with the task id when a running task is cancelled), sent in the same transaction as the change so they
//!   arrive only once it is committed; the poll interval stays as the safety net (and is all there is with
//!   `queue.listen = false`, e.g. behind a transaction-pooling PgBouncer, where LISTEN does not work).
//! - **Migrations** run on start inside one transaction under an advisory lock, so nodes starting together
//!   apply each once; `agentd_schema_migrations` records what was applied.
//! - **Reconnects**: the pool tests connections before handing them out, so a restarted server costs the
//!   operations in flight at that moment (callers retry them) and nothing more; the listener reconnects with
//!   backoff and asks for a look at the queue afterwards, since notifications sent meanwhile are lost.
//!
//! Every table is prefixed `agentd_` so the queue can live in a database shared with other software.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{Connection, Postgres, Row, Transaction};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::choreography;
use super::row::{LeaseRow, TaskRow, json};
use super::transitions::{self, Change, Handback, TAKEOVER_REASON, Takeover};
use super::{
    Cancelled, Decision, Finish, HumanAnswer, Lease, LeaseStatus, ListFilter, NewTask, Paused, Queue, QueueError,
    QueueSignal, Release, Rescued, SignalHandler, Submitted, ToolAnswer, WorkerIdentity, body_hash, desktop, row,
};
use crate::budget;
use crate::record::events::{Event, EventKind};
use crate::record::{StepRecord, TaskState, Usage};
use crate::status::{ListedTask, TaskRecord};

/// Channel notified when a task may have become claimable.
const WORK_CHANNEL: &str = "agentd_work";
/// Channel notified with a task id when a cancel is requested for a running task.
const CANCEL_CHANNEL: &str = "agentd_cancel";
/// Channel notified with a task id when a pause (take-over, docs/humans.md) is requested for a running task.
const PAUSE_CHANNEL: &str = "agentd_pause";
/// Advisory lock key held while migrating ("agentd" in ASCII).
const MIGRATION_LOCK: i64 = 0x6167_656e_7464;

/// Schema versions, applied in order, each once. Never edit a released entry: add a new one.
/// Migrations that also need Rust after their statements get it in [`PostgresQueue::after_migration`].
const MIGRATIONS: &[(i32, &str, &[&str])] = &[
    (
        1,
        "tasks, step journal, event log",
        &[
            "CREATE TABLE agentd_tasks (
            id text PRIMARY KEY,
            spec text NOT NULL,
            body_hash text NOT NULL,
            labels jsonb NOT NULL,
            state text NOT NULL,
            created_at timestamptz NOT NULL,
            started_at timestamptz,
            finished_at timestamptz,
            attempt integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL,
            worker text,
            lease_token bigint NOT NULL DEFAULT 0,
            lease_until timestamptz,
            not_before timestamptz NOT NULL DEFAULT '-infinity',
            cancel_requested boolean NOT NULL DEFAULT false,
            approved boolean NOT NULL DEFAULT false,
            same_attempt boolean NOT NULL DEFAULT false,
            waiting_reason text,
            elapsed_ms bigint NOT NULL DEFAULT 0,
            outcome text,
            usage text,
            final_screenshot text,
            computer_state text
        )",
            "CREATE INDEX agentd_tasks_claimable ON agentd_tasks (created_at, id) WHERE state = 'queued'",
            "CREATE INDEX agentd_tasks_leased ON agentd_tasks (lease_until) WHERE state = 'running'",
            "CREATE INDEX agentd_tasks_newest ON agentd_tasks (created_at DESC, id DESC)",
            "CREATE INDEX agentd_tasks_by_state ON agentd_tasks (state, created_at DESC, id DESC)",
            "CREATE TABLE agentd_steps (
            task_id text NOT NULL REFERENCES agentd_tasks (id) ON DELETE CASCADE,
            idx integer NOT NULL,
            record text NOT NULL,
            PRIMARY KEY (task_id, idx)
        )",
            "CREATE TABLE agentd_events (
            task_id text NOT NULL REFERENCES agentd_tasks (id) ON DELETE CASCADE,
            seq bigint NOT NULL,
            event text NOT NULL,
            PRIMARY KEY (task_id, seq)
        )",
        ],
    ),
    (
        2,
        "desktop keys: one task per desktop at a time",
        &[
            "ALTER TABLE agentd_tasks ADD COLUMN desktop text",
            "ALTER TABLE agentd_tasks ADD COLUMN desktop_held text",
            "CREATE INDEX agentd_tasks_desktop_held ON agentd_tasks (desktop_held) WHERE state = 'running'",
        ],
    ),
    (
        3,
        "retention: finished tasks by age, the purge list",
        &[
            "CREATE INDEX agentd_tasks_finished ON agentd_tasks (finished_at)
            WHERE state IN ('succeeded', 'failed', 'cancelled')",
            "CREATE TABLE agentd_purges (task_id text PRIMARY KEY, deleted_at timestamptz NOT NULL)",
        ],
    ),
    (4, "conversations: the turns of a task sent a message", &["ALTER TABLE agentd_tasks ADD COLUMN turns text"]),
    (
        5,
        "take-over: the marker and the note resume hands the next claim",
        &[
            "ALTER TABLE agentd_tasks ADD COLUMN takeover text",
            "ALTER TABLE agentd_tasks ADD COLUMN takeover_note text",
        ],
    ),
    (
        6,
        "desktop pools: the desktop a task ran on, the failure of one",
        &[
            "ALTER TABLE agentd_tasks ADD COLUMN desktop_name text",
            "ALTER TABLE agentd_tasks ADD COLUMN desktop_failure text",
        ],
    ),
    (
        7,
        "model rate budgets shared by the fleet (docs/models.md): GCRA times on the database's clock",
        &["CREATE TABLE agentd_rate_budgets (
            key text PRIMARY KEY,
            requests_at double precision NOT NULL DEFAULT 0,
            tokens_at double precision NOT NULL DEFAULT 0,
            paused_until double precision NOT NULL DEFAULT 0
        )"],
    ),
];

/// Deletes the finished tasks among `$1` (steps and events go by `ON DELETE CASCADE`) and puts them on the
/// purge list, in one statement: a row whose state changes meanwhile is re-checked under its lock, so a task
/// that is no longer finished is never deleted.
const DELETE_FINISHED: &str = "WITH gone AS (
        DELETE FROM agentd_tasks WHERE id = ANY($1) AND state IN ('succeeded', 'failed', 'cancelled') RETURNING id
    )
    INSERT INTO agentd_purges (task_id, deleted_at) SELECT id, now() FROM gone
    ON CONFLICT (task_id) DO UPDATE SET deleted_at = excluded.deleted_at
    RETURNING task_id";

/// How the queue connects.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    /// Connections in the pool (claims, heartbeats, journal writes, events, the API).
    pub max_connections: u32,
    /// Hold a `LISTEN` connection for wake-ups and cancellations from other nodes.
    pub listen: bool,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self { max_connections: 10, listen: true }
    }
}

/// How long the server lets one of our sessions sit idle inside a transaction (see `connect`).
const IDLE_IN_TRANSACTION: &str = "SET idle_in_transaction_session_timeout = '5s'";

/// How many tasks that cannot be read one claim ends before it answers that there is nothing to run.
const UNREADABLE_PER_CLAIM: usize = 16;

pub struct PostgresQueue {
    pool: PgPool,
    /// `postgres://user@host:port/db`, never with the password.
    describe: String,
    listen: bool,
}

/// What went wrong, in words an operator can act on (never the connection URL).
fn error_text(e: sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("{} (SQLSTATE {code})", db.message()),
            None => db.message().to_string(),
        },
        sqlx::Error::PoolTimedOut => "no database connection became free in time".into(),
        other => other.to_string(),
    }
}

fn db_error(e: sqlx::Error) -> QueueError {
    QueueError::Unavailable(error_text(e))
}

fn secs(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

/// A connection target for logs: user, host, port and database, never the password.
fn describe_options(options: &PgConnectOptions) -> String {
    let host = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    format!("postgres://{}@{host}/{}", options.get_username(), options.get_database().unwrap_or(""))
}

impl PostgresQueue {
    /// Connects to the database at `url` (`postgres://user@host/db`; the password may come from the URL,
    /// `PGPASSWORD` or `~/.pgpass`) and brings the schema up to date.
    pub async fn open(url: &str, settings: PostgresSettings) -> Result<Self, QueueError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| QueueError::Unavailable(format!("queue.url is not a PostgreSQL URL: {e}")))?;
        Self::connect(options, settings).await
    }

    /// Like [`PostgresQueue::open`], from parsed options (tests use it to set a `search_path`).
    pub async fn connect(options: PgConnectOptions, settings: PostgresSettings) -> Result<Self, QueueError> {
        let describe = describe_options(&options);
        let options = options.application_name("agentd");
        // One direct connection first: it fails fast and says why (refused, authentication, no such
        // database), where a pool would only report that it timed out.
        let first = tokio::time::timeout(Duration::from_secs(10), PgConnection::connect_with(&options))
            .await
            .map_err(|_| QueueError::Unavailable(format!("{describe}: no answer within 10 s")))?
            .map_err(|e| QueueError::Unavailable(format!("{describe}: {}", error_text(e))))?;
        let _ = first.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            // A connection broken by a server restart is found and replaced before anyone uses it.
            .test_before_acquire(true)
            // A node frozen or cut off in the middle of a transaction (SIGSTOP, a long pause, a partition)
            // would hold its row locks — and the rescuers on other nodes skip locked rows — for as long as it
            // stays away. Our transactions never wait on the client between statements, so the server ends
            // one idle that long and its locks go with it; the node's late write then fails and is fenced.
            .after_connect(|connection, _| {
                Box::pin(async move {
                    sqlx::Executor::execute(&mut *connection, IDLE_IN_TRANSACTION).await?;
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        let queue = Self { pool, describe, listen: settings.listen };
        queue.migrate().await?;
        Ok(queue)
    }

    /// Applies the migrations this database has not seen, under an advisory lock.
    async fn migrate(&self) -> Result<(), QueueError> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS agentd_schema_migrations (
                version integer PRIMARY KEY,
                description text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let applied: Vec<i32> = sqlx::query_scalar("SELECT version FROM agentd_schema_migrations ORDER BY version")
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        let newest_known = MIGRATIONS.last().map_or(0, |(v, _, _)| *v);
        if let Some(newest) = applied.iter().max().filter(|v| **v > newest_known) {
            tracing::warn!(
                database = newest,
                this_build = newest_known,
                "the queue schema is newer than this agentd; running anyway (schema changes are additive)"
            );
        }
        for (version, description, statements) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            for statement in *statements {
                sqlx::query(*statement).execute(&mut *tx).await.map_err(db_error)?;
            }
            Self::after_migration(&mut tx, *version).await?;
            sqlx::query("INSERT INTO agentd_schema_migrations (version, description) VALUES ($1, $2)")
                .bind(version)
                .bind(description)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            tracing::info!(version, description, "queue schema migrated");
        }
        tx.commit().await.map_err(db_error)
    }

    /// What a migration needs beyond SQL. 2: tasks that may still run get their desktop key, so an upgrade
    /// does not let them share a desktop.
    async fn after_migration(tx: &mut Transaction<'_, Postgres>, version: i32) -> Result<(), QueueError> {
        if version != 2 {
            return Ok(());
        }
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, spec FROM agentd_tasks WHERE state IN ('queued', 'running', 'waiting_for_human')",
        )
        .fetch_all(&mut **tx)
        .await
        .map_err(db_error)?;
        for (id, spec_text) in rows {
            let spec: crate::task::TaskSpec = serde_json::from_str(&spec_text).map_err(|e| row::corrupt("spec", e))?;
            sqlx::query("UPDATE agentd_tasks SET desktop = $2 WHERE id = $1")
                .bind(id)
                .bind(desktop::of_task(spec.computer.as_ref()))
                .execute(&mut **tx)
                .await
                .map_err(db_error)?;
        }
        Ok(())
    }

    /// The pool, for tests and benchmarks that inspect the database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A task's row as read, its JSON columns not decoded yet.
    fn task_row(row: &PgRow) -> Result<TaskRow, QueueError> {
        let get = |column: &str| row.try_get::<Option<String>, _>(column).map_err(db_error);
        let attempt: i32 = row.try_get("attempt").map_err(db_error)?;
        Ok(TaskRow {
            id: row.try_get("id").map_err(db_error)?,
            spec: row.try_get("spec").map_err(db_error)?,
            state: row.try_get("state").map_err(db_error)?,
            created_at: row.try_get("created_at").map_err(db_error)?,
            started_at: row.try_get("started_at").map_err(db_error)?,
            finished_at: row.try_get("finished_at").map_err(db_error)?,
            attempt: i64::from(attempt),
            worker: get("worker")?,
            outcome: get("outcome")?,
            usage: get("usage")?,
            final_screenshot: get("final_screenshot")?,
            computer_state: get("computer_state")?,
            waiting_reason: get("waiting_reason")?,
            turns: get("turns")?,
            takeover: get("takeover")?,
            desktop_name: get("desktop_name")?,
            desktop_failure: get("desktop_failure")?,
        })
    }

    /// Takes the transaction-scoped advisory lock on a desktop key, then tells whether no live task holds
    /// the desktop (running under a live lease, or parked for a take-over), seeing every claim committed
    /// before the lock was granted.
    async fn desktop_free(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, key: &str) -> Result<bool, QueueError> {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(key)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        let held: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM agentd_tasks
                            WHERE desktop_held = $1 AND (state = 'running' AND lease_until > now()
                                  OR state = 'waiting_for_human' AND takeover = 'parked'))",
        )
        .bind(key)
        .fetch_one(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(!held)
    }

    async fn steps(executor: impl sqlx::PgExecutor<'_>, id: &str) -> Result<Vec<StepRecord>, QueueError> {
        let rows: Vec<(i32, String)> =
            sqlx::query_as("SELECT idx, record FROM agentd_steps WHERE task_id = $1 ORDER BY idx")
                .bind(id)
                .fetch_all(executor)
                .await
                .map_err(db_error)?;
        rows.iter().map(|(idx, text)| row::step_at(i64::from(*idx), text)).collect()
    }

    async fn next_seq(executor: impl sqlx::PgExecutor<'_>, task_id: &str) -> Result<i64, QueueError> {
        sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) + 1 FROM agentd_events WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(executor)
            .await
            .map_err(db_error)
    }

    /// Appends an event the queue itself emits, numbered after the task's last event. Callers hold the task
    /// row's lock, so no other writer numbers an event of this task meanwhile.
    async fn own_event(tx: &mut Transaction<'_, Postgres>, task_id: &str, kind: EventKind) -> Result<(), QueueError> {
        let next = Self::next_seq(&mut **tx, task_id).await?;
        let (seq, text) = row::own_event(task_id, next, OffsetDateTime::now_utc(), kind)?;
        sqlx::query("INSERT INTO agentd_events (task_id, seq, event) VALUES ($1, $2, $3)")
            .bind(task_id)
            .bind(seq)
            .bind(text)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Tells listening workers (on commit of `tx`) that a task may be claimable.
    async fn notify_work(tx: &mut Transaction<'_, Postgres>) -> Result<(), QueueError> {
        sqlx::query("SELECT pg_notify($1, '')").bind(WORK_CHANNEL).execute(&mut **tx).await.map_err(db_error)?;
        Ok(())
    }

    /// Locks a task's row and returns its state and take-over marker.
    async fn lock_facts(
        tx: &mut Transaction<'_, Postgres>,
        id: &str,
    ) -> Result<(TaskState, Option<Takeover>), QueueError> {
        let (state, takeover): (String, Option<String>) =
            sqlx::query_as("SELECT state, takeover FROM agentd_tasks WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await
                .map_err(db_error)?
                .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        Ok((row::state(&state)?, Takeover::parse(takeover.as_deref())))
    }

    /// Locks a task's row and returns its state.
    async fn lock_state(tx: &mut Transaction<'_, Postgres>, id: &str) -> Result<TaskState, QueueError> {
        let state: String = sqlx::query_scalar("SELECT state FROM agentd_tasks WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        row::state(&state)
    }

    /// Writes a decision about a task no worker may write to now. The caller holds the row lock; the wake-up
    /// for a task that became claimable is the caller's (one per transaction).
    async fn apply(tx: &mut Transaction<'_, Postgres>, id: &str, change: &Change) -> Result<(), QueueError> {
        let update = match change {
            Change::End { outcome, fence } => sqlx::query(
                "UPDATE agentd_tasks SET state = $2, finished_at = now(), outcome = $3, waiting_reason = NULL,
                    takeover = NULL, takeover_note = NULL, lease_until = NULL, lease_token = lease_token + CASE WHEN $4 THEN 1 ELSE 0 END
                 WHERE id = $1",
            )
            .bind(id)
            .bind(outcome.state().as_str())
            .bind(json(outcome)?)
            .bind(*fence),
            Change::RequestCancel => {
                sqlx::query("UPDATE agentd_tasks SET cancel_requested = true WHERE id = $1").bind(id)
            }
            Change::RequestPause => sqlx::query("UPDATE agentd_tasks SET takeover = $2 WHERE id = $1")
                .bind(id)
                .bind(Takeover::Requested.as_str()),
            Change::Park { fence } => sqlx::query(
                "UPDATE agentd_tasks SET state = 'waiting_for_human', takeover = $2, waiting_reason = $3,
                    approved = false, lease_until = NULL, worker = NULL,
                    lease_token = lease_token + CASE WHEN $4 THEN 1 ELSE 0 END
                 WHERE id = $1",
            )
            .bind(id)
            .bind(Takeover::Parked.as_str())
            .bind(TAKEOVER_REASON)
            .bind(*fence),
            Change::HandBack { note } => sqlx::query(
                "UPDATE agentd_tasks SET state = 'queued', takeover = $2, takeover_note = $3, waiting_reason = NULL,
                    not_before = '-infinity'
                 WHERE id = $1",
            )
            .bind(id)
            .bind(Takeover::Resumed.as_str())
            .bind(note.clone()),
            // The answer itself is in the waiting step (`transitions::decide`); the `approved` column is no
            // longer read, only kept up for an older version reading this queue (a downgrade, or the other
            // nodes of a fleet during a rolling upgrade).
            Change::Approve => sqlx::query(
                "UPDATE agentd_tasks SET state = 'queued', approved = true, same_attempt = true,
                    waiting_reason = NULL, not_before = '-infinity'
                 WHERE id = $1",
            )
            .bind(id),
            Change::Resume => sqlx::query(
                "UPDATE agentd_tasks SET state = 'queued', same_attempt = true, waiting_reason = NULL,
                    not_before = '-infinity'
                 WHERE id = $1",
            )
            .bind(id),
            // Bumping the token fences the lost worker out even before anyone claims the task again.
            Change::Requeue => sqlx::query(
                "UPDATE agentd_tasks SET state = 'queued', lease_until = NULL, worker = NULL,
                    lease_token = lease_token + 1
                 WHERE id = $1",
            )
            .bind(id),
        };
        update.execute(&mut **tx).await.map_err(db_error)?;
        if *change == Change::RequestCancel {
            // The node running it hears this at once; the heartbeat carries it too, as a safety net.
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CANCEL_CHANNEL)
                .bind(id)
                .execute(&mut **tx)
                .await
                .map_err(db_error)?;
        }
        if *change == Change::RequestPause {
            // The node running it parks it after its current step; the heartbeat carries it too.
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(PAUSE_CHANNEL)
                .bind(id)
                .execute(&mut **tx)
                .await
                .map_err(db_error)?;
        }
        if let Some(kind) = change.event() {
            Self::own_event(tx, id, kind).await?;
        }
        Ok(())
    }
}

impl PostgresQueue {
    /// One claim ([`Queue::claim`]); a task it took whose row cannot be decoded is ended, and is the answer as
    /// [`QueueError::Unreadable`].
    async fn claim_one(&self, worker: &WorkerIdentity, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        // The oldest claimable task, skipping those whose desktop a task running under a live lease holds
        // (queue::desktop). Two nodes may pick two tasks of one free desktop at the same moment (neither sees
        // the other's uncommitted claim), so a task with a desktop is claimed under a transaction-scoped
        // advisory lock on its key and the desktop checked again after it, in a statement that sees every
        // claim committed before: of two such claims, the second finds the first and leaves its task queued.
        // A pool task (docs/providers.md) is claimed with one of the worker's free pool desktops its request matches,
        // under the same lock and check on that desktop's key. A few of the oldest tasks are looked at, so
        // that a task whose desktops are all busy does not hold back the ones behind it.
        let pick = format!(
            "SELECT id, {qualified} AS desktop_key, desktop_name, takeover, takeover_note FROM agentd_tasks t
             WHERE state = 'queued' AND not_before <= now() AND labels <@ $1
               AND NOT EXISTS (SELECT 1 FROM agentd_tasks r WHERE r.state = 'running' AND r.lease_until > now()
                                 AND r.desktop_held = {qualified})
               AND NOT EXISTS (SELECT 1 FROM agentd_tasks p WHERE p.state = 'waiting_for_human'
                                 AND p.takeover = 'parked' AND p.desktop_held = {qualified})
             ORDER BY created_at, id
             LIMIT 16
             FOR UPDATE SKIP LOCKED",
            qualified = desktop::sql_qualify("t.desktop", "$2", "$3", "$4"),
        );
        type Picked = (String, Option<String>, Option<String>, Option<String>, Option<String>);
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let picked: Vec<Picked> = // Built from constants only (no input reaches the text).
            sqlx::query_as(sqlx::AssertSqlSafe(pick.as_str()))
                .bind(Json(&worker.labels))
                .bind(&worker.desktops.default)
                .bind(&worker.desktops.host)
                .bind(&worker.desktops.display)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_error)?;
        for (id, desktop_key, before, takeover, takeover_note) in picked {
            let (desktop_key, desktop_name) = match desktop_key.as_deref().and_then(desktop::pool_request) {
                None => match desktop_key {
                    Some(key) if !Self::desktop_free(&mut tx, &key).await? => continue,
                    key => (key, None),
                },
                Some(request) => {
                    let mut chosen = None;
                    let mut offers: Vec<&desktop::PoolOffer> = worker
                        .pool
                        .iter()
                        .filter(|o| request.matches(&o.name, o.labels.iter().map(String::as_str)))
                        .collect();
                    offers.sort_by_key(|o| before.as_deref() != Some(o.name.as_str()));
                    for offer in offers {
                        if Self::desktop_free(&mut tx, &offer.key).await? {
                            chosen = Some((Some(offer.key.clone()), Some(offer.name.clone())));
                            break;
                        }
                    }
                    match chosen {
                        Some(chosen) => chosen,
                        None => continue,
                    }
                }
            };
            let row = sqlx::query(
                "UPDATE agentd_tasks t SET state = 'running',
                    attempt = t.attempt + CASE WHEN t.same_attempt THEN 0 ELSE 1 END, same_attempt = false,
                    worker = $2, lease_token = t.lease_token + 1, lease_until = now() + make_interval(secs => $3),
                    started_at = COALESCE(t.started_at, now()), cancel_requested = false, waiting_reason = NULL,
                    desktop_held = $4, takeover = NULL, takeover_note = NULL,
                    desktop_name = COALESCE($5, t.desktop_name)
                 WHERE t.id = $1
                 RETURNING t.spec, t.attempt, t.max_attempts, t.lease_token, t.elapsed_ms, t.turns",
            )
            .bind(&id)
            .bind(&worker.name)
            .bind(secs(lease_for))
            .bind(&desktop_key)
            .bind(&desktop_name)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
            let attempt: i32 = row.try_get("attempt").map_err(db_error)?;
            let max_attempts: i32 = row.try_get("max_attempts").map_err(db_error)?;
            let steps = Self::steps(&mut *tx, &id).await;
            let lease = LeaseRow {
                spec: row.try_get("spec").map_err(db_error)?,
                attempt: i64::from(attempt),
                max_attempts: i64::from(max_attempts),
                token: row.try_get("lease_token").map_err(db_error)?,
                elapsed_ms: row.try_get("elapsed_ms").map_err(db_error)?,
                steps: Vec::new(),
                next_seq: Self::next_seq(&mut *tx, &id).await?,
                turns: row.try_get("turns").map_err(db_error)?,
                takeover,
                takeover_note,
                desktop: desktop_name,
                id: id.clone(),
            };
            return match steps.and_then(|steps| LeaseRow { steps, ..lease }.decode()) {
                Ok(lease) => {
                    tx.commit().await.map_err(db_error)?;
                    Ok(Some(lease))
                }
                Err(QueueError::Corrupt(reason)) => {
                    Self::apply(&mut tx, &id, &transitions::unreadable(&reason)).await?;
                    tx.commit().await.map_err(db_error)?;
                    Err(QueueError::Unreadable { id, reason })
                }
                Err(e) => Err(e),
            };
        }
        tx.rollback().await.map_err(db_error)?;
        // Every pick's desktop is busy: the next poll or wake-up looks again.
        Ok(None)
    }
}

/// A write transaction of the queue's decisions ([`choreography`]): the task's row is locked `FOR UPDATE` by
/// the first read, so the decision and its write see one state whichever node asks.
pub(super) struct PgTx {
    tx: Transaction<'static, Postgres>,
}

impl choreography::Backend for PostgresQueue {
    type Tx<'a> = PgTx;

    async fn begin(&self) -> Result<PgTx, QueueError> {
        Ok(PgTx { tx: self.pool.begin().await.map_err(db_error)? })
    }
}

impl choreography::Tx for PgTx {
    async fn facts(&mut self, id: &str) -> Result<(TaskState, Option<Takeover>), QueueError> {
        PostgresQueue::lock_facts(&mut self.tx, id).await
    }

    async fn record(&mut self, id: &str) -> Result<TaskRecord, QueueError> {
        let row = sqlx::query("SELECT * FROM agentd_tasks WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        PostgresQueue::task_row(&row).and_then(TaskRow::decode).map_err(|e| row::unreadable(id, e))
    }

    async fn last_step(&mut self, id: &str) -> Result<Option<StepRecord>, QueueError> {
        let last: Option<String> =
            sqlx::query_scalar("SELECT record FROM agentd_steps WHERE task_id = $1 ORDER BY idx DESC LIMIT 1")
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(db_error)?;
        last.as_deref().map(row::step).transpose()
    }

    async fn next_step(&mut self, id: &str) -> Result<u32, QueueError> {
        let next: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(idx) + 1, 0)::bigint FROM agentd_steps WHERE task_id = $1")
                .bind(id)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(db_error)?;
        Ok(u32::try_from(next).unwrap_or(u32::MAX))
    }

    async fn write_step(&mut self, id: &str, step: &StepRecord) -> Result<(), QueueError> {
        step_write(id, step)?.execute(&mut *self.tx).await.map_err(db_error)?;
        Ok(())
    }

    async fn event(&mut self, id: &str, kind: EventKind) -> Result<(), QueueError> {
        PostgresQueue::own_event(&mut self.tx, id, kind).await
    }

    async fn apply(&mut self, id: &str, change: &Change) -> Result<(), QueueError> {
        PostgresQueue::apply(&mut self.tx, id, change).await
    }

    async fn start_turn(&mut self, id: &str, turns: &[crate::record::Turn]) -> Result<(), QueueError> {
        sqlx::query(
            "UPDATE agentd_tasks SET state = 'queued', turns = $2, started_at = NULL, finished_at = NULL,
                outcome = NULL, attempt = 0, same_attempt = false, approved = false, elapsed_ms = 0,
                not_before = '-infinity', cancel_requested = false, waiting_reason = NULL, worker = NULL,
                lease_until = NULL
             WHERE id = $1",
        )
        .bind(id)
        .bind(json(&turns)?)
        .execute(&mut *self.tx)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn expired(&mut self) -> Result<Vec<(String, transitions::Expired)>, QueueError> {
        // The database's clock decides. SKIP LOCKED: rescuers on several nodes split the work instead of
        // queueing behind each other, and a row a worker is writing to right now (its lease being renewed) is
        // left for the next round.
        let expired: Vec<(String, i32, i32, bool, Option<String>)> = sqlx::query_as(
            "SELECT id, attempt, max_attempts, cancel_requested, takeover FROM agentd_tasks
             WHERE state = 'running' AND lease_until < now()
             ORDER BY lease_until
             LIMIT 500
             FOR UPDATE SKIP LOCKED",
        )
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_error)?;
        Ok(expired
            .into_iter()
            .map(|(id, attempt, max_attempts, cancel_requested, takeover)| {
                let facts =
                    row::expired(i64::from(attempt), i64::from(max_attempts), cancel_requested, takeover.as_deref());
                (id, facts)
            })
            .collect())
    }

    async fn wake_workers(&mut self) -> Result<(), QueueError> {
        // Any node may take it: every listening node looks for work.
        PostgresQueue::notify_work(&mut self.tx).await
    }

    async fn commit(self) -> Result<(), QueueError> {
        self.tx.commit().await.map_err(db_error)
    }

    async fn refuse(self, refusal: QueueError) -> QueueError {
        rollback(self.tx, refusal).await
    }
}

/// The statement that writes a task's step: journals it, or replaces it (an answer written into it).
fn step_write<'q>(
    task_id: &'q str,
    step: &StepRecord,
) -> Result<sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>, QueueError> {
    Ok(sqlx::query(
        "INSERT INTO agentd_steps (task_id, idx, record) VALUES ($1, $2, $3)
         ON CONFLICT (task_id, idx) DO UPDATE SET record = EXCLUDED.record",
    )
    .bind(task_id)
    .bind(step.index.min(i32::MAX as u32) as i32)
    .bind(json(step)?))
}

#[async_trait]
impl Queue for PostgresQueue {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn rate_budget(&self) -> Option<std::sync::Arc<dyn crate::budget::Budget>> {
        Some(std::sync::Arc::new(PgBudget { pool: self.pool.clone() }))
    }

    async fn submit(&self, task: NewTask) -> Result<Submitted, QueueError> {
        let id = task.id().to_string();
        let hash = body_hash(&task.spec);
        let labels: BTreeMap<&str, &str> = task.spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        // ON CONFLICT DO NOTHING makes two nodes submitting the same id at once agree on one task.
        let inserted = sqlx::query(
            "INSERT INTO agentd_tasks (id, spec, body_hash, labels, state, created_at, max_attempts, desktop)
             VALUES ($1, $2, $3, $4, 'queued', now(), $5, $6)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id)
        .bind(json(&task.spec)?)
        .bind(&hash)
        .bind(Json(&labels))
        .bind(task.max_attempts.clamp(1, i32::MAX as u32) as i32)
        .bind(desktop::of_task(task.spec.computer.as_ref()))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        if inserted == 0 {
            let stored: String = sqlx::query_scalar("SELECT body_hash FROM agentd_tasks WHERE id = $1")
                .bind(&id)
                .fetch_one(&mut *tx)
                .await
                .map_err(db_error)?;
            drop(tx);
            transitions::resubmit(&id, &stored, &hash)?;
            return Ok(Submitted::Existing(self.get(&id).await?));
        }
        Self::own_event(&mut tx, &id, EventKind::TaskQueued {}).await?;
        Self::notify_work(&mut tx).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(Submitted::Created(self.get(&id).await?))
    }

    async fn get(&self, id: &str) -> Result<TaskRecord, QueueError> {
        // One snapshot for the task and its steps.
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let row = sqlx::query("SELECT * FROM agentd_tasks WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        let mut record = Self::task_row(&row)?.decode().map_err(|e| row::unreadable(id, e))?;
        record.steps = Self::steps(&mut *tx, id).await.map_err(|e| row::unreadable(id, e))?;
        tx.commit().await.map_err(db_error)?;
        record.derive();
        Ok(record)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<ListedTask>, QueueError> {
        let limit = row::list_limit(filter);
        let rows = sqlx::query(
            "SELECT * FROM agentd_tasks WHERE ($1::text IS NULL OR state = $1)
             AND ($3::text IS NULL OR starts_with(id, $3)) AND ($4::text IS NULL OR right(id, length($4)) = $4)
             ORDER BY created_at DESC, id DESC LIMIT $2",
        )
        .bind(filter.state.map(|s| s.as_str()))
        .bind(limit)
        .bind(filter.id_prefix.as_deref())
        .bind(filter.id_suffix.as_deref())
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|row| Self::task_row(row).map(TaskRow::listed)).collect()
    }

    async fn step_counts(&self, ids: &[String]) -> Result<BTreeMap<String, u64>, QueueError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT task_id, COUNT(*) FROM agentd_steps WHERE task_id = ANY($1) GROUP BY task_id")
                .bind(ids)
                .fetch_all(&self.pool)
                .await
                .map_err(db_error)?;
        Ok(rows.into_iter().map(|(id, n)| (id, n.max(0) as u64)).collect())
    }

    async fn claim(&self, worker: &WorkerIdentity, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        // A task that cannot be read ends where a claim takes it (`transitions::unreadable`); the claim goes on
        // with the next one.
        for _ in 0..UNREADABLE_PER_CLAIM {
            match self.claim_one(worker, lease_for).await {
                Err(QueueError::Unreadable { id, reason }) => {
                    tracing::warn!(task = %id, %reason, "a queued task cannot be read: it failed without running");
                }
                other => return other,
            }
        }
        Ok(None)
    }

    async fn heartbeat(&self, task_id: &str, token: i64, lease_for: Duration) -> Result<LeaseStatus, QueueError> {
        let held: Option<(bool, Option<String>)> = sqlx::query_as(
            "UPDATE agentd_tasks SET lease_until = now() + make_interval(secs => $3)
             WHERE id = $1 AND lease_token = $2 AND state = 'running'
             RETURNING cancel_requested, takeover",
        )
        .bind(task_id)
        .bind(token)
        .bind(secs(lease_for))
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(match held {
            Some((cancel_requested, takeover)) => LeaseStatus::Held {
                cancel_requested,
                pause_requested: Takeover::parse(takeover.as_deref()) == Some(Takeover::Requested),
            },
            None => LeaseStatus::Lost,
        })
    }

    async fn record_step(
        &self,
        task_id: &str,
        token: i64,
        step: &StepRecord,
        elapsed: Duration,
        usage: &Usage,
    ) -> Result<(), QueueError> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        // The fenced UPDATE locks the row until commit: a rescuer cannot take the task between the check and
        // the journal write.
        let held = sqlx::query(
            "UPDATE agentd_tasks SET elapsed_ms = $3, usage = $4 WHERE id = $1 AND lease_token = $2 AND state = 'running'",
        )
        .bind(task_id)
        .bind(token)
        .bind(elapsed.as_millis().min(i64::MAX as u128) as i64)
        .bind(json(usage)?)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        transitions::fenced(task_id, held)?;
        step_write(task_id, step)?.execute(&mut *tx).await.map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn append_events(&self, task_id: &str, token: Option<i64>, events: &[Event]) -> Result<(), QueueError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut seqs = Vec::with_capacity(events.len());
        let mut texts = Vec::with_capacity(events.len());
        for event in events {
            seqs.push(event.seq.min(i64::MAX as u64) as i64);
            texts.push(json(event)?);
        }
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        if let Some(token) = token {
            // A share lock on the row keeps the token from changing (a rescue) until these events are in.
            let held = sqlx::query("SELECT 1 FROM agentd_tasks WHERE id = $1 AND lease_token = $2 FOR SHARE")
                .bind(task_id)
                .bind(token)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
            if held.is_none() {
                return Err(QueueError::LeaseLost(task_id.to_string()));
            }
        }
        sqlx::query(
            "INSERT INTO agentd_events (task_id, seq, event)
             SELECT $1, e.seq, e.event FROM UNNEST($2::bigint[], $3::text[]) AS e (seq, event)
             ON CONFLICT (task_id, seq) DO UPDATE SET event = EXCLUDED.event",
        )
        .bind(task_id)
        .bind(&seqs)
        .bind(&texts)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn events_after(&self, task_id: &str, after: u64, limit: u32) -> Result<Vec<Event>, QueueError> {
        let rows: Vec<String> =
            sqlx::query_scalar("SELECT event FROM agentd_events WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
                .bind(task_id)
                .bind(after.min(i64::MAX as u64) as i64)
                .bind(i64::from(limit.max(1)))
                .fetch_all(&self.pool)
                .await
                .map_err(db_error)?;
        rows.iter().map(|text| row::event(text)).collect()
    }

    async fn finish(&self, task_id: &str, token: i64, finish: &Finish) -> Result<(), QueueError> {
        let freed: Option<bool> = sqlx::query_scalar(
            "UPDATE agentd_tasks SET state = $3, finished_at = now(), outcome = $4, usage = $5,
                final_screenshot = $6, computer_state = $7, lease_until = NULL, waiting_reason = NULL
             WHERE id = $1 AND lease_token = $2 AND state = 'running'
             RETURNING desktop_held IS NOT NULL",
        )
        .bind(task_id)
        .bind(token)
        .bind(finish.outcome.state().as_str())
        .bind(json(&finish.outcome)?)
        .bind(json(&finish.usage)?)
        .bind(finish.final_screenshot.as_ref().map(json).transpose()?)
        .bind(finish.computer_state.as_ref().map(json).transpose()?)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        transitions::fenced(task_id, u64::from(freed.is_some()))?;
        if freed == Some(true) {
            // A task waiting for this desktop may be claimable now, on any node.
            sqlx::query("SELECT pg_notify($1, '')").bind(WORK_CHANNEL).execute(&self.pool).await.map_err(db_error)?;
        }
        Ok(())
    }

    async fn release(&self, task_id: &str, token: i64, release: &Release) -> Result<(), QueueError> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let handback = transitions::release(release);
        let changed = match handback {
            Handback::Requeue { same_attempt, delay, .. } => sqlx::query(
                "UPDATE agentd_tasks SET state = 'queued', lease_until = NULL, worker = NULL,
                    same_attempt = $3, not_before = now() + make_interval(secs => $4)
                 WHERE id = $1 AND lease_token = $2 AND state = 'running'",
            )
            .bind(task_id)
            .bind(token)
            .bind(same_attempt)
            .bind(secs(delay))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected(),
            Handback::WaitForHuman { reason } => sqlx::query(
                "UPDATE agentd_tasks SET state = 'waiting_for_human', lease_until = NULL, worker = NULL,
                    waiting_reason = $3, approved = false
                 WHERE id = $1 AND lease_token = $2 AND state = 'running'
                    AND NOT cancel_requested",
            )
            .bind(task_id)
            .bind(token)
            .bind(reason)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected(),
            Handback::TakeOver => sqlx::query(
                "UPDATE agentd_tasks SET state = 'waiting_for_human', lease_until = NULL, worker = NULL,
                    waiting_reason = $3, approved = false, same_attempt = true, takeover = $4
                 WHERE id = $1 AND lease_token = $2 AND state = 'running'
                    AND NOT cancel_requested",
            )
            .bind(task_id)
            .bind(token)
            .bind(TAKEOVER_REASON)
            .bind(Takeover::Parked.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected(),
            Handback::AwaitTools => sqlx::query(
                "UPDATE agentd_tasks SET state = 'awaiting_tool', lease_until = NULL, worker = NULL,
                    waiting_reason = NULL, approved = false
                 WHERE id = $1 AND lease_token = $2 AND state = 'running'
                    AND NOT cancel_requested",
            )
            .bind(task_id)
            .bind(token)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected(),
            Handback::DesktopFailed { ref failure } => sqlx::query(
                "UPDATE agentd_tasks SET state = 'queued', lease_until = NULL, worker = NULL, same_attempt = true,
                    not_before = now(), desktop_failure = $3
                 WHERE id = $1 AND lease_token = $2 AND state = 'running'",
            )
            .bind(task_id)
            .bind(token)
            .bind(failure)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected(),
        };
        transitions::fenced(task_id, changed)?;
        // A task waiting for the desktop this one held may be claimable now, on any node.
        let freed_desktop: bool = sqlx::query_scalar("SELECT desktop_held IS NOT NULL FROM agentd_tasks WHERE id = $1")
            .bind(task_id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        if freed_desktop
            || matches!(handback, Handback::Requeue { wakes_workers: true, .. } | Handback::DesktopFailed { .. })
        {
            Self::notify_work(&mut tx).await?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn cancel(&self, id: &str) -> Result<Cancelled, QueueError> {
        choreography::cancel(self, id).await
    }

    async fn decide(&self, id: &str, decision: &Decision) -> Result<TaskState, QueueError> {
        choreography::decide(self, id, decision).await
    }

    async fn pause(&self, id: &str) -> Result<Paused, QueueError> {
        choreography::pause(self, id).await
    }

    async fn resume(&self, id: &str, note: Option<&str>) -> Result<(), QueueError> {
        choreography::resume(self, id, note).await
    }

    async fn add_human_step(
        &self,
        id: &str,
        step: &StepRecord,
        events: Vec<EventKind>,
        end: Option<crate::record::Outcome>,
    ) -> Result<(), QueueError> {
        choreography::add_human_step(self, id, step, events, end).await
    }

    async fn answer_tools(&self, id: &str, answers: &[ToolAnswer]) -> Result<(), QueueError> {
        choreography::answer_last_step(self, id, |state, last, now| {
            transitions::answer_tools(id, state, last, answers, now)
        })
        .await
    }

    async fn answer_question(&self, id: &str, answer: &HumanAnswer) -> Result<(), QueueError> {
        choreography::answer_last_step(self, id, |state, last, now| {
            transitions::answer_question(id, state, last, answer, now)
        })
        .await
    }

    async fn add_turn(&self, id: &str, text: &str) -> Result<TaskRecord, QueueError> {
        choreography::add_turn(self, id, text).await?;
        self.get(id).await
    }

    async fn rescue_expired(&self) -> Result<Vec<Rescued>, QueueError> {
        choreography::rescue_expired(self).await
    }

    async fn counts(&self) -> Result<BTreeMap<TaskState, u64>, QueueError> {
        let rows = sqlx::query_as("SELECT state, COUNT(*) AS n FROM agentd_tasks GROUP BY state")
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        row::counts(rows)
    }

    async fn delete(&self, id: &str) -> Result<(), QueueError> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let state = match Self::lock_state(&mut tx, id).await {
            Ok(state) => state,
            Err(e) => return Err(rollback(tx, e).await),
        };
        if let Err(e) = transitions::delete(id, state) {
            return Err(rollback(tx, e).await);
        }
        let ids = vec![id.to_string()];
        let _: Vec<String> =
            sqlx::query_scalar(DELETE_FINISHED).bind(&ids).fetch_all(&mut *tx).await.map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn finished_before(&self, age: Duration, limit: u32) -> Result<Vec<String>, QueueError> {
        sqlx::query_scalar(
            "SELECT id FROM agentd_tasks WHERE state IN ('succeeded', 'failed', 'cancelled')
             AND finished_at < now() - make_interval(secs => $1) ORDER BY finished_at, id LIMIT $2",
        )
        .bind(age.as_secs_f64())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)
    }

    async fn delete_finished(&self, ids: &[String]) -> Result<Vec<String>, QueueError> {
        sqlx::query_scalar(DELETE_FINISHED).bind(ids).fetch_all(&self.pool).await.map_err(db_error)
    }

    async fn purges(&self, limit: u32) -> Result<Vec<String>, QueueError> {
        sqlx::query_scalar("SELECT task_id FROM agentd_purges ORDER BY deleted_at, task_id LIMIT $1")
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn purged(&self, ids: &[String]) -> Result<(), QueueError> {
        sqlx::query("DELETE FROM agentd_purges WHERE task_id = ANY($1)")
            .bind(ids)
            .execute(&self.pool)
            .await
            .map_err(db_error)
            .map(drop)
    }

    async fn health(&self) -> Result<(), QueueError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map_err(db_error).map(drop)
    }

    async fn listen(&self, on_signal: SignalHandler, stop: CancellationToken) {
        if !self.listen {
            return;
        }
        let mut delay = Duration::from_millis(100);
        loop {
            let connected = async {
                let mut listener = PgListener::connect_with(&self.pool).await?;
                listener.listen_all([WORK_CHANNEL, CANCEL_CHANNEL, PAUSE_CHANNEL]).await?;
                Ok::<_, sqlx::Error>(listener)
            };
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                connected = connected => connected,
            };
            match outcome {
                Ok(mut listener) => {
                    delay = Duration::from_millis(100);
                    // Whatever was sent while nobody listened is lost: look at the queue now.
                    on_signal(QueueSignal::Work);
                    loop {
                        let received = tokio::select! {
                            () = stop.cancelled() => return,
                            received = listener.try_recv() => received,
                        };
                        match received {
                            Ok(Some(notification)) => match notification.channel() {
                                CANCEL_CHANNEL => on_signal(QueueSignal::Cancel(notification.payload().to_string())),
                                PAUSE_CHANNEL => on_signal(QueueSignal::Pause(notification.payload().to_string())),
                                _ => on_signal(QueueSignal::Work),
                            },
                            // The connection dropped; the next call reconnects (notifications meanwhile are lost).
                            Ok(None) => on_signal(QueueSignal::Work),
                            Err(e) => {
                                tracing::warn!(error = %error_text(e), "queue listener failed; reconnecting");
                                break;
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %error_text(e), ?delay, "queue listener cannot connect; retrying"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }
}

/// Rolls a refused request's transaction back before answering: a dropped transaction's rollback is only
/// sent when its pooled connection is next used, and until then its row locks would make a claim skip the
/// task (`SKIP LOCKED`).
async fn rollback(tx: Transaction<'_, Postgres>, refusal: QueueError) -> QueueError {
    if let Err(e) = tx.rollback().await {
        tracing::warn!(error = %e, "rolling back a refused request failed");
    }
    refusal
}

/// The model vendors' per-minute budgets of the fleet (`crate::budget`): a row per endpoint, read and
/// written under its row lock, times on the database's clock (every node sees one time).
#[derive(Debug)]
pub struct PgBudget {
    pool: PgPool,
}

impl PgBudget {
    /// Applies `change` to `key`'s cells under the row's lock; what it returns.
    async fn update<T>(
        &self,
        key: &str,
        change: impl FnOnce(budget::Cells, f64) -> (Option<budget::Cells>, T),
    ) -> Result<T, budget::BudgetError> {
        let unreachable = |e: sqlx::Error| budget::BudgetError(error_text(e));
        let mut tx = self.pool.begin().await.map_err(unreachable)?;
        sqlx::query("INSERT INTO agentd_rate_budgets (key) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(unreachable)?;
        let (requests_at, tokens_at, paused_until, now): (f64, f64, f64, f64) = sqlx::query_as(
            "SELECT requests_at, tokens_at, paused_until, extract(epoch FROM clock_timestamp())::float8
             FROM agentd_rate_budgets WHERE key = $1 FOR UPDATE",
        )
        .bind(key)
        .fetch_one(&mut *tx)
        .await
        .map_err(unreachable)?;
        let (next, out) = change(budget::Cells { requests_at, tokens_at, paused_until }, now);
        if let Some(next) = next {
            sqlx::query(
                "UPDATE agentd_rate_budgets SET requests_at = $2, tokens_at = $3, paused_until = $4 WHERE key = $1",
            )
            .bind(key)
            .bind(next.requests_at)
            .bind(next.tokens_at)
            .bind(next.paused_until)
            .execute(&mut *tx)
            .await
            .map_err(unreachable)?;
        }
        tx.commit().await.map_err(unreachable)?;
        Ok(out)
    }
}

#[async_trait]
impl budget::Budget for PgBudget {
    async fn admit(&self, key: &str, limits: &budget::Limits) -> Result<Duration, budget::BudgetError> {
        if limits.is_unlimited() {
            // Nothing to count, only a pause to honour: one read, no row lock every node would queue on.
            let row: Option<(f64, f64, f64, f64)> = sqlx::query_as(
                "SELECT requests_at, tokens_at, paused_until, extract(epoch FROM clock_timestamp())::float8
                 FROM agentd_rate_budgets WHERE key = $1",
            )
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| budget::BudgetError(error_text(e)))?;
            let Some((requests_at, tokens_at, paused_until, now)) = row else {
                return Ok(Duration::ZERO);
            };
            let cells = budget::Cells { requests_at, tokens_at, paused_until };
            return Ok(budget::admit(cells, now, limits).err().map_or(Duration::ZERO, Duration::from_secs_f64));
        }
        self.update(key, |cells, now| match budget::admit(cells, now, limits) {
            Ok(next) => (Some(next), Duration::ZERO),
            Err(wait) => (None, Duration::from_secs_f64(wait)),
        })
        .await
    }

    async fn charge(&self, key: &str, tokens: u64, limits: &budget::Limits) -> Result<(), budget::BudgetError> {
        self.update(key, |cells, now| (Some(budget::charge(cells, now, tokens, limits)), ())).await
    }

    async fn pause(&self, key: &str, wait: Duration) -> Result<(), budget::BudgetError> {
        self.update(key, |cells, now| (Some(budget::pause(cells, now, wait.as_secs_f64())), ())).await
    }

    fn is_shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Outcome, Usage};
    use crate::task::TaskSpec;
    use std::sync::{Arc, Mutex};

    /// The PostgreSQL server the tests use (`scripts/test` sets it), or `None` with a note why they skip.
    fn server() -> Option<String> {
        let url = std::env::var("AGENTD_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty());
        if url.is_none() {
            agentd_testenv::skip(
                "AGENTD_TEST_POSTGRES_URL is not set (./scripts/test sets it to the local PostgreSQL)",
            );
        }
        url
    }

    /// Queues in a schema of their own, dropped again by [`Fresh::drop_schema`].
    struct Fresh {
        url: String,
        admin: PgPool,
        schema: String,
    }

    impl Fresh {
        async fn new(url: &str) -> Self {
            let schema = format!("agentd_test_{}", uuid::Uuid::now_v7().simple());
            let admin = PgPoolOptions::new().max_connections(1).connect(url).await.expect("connect");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await.expect("schema");
            Self { url: url.to_string(), admin, schema }
        }

        fn options(&self) -> PgConnectOptions {
            PgConnectOptions::from_str(&self.url).expect("url").options([("search_path", self.schema.as_str())])
        }

        async fn queue(&self, settings: PostgresSettings) -> PostgresQueue {
            PostgresQueue::connect(self.options(), settings).await.expect("open queue")
        }

        async fn drop_schema(self) {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {} CASCADE", self.schema)))
                .execute(&self.admin)
                .await;
        }
    }

    fn spec(id: &str) -> TaskSpec {
        TaskSpec::parse(&format!(r#"{{"id": "{id}", "instructions": "x"}}"#), "t").expect("spec")
    }

    #[tokio::test]
    async fn two_queues_on_one_database_spend_one_rate_budget() {
        use crate::budget::Limits;
        let Some(url) = server() else { return };
        let fresh = Fresh::new(&url).await;
        let (a, b) = (fresh.queue(PostgresSettings::default()).await, fresh.queue(PostgresSettings::default()).await);
        let (a, b) = (a.rate_budget().expect("a budget"), b.rate_budget().expect("a budget"));
        assert!(a.is_shared());
        let limits = Limits { requests_per_minute: Some(4), tokens_per_minute: None };
        let mut admitted = 0;
        for budget in [&a, &b, &a, &b, &a, &b] {
            if budget.admit("p https://x:443", &limits).await.expect("admit").is_zero() {
                admitted += 1;
            }
        }
        // 4 a minute between them, not 4 each.
        assert_eq!(admitted, 4);
        // Another endpoint has a budget of its own; a pause set through one queue holds the other's calls.
        assert!(b.admit("q https://y:443", &limits).await.expect("admit").is_zero());
        a.pause("q https://y:443", std::time::Duration::from_secs(30)).await.expect("pause");
        let wait = b.admit("q https://y:443", &limits).await.expect("admit");
        assert!(wait > std::time::Duration::from_secs(25), "{wait:?}");
        fresh.drop_schema().await;
    }

    #[tokio::test]
    async fn migrations_run_once_when_nodes_start_together_and_the_password_is_never_shown() {
        let Some(url) = server() else { return };
        let fresh = Fresh::new(&url).await;
        let options = fresh.options().password("not-shown-anywhere");
        let opens = (0..4).map(|_| PostgresQueue::connect(options.clone(), PostgresSettings::default()));
        let queues: Vec<PostgresQueue> =
            futures_util::future::join_all(opens).await.into_iter().map(|q| q.expect("a concurrent open")).collect();
        let versions: Vec<i32> = sqlx::query_scalar("SELECT version FROM agentd_schema_migrations")
            .fetch_all(&queues[0].pool)
            .await
            .expect("versions");
        assert_eq!(versions, MIGRATIONS.iter().map(|(version, _, _)| *version).collect::<Vec<_>>());
        assert_eq!(versions, (1..=7).collect::<Vec<_>>(), "each migration once, in order");
        assert!(!queues[0].describe().contains("not-shown-anywhere"), "{}", queues[0].describe());
        assert!(queues[0].describe().starts_with("postgres://"), "{}", queues[0].describe());
        for queue in queues {
            queue.pool.close().await;
        }
        fresh.drop_schema().await;
    }

    #[tokio::test]
    async fn concurrent_claims_never_hand_out_a_task_twice() {
        let Some(url) = server() else { return };
        let fresh = Fresh::new(&url).await;
        let queue = Arc::new(fresh.queue(PostgresSettings { max_connections: 12, listen: false }).await);
        for i in 0..60 {
            queue.submit(NewTask { spec: spec(&format!("race-{i:02}")), max_attempts: 1 }).await.expect("submit");
        }
        let claimed = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for w in 0..8 {
            let queue = queue.clone();
            let claimed = claimed.clone();
            handles.push(tokio::spawn(async move {
                let who = WorkerIdentity {
                    name: format!("w{w}"),
                    labels: BTreeMap::new(),
                    desktops: crate::queue::desktop::DesktopScope::new("h", None, None),
                    pool: Vec::new(),
                };
                while let Some(lease) = queue.claim(&who, Duration::from_secs(30)).await.expect("claim") {
                    claimed.lock().expect("lock").push(lease.task_id);
                }
            }));
        }
        for handle in handles {
            handle.await.expect("worker");
        }
        let mut claimed = claimed.lock().expect("lock").clone();
        assert_eq!(claimed.len(), 60, "every task claimed once");
        claimed.sort();
        claimed.dedup();
        assert_eq!(claimed.len(), 60, "no task claimed twice");
        queue.pool.close().await;
        fresh.drop_schema().await;
    }

    #[tokio::test]
    async fn nodes_claiming_at_once_never_share_a_desktop() {
        let Some(url) = server() else { return };
        let fresh = Fresh::new(&url).await;
        let queue = Arc::new(fresh.queue(PostgresSettings { max_connections: 12, listen: false }).await);
        for i in 0..20 {
            let text = format!(
                r#"{{"id": "vm-{i:02}", "instructions": "x", "computer": {{"provider": "vnc", "address": "vm.example:5900"}}}}"#
            );
            let spec = TaskSpec::parse(&text, "t").expect("spec");
            queue.submit(NewTask { spec, max_attempts: 1 }).await.expect("submit");
        }
        for round in 0..5 {
            let claims = (0..8).map(|w| {
                let queue = queue.clone();
                async move {
                    let who = WorkerIdentity {
                        name: format!("w{w}"),
                        labels: BTreeMap::new(),
                        desktops: crate::queue::desktop::DesktopScope::new(&format!("node-{w}"), None, None),
                        pool: Vec::new(),
                    };
                    queue.claim(&who, Duration::from_secs(30)).await.expect("claim")
                }
            });
            let leases: Vec<Lease> = futures_util::future::join_all(claims).await.into_iter().flatten().collect();
            assert_eq!(leases.len(), 1, "round {round}: one task on the desktop at a time, from any node");
            let lease = &leases[0];
            queue.finish(&lease.task_id, lease.token, &done()).await.expect("finish");
        }
        queue.pool.close().await;
        fresh.drop_schema().await;
    }

    fn done() -> Finish {
        Finish {
            outcome: Outcome {
                success: true,
                summary: "done".into(),
                reason: crate::record::EndReason::Completed,
                output: None,
                verified: None,
                checks: Vec::new(),
            },
            usage: Usage::default(),
            final_screenshot: None,
            computer_state: None,
        }
    }

    #[tokio::test]
    async fn other_nodes_hear_new_work_and_cancellations() {
        let Some(url) = server() else { return };
        let fresh = Fresh::new(&url).await;
        let sender = fresh.queue(PostgresSettings::default()).await;
        let listener = Arc::new(fresh.queue(PostgresSettings::default()).await);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let handler: SignalHandler = {
            let heard = heard.clone();
            Arc::new(move |signal| {
                heard.lock().expect("lock").push(signal);
                let _ = tx.send(());
            })
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let listener = listener.clone();
            let stop = stop.clone();
            async move { listener.listen(handler, stop).await }
        });
        // The first signal says "look now" once listening.
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("listening");
        heard.lock().expect("lock").clear();
        sender.submit(NewTask { spec: spec("heard-1"), max_attempts: 1 }).await.expect("submit");
        // (Channels are database-wide: tests running beside this one in other schemas may add signals.)
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("work signal");
        assert!(heard.lock().expect("lock").contains(&QueueSignal::Work));
        let who = WorkerIdentity {
            name: "w".into(),
            labels: BTreeMap::new(),
            desktops: crate::queue::desktop::DesktopScope::new("h", None, None),
            pool: Vec::new(),
        };
        let lease = listener.claim(&who, Duration::from_secs(30)).await.expect("claim").expect("a task");
        assert_eq!(lease.task_id, "heard-1");
        assert_eq!(sender.cancel("heard-1").await.expect("cancel"), Cancelled::Requested);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !heard.lock().expect("lock").contains(&QueueSignal::Cancel("heard-1".into())) {
            tokio::time::timeout_at(deadline, rx.recv()).await.expect("cancel signal");
        }
        stop.cancel();
        task.await.expect("listener ends when stopped");
        sender.pool.close().await;
        listener.pool.close().await;
        fresh.drop_schema().await;
    }

    #[tokio::test]
    async fn lease_times_come_from_the_database_clock() {
        let Some(url) = server() else { return };
        let fresh = Fresh::new(&url).await;
        let queue = fresh.queue(PostgresSettings::default()).await;
        queue.submit(NewTask { spec: spec("clock-1"), max_attempts: 2 }).await.expect("submit");
        let who = WorkerIdentity {
            name: "w".into(),
            labels: BTreeMap::new(),
            desktops: crate::queue::desktop::DesktopScope::new("h", None, None),
            pool: Vec::new(),
        };
        queue.claim(&who, Duration::from_secs(90)).await.expect("claim").expect("a task");
        let seconds: f64 = sqlx::query_scalar(
            "SELECT EXTRACT(EPOCH FROM lease_until - now())::float8 FROM agentd_tasks WHERE id = 'clock-1'",
        )
        .fetch_one(&queue.pool)
        .await
        .expect("lease");
        assert!((85.0..=90.0).contains(&seconds), "lease ends {seconds} s from the database's now()");
        queue.pool.close().await;
        fresh.drop_schema().await;
    }

    /// A node frozen inside a transaction (here: a share lock on the task row, as an event append takes, left
    /// open) must not keep the other nodes' rescuers away from its expired lease: the server ends the idle
    /// transaction and the rescue goes through.
    #[tokio::test]
    async fn a_transaction_left_open_by_a_frozen_node_does_not_block_the_rescue() {
        let Some(url) = server() else { return };
        let fresh = Fresh::new(&url).await;
        let frozen = fresh.queue(PostgresSettings::default()).await;
        let rescuer = fresh.queue(PostgresSettings::default()).await;
        frozen.submit(NewTask { spec: spec("frozen-tx"), max_attempts: 2 }).await.expect("submit");
        let who = WorkerIdentity {
            name: "frozen".into(),
            labels: BTreeMap::new(),
            desktops: crate::queue::desktop::DesktopScope::new("h", None, None),
            pool: Vec::new(),
        };
        frozen.claim(&who, Duration::from_secs(1)).await.expect("claim").expect("a task");
        let mut tx = frozen.pool.begin().await.expect("begin");
        sqlx::query("SELECT 1 FROM agentd_tasks WHERE id = 'frozen-tx' FOR SHARE")
            .execute(&mut *tx)
            .await
            .expect("lock");
        // The node stops here, its transaction open; its lease runs out meanwhile.
        let started = std::time::Instant::now();
        let rescued = loop {
            let rescued = rescuer.rescue_expired().await.expect("rescue");
            if !rescued.is_empty() {
                break rescued;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "the open transaction kept the rescue away");
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert_eq!(rescued[0].task_id, "frozen-tx");
        // The woken node's transaction is gone.
        assert!(tx.commit().await.is_err(), "the frozen node's transaction outlived the server's timeout");
        frozen.pool.close().await;
        rescuer.pool.close().await;
        fresh.drop_schema().await;
    }
}
