//! The agent loop and its policies: what an attempt is and how it ends (`attempt`), the loop itself (`runner`), which screenshots the model still sees
//! (`context`), waiting for a quiet screen (`settle`), the sink that numbers events (`events`), the
//! boundaries of a streamed model turn (`stream`) and the step
//! journal boundary (`journal`). Coordinate spaces and pixels are `screen`; the event types are `record`.

pub mod attempt;
pub mod context;
pub mod events;
pub mod guard;
pub mod journal;
pub mod runner;
pub mod settle;
pub mod stream;

pub use attempt::{Attempt, AttemptOutput, Built, Ending, RunContext};
pub use runner::{run, run_isolated};
