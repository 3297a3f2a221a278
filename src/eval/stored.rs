//! Evaluations as the daemon has them (docs/eval.md, `GET /v1/evals`): an evaluation is nothing but its runs,
//! ordinary tasks whose ids are `EVAL.tT.mM.rR` and whose `metadata.eval` names the suite, the task, the model
//! and the repeat. Its first run (`EVAL.t1.m1.r1`) stands for it in a listing; its result is summarised from
//! its runs' records, the runs that have not ended counted as pending.

use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::summary::{EvalResult, RunOutcome};
use crate::status::TaskRecord;

/// The id suffix of an evaluation's first run.
pub const FIRST_RUN: &str = ".t1.m1.r1";

/// An evaluation in a listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalListing {
    pub id: String,
    pub suite: String,
    /// Runs planned (tasks × models × repeat).
    pub runs: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// An evaluation's result so far: the runs that ended, summarised; how many have not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEval {
    #[serde(flatten)]
    pub result: EvalResult,
    /// Runs planned.
    pub planned: u64,
    /// Runs found that have not ended (queued, running, waiting).
    pub pending: u32,
}

/// The `metadata.eval` of a run's task file.
fn eval_metadata(record: &TaskRecord) -> Option<&serde_json::Map<String, Value>> {
    record.task.metadata.get("eval").and_then(Value::as_object)
}

fn text<'a>(meta: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a str> {
    meta.get(key).and_then(Value::as_str)
}

/// The listing entry of the evaluation whose first run is `record`; `None` for a task that only looks like one.
pub fn listing(record: &TaskRecord) -> Option<EvalListing> {
    let meta = eval_metadata(record)?;
    let id = text(meta, "id")?;
    if record.id != format!("{id}{FIRST_RUN}") {
        return None;
    }
    Some(EvalListing {
        id: id.to_string(),
        suite: text(meta, "suite")?.to_string(),
        runs: meta.get("runs").and_then(Value::as_u64).unwrap_or(0),
        created_at: record.created_at,
    })
}

/// Run `id`'s place in evaluation `eval`: task, model and repeat, 1-based.
pub fn place(eval: &str, id: &str) -> Option<(u32, u32, u32)> {
    let rest = id.strip_prefix(eval)?.strip_prefix(".t")?;
    let (t, rest) = rest.split_once(".m")?;
    let (m, r) = rest.split_once(".r")?;
    Some((t.parse().ok()?, m.parse().ok()?, r.parse().ok()?))
}

/// A run of an evaluation found among the records.
struct Found<'a> {
    /// Task, model, repeat: 1-based.
    place: (u32, u32, u32),
    task: &'a str,
    model: &'a str,
    record: &'a TaskRecord,
    steps: u64,
}

/// Evaluation `eval`'s result from its runs' records, each with its number of steps (a listing's records
/// carry none); `None` when no run of it is among them.
pub fn summarize(eval: &str, runs: &[(TaskRecord, u64)]) -> Option<StoredEval> {
    let mut found: Vec<Found> = runs
        .iter()
        .filter_map(|(record, steps)| {
            let meta = eval_metadata(record)?;
            if text(meta, "id")? != eval {
                return None;
            }
            let place = place(eval, &record.id)?;
            Some(Found { place, task: text(meta, "task")?, model: text(meta, "model")?, record, steps: *steps })
        })
        .collect();
    found.sort_by_key(|run| run.place);
    let meta = eval_metadata(found.first()?.record)?;
    let suite = text(meta, "suite").unwrap_or_default().to_string();
    let repeat = meta.get("repeats").and_then(Value::as_u64).map_or_else(
        || found.iter().map(|run| run.place.2).max().unwrap_or(1),
        |k| u32::try_from(k).unwrap_or(u32::MAX),
    );
    let planned = meta.get("runs").and_then(Value::as_u64).unwrap_or(found.len() as u64);
    // Tasks and models in the suite's order (their indexes in the ids), each named once.
    let tasks = names(found.iter().map(|run| (run.place.0, run.task)));
    let models = names(found.iter().map(|run| (run.place.1, run.model)));
    let (ended, going): (Vec<&Found>, Vec<&Found>) = found.iter().partition(|run| run.record.state.is_terminal());
    let outcomes: Vec<RunOutcome> = ended
        .iter()
        .map(|run| {
            let mut outcome = RunOutcome::from_record(run.task, run.model, run.place.2, run.record);
            outcome.steps = u32::try_from(run.steps).unwrap_or(u32::MAX);
            outcome
        })
        .collect();
    let result = EvalResult::summarize(&suite, eval, repeat, &models, &tasks, &outcomes);
    Some(StoredEval { result, planned, pending: u32::try_from(going.len()).unwrap_or(u32::MAX) })
}

/// The names of `indexed` (index, name) in index order, each index once.
fn names<'a>(indexed: impl Iterator<Item = (u32, &'a str)>) -> Vec<String> {
    let mut named: Vec<(u32, &str)> = indexed.collect();
    named.sort();
    named.dedup_by_key(|(i, _)| *i);
    named.into_iter().map(|(_, name)| name.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_place_is_read_from_its_id() {
        assert_eq!(place("e_1", "e_1.t2.m3.r10"), Some((2, 3, 10)));
        assert_eq!(place("e_1", "e_10.t2.m3.r10"), None);
        assert_eq!(place("e_1", "e_1.t2.m3"), None);
        assert_eq!(place("e_1", "e_1.tx.m3.r1"), None);
    }
}
