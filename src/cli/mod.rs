//! The command line (product contract §2): argument parsing and dispatch. Each command lives in its own
//! module and returns an [`Exit`]; errors print their chain on stderr and map to the exit code table.

pub mod exit;
pub mod progress;
pub mod run;

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
            eprintln!("agentd: {e}");
            e.exit
        }
    };
    std::process::ExitCode::from(exit.code())
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("AGENTD_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

async fn dispatch(cli: Cli) -> CliResult {
    let source = ConfigSource::locate(cli.config.as_deref());
    match cli.command {
        Command::Run { task } => {
            let config = source.load()?;
            run::run(&config, &task, cli.json).await
        }
        Command::Config { command: ConfigCommand::Check } => config_check(&source, cli.json).await,
    }
}

async fn config_check(source: &ConfigSource, json: bool) -> CliResult {
    let config: Config = source.load()?;
    let store = crate::backends::artifact_store(&config).await.map_err(CliError::invalid)?;
    store
        .health()
        .await
        .map_err(|e| CliError::unreachable(anyhow::anyhow!("artifact store {}: {e}", store.describe())))?;
    if json {
        let doc = serde_json::json!({"ok": true, "config": source.name(), "artifacts": store.describe()});
        println!("{doc}");
    } else {
        eprintln!("{}: ok (artifacts: {})", source.name(), store.describe());
    }
    Ok(Exit::Success)
}
