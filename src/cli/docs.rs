//! Documentation generated from the clap definitions of [`super::Cli`], so it never drifts from what the binary
//! accepts: `agentd completions SHELL` (bash, zsh, fish, elvish, powershell) and the hidden `agentd man DIR`
//! that packaging runs (`super::command_line` adds it; one roff page per command: `agentd.1`, `agentd-submit.1`, `agentd-config-check.1`, …).

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use super::{Cli, CliError, CliResult, Exit, SchemaKind};

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> CliResult {
    let mut command = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut command, "agentd", &mut out);
    Ok(Exit::Success)
}

/// Prints the JSON Schema of `which` on stdout (`agentd schema`).
pub fn schema(which: SchemaKind) -> CliResult {
    let schema = match which {
        SchemaKind::Task => crate::task::schema::task_schema(),
        SchemaKind::Config => crate::config::schema::config_schema(),
    };
    let text = serde_json::to_string_pretty(&schema)
        .map_err(|e| CliError::invalid(anyhow::anyhow!("cannot write the schema: {e}")))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|e| CliError::invalid(anyhow::anyhow!("cannot write the schema: {e}")))?;
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

/// docs/cli.md against the clap definitions: the page documents every command and every long option the binary
/// takes, and names none it does not.
#[cfg(test)]
mod reference {
    use std::collections::{BTreeMap, BTreeSet};

    /// A command as typed after `agentd` (`config check`), with its long options, whether it is hidden and
    /// whether it has subcommands.
    #[derive(Debug, Default)]
    struct Entry {
        options: BTreeSet<String>,
        visible_options: BTreeSet<String>,
        hidden: bool,
        has_subcommands: bool,
    }

    /// Every command of `agentd`'s command line (hidden ones included: a page may mention them) and the
    /// options every command takes (the global ones and clap's own `--help` and `--version`).
    fn commands() -> (BTreeMap<String, Entry>, BTreeSet<String>) {
        let root = super::super::command_line();
        let mut global: BTreeSet<String> = ["help", "version"].into_iter().map(String::from).collect();
        for arg in root.get_arguments() {
            if let (Some(long), true) = (arg.get_long(), arg.is_global_set()) {
                global.insert(long.to_string());
            }
        }
        let mut commands = BTreeMap::new();
        walk(&root, "", false, &mut commands);
        (commands, global)
    }

    fn walk(command: &clap::Command, prefix: &str, hidden: bool, out: &mut BTreeMap<String, Entry>) {
        for sub in command.get_subcommands() {
            let name =
                if prefix.is_empty() { sub.get_name().to_string() } else { format!("{prefix} {}", sub.get_name()) };
            let hidden = hidden || sub.is_hide_set();
            let mut entry =
                Entry { hidden, has_subcommands: sub.get_subcommands().next().is_some(), ..Entry::default() };
            for arg in sub.get_arguments() {
                if let Some(long) = arg.get_long() {
                    entry.options.insert(long.to_string());
                    if !arg.is_hide_set() && !arg.is_global_set() {
                        entry.visible_options.insert(long.to_string());
                    }
                }
            }
            walk(sub, &name, hidden, out);
            out.insert(name, entry);
        }
    }

    fn page() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The sections of the page whose heading is a command (`` ### `agentd list` ``): command → its text.
    fn command_sections(page: &str) -> Vec<(String, String)> {
        let mut sections: Vec<(String, String)> = Vec::new();
        let mut current: Option<(String, String)> = None;
        for line in page.lines() {
            if line.starts_with('#') {
                sections.extend(current.take());
                let command = line.strip_prefix("### `agentd ").and_then(|rest| rest.strip_suffix('`'));
                current = command.map(|command| (command.to_string(), String::new()));
            } else if let Some((_, text)) = current.as_mut() {
                text.push_str(line);
                text.push('\n');
            }
        }
        sections.extend(current);
        sections
    }

    /// The long options a text names (`--name`, where `--` follows a space, a backtick, `[` or the line's
    /// start), without their `--`.
    fn options_named(text: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (i, _) in text.match_indices("--") {
            let before = text[..i].chars().next_back();
            if !matches!(before, None | Some(' ' | '`' | '[' | '(' | '\n')) {
                continue;
            }
            let name: String = text[i + 2..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                found.push(name);
            }
        }
        found
    }

    /// The code of the page: inline code spans and the lines of fenced blocks.
    fn code_of(page: &str) -> Vec<String> {
        let mut code = Vec::new();
        let mut fenced = false;
        for line in page.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            } else if fenced {
                code.push(line.to_string());
            } else {
                code.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
            }
        }
        code
    }

    #[test]
    fn every_command_and_long_option_is_documented() {
        let (commands, _) = commands();
        let sections: BTreeMap<String, String> = command_sections(&page()).into_iter().collect();
        let mut missing = Vec::new();
        for (name, entry) in commands.iter().filter(|(_, e)| !e.hidden && !e.has_subcommands) {
            let Some(text) = sections.get(name) else {
                missing.push(format!("no section \"### `agentd {name}`\""));
                continue;
            };
            let named: BTreeSet<String> = options_named(text).into_iter().collect();
            for option in entry.visible_options.difference(&named) {
                missing.push(format!("`agentd {name}`: --{option} is not in its section"));
            }
        }
        assert!(missing.is_empty(), "docs/cli.md does not document:\n{}", missing.join("\n"));
    }

    #[test]
    fn the_page_names_no_command_or_option_that_does_not_exist() {
        let (commands, global) = commands();
        let page = page();
        let mut wrong = Vec::new();
        for (name, text) in command_sections(&page) {
            let Some(entry) = commands.get(&name) else {
                wrong.push(format!("a section for `agentd {name}`, which is no command"));
                continue;
            };
            for option in options_named(&text) {
                if !entry.options.contains(&option) && !global.contains(&option) {
                    wrong.push(format!("the section of `agentd {name}` names --{option}"));
                }
            }
        }
        // Every `agentd COMMAND …` in the page's code: the command exists, and so does every option given to it
        // on that line (up to a pipe, a redirection or a comment).
        for line in code_of(&page) {
            let tokens: Vec<&str> = line.split_whitespace().collect();
            for (i, token) in tokens.iter().enumerate() {
                if *token != "agentd" && !token.ends_with("(agentd") {
                    continue;
                }
                let mut name = String::new();
                let mut rest = i + 1;
                while let Some(word) =
                    tokens.get(rest).filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                {
                    let candidate = if name.is_empty() { word.to_string() } else { format!("{name} {word}") };
                    let known = commands.contains_key(&candidate) || (name.is_empty() && *word == "help");
                    if !known {
                        break;
                    }
                    name = candidate;
                    rest += 1;
                    if !commands.get(&name).is_some_and(|e| e.has_subcommands) {
                        break;
                    }
                }
                let next = tokens.get(rest).copied().unwrap_or("");
                if name.is_empty() {
                    if next.starts_with(|c: char| c.is_ascii_lowercase()) && next != "agentd" {
                        wrong.push(format!("`agentd {next}` in `{line}`: no such command"));
                    }
                    continue;
                }
                if commands.get(&name).is_some_and(|e| e.has_subcommands) {
                    wrong.push(format!("`agentd {name}` in `{line}`: which of its commands?"));
                    continue;
                }
                let given =
                    tokens[rest..].iter().take_while(|t| !matches!(**t, "|" | "||" | "&&" | ";" | ">" | "<" | "#"));
                for option in given.flat_map(|t| options_named(t)) {
                    let accepted = commands.get(&name).is_some_and(|e| e.options.contains(&option));
                    if !accepted && !global.contains(&option) && name != "help" {
                        wrong.push(format!("`agentd {name} --{option}` in `{line}`: no such option"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "docs/cli.md names what agentd does not have:\n{}", wrong.join("\n"));
    }
}
