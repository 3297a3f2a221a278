//! The agent loop and what it owns: coordinate spaces, the context policy, screenshot processing, events
//! and the step journal boundary.

pub mod context;
pub mod coords;
pub mod events;
pub mod image;
pub mod journal;
pub mod runner;
pub mod settle;

pub use runner::{LoopEnd, LoopInput, LoopOutput, run, run_isolated};
