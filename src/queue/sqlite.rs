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

use super::choreography;
use super::row::{LeaseRow, TaskRow, json};
use super::transitions::{self, Change, Handback, TAKEOVER_REASON, Takeover};
use super::{
    Cancelled, Decision, Finish, HumanAnswer, Lease, LeaseStatus, ListFilter, NewTask, Paused, Queue, QueueError,
    Release, Rescued, Submitted, ToolAnswer, WorkerIdentity, body_hash, desktop, from_ms, labels_match, now_ms, row,
};
use crate::record::events::{Event, EventKind};
use crate::record::{StepRecord, TaskState, Usage};
use crate::status::{ListedTask, TaskRecord};

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
        computer_state TEXT,
        desktop TEXT,
        desktop_held TEXT,
        takeover TEXT,
        takeover_note TEXT,
        desktop_name TEXT,
        desktop_failure TEXT
    )",
    "CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks(state, created_ms)",
    "CREATE TABLE IF NOT EXISTS steps (
        task_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (task_id, idx)
    )",
    "CREATE TABLE IF NOT EXISTS health (id INTEGER PRIMARY KEY CHECK (id = 1), probed_ms INTEGER NOT NULL, room BLOB)",
    "CREATE TABLE IF NOT EXISTS events (
        task_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (task_id, seq)
    )",
    // Retention (docs/operations.md): finished tasks by age, and deleted tasks whose artifacts are still to be deleted.
    "CREATE INDEX IF NOT EXISTS tasks_finished ON tasks(finished_ms) WHERE state IN ('succeeded', 'failed', 'cancelled')",
    "CREATE TABLE IF NOT EXISTS purges (task_id TEXT PRIMARY KEY, deleted_ms INTEGER NOT NULL)",
];

/// How many tasks that cannot be read one claim ends before it answers that there is nothing to run.
const UNREADABLE_PER_CLAIM: usize = 16;

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
    /// Why the last write failed for want of space or IO (a full disk), and when; cleared by the next write
    /// that succeeds. While set, [`Queue::health`] reports it.
    write_failure: std::sync::Mutex<Option<(i64, String)>>,
}

fn db_error(e: sqlx::Error) -> QueueError {
    QueueError::Unavailable(e.to_string())
}

/// An error opening the database, with the path (SQLite's own message does not name it).
fn open_error(path: &Path, e: sqlx::Error) -> QueueError {
    let text = e.to_string();
    if text.contains("file is not a database") {
        QueueError::Corrupt(format!("{} is not a SQLite database (damaged or another file): {text}", path.display()))
    } else {
        QueueError::Unavailable(format!("cannot open {}: {text}", path.display()))
    }
}

/// A database file that holds no queue (emptied, truncated, another file), naming the marker that says one was
/// created there when it does.
fn no_queue(path: &Path, marker: &Path, size: u64) -> QueueError {
    let created = if marker.exists() {
        format!(" although {} says a queue was created there", marker.display())
    } else {
        String::new()
    };
    QueueError::Corrupt(format!(
        "{} holds no agentd queue ({size} bytes: emptied, truncated or another file){created}; restore it from a \
         backup, or move it away to start an empty queue",
        path.display()
    ))
}

/// Whether the file begins with SQLite's header string (every database file of one page or more does).
fn starts_like_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 16];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut header)).is_ok() && &header == b"SQLite format 3\0"
}

/// Writes the marker that says a queue was created beside it.
fn write_marker(marker: &Path) -> std::io::Result<()> {
    let text = format!(
        "agentd created its queue database here at {} (unix time); if the database goes missing, agentd refuses to start rather than begin an empty queue\n",
        now_ms() / 1000
    );
    crate::private::write_atomically(marker, text.as_bytes())
}

impl SqliteQueue {
    /// Opens the database at `path` and brings its schema up to date; creates it only where there never was
    /// one. The file and its directory are created private (0600 / 0700) whatever the umask; the WAL and
    /// shared-memory files SQLite makes beside it take the file's mode.
    ///
    /// Refused with [`QueueError::Corrupt`]: a file that holds no queue (emptied, truncated, not SQLite), one
    /// that fails SQLite's `quick_check`, and a missing file where the marker beside it says a queue was
    /// created (see [`SqliteQueue::marker_path`]).
    pub async fn open(path: &Path) -> Result<Self, QueueError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            crate::private::create_private_dir_all(parent)
                .map_err(|e| QueueError::Unavailable(format!("cannot create {}: {e}", parent.display())))?;
        }
        let marker = Self::marker_path(path);
        let exists = match std::fs::symlink_metadata(path) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(QueueError::Unavailable(format!("{}: {e}", path.display()))),
        };
        if !exists {
            if marker.exists() {
                return Err(QueueError::Corrupt(format!(
                    "{} is missing, but {} says a queue was created there: restore the database from a backup, \
                     or remove the marker to start an empty queue",
                    path.display(),
                    marker.display()
                )));
            }
            Self::create_new(path).await?;
        } else {
            // Opening read-write is what SQLite needs too; asking the OS first gets its reason (permission
            // denied, read-only file system) where SQLite only says "unable to open database file".
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(|e| QueueError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
            Self::check_dir_writable(path)?;
        }
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        // A file that is there but is no SQLite database (emptied, truncated to nothing, another file) is
        // refused before SQLite opens it for writing: opening would write a fresh header into it.
        if exists && !starts_like_sqlite(path) {
            return Err(no_queue(path, &marker, size));
        }
        let options = Self::options(path);
        let pool = Self::pool(4).connect_with(options.clone()).await.map_err(|e| open_error(path, e))?;
        Self::check(&pool, path, &marker, size).await?;
        for statement in SCHEMA {
            sqlx::query(*statement).execute(&pool).await.map_err(db_error)?;
        }
        Self::migrate(&pool).await?;
        if !marker.exists() {
            // A database created before markers existed, or a crash between creating it and the marker.
            write_marker(&marker).map_err(|e| QueueError::Unavailable(format!("{}: {e}", marker.display())))?;
        }
        // In WAL mode a commit on a FULL connection syncs the log, with every commit before it.
        let durable = Self::pool(1)
            .connect_with(options.synchronous(SqliteSynchronous::Full))
            .await
            .map_err(|e| open_error(path, e))?;
        Ok(Self {
            pool,
            durable,
            path: path.display().to_string(),
            writes: tokio::sync::Mutex::new(()),
            write_failure: std::sync::Mutex::new(None),
        })
    }

    /// A failed write's error; remembered for [`Queue::health`] when the disk is full or failing.
    fn failed(&self, e: sqlx::Error) -> QueueError {
        let storage = match &e {
            sqlx::Error::Database(db) => {
                // Primary result codes: SQLITE_IOERR (10), SQLITE_FULL (13).
                db.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|c| matches!(c & 0xff, 10 | 13))
            }
            sqlx::Error::Io(_) => true,
            _ => false,
        };
        let error = db_error(e);
        if storage && let Ok(mut failure) = self.write_failure.lock() {
            *failure = Some((now_ms(), error.to_string()));
        }
        error
    }

    /// A write's commit: a success clears a remembered failure.
    fn wrote<T>(&self, result: Result<T, sqlx::Error>) -> Result<T, QueueError> {
        let value = result.map_err(|e| self.failed(e))?;
        if let Ok(mut failure) = self.write_failure.lock() {
            *failure = None;
        }
        Ok(value)
    }

    /// The file beside the database that says a queue was created there: `queue.db` missing while
    /// `queue.db.created` exists is a lost database, never a new one.
    pub fn marker_path(path: &Path) -> std::path::PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".created");
        std::path::PathBuf::from(name)
    }

    fn options(path: &Path) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(false)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
    }

    fn pool(max_connections: u32) -> SqlitePoolOptions {
        SqlitePoolOptions::new().max_connections(max_connections).after_release(|conn, _| {
            Box::pin(async move {
                // A failed write (a full disk: SQLite may then roll the transaction back by itself) can leave
                // the connection counted inside a transaction that its rollback cannot end; every later
                // `BEGIN` on it would fail. The ping runs after any rollback still queued on the connection;
                // a connection still inside a transaction after it is closed instead of reused.
                use sqlx::Connection;
                conn.ping().await?;
                Ok(!conn.is_in_transaction())
            })
        })
    }

    /// Creates a new database: built beside `path` and renamed into place once its schema is in, so a file at
    /// `path` is always a queue that was initialized (a crash midway leaves only the temporary file).
    async fn create_new(path: &Path) -> Result<(), QueueError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let tmp = std::path::PathBuf::from(tmp);
        let unavailable =
            |what: &Path, e: std::io::Error| QueueError::Unavailable(format!("cannot create {}: {e}", what.display()));
        for leftover in ["", "-wal", "-shm", "-journal"] {
            let mut name = tmp.as_os_str().to_owned();
            name.push(leftover);
            match std::fs::remove_file(&name) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(unavailable(Path::new(&name), e)),
            }
        }
        {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            options.open(&tmp).map_err(|e| unavailable(&tmp, e))?;
        }
        let pool = Self::pool(1).connect_with(Self::options(&tmp)).await.map_err(|e| open_error(&tmp, e))?;
        for statement in SCHEMA {
            sqlx::query(*statement).execute(&pool).await.map_err(db_error)?;
        }
        Self::migrate(&pool).await?;
        // Pages freed by deleting old tasks (docs/operations.md) are given back to the file system
        // (`incremental_vacuum` after
        // each deletion) instead of only being reused. In WAL mode the setting takes effect only through a
        // VACUUM, which costs nothing on this empty database.
        for statement in ["PRAGMA auto_vacuum = INCREMENTAL", "VACUUM"] {
            sqlx::query(statement).execute(&pool).await.map_err(db_error)?;
        }
        // Closing the last connection checkpoints the log into the file and removes it.
        pool.close().await;
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| unavailable(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| unavailable(path, e))?;
        // The rename made durable (Windows opens no directory as a file: there NTFS's journal does it).
        #[cfg(unix)]
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(|e| unavailable(parent, e))?;
        }
        write_marker(&Self::marker_path(path)).map_err(|e| unavailable(&Self::marker_path(path), e))
    }

    /// Windows has no `access(2)`: an unwritable directory shows when SQLite opens the database.
    #[cfg(not(unix))]
    fn check_dir_writable(_path: &Path) -> Result<(), QueueError> {
        Ok(())
    }

    /// SQLite writes its `-wal` and `-shm` files beside the database: it needs the directory writable.
    #[cfg(unix)]
    fn check_dir_writable(path: &Path) -> Result<(), QueueError> {
        let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(());
        };
        let Ok(dir) = std::ffi::CString::new(parent.as_os_str().as_encoded_bytes()) else {
            return Ok(());
        };
        // SAFETY: `dir` is a valid NUL-terminated path for the duration of the call.
        if unsafe { libc::access(dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(QueueError::Unavailable(format!(
                "cannot write in {} (the queue's log files go beside {}): {e}",
                parent.display(),
                path.display()
            )));
        }
        Ok(())
    }

    /// Refuses a database that holds no queue or is damaged, naming the file.
    async fn check(pool: &SqlitePool, path: &Path, marker: &Path, size: u64) -> Result<(), QueueError> {
        let damaged = |detail: String| {
            QueueError::Corrupt(format!("{} is damaged ({detail}): restore it from a backup", path.display()))
        };
        let tables: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'tasks'")
                .fetch_one(pool)
                .await
                .map_err(|e| damaged(e.to_string()))?;
        if tables == 0 {
            return Err(no_queue(path, marker, size));
        }
        let problems: Vec<String> =
            sqlx::query_scalar("PRAGMA quick_check(5)").fetch_all(pool).await.map_err(|e| damaged(e.to_string()))?;
        if problems.len() != 1 || problems[0] != "ok" {
            return Err(damaged(format!("quick_check: {}", problems.join("; "))));
        }
        Ok(())
    }

    /// Brings a database made by an earlier version up to the current schema (columns added since).
    async fn migrate(pool: &SqlitePool) -> Result<(), QueueError> {
        let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info('tasks')")
            .fetch_all(pool)
            .await
            .map_err(db_error)?;
        if !columns.iter().any(|c| c == "desktop") {
            let mut tx = pool.begin().await.map_err(db_error)?;
            for statement in
                ["ALTER TABLE tasks ADD COLUMN desktop TEXT", "ALTER TABLE tasks ADD COLUMN desktop_held TEXT"]
            {
                sqlx::query(statement).execute(&mut *tx).await.map_err(db_error)?;
            }
            // Tasks that may still run get their desktop key, so the upgrade does not let them share one.
            let rows =
                sqlx::query("SELECT id, spec FROM tasks WHERE state IN ('queued', 'running', 'waiting_for_human')")
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(db_error)?;
            for row in rows {
                let id: String = row.try_get("id").map_err(db_error)?;
                let spec_text: String = row.try_get("spec").map_err(db_error)?;
                let spec: crate::task::TaskSpec =
                    serde_json::from_str(&spec_text).map_err(|e| row::corrupt("spec", e))?;
                sqlx::query("UPDATE tasks SET desktop = ?2 WHERE id = ?1")
                    .bind(id)
                    .bind(desktop::of_task(spec.computer.as_ref()))
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
        }
        // Conversations (docs/humans.md): the turns of a task that was sent a message.
        if !columns.iter().any(|c| c == "turns") {
            sqlx::query("ALTER TABLE tasks ADD COLUMN turns TEXT").execute(pool).await.map_err(db_error)?;
        }

        // Take-over (docs/humans.md): the marker (`transitions::Takeover`) and the note `resume` hands the next claim.
        if !columns.iter().any(|c| c == "takeover") {
            let mut tx = pool.begin().await.map_err(db_error)?;
            for statement in
                ["ALTER TABLE tasks ADD COLUMN takeover TEXT", "ALTER TABLE tasks ADD COLUMN takeover_note TEXT"]
            {
                sqlx::query(statement).execute(&mut *tx).await.map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
        }
        // Desktop pools (docs/providers.md): the name of the pool desktop a task's latest attempt ran on.
        if !columns.iter().any(|c| c == "desktop_name") {
            for statement in
                ["ALTER TABLE tasks ADD COLUMN desktop_name TEXT", "ALTER TABLE tasks ADD COLUMN desktop_failure TEXT"]
            {
                sqlx::query(statement).execute(pool).await.map_err(db_error)?;
            }
        }
        sqlx::query("CREATE INDEX IF NOT EXISTS tasks_desktop_held ON tasks(desktop_held) WHERE state = 'running'")
            .execute(pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// A task's row as read, its JSON columns not decoded yet.
    fn task_row(row: &sqlx::sqlite::SqliteRow) -> Result<TaskRow, QueueError> {
        let get = |column: &str| row.try_get::<Option<String>, _>(column).map_err(db_error);
        let started: Option<i64> = row.try_get("started_ms").map_err(db_error)?;
        let finished: Option<i64> = row.try_get("finished_ms").map_err(db_error)?;
        Ok(TaskRow {
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
            turns: get("turns")?,
            takeover: get("takeover")?,
            desktop_name: get("desktop_name")?,
            desktop_failure: get("desktop_failure")?,
        })
    }

    /// One claim ([`Queue::claim`]); a task it took whose row cannot be decoded is ended, and is the answer as
    /// [`QueueError::Unreadable`].
    async fn claim_one(&self, worker: &WorkerIdentity, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        let _write = self.writes.lock().await;
        let now = now_ms();
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(|e| self.failed(e))?;
        // A task whose desktop a running task holds under a live lease waits its turn (queue::desktop), and
        // so does one whose desktop a person took over (docs/humans.md: a task parked for a take-over keeps it).
        // Built from constants only (no input reaches the text).
        let candidates = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT id, labels, desktop, desktop_name, takeover, takeover_note FROM tasks t WHERE state = 'queued' AND not_before_ms <= ?1
               AND NOT EXISTS (SELECT 1 FROM tasks r WHERE r.state = 'running' AND r.lease_until_ms >= ?1
                                 AND r.desktop_held = {qualified})
               AND NOT EXISTS (SELECT 1 FROM tasks p WHERE p.state = 'waiting_for_human' AND p.takeover = 'parked'
                                 AND p.desktop_held = {qualified})
             ORDER BY created_ms, id LIMIT 200",
            qualified = desktop::sql_qualify("t.desktop", "?2", "?3", "?4")
        )))
        .bind(now)
        .bind(&worker.desktops.default)
        .bind(&worker.desktops.host)
        .bind(&worker.desktops.display)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.failed(e))?;
        let mut chosen = None;
        // The keys live tasks hold, read once and only when a pool task (docs/providers.md) needs a desktop chosen.
        let mut held: Option<std::collections::HashSet<String>> = None;
        for row in &candidates {
            let labels_text: String = row.try_get("labels").map_err(|e| self.failed(e))?;
            // The queue's own copy of the task's labels, unreadable only if changed by hand: that task is left
            // (never one claim's failure for every task behind it).
            let Ok(labels) = serde_json::from_str::<BTreeMap<String, String>>(&labels_text) else { continue };
            if !labels_match(&labels, &worker.labels) {
                continue;
            }
            let id = row.try_get::<String, _>("id").map_err(|e| self.failed(e))?;
            let desktop: Option<String> = row.try_get("desktop").map_err(|e| self.failed(e))?;
            let qualified = worker.desktops.qualify(desktop.as_deref());
            let (desktop_held, desktop_name) = match qualified.as_deref().and_then(desktop::pool_request) {
                None => (qualified, None),
                Some(request) => {
                    if held.is_none() {
                        held = Some(self.held_desktops(&mut *tx, now).await?);
                    }
                    let held = held.as_ref();
                    let before: Option<String> = row.try_get("desktop_name").map_err(|e| self.failed(e))?;
                    let is_held = |key: &str| held.is_some_and(|h| h.contains(key));
                    match desktop::choose(&request, &worker.pool, before.as_deref(), is_held) {
                        Some(offer) => (Some(offer.key.clone()), Some(offer.name.clone())),
                        None => continue,
                    }
                }
            };
            let takeover: (Option<String>, Option<String>) = (
                row.try_get("takeover").map_err(|e| self.failed(e))?,
                row.try_get("takeover_note").map_err(|e| self.failed(e))?,
            );
            chosen = Some((id, desktop_held, desktop_name, takeover));
            break;
        }
        let Some((id, desktop_held, desktop_name, (takeover, takeover_note))) = chosen else {
            return Ok(None);
        };
        let row = sqlx::query(
            "UPDATE tasks SET state = 'running', attempt = attempt + 1 - same_attempt, same_attempt = 0,
                worker = ?2, lease_token = lease_token + 1,
                lease_until_ms = ?3, started_ms = COALESCE(started_ms, ?4), cancel_requested = 0,
                waiting_reason = NULL, desktop_held = ?5, takeover = NULL, takeover_note = NULL,
                desktop_name = COALESCE(?6, desktop_name)
             WHERE id = ?1 AND state = 'queued'
             RETURNING spec, attempt, max_attempts, lease_token, elapsed_ms, turns",
        )
        .bind(&id)
        .bind(&worker.name)
        .bind(now + lease_for.as_millis() as i64)
        .bind(now)
        .bind(desktop_held)
        .bind(&desktop_name)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| self.failed(e))?;
        let steps = self.steps(&mut *tx, &id).await;
        let lease = LeaseRow {
            spec: row.try_get("spec").map_err(|e| self.failed(e))?,
            attempt: row.try_get("attempt").map_err(|e| self.failed(e))?,
            max_attempts: row.try_get("max_attempts").map_err(|e| self.failed(e))?,
            token: row.try_get("lease_token").map_err(|e| self.failed(e))?,
            elapsed_ms: row.try_get("elapsed_ms").map_err(|e| self.failed(e))?,
            steps: Vec::new(),
            next_seq: Self::next_seq(&mut *tx, &id).await?,
            turns: row.try_get("turns").map_err(|e| self.failed(e))?,
            takeover,
            takeover_note,
            desktop: desktop_name,
            id: id.clone(),
        };
        match steps.and_then(|steps| LeaseRow { steps, ..lease }.decode()) {
            Ok(lease) => {
                self.wrote(tx.commit().await)?;
                Ok(Some(lease))
            }
            Err(QueueError::Corrupt(reason)) => {
                Self::apply(&mut tx, &id, &transitions::unreadable(&reason)).await?;
                self.wrote(tx.commit().await)?;
                Err(QueueError::Unreadable { id, reason })
            }
            Err(e) => Err(e),
        }
    }

    /// The desktop keys live tasks hold: running under a live lease, or parked for a take-over (docs/humans.md).
    async fn held_desktops(
        &self,
        executor: impl sqlx::SqliteExecutor<'_>,
        now: i64,
    ) -> Result<std::collections::HashSet<String>, QueueError> {
        let keys: Vec<String> = sqlx::query_scalar(
            "SELECT desktop_held FROM tasks WHERE desktop_held IS NOT NULL
               AND (state = 'running' AND lease_until_ms >= ?1 OR state = 'waiting_for_human' AND takeover = 'parked')",
        )
        .bind(now)
        .fetch_all(executor)
        .await
        .map_err(|e| self.failed(e))?;
        Ok(keys.into_iter().collect())
    }

    async fn steps(&self, executor: impl sqlx::SqliteExecutor<'_>, id: &str) -> Result<Vec<StepRecord>, QueueError> {
        let rows = sqlx::query("SELECT idx, record FROM steps WHERE task_id = ?1 ORDER BY idx")
            .bind(id)
            .fetch_all(executor)
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| {
                let idx: i64 = r.try_get("idx").map_err(db_error)?;
                row::step_at(idx, &r.try_get::<String, _>("record").map_err(db_error)?)
            })
            .collect()
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
                    takeover = NULL, takeover_note = NULL, lease_until_ms = NULL, lease_token = lease_token + CASE WHEN ?5 THEN 1 ELSE 0 END
                 WHERE id = ?1",
            )
            .bind(id)
            .bind(outcome.state().as_str())
            .bind(now_ms())
            .bind(json(outcome)?)
            .bind(*fence),
            Change::RequestCancel => sqlx::query("UPDATE tasks SET cancel_requested = 1 WHERE id = ?1").bind(id),
            Change::RequestPause => sqlx::query("UPDATE tasks SET takeover = ?2 WHERE id = ?1")
                .bind(id)
                .bind(Takeover::Requested.as_str()),
            Change::Park { fence } => sqlx::query(
                "UPDATE tasks SET state = 'waiting_for_human', takeover = ?2, waiting_reason = ?3, approved = 0,
                    lease_until_ms = NULL, worker = NULL, lease_token = lease_token + CASE WHEN ?4 THEN 1 ELSE 0 END
                 WHERE id = ?1",
            )
            .bind(id)
            .bind(Takeover::Parked.as_str())
            .bind(TAKEOVER_REASON)
            .bind(*fence),
            Change::HandBack { note } => sqlx::query(
                "UPDATE tasks SET state = 'queued', takeover = ?2, takeover_note = ?3, waiting_reason = NULL,
                    not_before_ms = 0
                 WHERE id = ?1",
            )
            .bind(id)
            .bind(Takeover::Resumed.as_str())
            .bind(note.clone()),
            // The answer itself is in the waiting step (`transitions::decide`); the `approved` column is no
            // longer read, only kept up for an older version reading this queue (a downgrade, or the other
            // nodes of a fleet during a rolling upgrade).
            Change::Approve => sqlx::query(
                "UPDATE tasks SET state = 'queued', approved = 1, same_attempt = 1, waiting_reason = NULL,
                    not_before_ms = 0
                 WHERE id = ?1",
            )
            .bind(id),
            Change::Resume => sqlx::query(
                "UPDATE tasks SET state = 'queued', same_attempt = 1, waiting_reason = NULL, not_before_ms = 0
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

    /// Deletes a task's rows (the caller checked it is finished) and puts it on the purge list.
    async fn remove(tx: &mut sqlx::SqliteConnection, id: &str) -> Result<(), QueueError> {
        for statement in [
            "DELETE FROM events WHERE task_id = ?1",
            "DELETE FROM steps WHERE task_id = ?1",
            "DELETE FROM tasks WHERE id = ?1",
        ] {
            sqlx::query(statement).bind(id).execute(&mut *tx).await.map_err(db_error)?;
        }
        sqlx::query("INSERT OR REPLACE INTO purges (task_id, deleted_ms) VALUES (?1, ?2)")
            .bind(id)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Gives the pages freed by deletions back to the file system (a database created with
    /// `auto_vacuum = INCREMENTAL`; on an older one this does nothing and the pages are reused). Called with
    /// the write lock held.
    async fn shrink(&self) {
        if let Err(e) = sqlx::query("PRAGMA incremental_vacuum").execute(&self.pool).await {
            tracing::warn!(error = %e, "incremental_vacuum failed; freed pages stay in the file and are reused");
        }
    }

    /// The state of a task and its take-over marker, read inside the caller's write transaction.
    async fn facts(tx: &mut sqlx::SqliteConnection, id: &str) -> Result<(TaskState, Option<Takeover>), QueueError> {
        let (state, takeover): (String, Option<String>) =
            sqlx::query_as("SELECT state, takeover FROM tasks WHERE id = ?1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?
                .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        Ok((row::state(&state)?, Takeover::parse(takeover.as_deref())))
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

/// A write transaction of the queue's decisions ([`choreography`]): the in-process write lock (SQLite has one
/// writer: nobody waits on `SQLITE_BUSY`) and a `BEGIN IMMEDIATE` transaction on the durable connection.
pub(super) struct SqliteTx<'a> {
    queue: &'a SqliteQueue,
    _write: tokio::sync::MutexGuard<'a, ()>,
    tx: sqlx::Transaction<'static, sqlx::Sqlite>,
}

impl choreography::Backend for SqliteQueue {
    type Tx<'a> = SqliteTx<'a>;

    async fn begin(&self) -> Result<SqliteTx<'_>, QueueError> {
        let write = self.writes.lock().await;
        let tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(|e| self.failed(e))?;
        Ok(SqliteTx { queue: self, _write: write, tx })
    }
}

impl choreography::Tx for SqliteTx<'_> {
    async fn facts(&mut self, id: &str) -> Result<(TaskState, Option<Takeover>), QueueError> {
        SqliteQueue::facts(&mut self.tx, id).await
    }

    async fn record(&mut self, id: &str) -> Result<TaskRecord, QueueError> {
        let row = sqlx::query("SELECT * FROM tasks WHERE id = ?1")
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        SqliteQueue::task_row(&row).and_then(TaskRow::decode).map_err(|e| row::unreadable(id, e))
    }

    async fn last_step(&mut self, id: &str) -> Result<Option<StepRecord>, QueueError> {
        let last: Option<String> =
            sqlx::query_scalar("SELECT record FROM steps WHERE task_id = ?1 ORDER BY idx DESC LIMIT 1")
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(db_error)?;
        last.as_deref().map(row::step).transpose()
    }

    async fn next_step(&mut self, id: &str) -> Result<u32, QueueError> {
        let next: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(idx) + 1, 0) FROM steps WHERE task_id = ?1")
            .bind(id)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_error)?;
        Ok(u32::try_from(next).unwrap_or(u32::MAX))
    }

    async fn write_step(&mut self, id: &str, step: &StepRecord) -> Result<(), QueueError> {
        step_write(id, step)?.execute(&mut *self.tx).await.map_err(|e| self.queue.failed(e))?;
        Ok(())
    }

    async fn event(&mut self, id: &str, kind: EventKind) -> Result<(), QueueError> {
        SqliteQueue::own_event(&mut self.tx, id, kind).await
    }

    async fn apply(&mut self, id: &str, change: &Change) -> Result<(), QueueError> {
        SqliteQueue::apply(&mut self.tx, id, change).await
    }

    async fn start_turn(&mut self, id: &str, turns: &[crate::record::Turn]) -> Result<(), QueueError> {
        sqlx::query(
            "UPDATE tasks SET state = 'queued', turns = ?2, started_ms = NULL, finished_ms = NULL, outcome = NULL,
                attempt = 0, same_attempt = 0, approved = 0, elapsed_ms = 0, not_before_ms = 0,
                cancel_requested = 0, waiting_reason = NULL, worker = NULL, lease_until_ms = NULL
             WHERE id = ?1",
        )
        .bind(id)
        .bind(json(&turns)?)
        .execute(&mut *self.tx)
        .await
        .map_err(|e| self.queue.failed(e))?;
        Ok(())
    }

    async fn expired(&mut self) -> Result<Vec<(String, transitions::Expired)>, QueueError> {
        let expired: Vec<(String, i64, i64, bool, Option<String>)> = sqlx::query_as(
            "SELECT id, attempt, max_attempts, cancel_requested, takeover FROM tasks
             WHERE state = 'running' AND lease_until_ms < ?1",
        )
        .bind(now_ms())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_error)?;
        Ok(expired
            .into_iter()
            .map(|(id, attempt, max_attempts, cancel_requested, takeover)| {
                (id, row::expired(attempt, max_attempts, cancel_requested, takeover.as_deref()))
            })
            .collect())
    }

    async fn wake_workers(&mut self) -> Result<(), QueueError> {
        // One process: the API wakes its own workers (`WorkerHandle`).
        Ok(())
    }

    async fn commit(self) -> Result<(), QueueError> {
        self.queue.wrote(self.tx.commit().await)
    }

    async fn refuse(self, refusal: QueueError) -> QueueError {
        rollback(self.tx, refusal).await
    }
}

/// The statement that writes a task's step: journals it, or replaces it (an answer written into it).
fn step_write<'q>(
    task_id: &'q str,
    step: &StepRecord,
) -> Result<sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>, QueueError> {
    Ok(sqlx::query(
        "INSERT INTO steps (task_id, idx, record) VALUES (?1, ?2, ?3)
         ON CONFLICT (task_id, idx) DO UPDATE SET record = excluded.record",
    )
    .bind(task_id)
    .bind(i64::from(step.index))
    .bind(json(step)?))
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
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(|e| self.failed(e))?;
        let existing = sqlx::query("SELECT body_hash FROM tasks WHERE id = ?1")
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.failed(e))?;
        if let Some(row) = existing {
            let stored: String = row.try_get("body_hash").map_err(|e| self.failed(e))?;
            drop(tx);
            transitions::resubmit(&id, &stored, &hash)?;
            return Ok(Submitted::Existing(self.get(&id).await?));
        }
        let labels: BTreeMap<&str, &str> = task.spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        sqlx::query(
            "INSERT INTO tasks (id, spec, body_hash, labels, state, created_ms, max_attempts, desktop)
             VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?6, ?7)",
        )
        .bind(&id)
        .bind(json(&task.spec)?)
        .bind(&hash)
        .bind(json(&labels)?)
        .bind(now_ms())
        .bind(i64::from(task.max_attempts.max(1)))
        .bind(desktop::of_task(task.spec.computer.as_ref()))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.failed(e))?;
        Self::own_event(&mut tx, &id, EventKind::TaskQueued {}).await?;
        self.wrote(tx.commit().await)?;
        Ok(Submitted::Created(self.get(&id).await?))
    }

    async fn get(&self, id: &str) -> Result<TaskRecord, QueueError> {
        let row = sqlx::query("SELECT * FROM tasks WHERE id = ?1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| QueueError::NotFound(id.to_string()))?;
        let mut record = Self::task_row(&row)?.decode().map_err(|e| row::unreadable(id, e))?;
        record.steps = self.steps(&self.pool, id).await.map_err(|e| row::unreadable(id, e))?;
        record.derive();
        Ok(record)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<ListedTask>, QueueError> {
        let limit = row::list_limit(filter);
        // Two texts, not `(?1 IS NULL OR state = ?1)`: SQLite plans a statement before its parameters are
        // bound, and only `state = ?1` lets it search `tasks_by_state` (the rescuer's rounds list by state).
        let sql = if filter.state.is_some() {
            "SELECT * FROM tasks WHERE state = ?1
             AND (?3 IS NULL OR substr(id, 1, length(?3)) = ?3) AND (?4 IS NULL OR substr(id, -length(?4)) = ?4)
             ORDER BY created_ms DESC, id DESC LIMIT ?2"
        } else {
            "SELECT * FROM tasks WHERE ?1 IS NULL
             AND (?3 IS NULL OR substr(id, 1, length(?3)) = ?3) AND (?4 IS NULL OR substr(id, -length(?4)) = ?4)
             ORDER BY created_ms DESC, id DESC LIMIT ?2"
        };
        let rows = sqlx::query(sql)
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
        let ids = serde_json::to_string(ids).map_err(|e| QueueError::Unavailable(e.to_string()))?;
        let rows = sqlx::query(
            "SELECT task_id, COUNT(*) AS n FROM steps WHERE task_id IN (SELECT value FROM json_each(?1)) \
             GROUP BY task_id",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let n: i64 = row.try_get("n").map_err(db_error)?;
                Ok((row.try_get("task_id").map_err(db_error)?, n.max(0) as u64))
            })
            .collect()
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
        let _write = self.writes.lock().await;
        let row = sqlx::query(
            "UPDATE tasks SET lease_until_ms = ?3 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
             RETURNING cancel_requested, takeover",
        )
        .bind(task_id)
        .bind(token)
        .bind(now_ms() + lease_for.as_millis() as i64)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.failed(e))?;
        self.write_failure.lock().map(|mut f| f.take()).ok();
        Ok(match row {
            Some(row) => {
                let cancel: i64 = row.try_get("cancel_requested").map_err(db_error)?;
                let takeover: Option<String> = row.try_get("takeover").map_err(db_error)?;
                let pause_requested = Takeover::parse(takeover.as_deref()) == Some(Takeover::Requested);
                LeaseStatus::Held { cancel_requested: cancel != 0, pause_requested }
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
        usage: &Usage,
    ) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        // The write before a step's actions must survive a power cut (it is what keeps them from being run
        // again); the one after may be lost with it: the step then reads as interrupted, which is safe.
        let pool = if step.finished { &self.pool } else { &self.durable };
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(|e| self.failed(e))?;
        let held = sqlx::query(
            "UPDATE tasks SET elapsed_ms = ?3, usage = ?4 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'",
        )
        .bind(task_id)
        .bind(token)
        .bind(elapsed.as_millis() as i64)
        .bind(json(usage)?)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.failed(e))?
        .rows_affected();
        transitions::fenced(task_id, held)?;
        step_write(task_id, step)?.execute(&mut *tx).await.map_err(|e| self.failed(e))?;
        self.wrote(tx.commit().await)
    }

    async fn append_events(&self, task_id: &str, token: Option<i64>, events: &[Event]) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        if events.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(|e| self.failed(e))?;
        if let Some(token) = token {
            let held = sqlx::query("SELECT 1 FROM tasks WHERE id = ?1 AND lease_token = ?2")
                .bind(task_id)
                .bind(token)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.failed(e))?;
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
                .map_err(|e| self.failed(e))?;
        }
        self.wrote(tx.commit().await)
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
        .map_err(|e| self.failed(e))?
        .rows_affected();
        self.write_failure.lock().map(|mut f| f.take()).ok();
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
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
                    AND cancel_requested = 0",
                )
                .bind(task_id)
                .bind(token)
                .bind(reason)
                .execute(&self.durable)
                .await
            }
            Handback::TakeOver => {
                sqlx::query(
                    "UPDATE tasks SET state = 'waiting_for_human', lease_until_ms = NULL, worker = NULL,
                    waiting_reason = ?3, approved = 0, same_attempt = 1, takeover = ?4
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
                    AND cancel_requested = 0",
                )
                .bind(task_id)
                .bind(token)
                .bind(TAKEOVER_REASON)
                .bind(Takeover::Parked.as_str())
                .execute(&self.durable)
                .await
            }
            Handback::AwaitTools => {
                sqlx::query(
                    "UPDATE tasks SET state = 'awaiting_tool', lease_until_ms = NULL, worker = NULL,
                    waiting_reason = NULL, approved = 0
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
                    AND cancel_requested = 0",
                )
                .bind(task_id)
                .bind(token)
                .execute(&self.durable)
                .await
            }
            Handback::DesktopFailed { failure } => {
                sqlx::query(
                    "UPDATE tasks SET state = 'queued', lease_until_ms = NULL, worker = NULL, same_attempt = 1,
                    not_before_ms = ?3, desktop_failure = ?4
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'running'",
                )
                .bind(task_id)
                .bind(token)
                .bind(now_ms())
                .bind(failure)
                .execute(&self.durable)
                .await
            }
        };
        let changed = result.map_err(|e| self.failed(e))?.rows_affected();
        self.write_failure.lock().map(|mut f| f.take()).ok();
        transitions::fenced(task_id, changed)
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
        let rows = sqlx::query_as("SELECT state, COUNT(*) AS n FROM tasks GROUP BY state")
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        row::counts(rows)
    }

    async fn delete(&self, id: &str) -> Result<(), QueueError> {
        self.delete_one(id).await
    }

    async fn finished_before(&self, age: Duration, limit: u32) -> Result<Vec<String>, QueueError> {
        let cutoff = now_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        sqlx::query_scalar(
            "SELECT id FROM tasks WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_ms < ?1
             ORDER BY finished_ms, id LIMIT ?2",
        )
        .bind(cutoff)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)
    }

    async fn delete_finished(&self, ids: &[String]) -> Result<Vec<String>, QueueError> {
        self.delete_many(ids).await
    }

    async fn purges(&self, limit: u32) -> Result<Vec<String>, QueueError> {
        sqlx::query_scalar("SELECT task_id FROM purges ORDER BY deleted_ms, task_id LIMIT ?1")
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn purged(&self, ids: &[String]) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        let ids = serde_json::to_string(ids).map_err(|e| QueueError::Unavailable(e.to_string()))?;
        let result = sqlx::query("DELETE FROM purges WHERE task_id IN (SELECT value FROM json_each(?1))")
            .bind(ids)
            .execute(&self.pool)
            .await;
        self.wrote(result).map(drop)
    }

    /// Whether the queue answers, and, after a write failed for want of space or IO, whether it can write
    /// again: a probe write of 64 KiB (one row, rewritten each time) that clears the failure when it
    /// succeeds, so `/healthz` says unhealthy while the disk is full and ok once space is back.
    async fn health(&self) -> Result<(), QueueError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map_err(db_error)?;
        let Some((at, error)) = self.write_failure.lock().ok().and_then(|f| f.clone()) else {
            return Ok(());
        };
        let _write = self.writes.lock().await;
        let probe = sqlx::query(
            "INSERT INTO health (id, probed_ms, room) VALUES (1, ?1, zeroblob(65536))
             ON CONFLICT (id) DO UPDATE SET probed_ms = excluded.probed_ms, room = excluded.room",
        )
        .bind(now_ms())
        .execute(&self.pool)
        .await;
        match self.wrote(probe) {
            Ok(_) => Ok(()),
            Err(_) => {
                let ago = (now_ms() - at).max(0) / 1000;
                Err(QueueError::Unavailable(format!("the last write failed {ago} s ago: {error}")))
            }
        }
    }
}

/// Retention (docs/operations.md), apart from the trait's scheduling methods above for reading ease.
impl SqliteQueue {
    async fn delete_one(&self, id: &str) -> Result<(), QueueError> {
        let _write = self.writes.lock().await;
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(|e| self.failed(e))?;
        let state = match Self::state(&mut tx, id).await {
            Ok(state) => state,
            Err(e) => return Err(rollback(tx, e).await),
        };
        if let Err(e) = transitions::delete(id, state) {
            return Err(rollback(tx, e).await);
        }
        Self::remove(&mut tx, id).await?;
        self.wrote(tx.commit().await)?;
        self.shrink().await;
        Ok(())
    }

    async fn delete_many(&self, ids: &[String]) -> Result<Vec<String>, QueueError> {
        let _write = self.writes.lock().await;
        let mut tx = self.durable.begin_with("BEGIN IMMEDIATE").await.map_err(|e| self.failed(e))?;
        let mut deleted = Vec::new();
        for id in ids {
            let state: Option<String> = sqlx::query_scalar("SELECT state FROM tasks WHERE id = ?1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
            let Some(state) = state else { continue };
            if transitions::delete(id, row::state(&state)?).is_err() {
                continue;
            }
            Self::remove(&mut tx, id).await?;
            deleted.push(id.clone());
        }
        self.wrote(tx.commit().await)?;
        if !deleted.is_empty() {
            self.shrink().await;
        }
        Ok(deleted)
    }
}

/// Rolls a refused request's transaction back before answering, so its write lock is released now rather
/// than when its pooled connection is next used.
async fn rollback(tx: sqlx::Transaction<'_, sqlx::Sqlite>, refusal: QueueError) -> QueueError {
    if let Err(e) = tx.rollback().await {
        tracing::warn!(error = %e, "rolling back a refused request failed");
    }
    refusal
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskSpec;

    #[tokio::test]
    async fn the_claim_query_fills_in_desktop_keys_as_rust_does() {
        let dir = tempfile::tempdir().unwrap();
        let queue = SqliteQueue::open(&dir.path().join("queue.db")).await.unwrap();
        let local =
            crate::task::ComputerSpec::Local(crate::task::LocalSpec { display: Some(":3".into()), monitor: None });
        let scopes = [
            desktop::DesktopScope::new("node-a", Some(":1.0"), None),
            desktop::DesktopScope::new("node-b", None, desktop::template(&local).as_deref()),
        ];
        let templates =
            [None, Some("{default}"), Some("{host}/x11:{display}"), Some("vnc:vm:5900"), Some("{host}/x11:0")];
        let sql = format!("SELECT {} AS key", desktop::sql_qualify("?1", "?2", "?3", "?4"));
        for scope in &scopes {
            for template in templates {
                let key: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.as_str()))
                    .bind(template)
                    .bind(&scope.default)
                    .bind(&scope.host)
                    .bind(&scope.display)
                    .fetch_one(&queue.pool)
                    .await
                    .unwrap();
                assert_eq!(key, scope.qualify(template), "{template:?} for {scope:?}");
            }
        }
    }

    async fn with_tasks(path: &Path, n: usize) {
        let queue = SqliteQueue::open(path).await.unwrap();
        for i in 0..n {
            let spec =
                TaskSpec::parse(&format!(r#"{{"id": "t{i}", "instructions": "{}"}}"#, "x".repeat(500)), "t").unwrap();
            queue.submit(NewTask { spec, max_attempts: 3 }).await.unwrap();
        }
        queue.pool.close().await;
        queue.durable.close().await;
    }

    fn refused(result: Result<SqliteQueue, QueueError>) -> String {
        match result {
            Err(e @ QueueError::Corrupt(_)) => e.to_string(),
            Err(other) => panic!("refused, but not as corrupt: {other}"),
            Ok(_) => panic!("opened a database that lost its tasks"),
        }
    }

    #[tokio::test]
    async fn an_emptied_database_is_refused_not_taken_for_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        with_tasks(&path, 120).await;
        std::fs::File::create(&path).unwrap(); // truncated to 0 bytes
        let message = refused(SqliteQueue::open(&path).await);
        assert!(message.contains(&path.display().to_string()) && message.contains("0 bytes"), "{message}");
        // The refusal wrote nothing into the file it refused (no fresh SQLite header).
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "the refused file was written to");
        // Deleted outright: the marker beside it says there was a queue.
        std::fs::remove_file(&path).unwrap();
        let message = refused(SqliteQueue::open(&path).await);
        assert!(message.contains("is missing") && message.contains("queue.db.created"), "{message}");
        assert!(!path.exists(), "nothing was created in its place");
    }

    #[tokio::test]
    async fn a_damaged_database_is_refused_naming_the_file() {
        use std::io::{Seek, SeekFrom, Write};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        with_tasks(&path, 400).await;
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > 200 * 1024, "{len}");
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(len / 2 / 4096 * 4096)).unwrap();
        let garbage: Vec<u8> = (0..64 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        file.write_all(&garbage).unwrap();
        drop(file);
        let message = refused(SqliteQueue::open(&path).await);
        assert!(message.contains(&path.display().to_string()) && message.contains("damaged"), "{message}");
        // A header that is not SQLite's.
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all(&garbage[..100]).unwrap();
        drop(file);
        let message = refused(SqliteQueue::open(&path).await);
        assert!(message.contains(&path.display().to_string()), "{message}");
    }

    #[tokio::test]
    async fn the_database_and_its_log_are_private_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data/queue.db");
        // SAFETY: umask only changes this process's file-creation mask; this test restores it.
        let old = unsafe { libc::umask(0o022) };
        let queue = SqliteQueue::open(&path).await;
        unsafe { libc::umask(old) };
        let queue = queue.unwrap();
        let spec = TaskSpec::parse(r#"{"id": "secret", "instructions": "type hunter2"}"#, "t").unwrap();
        queue.submit(NewTask { spec, max_attempts: 3 }).await.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("data")), 0o700);
        for file in ["queue.db", "queue.db-wal", "queue.db-shm", "queue.db.created"] {
            assert_eq!(mode(&dir.path().join("data").join(file)), 0o600, "{file}");
        }
    }

    #[tokio::test]
    async fn an_unwritable_directory_is_named_with_the_os_error() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let _ro = ReadOnly::new(&data);
        let message = match SqliteQueue::open(&data.join("queue.db")).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("opened a queue in a directory it cannot write"),
        };
        assert!(message.contains(&data.display().to_string()) && message.contains("os error"), "{message}");
    }

    /// A directory agentd cannot write in: mode 0500, or, for root (who may write anyway), a read-only tmpfs.
    struct ReadOnly(Option<std::path::PathBuf>);

    impl ReadOnly {
        fn new(dir: &Path) -> Self {
            use std::os::unix::fs::PermissionsExt;
            std::fs::create_dir_all(dir).unwrap();
            if unsafe { libc::geteuid() } != 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
                return Self(None);
            }
            let mounted = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(mounted, "as root, the test mounts a read-only tmpfs");
            Self(Some(dir.to_path_buf()))
        }
    }

    impl Drop for ReadOnly {
        fn drop(&mut self) {
            if let Some(dir) = &self.0 {
                let _ = std::process::Command::new("umount").arg("-l").arg(dir).status();
            }
        }
    }

    /// A real full disk (a 3 MB tmpfs; needs root to mount, says so and skips otherwise): writes fail and
    /// health says so; once space is back, writes work again and health is ok — the connection a failed
    /// transaction left behind is not reused.
    #[tokio::test]
    async fn after_a_full_disk_the_queue_recovers_and_health_tells_the_truth() {
        if unsafe { libc::geteuid() } != 0 {
            agentd_testenv::skip("mounting a small tmpfs to fill needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mount = Mounted::tmpfs(dir.path(), "3m");
        let ballast = dir.path().join("ballast");
        std::fs::write(&ballast, vec![1u8; 1024 * 1024]).unwrap();
        let queue = SqliteQueue::open(&dir.path().join("queue.db")).await.unwrap();
        queue.health().await.unwrap();
        let submit = |i: usize| {
            let text = format!(r#"{{"id": "full-{i}", "instructions": "{}"}}"#, "y".repeat(4000));
            let spec = TaskSpec::parse(&text, "t").unwrap();
            queue.submit(NewTask { spec, max_attempts: 3 })
        };
        let mut full = None;
        for i in 0..2000 {
            if let Err(e) = submit(i).await {
                full = Some(e.to_string());
                break;
            }
        }
        let full = full.unwrap_or_else(|| panic!("3 MB never filled"));
        assert!(full.contains("full"), "{full}");
        // Still full: later writes fail for that reason, and health says so.
        let again = submit(10_000).await.map(drop).unwrap_err().to_string();
        assert!(again.contains("full"), "{again}");
        let health = queue.health().await.map_err(|e| e.to_string()).unwrap_err();
        assert!(health.contains("full"), "{health}");
        // Space back: health is ok again without waiting for another write, and writes work.
        std::fs::remove_file(&ballast).unwrap();
        queue.health().await.unwrap_or_else(|e| panic!("health after space was freed: {e}"));
        submit(10_001).await.unwrap_or_else(|e| panic!("after space was freed: {e}"));
        queue.health().await.unwrap();
        drop(queue);
        drop(mount);
    }

    struct Mounted(std::path::PathBuf);

    impl Mounted {
        fn tmpfs(dir: &Path, size: &str) -> Self {
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "mount a tmpfs on {}", dir.display());
            Self(dir.to_path_buf())
        }
    }

    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }

    /// A new database gives the pages of deleted tasks back to the file system (docs/operations.md), not only to reuse.
    #[tokio::test]
    async fn deleting_finished_tasks_shrinks_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let queue = SqliteQueue::open(&dir.path().join("queue.db")).await.unwrap();
        let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum").fetch_one(&queue.pool).await.unwrap();
        assert_eq!(mode, 2, "incremental");
        let pages =
            || async { sqlx::query_scalar::<_, i64>("PRAGMA page_count").fetch_one(&queue.pool).await.unwrap() };
        let empty = pages().await;
        let mut ids = Vec::new();
        for i in 0..200 {
            let id = format!("big-{i}");
            let text = serde_json::json!({"id": id, "instructions": "x".repeat(8000)}).to_string();
            let spec = TaskSpec::parse(&text, "t").unwrap();
            queue.submit(NewTask { spec, max_attempts: 1 }).await.unwrap();
            queue.cancel(&id).await.unwrap();
            ids.push(id);
        }
        let full = pages().await;
        assert!(full > empty + 300, "{empty} → {full}");
        assert_eq!(queue.delete_finished(&ids).await.unwrap().len(), 200);
        let after = pages().await;
        assert!(after < empty + 20, "pages: empty {empty}, full {full}, after deleting {after}");
    }

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
