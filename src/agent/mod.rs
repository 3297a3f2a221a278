//! The agent loop and its policies: the loop itself (`runner`), which screenshots the model still sees
//! (`context`), waiting for a quiet screen (`settle`), the sink that numbers events (`events`), the
//! boundaries of a streamed model turn (`stream`) and the step
//! journal boundary (`journal`). Coordinate spaces and pixels are `screen`; the event types are `record`.

pub mod context;
pub mod events;
pub mod guard;
pub mod journal;
pub mod runner;
pub mod settle;
pub mod stream;

pub use runner::{LoopEnd, LoopInput, LoopOutput, run, run_isolated};
