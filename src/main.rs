//! The `agentd` binary: everything happens in [`agentd::cli`].

fn main() -> std::process::ExitCode {
    agentd::cli::main()
}
