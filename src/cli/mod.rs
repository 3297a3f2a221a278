//! The command line (docs/cli.md): argument parsing and dispatch. Each command lives in its own
//! module and returns an [`Exit`]; errors print their chain on stderr and map to the exit code table.

pub mod ask;
pub mod client;
pub mod compile;
pub mod console;
pub mod docs;
pub mod eval;
pub mod exit;
pub mod live;
pub mod mcp;
pub mod progress;
pub mod remote;
pub mod report;
pub mod retention;
pub mod run;
pub mod sanitize;
pub mod takeover;
pub mod telemetry;
pub mod term;
pub mod turns;

use std::io::Write;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

pub use exit::{CliError, CliResult, Exit};

use crate::config::{Config, ConfigSource};

#[derive(Debug, Parser)]
#[command(
    name = "agentd",
    version,
    about = "A daemon that lets a vision model operate a computer",
    after_help = "Examples:
  agentd run config/tasks/mock-login.json            run one task here, no daemon
  agentd serve                                       run the daemon (what systemd starts)
  agentd submit config/tasks/mock-login.json --wait  send a task to the daemon and follow it
  agentd list --state running                        the daemon's running tasks
  agentd completions bash > ~/.local/share/bash-completion/completions/agentd

`agentd help COMMAND` (or `agentd COMMAND --help`) shows a command's options and examples; `man agentd-COMMAND`
when the man pages are installed."
)]
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

/// How a client command reaches the daemon: the options of every command that talks to it.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Reaching the daemon")]
pub struct DaemonArgs {
    /// The daemon's Unix socket (default: $AGENTD_SOCKET, else the configured api.socket).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// The daemon's TCP address, http://host:port (default: $AGENTD_URL); the token comes from $AGENTD_TOKEN.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one task in the foreground with no daemon: progress on stderr, result on stdout.
    #[command(after_help = "Examples:
  agentd run config/tasks/mock-login.json          the mock desktop and the scripted model
  agentd run task.json --json > result.json        the task's status document on stdout
  cat task.json | agentd run -                     the task from standard input")]
    Run {
        /// The task file, or `-` for standard input.
        task: PathBuf,
    },
    /// Run the daemon: API and workers (what systemd starts).
    #[command(after_help = "Examples:
  agentd serve                                     the socket and queue of the configuration
  agentd serve --config ./agentd.toml --socket ./agentd.sock
  systemctl start agentd                           the packaged service runs `agentd serve`")]
    Serve {
        /// The Unix socket to listen on (default: $AGENTD_SOCKET, else the configured api.socket).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
    /// Send a task to the daemon and print its id.
    #[command(after_help = "Examples:
  agentd submit config/tasks/mock-login.json       prints the task id
  agentd submit task.json --wait                   follow it; exit with its outcome (0 succeeded, 1 not)
  agentd submit - --url http://10.0.0.5:7070 < task.json   (token from $AGENTD_TOKEN)")]
    Submit {
        /// The task file, or `-` for standard input.
        task: PathBuf,
        /// Follow the task's progress and exit with its outcome.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Run a suite of verified tasks on one or more models and report pass rates with intervals (docs/eval.md).
    #[command(after_help = "Examples:
  agentd eval suite.toml --local                   every run in this process, no daemon
  agentd eval suite.toml                           through the daemon (a fleet runs the runs side by side)
  agentd eval suite.toml --json > result.json      the result as one JSON document
  agentd eval suite.toml --baseline result.json    exit 1 when a pass rate fell below the earlier interval
  agentd eval suite.toml --html eval.html          a page with every failed run linked to its report
  agentd eval suite.toml --continue ID             continue an interrupted evaluation

Exit: 0 the evaluation finished (with --baseline: and no pass rate fell below the baseline's interval),
1 a pass rate fell below it, 2 invalid suite or arguments, 3 the daemon could not be reached, 130
interrupted (continue it with --continue ID).")]
    Eval {
        /// The suite file (TOML or JSON).
        suite: PathBuf,
        /// Run every run in this process, as `agentd run` does, instead of through the daemon.
        #[arg(long)]
        local: bool,
        /// Continue evaluation ID: runs it already finished are read, not run again.
        #[arg(long = "continue", value_name = "ID")]
        resume: Option<String>,
        /// Write the result as an HTML page (failed runs' reports beside it, in FILE's name + `-runs/`).
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// An earlier `--json` result: exit 1 when a model's pass rate fell below its interval there.
        #[arg(long, value_name = "FILE")]
        baseline: Option<PathBuf>,
        /// Runs at once (default: the suite's `concurrency`, else 4).
        #[arg(long, value_name = "N")]
        concurrency: Option<u32>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Replay a succeeded task's recorded actions without a model (docs/replay-and-verify.md), comparing the screen
    /// before each step.
    #[command(after_help = "Examples:
  agentd replay ID --wait                          run task ID's actions again; exit with the outcome
  agentd replay ID --param 'zoe@example.com=ada@example.com'   type ada@… where the recording typed zoe@…
  agentd replay ID --fallback anthropic:claude-sonnet-4-5      on divergence, the model takes over
  agentd replay ID --task other-computer.json      the task file to run (its computer, limits), not ID's

On divergence without --fallback the task waits for a human (`agentd approve ID` runs the recorded
actions anyway, `agentd reject ID` ends it). The record says `replay: {of, diverged_at?, handed_over?}`.")]
    Replay {
        /// The id of the succeeded task to replay.
        id: String,
        /// The task file to run instead of ID's own (its `replay` field's masks and thresholds are kept).
        #[arg(long, value_name = "FILE")]
        task: Option<PathBuf>,
        /// Type VALUE wherever a recorded `type` text equals or contains NAME (repeatable).
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// The model that takes over from a step whose screen diverged from the recording.
        #[arg(long, value_name = "PROVIDER[:MODEL]")]
        fallback: Option<String>,
        /// Follow the task's progress and exit with its outcome.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Show one task: state, outcome, steps, usage.
    #[command(after_help = "Examples:
  agentd status 0199a4c2-7b1e-7c3a-9f00-5d1e2a3b4c5d
  agentd status ID --json | jq .outcome")]
    Status {
        /// The task's id (as `submit` printed it).
        id: String,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// List tasks, newest first.
    #[command(after_help = "Examples:
  agentd list                                      the newest tasks
  agentd list --state waiting_for_human            tasks waiting for an approval
  agentd list --state failed --limit 5 --json")]
    List {
        /// Only tasks in this state (queued, running, waiting_for_human, awaiting_tool, succeeded, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
        /// At most this many tasks.
        #[arg(long)]
        limit: Option<u32>,
        /// Ask again every 2 s and show the table anew (redrawn in place on a terminal) until Ctrl-C.
        #[arg(long)]
        watch: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Cancel a queued or running task.
    #[command(after_help = "Examples:
  agentd cancel 0199a4c2-7b1e-7c3a-9f00-5d1e2a3b4c5d")]
    Cancel {
        /// The task's id.
        id: String,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Delete a finished task with its steps, events and artifacts (docs/operations.md).
    #[command(after_help = "Only a finished task (succeeded, failed or cancelled) can be deleted: a queued, running or
waiting task is refused (exit 2) and nothing changes; cancel it first.

Examples:
  agentd delete 0199a4c2-7b1e-7c3a-9f00-5d1e2a3b4c5d
  agentd delete ID --json")]
    Delete {
        /// The task's id.
        id: String,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Delete old finished tasks now, as the daemon's retention job does ([retention] finished_days).
    #[command(after_help = "Examples:
  agentd prune --dry-run                           what retention would delete now (ids on stdout)
  agentd prune                                     delete it
  agentd prune --older-than 7                      finished tasks older than a week
  agentd prune --older-than 0 --dry-run --json     every finished task, as JSON")]
    Prune {
        /// Only list what would be deleted (ids on stdout, a summary on stderr).
        #[arg(long)]
        dry_run: bool,
        /// Tasks that finished more than this many days ago (0: every finished task). Default: the daemon's
        /// [retention] finished_days.
        #[arg(long, value_name = "DAYS")]
        older_than: Option<u32>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Print a task's events (JSON lines with --json).
    #[command(after_help = "Examples:
  agentd events ID                                 what happened so far
  agentd events ID --follow                        and what happens next, until the task ends
  agentd events ID --follow --json | jq -c 'select(.type == \"step_finished\")'")]
    Events {
        /// The task's id.
        id: String,
        /// Keep following until the task finishes.
        #[arg(long)]
        follow: bool,
        /// Only events of these types (comma-separated or repeated: `--type step_finished,task_finished`).
        #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
        types: Vec<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Approve what a task waiting for a human asked for; it resumes.
    #[command(after_help = "Examples:
  agentd list --state waiting_for_human            which tasks wait
  agentd status ID                                 what the task asks for
  agentd approve ID
  agentd approve ID --action '{\"type\": \"click\", \"x\": 640, \"y\": 370}'   run this instead")]
    Approve {
        /// The task's id.
        id: String,
        /// Run this instead of the proposed computer actions: an action or an array of actions as JSON, in
        /// screen pixels (`waiting.proposed.actions` shows the proposed ones).
        #[arg(long, value_name = "JSON")]
        action: Option<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Reject what a task waiting for a human asked for. A turn an approval rule held goes on without its
    /// calls (each is told it was rejected, with the reason); a vendor's safety check or a script's question
    /// rejected ends the task `rejected`.
    #[command(after_help = "Examples:
  agentd reject ID --reason \"not on the production account\"")]
    Reject {
        /// The task's id.
        id: String,
        /// Why: recorded with the task and shown in its outcome.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Take a task's desktop over: it stops after its current step and waits, holding no worker (docs/humans.md).
    #[command(
        after_help = "A queued task waits before it starts; a running one finishes the step it is in, then waits in
waiting_for_human (`waiting.kind` is `takeover`) while a person uses the desktop. A waiting or finished task is
refused (exit 2).

Examples:
  agentd pause ID
  agentd resume ID --note \"I entered the 2FA code\""
    )]
    Pause {
        /// The task's id.
        id: String,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Record a demonstration: a task whose steps are all yours, done on its desktop through the console's
    /// live view; prints its console URL. Handing the desktop back (agentd resume ID) finishes it.
    #[command(after_help = "The computer is a JSON file naming it as a task file's `computer` does, or the name of a \
desktop of the daemon's pool. Finish with `agentd resume ID [--note SUMMARY]`; then `agentd compile ID` prints it as \
a script and `agentd replay ID` plays it again without a model.

Examples:
  agentd demonstrate --computer mock-login.json --instructions \"sign in as bob\"
  agentd demonstrate --computer lab-1")]
    Demonstrate {
        /// A JSON file holding the computer (`{\"provider\": \"mock\", \"scene\": \"login\"}`), or a pool desktop's name.
        #[arg(long, value_name = "FILE|DESKTOP")]
        computer: String,
        /// What the demonstration shows (its task's instructions).
        #[arg(long, value_name = "TEXT")]
        instructions: Option<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Hand a paused task's desktop back: it continues on a fresh screenshot, with the note for the model.
    #[command(after_help = "Only a task paused with `agentd pause` can be resumed (exit 2 otherwise).

Examples:
  agentd resume ID
  agentd resume ID --note \"logged in; the report page is open\"")]
    Resume {
        /// The task's id.
        id: String,
        /// What the person did, for the model (it sees it with the next screenshot).
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Answer a task's pending `remote` tool call (the task waits in awaiting_tool); it resumes.
    ///
    /// The API takes one result per pending call at once: a task waiting for several calls is answered
    /// through `POST /v1/tasks/{id}/tool-results`, and this command says which calls are pending.
    #[command(after_help = "Examples:
  agentd status ID                                 lists the pending calls and their ids
  agentd tool-result ID call_1 --output \"order 1234 shipped\"
  agentd tool-result ID call_1 --output \"no such order\" --error --details '{\"status\": 404}'")]
    ToolResult {
        /// The task's id.
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
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Send a finished task the user's next message: a new turn of it, run with its history (docs/humans.md).
    ///
    /// The task (succeeded, failed or cancelled) is queued again; its model sees the earlier turns and a fresh
    /// screenshot, then TEXT. Steps, events and screenshots keep their numbering. A task that has not finished
    /// is refused (exit 2) and nothing changes.
    #[command(after_help = "Examples:
  agentd send ID \"now export April too\"          queue a new turn; prints the id
  agentd send ID \"and May\" --wait                follow the new turn; exit with its outcome (0 succeeded, 1 not)
  agentd status ID --json                          `turns`: each turn's instructions, steps and outcome")]
    Send {
        /// The task's id.
        id: String,
        /// The message: what the user asks next.
        text: String,
        /// Follow the new turn's progress and exit with its outcome.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Answer the question a task's model asked with `ask_human` (the task waits in waiting_for_human); it
    /// resumes with the text as the tool's result.
    #[command(after_help = "Examples:
  agentd status ID                                 shows the question (waiting.question)
  agentd answer ID \"the Alice in accounting, alice@example.com\"")]
    Answer {
        /// The task's id.
        id: String,
        /// The answer the model reads.
        text: String,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Write a task's trajectory report: a self-contained HTML file, an animated GIF or WebP of its steps.
    #[command(after_help = "Examples:
  agentd export 01J… --html run.html          one file to open in a browser or attach to a ticket
  agentd export 01J… --gif run.gif             an animation of the run, one frame per step
  agentd export ID --local --html run.html     a task `agentd run` ran (no daemon)")]
    Export {
        id: String,
        /// The HTML report (one file: screenshots, actions, model text, tool calls, outcome).
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// An animated GIF, one frame per step.
        #[arg(long, value_name = "FILE")]
        gif: Option<PathBuf>,
        /// An animated lossless WebP, one frame per step.
        #[arg(long, value_name = "FILE")]
        webp: Option<PathBuf>,
        /// Print, instead of a report, a task file that continues the task's conversation in a new task
        /// (docs/humans.md):
        /// its turns as `conversation`, the next message as `instructions`.
        #[arg(long, conflicts_with_all = ["html", "gif", "webp"])]
        conversation: bool,
        /// With --conversation: the new task's instructions (the user's next message).
        #[arg(long, value_name = "TEXT", requires = "conversation")]
        message: Option<String>,
        /// Read what `agentd run` wrote (data_dir/runs/ID.json, the configured artifact store), not the daemon.
        #[arg(long)]
        local: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Show a task's steps as a table (time, actions, result or error, tokens, cost), then its outcome.
    #[command(after_help = "Examples:
  agentd show 01J…             the step table of a task the daemon ran
  agentd show ID --local       a task `agentd run` ran")]
    Show {
        id: String,
        /// Read what `agentd run` wrote (data_dir/runs/ID.json), not the daemon.
        #[arg(long)]
        local: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Print a finished task's trajectory as a script of the scripted model (one turn per step), typed texts
    /// named as parameters written {{NAME}}: for review, version control, and runs without a model.
    #[command(after_help = "Examples:
  agentd compile 01J… > signup.json                           the steps as a script
  agentd compile 01J… --param email=zoe@example.com           zoe@example.com typed → {{email}}
  agentd compile ID --local                                   a task `agentd run` ran")]
    Compile {
        id: String,
        /// Name a typed text: every `type` action's TEXT becomes {{NAME}} (repeatable).
        #[arg(long = "param", value_name = "NAME=TEXT")]
        params: Vec<String>,
        /// Read what `agentd run` wrote (data_dir/runs/ID.json), not the daemon.
        #[arg(long)]
        local: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Open the web console of a daemon that listens only on its Unix socket: serves it on a loopback port
    /// and prints a one-time URL (with --url, prints the daemon's own console URL).
    #[command(after_help = "Examples:
  agentd console               prints http://127.0.0.1:PORT/console/open?secret=… (one visit)
  agentd console --open        and opens it in the browser")]
    Console {
        /// The loopback port to listen on (default: one the system picks).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Also open the URL in a browser (xdg-open).
        #[arg(long)]
        open: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Serve the Model Context Protocol on standard input and output: the task tools (run_task, submit_task,
    /// get_task, list_tasks, answer, approve, reject, cancel, send_message) for an MCP client that starts agentd
    /// (Claude Code, Claude Desktop, an editor).
    ///
    /// The tasks go to the daemon (reached like the other client commands), or run in this process with
    /// --local, as `agentd run` runs them. Standard output carries the protocol only; logs go to stderr.
    #[command(after_help = "Examples:
  agentd mcp                                       the daemon on the configured socket
  agentd mcp --url https://agentd.internal:7070    a daemon over TCP (token from $AGENTD_TOKEN)
  agentd mcp --local                               tasks run here, no daemon
  agentd mcp --computer lab-1                      the computer tools on the daemon's pool desktop lab-1
  agentd mcp --computer desktop.json --local       the same on a computer this process opens, no daemon
  claude mcp add agentd -- agentd mcp              add it to Claude Code

See docs/mcp.md for the tools, their results and the clients' configuration.")]
    Mcp {
        /// Run the tasks in this process, as `agentd run` does, instead of sending them to the daemon
        /// (answer, approve, reject and send_message are then refused).
        #[arg(long, conflicts_with_all = ["socket", "url"])]
        local: bool,
        /// Serve the computer tools (screenshot, click, double_click, type, key, scroll, drag, move, wait) on
        /// one computer instead of the task tools: a file holding a task's `computer` object (JSON), or the
        /// name of a desktop of the pool. The session is a task of the daemon (leased like one, listed, shown
        /// in the console), or with --local runs in this process (data_dir/runs/ID.json: `agentd show ID
        /// --local`, `export`, `compile`).
        #[arg(long, value_name = "FILE|DESKTOP")]
        computer: Option<String>,
        /// With --computer: what the session is for, kept as the recorded task's instructions.
        #[arg(long, value_name = "TEXT", requires = "computer")]
        instructions: Option<String>,
        /// With --computer: a secret the client types by placeholder (`<secret:NAME>` in `type`), read from
        /// the environment variable VAR (of the daemon, or of this process with --local). Repeatable.
        #[arg(long = "secret", value_name = "NAME=VAR", requires = "computer")]
        secrets: Vec<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print the JSON Schema of a task file or of the configuration, derived from the types agentd reads them
    /// into (for editors and validators).
    #[command(after_help = "Examples:
  agentd schema task > task.schema.json            point an editor at it to check task files as you write them
  agentd schema config > agentd.schema.json        the same for agentd.toml (Taplo: #:schema ./agentd.schema.json)

What a schema cannot say (files that exist, a tool's own JSON Schema) agentd checks when it reads the file.
See docs/cli.md.")]
    Schema {
        /// Which file's schema.
        which: SchemaKind,
    },
    /// Print the shell completion script for SHELL on stdout.
    #[command(after_help = "Examples:
  agentd completions bash > ~/.local/share/bash-completion/completions/agentd
  agentd completions zsh > ~/.zfunc/_agentd        (with fpath+=~/.zfunc before compinit)
  agentd completions fish > ~/.config/fish/completions/agentd.fish
  source <(agentd completions bash)                this shell only")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// What `agentd schema` describes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaKind {
    /// A task file (docs/task-file.md).
    Task,
    /// The configuration file, agentd.toml (docs/configuration.md).
    Config,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the configuration and build every backend it names.
    #[command(after_help = "Examples:
  agentd config check                              the configuration serve would load
  agentd config check --config ./agentd.toml --json
  sudo -u agentd agentd config check               as the service's user (what the unit runs first)")]
    Check {
        /// The Unix socket serve would listen on (default: $AGENTD_SOCKET, else the configured api.socket).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
}

impl Command {
    /// The command's name as typed (`config check` for the nested one).
    fn name(&self) -> &'static str {
        match self {
            Command::Run { .. } => "run",
            Command::Serve { .. } => "serve",
            Command::Submit { .. } => "submit",
            Command::Replay { .. } => "replay",
            Command::Eval { .. } => "eval",
            Command::Status { .. } => "status",
            Command::List { .. } => "list",
            Command::Cancel { .. } => "cancel",
            Command::Delete { .. } => "delete",
            Command::Prune { .. } => "prune",
            Command::Events { .. } => "events",
            Command::Approve { .. } => "approve",
            Command::Reject { .. } => "reject",
            Command::Pause { .. } => "pause",
            Command::Resume { .. } => "resume",
            Command::Demonstrate { .. } => "demonstrate",
            Command::ToolResult { .. } => "tool-result",
            Command::Send { .. } => "send",
            Command::Answer { .. } => "answer",
            Command::Export { .. } => "export",
            Command::Show { .. } => "show",
            Command::Compile { .. } => "compile",
            Command::Console { .. } => "console",
            Command::Mcp { .. } => "mcp",
            Command::Config { command: ConfigCommand::Check { .. } } => "config check",
            Command::Completions { .. } => "completions",
            Command::Schema { .. } => "schema",
        }
    }

    /// Where the command's own `--socket` and `--url` live: both for a client command, the socket alone for
    /// the ones that listen on it (or check it), neither for the others.
    fn endpoint_options(&mut self) -> (Option<&mut Option<PathBuf>>, Option<&mut Option<String>>) {
        match self {
            Command::Submit { daemon, .. }
            | Command::Replay { daemon, .. }
            | Command::Eval { daemon, .. }
            | Command::Status { daemon, .. }
            | Command::List { daemon, .. }
            | Command::Cancel { daemon, .. }
            | Command::Delete { daemon, .. }
            | Command::Prune { daemon, .. }
            | Command::Events { daemon, .. }
            | Command::Approve { daemon, .. }
            | Command::Reject { daemon, .. }
            | Command::Pause { daemon, .. }
            | Command::Resume { daemon, .. }
            | Command::Demonstrate { daemon, .. }
            | Command::ToolResult { daemon, .. }
            | Command::Send { daemon, .. }
            | Command::Answer { daemon, .. }
            | Command::Export { daemon, .. }
            | Command::Show { daemon, .. }
            | Command::Compile { daemon, .. }
            | Command::Console { daemon, .. }
            | Command::Mcp { daemon, .. } => (Some(&mut daemon.socket), Some(&mut daemon.url)),
            Command::Serve { socket } | Command::Config { command: ConfigCommand::Check { socket } } => {
                (Some(socket), None)
            }
            Command::Run { .. } | Command::Completions { .. } | Command::Schema { .. } => (None, None),
        }
    }
}

/// What the parser accepts beyond [`Cli`], never shown in help, completions or man pages: `--socket` and
/// `--url` before the command (`agentd --socket PATH status ID`, as earlier versions took them), and
/// `agentd man DIR`, which writes the man pages (what packaging runs).
fn command_line() -> clap::Command {
    use clap::{Arg, value_parser};
    Cli::command()
        .arg(Arg::new(SOCKET_BEFORE).long("socket").value_name("PATH").value_parser(value_parser!(PathBuf)).hide(true))
        .arg(Arg::new(URL_BEFORE).long("url").value_name("URL").hide(true))
        .subcommand(
            clap::Command::new("man")
                .about("Write the man pages (agentd.1, one agentd-COMMAND.1 per command) into DIR")
                .hide(true)
                .arg(Arg::new("dir").value_name("DIR").required(true).value_parser(value_parser!(PathBuf))),
        )
}

const SOCKET_BEFORE: &str = "socket_before_command";
const URL_BEFORE: &str = "url_before_command";

/// What the command line asks for.
enum Invocation {
    Command(Cli),
    /// `agentd man DIR`.
    Man(PathBuf),
}

/// Parses the arguments; `Err` is clap's own error (help and version included) to print.
fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Result<Invocation, CliError>, clap::Error> {
    use clap::FromArgMatches;
    let matches = command_line().try_get_matches_from(args)?;
    if let Some(("man", man)) = matches.subcommand() {
        let dir = man.get_one::<PathBuf>("dir").cloned().unwrap_or_default();
        return Ok(Ok(Invocation::Man(dir)));
    }
    let mut cli = Cli::from_arg_matches(&matches)?;
    let name = cli.command.name();
    let (socket_slot, url_slot) = cli.command.endpoint_options();
    let placed = place(name, "--socket", matches.get_one::<PathBuf>(SOCKET_BEFORE).cloned(), socket_slot)
        .and_then(|()| place(name, "--url", matches.get_one::<String>(URL_BEFORE).cloned(), url_slot));
    Ok(placed.map(|()| Invocation::Command(cli)))
}

/// Moves a `--socket`/`--url` given before the command onto the command; an error (exit 2) for a command
/// that does not take it, or when it is given both before and after the command.
fn place<T>(command: &str, option: &str, before: Option<T>, slot: Option<&mut Option<T>>) -> Result<(), CliError> {
    let Some(value) = before else {
        return Ok(());
    };
    match slot {
        None => Err(CliError::invalid(anyhow::anyhow!(
            "{option} does not apply to `agentd {command}` (see `agentd {command} --help`)"
        ))),
        Some(Some(_)) => {
            Err(CliError::invalid(anyhow::anyhow!("{option} is given both before and after `{command}`: give it once")))
        }
        Some(slot) => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// Parses arguments, runs the command, prints errors, and returns the process exit code.
pub fn main() -> std::process::ExitCode {
    let cli = match parse(std::env::args_os()) {
        Ok(Ok(Invocation::Command(cli))) => cli,
        Ok(Ok(Invocation::Man(dir))) => return exit_code(docs::man_pages(&dir)),
        Ok(Err(e)) => return exit_code(Err(e)),
        Err(e) => {
            let _ = e.print();
            let code = if e.use_stderr() { Exit::InvalidInput } else { Exit::Success };
            return std::process::ExitCode::from(code.code());
        }
    };
    // Completions need no configuration, runtime or logs.
    if let Command::Completions { shell } = &cli.command {
        return exit_code(docs::completions(*shell));
    }
    if let Command::Schema { which } = &cli.command {
        return exit_code(docs::schema(*which));
    }
    // Logs and traces follow the config's `[log]` and `[otel]` when it loads (the command reports it if not).
    let config = ConfigSource::locate(cli.config.as_deref()).load().ok();
    let traces = matches!(cli.command, Command::Serve { .. } | Command::Run { .. });
    let telemetry = telemetry::init(config.as_ref(), traces);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("agentd: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(Exit::Unreachable.code());
        }
    };
    let result = runtime.block_on(dispatch(cli));
    drop(runtime);
    telemetry.shutdown();
    exit_code(result)
}

/// The process exit code of a command's result, its error chain printed on stderr.
fn exit_code(result: CliResult) -> std::process::ExitCode {
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

async fn dispatch(cli: Cli) -> CliResult {
    let source = ConfigSource::locate(cli.config.as_deref());
    let json = cli.json;
    let client = |daemon: &DaemonArgs| -> Result<client::Client, CliError> {
        let config = source.load()?;
        Ok(client::Client::new(client::Endpoint::locate(daemon.socket.clone(), daemon.url.clone(), &config)?))
    };
    match &cli.command {
        Command::Run { task } => {
            let config = source.load()?;
            run::run(&config, task, json).await
        }
        Command::Serve { socket } => {
            let mut config = source.load()?;
            // `--socket` names the socket the daemon listens on (as it names the one clients reach).
            if let Some(socket) = socket {
                config.api.socket = Some(socket.clone());
            }
            crate::daemon::serve(config).await.map_err(|e| match e {
                crate::daemon::DaemonError::Invalid(m) => CliError::invalid(anyhow::anyhow!(m)),
                crate::daemon::DaemonError::Unreachable(m) => CliError::unreachable(anyhow::anyhow!(m)),
            })?;
            Ok(Exit::Success)
        }
        Command::Submit { task, wait, daemon } => remote::submit(&client(daemon)?, task, *wait, json).await,
        Command::Replay { id, task, params, fallback, wait, daemon } => {
            let args =
                remote::ReplayArgs { id, task: task.as_deref(), params, fallback: fallback.as_deref(), wait: *wait };
            remote::replay(&client(daemon)?, args, json).await
        }
        Command::Eval { suite, local, resume, html, baseline, concurrency, daemon } => {
            let config = source.load()?;
            let args = eval::EvalArgs {
                suite,
                local: *local,
                resume: resume.as_deref(),
                html: html.as_deref(),
                baseline: baseline.as_deref(),
                concurrency: *concurrency,
            };
            let daemon = if *local { None } else { Some(client(daemon)?) };
            eval::eval(&config, daemon, args, json).await
        }
        Command::Status { id, daemon } => remote::status(&client(daemon)?, id, json).await,
        Command::List { state, limit, watch, daemon } => {
            remote::list(&client(daemon)?, state.as_deref(), *limit, *watch, json).await
        }
        Command::Cancel { id, daemon } => remote::cancel(&client(daemon)?, id, json).await,
        Command::Delete { id, daemon } => retention::delete(&client(daemon)?, id, json).await,
        Command::Prune { dry_run, older_than, daemon } => {
            retention::prune(&client(daemon)?, *dry_run, *older_than, json).await
        }
        Command::Events { id, follow, types, daemon } => {
            remote::events(&client(daemon)?, id, *follow, types, json).await
        }
        Command::Approve { id, action: None, daemon } => remote::decide(&client(daemon)?, id, true, None, json).await,
        Command::Approve { id, action: Some(action), daemon } => {
            takeover::approve_edited(&client(daemon)?, id, action, json).await
        }
        Command::Reject { id, reason, daemon } => {
            remote::decide(&client(daemon)?, id, false, reason.clone(), json).await
        }
        Command::Pause { id, daemon } => takeover::pause(&client(daemon)?, id, json).await,
        Command::Resume { id, note, daemon } => takeover::resume(&client(daemon)?, id, note.as_deref(), json).await,
        Command::Demonstrate { computer, instructions, daemon } => {
            takeover::demonstrate(&client(daemon)?, computer, instructions.as_deref(), json).await
        }
        Command::ToolResult { id, call_id, output, error, details, daemon } => {
            let answer = remote::ToolResultArgs { call_id, output, error: *error, details: details.as_deref() };
            remote::tool_result(&client(daemon)?, id, &answer, json).await
        }
        Command::Answer { id, text, daemon } => remote::answer(&client(daemon)?, id, text, json).await,
        Command::Send { id, text, wait, daemon } => turns::send(&client(daemon)?, id, text, *wait, json).await,
        Command::Export { id, conversation: true, message, local, daemon, .. } => {
            let config = source.load()?;
            let message = message.as_deref();
            if *local {
                turns::export_conversation(report::Source::Local(&config), id, message).await
            } else {
                turns::export_conversation(report::Source::Daemon(&client(daemon)?), id, message).await
            }
        }
        Command::Export { id, html, gif, webp, local, daemon, .. } => {
            let config = source.load()?;
            let files = report::ExportArgs { html: html.as_deref(), gif: gif.as_deref(), webp: webp.as_deref() };
            if *local {
                report::export(report::Source::Local(&config), id, &files, json).await
            } else {
                report::export(report::Source::Daemon(&client(daemon)?), id, &files, json).await
            }
        }
        Command::Show { id, local, daemon } => {
            let config = source.load()?;
            if *local {
                report::show(report::Source::Local(&config), id, json).await
            } else {
                let shown = report::show(report::Source::Daemon(&client(daemon)?), id, json).await;
                report::hint_local(shown, &config, id)
            }
        }
        Command::Compile { id, params, local, daemon } => {
            if *local {
                compile::run(report::Source::Local(&source.load()?), id, params).await
            } else {
                compile::run(report::Source::Daemon(&client(daemon)?), id, params).await
            }
        }
        Command::Console { port, open, daemon } => {
            let endpoint = client::Endpoint::locate(daemon.socket.clone(), daemon.url.clone(), &source.load()?)?;
            console::console(endpoint, *port, *open, json).await
        }
        Command::Mcp { local, computer, instructions, secrets, daemon } => {
            let config = source.load()?;
            let client = if *local { None } else { Some(client(daemon)?) };
            if let Some(computer) = computer {
                let session = mcp::Session { computer, instructions: instructions.as_deref(), secrets };
                return mcp::serve_computer(config, client, session).await;
            }
            mcp::serve(config, client).await
        }
        Command::Config { command: ConfigCommand::Check { socket } } => {
            config_check(&source, socket.as_deref(), json).await
        }
        Command::Completions { shell } => docs::completions(*shell),
        Command::Schema { which } => docs::schema(*which),
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
