//! The command line's documentation as people meet it: the bash completion script loads in bash and
//! completes commands and options; the man pages render with `man -l`; `--help` shows examples; `--socket`
//! and `--url` are offered and accepted only by the commands that use them. (The .deb itself is built,
//! installed and checked by `scripts/check-deb`, which needs root.)

use std::path::Path;
use std::process::Command;

use crate::support::Agentd;

/// What bash's programmable completion offers for `words` (the last one being completed), using the script
/// `agentd completions bash` printed.
fn bash_complete(script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let line = words.join(" ");
    let program = format!(
        "source '{script}' || exit 9\n\
         COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT={point}\n\
         _agentd agentd '{current}' '{previous}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script.display(),
        words = quoted.join(" "),
        cword = words.len() - 1,
        point = line.len(),
        current = words[words.len() - 1],
        previous = words[words.len() - 2],
    );
    let out = Command::new("bash").args(["--norc", "--noprofile", "-c", &program]).output().expect("bash");
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
}

#[test]
fn bash_completion_loads_and_completes_commands_and_their_options() {
    let agentd = Agentd::new();
    let generated = agentd.run(&["completions", "bash"]);
    assert_eq!(generated.code, 0, "{}", generated.stderr);
    let script = agentd.dir.path().join("agentd.bash");
    std::fs::write(&script, &generated.stdout).expect("write script");

    assert_eq!(bash_complete(&script, &["agentd", "su"]), ["submit"]);
    let commands = bash_complete(&script, &["agentd", ""]);
    for command in ["run", "serve", "submit", "status", "list", "cancel", "events", "config", "completions"] {
        assert!(commands.iter().any(|c| c == command), "{command} not offered: {commands:?}");
    }
    assert!(!commands.iter().any(|c| c == "man"), "the hidden `man` is offered: {commands:?}");
    assert_eq!(bash_complete(&script, &["agentd", "config", "ch"]), ["check"]);
    assert_eq!(bash_complete(&script, &["agentd", "submit", "--w"]), ["--wait"]);
    // Options only where they apply.
    assert_eq!(bash_complete(&script, &["agentd", "status", "--so"]), ["--socket"]);
    assert!(bash_complete(&script, &["agentd", "run", "--so"]).is_empty());
    assert!(bash_complete(&script, &["agentd", "run", "--"]).iter().all(|o| o != "--url" && o != "--socket"));
    let shells = bash_complete(&script, &["agentd", "completions", ""]);
    let shells: Vec<&String> = shells.iter().filter(|s| !s.starts_with('-')).collect();
    assert_eq!(shells, ["bash", "elvish", "fish", "powershell", "zsh"]);
}

#[test]
fn completions_for_every_shell_and_bad_shells_refused() {
    let agentd = Agentd::new();
    for (shell, marker) in [
        ("bash", "complete -F _agentd"),
        ("zsh", "#compdef agentd"),
        ("fish", "complete -c agentd"),
        ("elvish", "edit:completion:arg-completer[agentd]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let run = agentd.run(&["completions", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(run.stdout.contains(marker), "{shell}: no {marker:?} in the script");
        assert!(run.stdout.contains("tool-result"), "{shell}: the commands are missing");
    }
    let bad = agentd.run(&["completions", "tcsh"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("tcsh") && bad.stderr.contains("bash"), "{}", bad.stderr);
}

fn man_available() -> bool {
    let ok = Command::new("man").arg("--version").output().is_ok_and(|o| o.status.success())
        && Command::new("col").arg("-V").output().is_ok_and(|o| o.status.success());
    if !ok {
        agentd_testenv::skip("man or col is not installed (scripts/setup/10-cli.sh installs them)");
    }
    ok
}

/// `man -l PAGE` as text, with groff's warnings on; panics on a warning.
fn render(page: &Path) -> String {
    let out = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(page)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env_remove("MAN_KEEP_FORMATTING")
        .output()
        .expect("man");
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && warnings.trim().is_empty(), "man -l {}: {warnings}", page.display());
    // Bold and underline come as overstrikes off a terminal: col -b leaves the text.
    let mut col = Command::new("col")
        .arg("-b")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("col");
    std::io::Write::write_all(&mut col.stdin.take().expect("stdin"), &out.stdout).expect("write to col");
    String::from_utf8_lossy(&col.wait_with_output().expect("col").stdout).into_owned()
}

#[test]
fn man_pages_render_one_per_command() {
    if !man_available() {
        return;
    }
    let agentd = Agentd::new();
    let dir = agentd.dir.path().join("man");
    let made = agentd.run(&["man", dir.to_str().expect("path")]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .expect("man dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for page in ["agentd.1", "agentd-run.1", "agentd-serve.1", "agentd-submit.1", "agentd-config-check.1"] {
        assert!(pages.iter().any(|p| p == page), "{page} missing: {pages:?}");
    }
    assert!(!pages.iter().any(|p| p == "agentd-man.1" || p.contains("help")), "hidden pages made: {pages:?}");

    let top = render(&dir.join("agentd.1"));
    assert!(top.contains("agentd - A daemon that lets a vision model operate a computer"), "{top}");
    assert!(top.contains("agentd-submit(1)"), "no see-also to the command pages:\n{top}");
    for page in &pages {
        let text = render(&dir.join(page));
        assert!(text.contains("NAME") && text.contains("SYNOPSIS"), "{page}:\n{text}");
    }
    let submit = render(&dir.join("agentd-submit.1"));
    for expected in ["agentd-submit - Send a task to the daemon", "--wait", "--socket", "--url", "EXAMPLES"] {
        assert!(submit.contains(expected), "agentd-submit.1 lacks {expected:?}:\n{submit}");
    }
    // Every page says what the environment and the exit status mean; examples keep their lines.
    for page in &pages {
        let text = render(&dir.join(page));
        assert!(text.contains("ENVIRONMENT") && text.contains("AGENTD_TOKEN"), "{page} has no ENVIRONMENT:\n{text}");
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("EXIT STATUS") && words.contains("2 Invalid input"),
            "{page} has no EXIT STATUS:\n{text}"
        );
    }
    let approve = render(&dir.join("agentd-approve.1"));
    assert!(
        approve.lines().any(|l| l.trim() == "agentd approve ID"),
        "the examples were filled into one paragraph:\n{approve}"
    );
    let run = render(&dir.join("agentd-run.1"));
    assert!(!run.contains("--socket") && !run.contains("--url"), "agentd-run.1 offers --socket or --url:\n{run}");
}

#[test]
fn help_shows_examples_and_only_the_options_that_apply() {
    let agentd = Agentd::new();
    let commands: &[&[&str]] = &[
        &["run"],
        &["serve"],
        &["submit"],
        &["status"],
        &["list"],
        &["cancel"],
        &["events"],
        &["approve"],
        &["reject"],
        &["tool-result"],
        &["config", "check"],
        &["completions"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let help = agentd.run(&args);
        assert_eq!(help.code, 0, "{command:?}: {}", help.stderr);
        let example = format!("  agentd {}", command.join(" "));
        assert!(help.stdout.contains("Examples:") && help.stdout.contains(&example), "{command:?}:\n{}", help.stdout);
        let client = !matches!(command[0], "run" | "serve" | "config" | "completions");
        assert_eq!(help.stdout.contains("--url"), client, "{command:?} and --url:\n{}", help.stdout);
        let socket = client || matches!(command[0], "serve" | "config");
        assert_eq!(help.stdout.contains("--socket"), socket, "{command:?} and --socket:\n{}", help.stdout);
    }
    let top = agentd.run(&["--help"]);
    assert!(top.stdout.contains("completions") && top.stdout.contains("Examples:"), "{}", top.stdout);
    assert!(!top.stdout.contains("--socket") && !top.stdout.contains("  man "), "{}", top.stdout);

    // Refused where they do not apply, after the command as before it (exit 2, naming the option).
    let task = "config/tasks/mock-login.json";
    for args in [
        &["run", "--socket", "/tmp/x.sock", task][..],
        &["--socket", "/tmp/x.sock", "run", task],
        &["--url", "http://127.0.0.1:9", "serve"],
        &["config", "check", "--url", "http://127.0.0.1:9"],
        &["--url", "http://127.0.0.1:9", "completions", "bash"],
    ] {
        let run = agentd.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("--socket") || run.stderr.contains("--url"), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
    let twice = agentd.run(&["--socket", "/tmp/a.sock", "status", "x", "--socket", "/tmp/b.sock"]);
    assert_eq!(twice.code, 2, "{}", twice.stderr);
    assert!(twice.stderr.contains("given both before and after"), "{}", twice.stderr);
    // Before the command, as earlier versions took it, for a command that uses it: it is used.
    let missing = agentd.dir.path().join("none.sock");
    for args in [
        &["--socket", missing.to_str().expect("path"), "status", "x"][..],
        &["status", "x", "--socket", missing.to_str().expect("path")],
    ] {
        let run = agentd.run(args);
        assert_eq!(run.code, 3, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("none.sock"), "{args:?}: {}", run.stderr);
    }
}

/// `agentd schema task` and `agentd schema config` print JSON Schemas (draft 2020-12) on stdout, exit 0, and need
/// no configuration; another argument is refused (exit 2).
#[test]
fn schema_prints_the_task_and_config_schemas() {
    let agentd = Agentd::new();
    for (which, field) in [("task", "instructions"), ("config", "api")] {
        let run = agentd.run(&["schema", which]);
        assert_eq!(run.code, 0, "{which}: {}", run.stderr);
        let schema: serde_json::Value = serde_json::from_str(&run.stdout).expect("a JSON document");
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{which}");
        assert!(schema["properties"].get(field).is_some(), "{which}: no {field}:\n{}", run.stdout);
    }
    let bad = agentd.run(&["schema", "status"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}
