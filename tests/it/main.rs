//! Integration tests: one binary, a module per area. Tests that run the real `agentd` binary use
//! [`support::Agentd`], which gives each test its own data directory and config file.

mod agent_loop;
mod bad_input;
mod cli;
mod crash;
mod daemon;
mod desktops;
mod doubles;
mod events;
mod fleet;
mod hostile;
mod house;
mod library;
mod models;
mod models_storm;
mod models_wire;
mod output;
mod proxy;
mod queue_suite;
mod remote_tools;
mod run_examples;
mod s3;
mod secrets;
mod support;
mod systemd;
mod tools;
