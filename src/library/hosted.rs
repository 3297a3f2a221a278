//! One attempt of a queued task, for agentd's own daemon: the same builder and the same [`Attempt`] as an
//! [`Agent`](super::Agent)'s run, with what only a queue has — the attempt's number, the steps of earlier
//! attempts, a journal that writes through the lease, the worker's shared uploader and its event sink, the
//! lease's cancellation and the daemon's shutdown — and without a final outcome: the worker decides from the
//! [`Ending`](crate::attempt::Ending) whether the task finishes, waits or goes back to the queue.

use super::{AgentBuilder, Assembled};
use crate::attempt::{self, Attempt, AttemptOutput, RunContext};

/// What an attempt of a queued task runs in, besides what the builder builds: the attempt's
/// [`RunContext`](crate::attempt::RunContext).
pub type Hosting<'a> = RunContext<'a>;

impl AgentBuilder {
    /// Emits `task_started`, builds the attempt's parts (what cannot be built is the attempt's ending) and
    /// runs the loop to its end.
    #[doc(hidden)]
    pub async fn run_attempt(self, hosting: Hosting<'_>) -> AttemptOutput {
        attempt::emit_started(&hosting.events, hosting.attempt, &self.worker_name());
        let store = hosting.uploader.store().clone();
        let Assembled { task, built, config, .. } = match self.assemble(store.as_ref()).await {
            Ok(assembled) => assembled,
            Err(error) => return AttemptOutput::unbuilt(error),
        };
        Attempt { task, settle: config.settle, context: hosting }.run(built).await
    }
}
