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
    clap_mangen::generate_to(Cli::command(), dir)
        .map_err(|e| CliError::invalid(anyhow::anyhow!("cannot write the man pages into {}: {e}", dir.display())))?;
    Ok(Exit::Success)
}
