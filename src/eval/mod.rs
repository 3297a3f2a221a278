//! Evaluation (docs/eval.md): what `agentd eval` measures, apart from how it runs.
//!
//! `suite` reads a suite file (TOML or JSON: its tasks, each with a verifier, the models, `repeat`,
//! `concurrency`) and plans its runs — every task × model × repeat as an ordinary task whose `metadata.eval`
//! names the evaluation, the suite, the task, the model and the repeat, with an id derived from them so that
//! an interrupted evaluation can be continued. `summary` turns the runs' task records into the result: per
//! model the pass rate with its 95 % Wilson interval, pass^k, medians, tokens and cost, a row per task, the
//! runs that failed for infrastructure reasons counted apart; and compares a result with a baseline. `html`
//! writes the result as a self-contained page. Running the runs (in this process or through the daemon) is
//! the command's (`cli::eval`).

pub mod html;
pub mod stored;
pub mod suite;
pub mod summary;

pub use suite::{PlannedRun, Suite, SuiteError};
pub use summary::{EvalResult, Regression, Verdict};
