//! Documentation generated from the clap definitions of [`super::Cli`], so it never drifts from what the binary
//! accepts: `agentd completions SHELL` (bash, zsh, fish, elvish, powershell) and the hidden `agentd man DIR`
//! that packaging runs (`super::command_line` adds it; one roff page per command: `agentd.1`, `agentd-submit.1`, `agentd-config-check.1`, …).

use std::path::Path;

use clap::CommandFactory;

use super::{Cli, CliError, CliResult, Exit};

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> CliResult {
    let mut command = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut command, "agentd", &mut out);
    Ok(Exit::Success)
}

/// Writes `agentd.1` and one page per (nested) command that is not hidden into `dir`, creating it.
pub fn man_pages(dir: &Path) -> CliResult {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::invalid(anyhow::anyhow!("cannot create {}: {e}", dir.display())))?;
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    write_pages(command, dir)
        .map_err(|e| CliError::invalid(anyhow::anyhow!("cannot write the man pages into {}: {e}", dir.display())))?;
    Ok(Exit::Success)
}

fn write_pages(command: clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        write_pages(sub, dir)?;
    }
    let name = command.get_display_name().unwrap_or_else(|| command.get_name()).to_string();
    std::fs::write(dir.join(format!("{name}.1")), page(command)?)
}

/// One man page: clap_mangen's title, name, synopsis, description, options and subcommands; then the
/// command's examples kept as written (clap_mangen would fill them into one paragraph), the environment and
/// the exit status every command shares.
fn page(command: clap::Command) -> std::io::Result<Vec<u8>> {
    let examples = command.get_after_help().map(|h| h.to_string());
    let has_subcommands = command.get_subcommands().any(|s| !s.is_hide_set());
    let has_arguments = command.get_arguments().any(|a| !a.is_hide_set());
    let man = clap_mangen::Man::new(command);
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if has_arguments {
        man.render_options_section(&mut out)?;
    }
    if has_subcommands {
        man.render_subcommands_section(&mut out)?;
    }
    if let Some(examples) = examples {
        let lines: Vec<&str> = examples.lines().filter(|l| l.trim_end() != "Examples:").collect();
        out.extend_from_slice(b".SH EXAMPLES\n.nf\n");
        for line in lines {
            out.extend_from_slice(roff_line(line).as_bytes());
            out.push(b'\n');
        }
        out.extend_from_slice(b".fi\n");
    }
    out.extend_from_slice(ENVIRONMENT_AND_EXIT_STATUS.as_bytes());
    Ok(out)
}

/// A line of text for roff in no-fill mode: backslashes and hyphens escaped, a leading `.` or `'` guarded.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) { format!("\\&{escaped}") } else { escaped }
}

/// The sections every page ends with.
const ENVIRONMENT_AND_EXIT_STATUS: &str = r#".SH ENVIRONMENT
.TP
\fBAGENTD_CONFIG\fR
The configuration file, when \fB\-\-config\fR is not given (else /etc/agentd/agentd.toml when it exists, else the built\-in defaults).
.TP
\fBAGENTD_SOCKET\fR, \fBAGENTD_URL\fR
Where client commands reach the daemon: its Unix socket, or http(s)://HOST:PORT.
.TP
\fBAGENTD_TOKEN\fR
The bearer token sent to a daemon reached over TCP (else the file the config's api.token_file names).
.TP
\fBAGENTD_CA_FILE\fR
A PEM file of the CA to trust for an https:// daemon.
.TP
\fBAGENTD_LOG\fR
Which log events are written to stderr (a tracing filter, e.g. info or agentd=debug).
.TP
\fBAGENTD_\fISECTION\fB_\fIKEY\fR
Overrides a configuration key (AGENTD_WORKER_CONCURRENCY=4 sets [worker] concurrency). A variable that names no setting is ignored with a warning.
.SH "EXIT STATUS"
.TP
\fB0\fR
Success (for a task: it succeeded).
.TP
\fB1\fR
The task ended without success (failed, cancelled, timed out, over budget, out of steps).
.TP
\fB2\fR
Invalid input: a task file, the configuration or the arguments; the message names the file, field and line.
.TP
\fB3\fR
A backend could not be reached, or refused this client.
"#;
