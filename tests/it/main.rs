//! Integration tests: one binary, a module per area. Tests that run the real `agentd` binary use
//! [`support::Agentd`], which gives each test its own data directory and config file.

/// Runs each named `fn name(backend: Backend)` of a module as two tests, `sqlite::name` and `postgres::name`
/// (the latter skips without `AGENTD_TEST_POSTGRES_URL`). Defined before the modules so that all can use it.
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(crate::support::Backend::Sqlite);
                }
            )+
        }

        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(backend) = crate::support::Backend::postgres() {
                        super::$name(backend);
                    }
                }
            )+
        }
    };
}

mod agent_loop;
mod approval;
mod bad_input;
mod browser;
mod browser_models;
mod cli;
mod cli_progress;
mod compile;
mod console;
mod crash;
mod cua;
mod daemon;
mod defects;
mod desktops;
mod doubles;
mod eval;
mod events;
mod fidelity;
mod fleet;
mod guard;
mod hostile;
mod house;
mod humans;
mod library;
mod live;
mod mcp;
mod mcp_tools;
mod metrics;
mod models;
mod models_storm;
mod models_wire;
mod openapi;
mod output;
mod packaging;
mod pools;
mod proxy;
mod queue_suite;
mod rate_budget;
mod remote_tools;
mod replay;
mod reports;
mod retention;
mod run_examples;
mod s3;
mod secrets;
mod support;
mod systemd;
mod takeover;
mod telemetry;
mod tools;
mod turns;
mod unreadable;
mod verify;
