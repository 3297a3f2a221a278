//! The command line (product contract §2): argument parsing and dispatch. Each command lives in its own
//! module and returns an [`Exit`]; errors print their chain on stderr and map to the exit code table.

pub mod client;
pub mod exit;
pub mod progress;
pub mod remote;
pub mod run;
pub mod sanitize;

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use exit::{CliError, CliResult, Exit};

use crate::config::{Config, ConfigSource};

#[derive(Debug, Parser)]
#[command(name = "agentd", version, about = "A daemon that lets a vision model operate a computer")]
pub struct Cli {
    /// Configuration file (default: $AGENTD_CONFIG, else /etc/agentd/agentd.toml when it exists, else built-in
    /// defaults).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Print results as one JSON document (JSON lines for streams) on stdout, and nothing else there.
    #[arg(long, global = true)]
    pub json: bool,

    /// The daemon's Unix socket (default: $AGENTD_SOCKET, else the configured api.socket).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// The daemon's TCP address, http://host:port (default: $AGENTD_URL); the token comes from $AGENTD_TOKEN.
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one task in the foreground with no daemon: progress on stderr, result on stdout.
    Run {
        /// The task file, or `-` for standard input.
        task: PathBuf,
    },
    /// Run the daemon: API and workers (what systemd starts).
    Serve,
    /// Send a task to the daemon and print its id.
    Submit {
        /// The task file, or `-` for standard input.
        task: PathBuf,
        /// Follow the task's progress and exit with its outcome.
        #[arg(long)]
        wait: bool,
    },
    /// Show one task: state, outcome, steps, usage.
    Status { id: String },
    /// List tasks, newest first.
    List {
        /// Only tasks in this state (queued, running, waiting_for_human, awaiting_tool, succeeded, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Cancel a queued or running task.
    Cancel { id: String },
    /// Print a task's events (JSON lines with --json).
    Events {
        id: String,
        /// Keep following until the task finishes.
        #[arg(long)]
        follow: bool,
    },
    /// Approve what a task waiting for a human asked for; it resumes.
    Approve { id: String },
    /// Reject what a task waiting for a human asked for; it ends.
    Reject {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Answer a task's pending `remote` tool call (the task waits in awaiting_tool); it resumes. The API
    /// takes one result per pending call at once: a task waiting for several calls is answered through
    /// `POST /v1/tasks/{id}/tool-results`, and this command says which calls are pending.
    ToolResult {
        id: String,
        /// The call's id (`agentd status ID` lists the pending calls).
        call_id: String,
        /// What the model reads (the envelope's `output`).
        #[arg(long)]
        output: String,
        /// The tool failed: `ok` is false.
        #[arg(long)]
        error: bool,
        /// JSON kept in the step record and events, never shown to the model (the envelope's `details`).
        #[arg(long, value_name = "JSON")]
        details: Option<String>,
    },
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the configuration and build every backend it names.
    Check,
}

/// Parses arguments, runs the command, prints errors, and returns the process exit code.
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            let code = if e.use_stderr() { Exit::InvalidInput } else { Exit::Success };
            return std::process::ExitCode::from(code.code());
        }
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("agentd: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(Exit::Unreachable.code());
        }
    };
    let result = runtime.block_on(dispatch(cli));
    let exit = match result {
        Ok(exit) => exit,
        Err(e) => {
            print_stderr(&e.to_string());
            e.exit
        }
    };
    std::process::ExitCode::from(exit.code())
}

/// Prints a message (an error chain, a warning) on stderr for people: control characters escaped, every line
/// prefixed with `agentd: `.
pub fn print_stderr(message: &str) {
    let mut out = std::io::stderr().lock();
    for line in sanitize::sanitize_lines(message).lines() {
        let _ = writeln!(out, "agentd: {line}");
    }
}

/// Logs go to stderr. Colour only on a terminal and when `NO_COLOR` is unset or empty (no-color.org); under
/// systemd (`JOURNAL_STREAM` names stderr's stream) no timestamp either, since journald stamps every line
/// itself. No log line shows a secret's value (`tools::secrets::RedactingWriter`).
fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("AGENTD_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Every line is filtered for the values of running tasks' secrets (§15).
        .with_writer(|| crate::tools::secrets::RedactingWriter(std::io::stderr()))
        .with_ansi(std::io::stderr().is_terminal() && !no_color);
    let _ = if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder.without_time().try_init()
    } else {
        builder.try_init()
    };
}

async fn dispatch(cli: Cli) -> CliResult {
    let source = ConfigSource::locate(cli.config.as_deref());
    let json = cli.json;
    let client = |config: &Config| -> Result<client::Client, CliError> {
        Ok(client::Client::new(client::Endpoint::locate(cli.socket.clone(), cli.url.clone(), config)?))
    };
    match &cli.command {
        Command::Run { task } => {
            let config = source.load()?;
            run::run(&config, task, json).await
        }
        Command::Serve => {
            let mut config = source.load()?;
            // `--socket` names the socket the daemon listens on (as it names the one clients reach).
            if let Some(socket) = &cli.socket {
                config.api.socket = Some(socket.clone());
            }
            crate::daemon::serve(config).await.map_err(|e| match e {
                crate::daemon::DaemonError::Invalid(m) => CliError::invalid(anyhow::anyhow!(m)),
                crate::daemon::DaemonError::Unreachable(m) => CliError::unreachable(anyhow::anyhow!(m)),
            })?;
            Ok(Exit::Success)
        }
        Command::Submit { task, wait } => remote::submit(&client(&source.load()?)?, task, *wait, json).await,
        Command::Status { id } => remote::status(&client(&source.load()?)?, id, json).await,
        Command::List { state, limit } => remote::list(&client(&source.load()?)?, state.as_deref(), *limit, json).await,
        Command::Cancel { id } => remote::cancel(&client(&source.load()?)?, id, json).await,
        Command::Events { id, follow } => remote::events(&client(&source.load()?)?, id, *follow, json).await,
        Command::Approve { id } => remote::decide(&client(&source.load()?)?, id, true, None, json).await,
        Command::Reject { id, reason } => {
            remote::decide(&client(&source.load()?)?, id, false, reason.clone(), json).await
        }
        Command::ToolResult { id, call_id, output, error, details } => {
            let answer = remote::ToolResultArgs { call_id, output, error: *error, details: details.as_deref() };
            remote::tool_result(&client(&source.load()?)?, id, &answer, json).await
        }
        Command::Config { command: ConfigCommand::Check } => config_check(&source, cli.socket.as_deref(), json).await,
    }
}

/// `config check`: what `serve` would check before starting, without starting. Every line it prints on
/// stderr starts with `agentd: ` and, when it is about one backend, names it.
async fn config_check(source: &ConfigSource, socket: Option<&std::path::Path>, json: bool) -> CliResult {
    let mut config: Config = source.load()?;
    if let Some(socket) = socket {
        config.api.socket = Some(socket.to_path_buf());
    }
    let daemon_error = |e| match e {
        crate::daemon::DaemonError::Invalid(m) => CliError::invalid(anyhow::anyhow!(m)),
        crate::daemon::DaemonError::Unreachable(m) => CliError::unreachable(anyhow::anyhow!(m)),
    };
    for warning in crate::daemon::preflight(&config).map_err(daemon_error)? {
        print_stderr(&format!("warning: {warning}"));
    }
    let queue = crate::daemon::open_queue(&config).await.map_err(daemon_error)?;
    queue.health().await.map_err(|e| CliError::unreachable(anyhow::anyhow!("queue {}: {e}", queue.describe())))?;
    let store = crate::backends::artifact_store(&config).await.map_err(CliError::invalid)?;
    store
        .health()
        .await
        .map_err(|e| CliError::unreachable(anyhow::anyhow!("artifact store {}: {e}", store.describe())))?;
    if json {
        let doc = serde_json::json!({
            "ok": true,
            "config": source.name(),
            "queue": queue.describe(),
            "artifacts": store.describe(),
            "socket": config.socket_path(),
        });
        println!("{doc}");
    } else {
        print_stderr(&format!(
            "{}: ok (queue {}, artifacts {}, socket {})",
            source.name(),
            queue.describe(),
            store.describe(),
            config.socket_path().display()
        ));
    }
    Ok(Exit::Success)
}
