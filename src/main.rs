//! The `agentd` binary: everything happens in the crate's `cli` module.

fn main() -> std::process::ExitCode {
    agentd::binary_main()
}
