//! agentd: a daemon that lets a vision model operate a computer.
//!
//! Data flows one way: task file → agent loop ⇄ (model, computer) → artifacts + events → task record.
//! See ARCHITECTURE.md for the code map.

pub mod agent;
pub mod api;
pub mod artifacts;
pub mod attempt;
pub mod backends;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod exit;
pub mod input;
pub mod metrics;
pub mod model;
pub mod private;
pub mod queue;
pub mod record;
pub mod screen;
pub mod sse;
pub mod status;
pub mod task;
pub mod tools;
