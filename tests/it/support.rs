//! Shared helpers: a hermetic `agentd` command (own config file and data dir) and output capture.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// This test loads the machine (several daemons, kill loops): it runs beside others that do, never beside a
/// timing-sensitive one ([`agentd_testenv::MACHINE_LOAD`]).
pub fn heavy() -> agentd_testenv::Inside {
    agentd_testenv::loading_the_machine()
}

/// This test's checks depend on timing (real desktops and the apps on them): it runs beside others that do,
/// never beside one that loads the machine.
pub fn timing_sensitive() -> agentd_testenv::Inside {
    agentd_testenv::on_a_quiet_machine()
}

/// The repository root (where `config/` lives).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixtures() -> PathBuf {
    repo().join("tests/fixtures")
}

/// An `agentd` binary with a private data directory and config file.
pub struct Agentd {
    pub dir: tempfile::TempDir,
}

impl Agentd {
    pub fn new() -> Self {
        Self::with_config("")
    }

    /// `extra` is appended to a config that sets `data_dir` to the private directory.
    pub fn with_config(extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = format!("data_dir = {:?}\n{extra}", dir.path().join("data").display().to_string());
        std::fs::write(dir.path().join("agentd.toml"), config).expect("write config");
        Self { dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
        cmd.arg("--config").arg(self.dir.path().join("agentd.toml"));
        for (name, _) in std::env::vars() {
            if name.starts_with("AGENTD_") {
                cmd.env_remove(name);
            }
        }
        cmd.current_dir(repo());
        cmd
    }

    /// Runs `agentd ARGS` and returns its output.
    pub fn run(&self, args: &[&str]) -> Run {
        let output = self.command().args(args).stdin(Stdio::null()).output().expect("spawn agentd");
        Run::from(output)
    }

    /// Runs `agentd ARGS` with `stdin` as standard input.
    pub fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Run {
        use std::io::Write;
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentd");
        child.stdin.take().expect("stdin").write_all(stdin).expect("write stdin");
        Run::from(child.wait_with_output().expect("wait agentd"))
    }
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Self {
        Self {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }
}

pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() { stack.push(path) } else { out.push(path) }
        }
    }
    out.sort();
    out
}

/// The test PostgreSQL server (`./scripts/test` sets `AGENTD_TEST_POSTGRES_URL`), or `None` after
/// [`agentd_testenv::skip`] (a failure under CI).
pub fn postgres_url() -> Option<String> {
    agentd_testenv::var_or_skip("AGENTD_TEST_POSTGRES_URL", "./scripts/test sets it to a private PostgreSQL")
}

/// A schema of its own on the test PostgreSQL server, so tests running side by side never see each other's
/// tasks; dropped (with everything in it) when this is dropped, also when the test fails.
pub struct PgSchema {
    server: String,
    name: String,
}

impl PgSchema {
    pub fn create(server: &str) -> Self {
        let name = format!("agentd_it_{}", uuid::Uuid::now_v7().simple());
        pg_execute(server, format!("CREATE SCHEMA {name}")).unwrap_or_else(|e| panic!("create schema {name}: {e}"));
        Self { server: server.to_string(), name }
    }

    /// The server's URL with this schema as the search path, as `queue.url` takes it.
    pub fn url(&self) -> String {
        let separator = if self.server.contains('?') { '&' } else { '?' };
        format!("{}{separator}options[search_path]={}", self.server, self.name)
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        if let Err(e) = pg_execute(&self.server, format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name)) {
            eprintln!("could not drop schema {}: {e}", self.name);
        }
    }
}

/// Runs one statement on `url`, on a thread and runtime of its own (so async tests can call it too).
fn pg_execute(url: &str, statement: String) -> Result<(), String> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        runtime.block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await.map_err(|e| e.to_string())?;
            let done = sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut conn).await.map_err(|e| e.to_string());
            let _ = conn.close().await;
            done.map(drop)
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the statement's thread panicked".into()))
}

/// The queue a test daemon uses.
pub enum Backend {
    /// The embedded default, in the daemon's data dir.
    Sqlite,
    /// A schema of its own on the test PostgreSQL server.
    Postgres(PgSchema),
}

impl Backend {
    /// PostgreSQL in a fresh schema, or `None` (the test skips, saying so) when no server is configured.
    pub fn postgres() -> Option<Self> {
        postgres_url().map(|url| Self::Postgres(PgSchema::create(&url)))
    }

    /// The `[queue]` lines that select this backend.
    fn queue_config(&self) -> String {
        match self {
            Self::Sqlite => String::new(),
            Self::Postgres(schema) => format!("backend = \"postgres\"\nurl = {:?}\n", schema.url()),
        }
    }
}

/// A running `agentd serve` on a private data dir and socket; killed when dropped.
pub struct Daemon {
    pub agentd: Agentd,
    pub child: Option<std::process::Child>,
    pub socket: PathBuf,
    /// Environment variables the daemon is started with (beside the test's own, without `AGENTD_*`).
    pub env: Vec<(String, String)>,
    /// Dropped after the daemon is killed (a PostgreSQL schema goes with it).
    _backend: Backend,
}

impl Daemon {
    /// Starts a daemon whose config is the private data dir and socket plus `extra` (further sections).
    pub fn start(extra: &str) -> Self {
        Self::start_with_api("", extra)
    }

    /// Like [`Daemon::start`], with `api` lines added to the `[api]` section.
    pub fn start_with_api(api: &str, extra: &str) -> Self {
        Self::start_with(api, "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100", extra)
    }

    /// Like [`Daemon::start_with_api`], with `queue` as the `[queue]` section's first lines instead of the
    /// short test leases (3 s lease, 1 s heartbeat, 100 ms poll).
    pub fn start_with(api: &str, queue: &str, extra: &str) -> Self {
        Self::start_on_with(Backend::Sqlite, api, queue, extra)
    }

    /// Like [`Daemon::start_with_api`], on the queue `backend`.
    pub fn start_on(backend: Backend, api: &str, extra: &str) -> Self {
        Self::start_on_with(backend, api, "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100", extra)
    }

    /// Like [`Daemon::start`], with the environment variables `env` set for the daemon.
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Self {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Self::start_on_with_env(Backend::Sqlite, "", "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100", extra, env)
    }

    /// Like [`Daemon::start_on`], with the environment variables `env` set for the daemon.
    pub fn start_on_env(backend: Backend, extra: &str, env: &[(&str, &str)]) -> Self {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Self::start_on_with_env(backend, "", "lease_secs = 3\nheartbeat_secs = 1\npoll_ms = 100", extra, env)
    }

    fn start_on_with(backend: Backend, api: &str, queue: &str, extra: &str) -> Self {
        Self::start_on_with_env(backend, api, queue, extra, Vec::new())
    }

    pub fn start_on_with_env(
        backend: Backend,
        api: &str,
        queue: &str,
        extra: &str,
        env: Vec<(String, String)>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agentd.sock");
        let queue = format!("{}{queue}", backend.queue_config());
        let config = format!("[api]\nsocket = {:?}\n{api}\n[queue]\n{queue}\n{extra}", socket.display().to_string());
        let agentd = Agentd { dir };
        let mut text = format!("data_dir = {:?}\n", agentd.data_dir().display().to_string());
        text.push_str(&config);
        std::fs::write(agentd.dir.path().join("agentd.toml"), text).expect("write config");
        let mut daemon = Self { agentd, child: None, socket, env, _backend: backend };
        daemon.spawn();
        daemon
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.agentd.dir.path().join("serve.log"))
            .expect("log file");
        let child = self
            .agentd
            .command()
            .arg("serve")
            .env("AGENTD_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn agentd serve");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Ok((200, _)) = http(&self.socket, "GET", "/healthz", None, &[]) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("agentd serve did not become healthy:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.agentd.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// Runs one SQL statement on this daemon's queue database behind its back (`sqlite` for the embedded
    /// queue, `postgres` for a PostgreSQL one): for tests that need a state the API cannot make, such as
    /// tasks that finished days ago.
    pub fn queue_sql(&self, sqlite: &str, postgres: &str) {
        match &self._backend {
            Backend::Postgres(schema) => {
                pg_execute(&schema.url(), postgres.to_string()).unwrap_or_else(|e| panic!("{postgres}: {e}"))
            }
            Backend::Sqlite => {
                let path = self.agentd.data_dir().join("queue.db");
                let statement = sqlite.to_string();
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                    runtime.block_on(async {
                        use sqlx::Connection;
                        let options = sqlx::sqlite::SqliteConnectOptions::new()
                            .filename(&path)
                            .busy_timeout(std::time::Duration::from_secs(10));
                        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("open queue.db");
                        sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
                            .execute(&mut conn)
                            .await
                            .unwrap_or_else(|e| panic!("{statement}: {e}"));
                        let _ = conn.close().await;
                    })
                })
                .join()
                .expect("the statement's thread");
            }
        }
    }

    /// Every row of every table of this daemon's queue database, read behind its back as text (one line a
    /// row: PostgreSQL's `row_to_json`, SQLite's columns as text), for tests that search what is stored.
    pub fn queue_dump(&self) -> String {
        let (postgres, sqlite) = match &self._backend {
            Backend::Postgres(schema) => (Some(schema.url()), None),
            Backend::Sqlite => (None, Some(self.agentd.data_dir().join("queue.db"))),
        };
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                use sqlx::{Connection, Row};
                let mut out = String::new();
                if let Some(url) = postgres {
                    let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect to PostgreSQL");
                    let tables: Vec<String> = sqlx::query_scalar(
                        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()",
                    )
                    .fetch_all(&mut conn)
                    .await
                    .expect("tables");
                    assert!(!tables.is_empty(), "no tables in the daemon's schema");
                    for table in tables {
                        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                            "SELECT row_to_json(t)::text FROM \"{table}\" t"
                        )))
                        .fetch_all(&mut conn)
                        .await
                        .unwrap_or_else(|e| panic!("{table}: {e}"));
                        for row in rows {
                            out.push_str(&format!("{table}: {row}\n"));
                        }
                    }
                    let _ = conn.close().await;
                }
                if let Some(path) = sqlite {
                    let options = sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(&path)
                        .busy_timeout(std::time::Duration::from_secs(10));
                    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("open queue.db");
                    let tables: Vec<String> = sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
                        .fetch_all(&mut conn)
                        .await
                        .expect("tables");
                    assert!(!tables.is_empty(), "no tables in queue.db");
                    for table in tables {
                        let rows = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM \"{table}\"")))
                            .fetch_all(&mut conn)
                            .await
                            .unwrap_or_else(|e| panic!("{table}: {e}"));
                        for row in rows {
                            out.push_str(&format!("{table}:"));
                            for i in 0..row.len() {
                                if let Ok(Some(text)) = row.try_get::<Option<String>, _>(i) {
                                    out.push_str(&format!(" {text}"));
                                } else if let Ok(Some(bytes)) = row.try_get::<Option<Vec<u8>>, _>(i) {
                                    out.push_str(&format!(" {}", String::from_utf8_lossy(&bytes)));
                                }
                            }
                            out.push('\n');
                        }
                    }
                    let _ = conn.close().await;
                }
                out
            })
        })
        .join()
        .expect("the dump's thread")
    }

    /// Runs a CLI command against this daemon.
    pub fn cli(&self, args: &[&str]) -> Run {
        let mut full = vec!["--socket", self.socket.to_str().expect("socket path")];
        full.extend_from_slice(args);
        self.agentd.run(&full)
    }

    pub fn signal(&mut self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: sending a signal to our own child process.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// Waits for the daemon to exit; returns its exit code.
    pub fn wait(&mut self) -> Option<i32> {
        self.child.take().and_then(|mut c| c.wait().ok()).and_then(|s| s.code())
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The status document of a task, over the API.
    pub fn task(&self, id: &str) -> serde_json::Value {
        let (status, body) = http(&self.socket, "GET", &format!("/v1/tasks/{id}"), None, &[]).expect("status request");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    }

    /// Polls until the task is in a terminal state (or `timeout` passes).
    pub fn wait_terminal(&self, id: &str, timeout: std::time::Duration) -> serde_json::Value {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let task = self.task(id);
            let state = task["state"].as_str().unwrap_or_default().to_string();
            if ["succeeded", "failed", "cancelled"].contains(&state.as_str()) || std::time::Instant::now() > deadline {
                return task;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How long [`http`] waits on a peer that neither sends nor takes a byte: a daemon answers within
/// milliseconds and an event stream sends a keep-alive every 15 s, so only a stopped or wedged server is this
/// silent. The request then fails (saying so) instead of hanging the test.
const SILENT_PEER: std::time::Duration = std::time::Duration::from_secs(60);

/// One HTTP/1.1 request over a Unix socket (or TCP when `target` has a `:port` and no `/`), returning the
/// status and body. `headers` are extra header lines.
pub fn http(
    target: &Path,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    http_with_head(target, method, path, body, headers).map(|(status, _, body)| (status, body))
}

/// Like [`http`], with the response head (status line and headers) too.
pub fn http_with_head(
    target: &Path,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String, String)> {
    http_within(target, method, path, body, headers, SILENT_PEER)
}

/// Like [`http_with_head`], failing once the peer has been silent for `silent`.
fn http_within(
    target: &Path,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
    silent: std::time::Duration,
) -> std::io::Result<(u16, String, String)> {
    use std::io::{Read, Write};
    let body = body.unwrap_or_default();
    let mut request = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str("host: localhost\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let target_str = target.to_string_lossy();
    let mut raw = Vec::new();
    let read = if !target_str.contains('/') && target_str.contains(':') {
        let mut stream = std::net::TcpStream::connect(target_str.as_ref())?;
        stream.set_read_timeout(Some(silent))?;
        stream.set_write_timeout(Some(silent))?;
        stream.write_all(request.as_bytes())?;
        early_answer(stream.write_all(body))?;
        stream.read_to_end(&mut raw)
    } else {
        let mut stream = std::os::unix::net::UnixStream::connect(target)?;
        stream.set_read_timeout(Some(silent))?;
        stream.set_write_timeout(Some(silent))?;
        stream.write_all(request.as_bytes())?;
        early_answer(stream.write_all(body))?;
        stream.read_to_end(&mut raw)
    };
    if let Err(e) = read
        && matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "{method} {path} on {}: silent for {silent:?} (a server that stopped answering); received so \
                 far: {:?}",
                target.display(),
                String::from_utf8_lossy(&raw)
            ),
        ));
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(rest) } else { rest.to_string() };
    Ok((status, head.to_string(), body))
}

/// A server may answer before it has read the whole body (a 413 from the declared length) and close its side:
/// the rest of the body then cannot be written, and the answer is still there to read.
fn early_answer(written: std::io::Result<()>) -> std::io::Result<()> {
    match written {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) => Ok(()),
        other => other,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// A server that accepts and never answers fails the request after the bound, saying so, instead of hanging.
#[test]
fn a_silent_server_fails_the_request_instead_of_hanging_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("silent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let started = std::time::Instant::now();
    let answer = http_within(&socket, "GET", "/healthz", None, &[], std::time::Duration::from_millis(300));
    let err = answer.expect_err("a silent server gives no answer");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains("GET /healthz"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    drop(listener);
}
