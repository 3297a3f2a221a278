//! The queue behaviour every backend must show, one test per scenario and backend, so a failure names both:
//! `queue_suite::sqlite::<scenario>` runs on a fresh SQLite file, `queue_suite::postgres::<scenario>` in a
//! fresh schema of the server at `AGENTD_TEST_POSTGRES_URL` (and says it skips when that is not set).
//! [`queue_suite!`] stamps the tests; each scenario is an `async fn(&dyn Queue)` below.

use std::collections::BTreeMap;
use std::time::Duration;

use agentd::queue::{
    Cancelled, Decision, Finish, HumanAnswer, Lease, LeaseStatus, ListFilter, NewTask, Paused, Queue, QueueError,
    Release, Submitted, ToolAnswer, WorkerIdentity,
};
use agentd::record::Usage;
use agentd::record::events::{Event, EventKind};
use agentd::record::{EndReason, HandBack, Outcome, ScreenshotRef, StepApproval, StepRecord, TaskState, Waiting};
use agentd::task::{TaskId, TaskSpec};
use time::OffsetDateTime;

/// One `#[tokio::test]` per scenario in `mod sqlite` and again in `mod postgres`, each on a queue of its own.
macro_rules! queue_suite {
    ($($scenario:ident),+ $(,)?) => {
        mod sqlite {
            use agentd::queue::Queue as _;
            $(
                #[tokio::test]
                async fn $scenario() {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let queue = agentd::queue::sqlite::SqliteQueue::open(&dir.path().join("queue.db"))
                        .await
                        .unwrap_or_else(|e| panic!("open: {e}"));
                    queue.health().await.unwrap_or_else(|e| panic!("health: {e}"));
                    super::$scenario(&queue).await;
                }
            )+
        }

        mod postgres {
            use agentd::queue::Queue as _;
            $(
                #[tokio::test]
                async fn $scenario() {
                    let Some(url) = crate::support::postgres_url() else { return };
                    let schema = crate::support::PgSchema::create(&url);
                    let queue = agentd::queue::postgres::PostgresQueue::open(&schema.url(), Default::default())
                        .await
                        .unwrap_or_else(|e| panic!("open: {e}"));
                    queue.health().await.unwrap_or_else(|e| panic!("health: {e}"));
                    super::$scenario(&queue).await;
                    queue.pool().close().await;
                }
            )+
        }
    };
}

queue_suite!(
    submit_is_idempotent,
    claims_follow_labels_and_order,
    fencing_rejects_a_stale_worker,
    cancellation_reaches_queued_and_running_tasks,
    a_cancelled_task_whose_worker_died_stays_cancelled,
    release_and_attempts,
    humans_approve_and_reject,
    an_approval_racing_a_cancel_is_in_the_record_exactly_when_it_was_answered,
    events_are_ordered_and_resumable,
    steps_are_journaled_and_returned,
    listing_and_counts,
    one_task_per_desktop,
    remote_tools_park_and_take_one_answer_per_call,
    a_task_awaiting_tools_is_cancelled_at_once,
    a_question_takes_one_answer_and_two_at_once_leave_one_winner,
    only_finished_tasks_are_deleted_with_their_steps_and_events,
    retention_finds_and_deletes_only_old_finished_tasks,
    a_message_to_a_finished_task_queues_a_new_turn,
    a_person_takes_the_desktop_over_and_hands_it_back,
    a_taken_over_desktop_is_kept_for_the_person,
);

fn spec(id: &str, labels: &[(&str, &str)]) -> TaskSpec {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let json = serde_json::json!({"id": id, "instructions": format!("task {id}"), "labels": labels});
    TaskSpec::parse(&json.to_string(), "suite").unwrap_or_else(|e| panic!("suite spec: {e}"))
}

fn new_task(id: &str, labels: &[(&str, &str)]) -> NewTask {
    NewTask { spec: spec(id, labels), max_attempts: 2 }
}

fn worker(name: &str, labels: &[(&str, &str)]) -> WorkerIdentity {
    WorkerIdentity {
        name: name.to_string(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        desktops: agentd::queue::desktop::DesktopScope::new("suite-host", Some(":0"), None),
        pool: Vec::new(),
    }
}

fn step(index: u32) -> StepRecord {
    let screenshot = ScreenshotRef { url: "u".into(), width: 1, height: 1, key: format!("k{index}") };
    let mut step = StepRecord::begun(index, OffsetDateTime::now_utc(), screenshot);
    step.duration_ms = 1;
    step.model_text = format!("step {index}");
    step.finished = true;
    step
}

/// A step held for a human's approval (a vendor's safety check), journaled before any of it ran.
fn held_step(index: u32) -> StepRecord {
    let mut step = step(index);
    step.finished = false;
    step.approval = Some(StepApproval::asked("confirm the purchase".into(), serde_json::Value::Null));
    step
}

fn event(task_id: &str, seq: u64, step: u32) -> Event {
    Event {
        seq,
        task_id: task_id.to_string(),
        ts: OffsetDateTime::now_utc(),
        kind: EventKind::StepStarted { step, by: agentd::By::Model },
    }
}

const LEASE: Duration = Duration::from_secs(30);

/// Claims until `id` comes up (other checks' tasks may be queued too), releasing nothing else.
async fn claim_id(queue: &dyn Queue, who: &WorkerIdentity, id: &str) -> Lease {
    for _ in 0..1000 {
        match queue.claim(who, LEASE).await {
            Ok(Some(lease)) if lease.task_id == id => return lease,
            Ok(Some(other)) => {
                let _ = queue.finish(&other.task_id, other.token, &finish(true)).await;
            }
            Ok(None) => break,
            Err(e) => panic!("claim: {e}"),
        }
    }
    panic!("task {id} was never claimable");
}

fn finish(success: bool) -> Finish {
    Finish {
        outcome: Outcome {
            success,
            summary: "done".into(),
            reason: if success { EndReason::Completed } else { EndReason::Error },
            output: None,
            verified: None,
            checks: Vec::new(),
        },
        usage: Usage { input_tokens: 5, ..Usage::default() },
        final_screenshot: None,
        computer_state: Some(serde_json::json!({"screen": "end"})),
    }
}

async fn submit_is_idempotent(queue: &dyn Queue) {
    let first = queue.submit(new_task("idem-1", &[])).await.unwrap_or_else(|e| panic!("submit: {e}"));
    assert!(matches!(first, Submitted::Created(_)));
    assert_eq!(first.record().state, TaskState::Queued);
    let again = queue.submit(new_task("idem-1", &[])).await.unwrap_or_else(|e| panic!("resubmit: {e}"));
    assert!(matches!(again, Submitted::Existing(_)));
    let mut different = new_task("idem-1", &[]);
    different.spec.instructions = serde_json::from_str("\"something else\"").unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(queue.submit(different).await, Err(QueueError::Conflict(_))));
    assert!(matches!(queue.get("no-such-task").await, Err(QueueError::NotFound(_))));
    let events = queue.events_after("idem-1", 0, 10).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(events.len(), 1, "one task_queued event, not one per submission");
    assert_eq!(events[0].kind, EventKind::TaskQueued {});
    assert_eq!(events[0].seq, 1);
    // Clean up so later claims do not see it.
    let _ = queue.cancel("idem-1").await;
}

async fn claims_follow_labels_and_order(queue: &dyn Queue) {
    queue.submit(new_task("labels-win", &[("os", "windows")])).await.unwrap_or_else(|e| panic!("{e}"));
    queue.submit(new_task("labels-a", &[("os", "ubuntu")])).await.unwrap_or_else(|e| panic!("{e}"));
    queue.submit(new_task("labels-b", &[])).await.unwrap_or_else(|e| panic!("{e}"));
    let ubuntu = worker("w-ubuntu", &[("os", "ubuntu"), ("gpu", "no")]);
    let a = queue
        .claim(&ubuntu, LEASE)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("nothing claimed"));
    assert_eq!(a.task_id, "labels-a", "oldest matching first; the windows task is skipped");
    assert_eq!(a.attempt, 1);
    assert_eq!(a.next_seq, 2, "after task_queued");
    let b = queue
        .claim(&ubuntu, LEASE)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("nothing claimed"));
    assert_eq!(b.task_id, "labels-b");
    assert!(queue.claim(&ubuntu, LEASE).await.unwrap_or_else(|e| panic!("{e}")).is_none(), "windows task stays queued");
    let running = queue.get("labels-a").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(running.state, TaskState::Running);
    assert_eq!(running.worker.as_deref(), Some("w-ubuntu"));
    assert!(running.started_at.is_some());
    queue.finish("labels-a", a.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
    queue.finish("labels-b", b.token, &finish(false)).await.unwrap_or_else(|e| panic!("{e}"));
    let windows = worker("w-win", &[("os", "windows")]);
    let w = claim_id(queue, &windows, "labels-win").await;
    queue.finish("labels-win", w.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
    let done = queue.get("labels-a").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!(done.usage.input_tokens, 5);
    assert_eq!(done.computer_state, Some(serde_json::json!({"screen": "end"})));
    assert_eq!(queue.get("labels-b").await.unwrap_or_else(|e| panic!("{e}")).state, TaskState::Failed);
}

async fn fencing_rejects_a_stale_worker(queue: &dyn Queue) {
    queue.submit(new_task("fence-1", &[("fence", "yes")])).await.unwrap_or_else(|e| panic!("{e}"));
    let slow = worker("w-slow", &[("fence", "yes")]);
    let fast = worker("w-fast", &[("fence", "yes")]);
    // A lease that is over at once, as if the worker froze past it.
    let stale = queue
        .claim(&slow, Duration::ZERO)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no claim"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rescued = queue.rescue_expired().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(rescued.iter().any(|r| r.task_id == "fence-1" && r.new_state == TaskState::Queued), "{rescued:?}");
    // Fenced out before anyone else claims it.
    assert_eq!(
        queue.heartbeat("fence-1", stale.token, LEASE).await.unwrap_or_else(|e| panic!("{e}")),
        LeaseStatus::Lost
    );
    let fresh = claim_id(queue, &fast, "fence-1").await;
    assert!(fresh.token > stale.token);
    assert_eq!(fresh.attempt, 2, "a lost worker uses an attempt");
    assert!(matches!(
        queue.record_step("fence-1", stale.token, &step(0), Duration::ZERO, &agentd::record::Usage::default()).await,
        Err(QueueError::LeaseLost(_))
    ));
    assert!(matches!(queue.finish("fence-1", stale.token, &finish(true)).await, Err(QueueError::LeaseLost(_))));
    assert!(matches!(
        queue.append_events("fence-1", Some(stale.token), &[event("fence-1", 50, 0)]).await,
        Err(QueueError::LeaseLost(_))
    ));
    assert!(matches!(
        queue
            .release(
                "fence-1",
                stale.token,
                &Release::Requeue { count_attempt: false, delay: Duration::ZERO, reason: "x".into() }
            )
            .await,
        Err(QueueError::LeaseLost(_))
    ));
    assert!(matches!(
        queue.heartbeat("fence-1", fresh.token, LEASE).await,
        Ok(LeaseStatus::Held { cancel_requested: false, pause_requested: false })
    ));
    queue
        .record_step("fence-1", fresh.token, &step(0), Duration::from_secs(3), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Out of attempts: the rescuer fails the task instead of queueing it a third time.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let expired = queue.heartbeat("fence-1", fresh.token, Duration::ZERO).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(expired, LeaseStatus::Held { cancel_requested: false, pause_requested: false });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rescued = queue.rescue_expired().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(rescued.iter().any(|r| r.task_id == "fence-1" && r.new_state == TaskState::Failed), "{rescued:?}");
    let failed = queue.get("fence-1").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(failed.state, TaskState::Failed);
    assert_eq!(failed.outcome.map(|o| o.reason), Some(EndReason::Error));
    let last = queue.events_after("fence-1", 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(last.last().map(|e| &e.kind), Some(EventKind::TaskFinished { .. })));
}

async fn cancellation_reaches_queued_and_running_tasks(queue: &dyn Queue) {
    queue.submit(new_task("cancel-q", &[("c", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(queue.cancel("cancel-q").await.unwrap_or_else(|e| panic!("{e}")), Cancelled::Now);
    assert_eq!(queue.get("cancel-q").await.unwrap_or_else(|e| panic!("{e}")).state, TaskState::Cancelled);
    assert!(matches!(queue.cancel("cancel-q").await, Err(QueueError::WrongState { .. })));
    assert!(matches!(queue.cancel("cancel-none").await, Err(QueueError::NotFound(_))));

    queue.submit(new_task("cancel-r", &[("c", "2")])).await.unwrap_or_else(|e| panic!("{e}"));
    let lease = claim_id(queue, &worker("w", &[("c", "2")]), "cancel-r").await;
    assert_eq!(queue.cancel("cancel-r").await.unwrap_or_else(|e| panic!("{e}")), Cancelled::Requested);
    assert_eq!(
        queue.heartbeat("cancel-r", lease.token, LEASE).await.unwrap_or_else(|e| panic!("{e}")),
        LeaseStatus::Held { cancel_requested: true, pause_requested: false }
    );
    let cancelled = Finish {
        outcome: Outcome {
            success: false,
            summary: "cancelled".into(),
            reason: EndReason::Cancelled,
            output: None,
            verified: None,
            checks: Vec::new(),
        },
        ..finish(false)
    };
    queue.finish("cancel-r", lease.token, &cancelled).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(queue.get("cancel-r").await.unwrap_or_else(|e| panic!("{e}")).state, TaskState::Cancelled);
}

/// A cancel requested while the task ran, then the worker died before it could stop: the rescuer ends the
/// task as cancelled instead of queueing it again (where the next claim would forget the request).
async fn a_cancelled_task_whose_worker_died_stays_cancelled(queue: &dyn Queue) {
    queue.submit(new_task("cancel-dead", &[("c", "3")])).await.unwrap_or_else(|e| panic!("{e}"));
    let lease = claim_id(queue, &worker("w", &[("c", "3")]), "cancel-dead").await;
    assert_eq!(queue.cancel("cancel-dead").await.unwrap_or_else(|e| panic!("{e}")), Cancelled::Requested);
    // The worker dies: its lease runs out.
    let _ = queue.heartbeat("cancel-dead", lease.token, Duration::ZERO).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rescued = queue.rescue_expired().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(rescued.iter().any(|r| r.task_id == "cancel-dead" && r.new_state == TaskState::Cancelled), "{rescued:?}");
    let record = queue.get("cancel-dead").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(record.state, TaskState::Cancelled);
    assert_eq!(record.outcome.map(|o| o.reason), Some(EndReason::Cancelled));
    assert!(matches!(queue.finish("cancel-dead", lease.token, &finish(true)).await, Err(QueueError::LeaseLost(_))));
    let events = queue.events_after("cancel-dead", 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(events.last().map(|e| &e.kind), Some(EventKind::TaskFinished { .. })));
}

async fn release_and_attempts(queue: &dyn Queue) {
    queue.submit(new_task("release-1", &[("r", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
    let who = worker("w", &[("r", "1")]);
    let first = claim_id(queue, &who, "release-1").await;
    queue
        .release(
            "release-1",
            first.token,
            &Release::Requeue { count_attempt: false, delay: Duration::ZERO, reason: "shutdown".into() },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let again = claim_id(queue, &who, "release-1").await;
    assert_eq!(again.attempt, 1, "a graceful hand-back does not use an attempt");
    queue
        .release(
            "release-1",
            again.token,
            &Release::Requeue { count_attempt: true, delay: Duration::from_secs(3600), reason: "retry".into() },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(queue.claim(&who, LEASE).await.unwrap_or_else(|e| panic!("{e}")).is_none(), "held back by the retry delay");
    assert_eq!(queue.get("release-1").await.unwrap_or_else(|e| panic!("{e}")).state, TaskState::Queued);
    let _ = queue.cancel("release-1").await;
}

async fn humans_approve_and_reject(queue: &dyn Queue) {
    let who = worker("w", &[("h", "1")]);
    for (id, approve) in [("human-yes", true), ("human-no", false)] {
        queue.submit(new_task(id, &[("h", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
        let lease = claim_id(queue, &who, id).await;
        assert!(
            matches!(queue.decide(id, &Decision::Approve).await, Err(QueueError::WrongState { .. })),
            "not waiting yet"
        );
        // The step held for the human is journaled before the task parks, as the loop does.
        queue
            .record_step(id, lease.token, &held_step(0), Duration::from_secs(1), &Usage::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        queue
            .release(id, lease.token, &Release::WaitForHuman { reason: "confirm the purchase".into() })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let waiting = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(waiting.state, TaskState::WaitingForHuman);
        assert_eq!(waiting.waiting_reason.as_deref(), Some("confirm the purchase"));
        assert!(
            queue.claim(&who, LEASE).await.unwrap_or_else(|e| panic!("{e}")).is_none(),
            "a waiting task holds no worker"
        );
        if approve {
            let now = queue.decide(id, &Decision::Approve).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(now, TaskState::Queued);
            let resumed = claim_id(queue, &who, id).await;
            let approval = resumed.steps.last().and_then(|s| s.approval.clone());
            assert_eq!(
                approval.map(|a| (a.approved, a.started)),
                Some((Some(true), false)),
                "the answer is in the step"
            );
            assert_eq!(resumed.attempt, 1, "waiting for a human does not use an attempt");
            queue.finish(id, resumed.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
        } else {
            queue
                .decide(id, &Decision::Reject { reason: "too expensive".into() })
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let rejected = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(rejected.state, TaskState::Failed);
            let outcome = rejected.outcome.unwrap_or_else(|| panic!("outcome"));
            assert_eq!(outcome.reason, EndReason::Rejected);
            assert!(outcome.summary.contains("too expensive"));
        }
    }
}

/// An approval and a cancel of a waiting task at the same moment, many times, in both orders: each answer is
/// what the record says. An approval answered `Ok` is in the waiting step (and the cancel that followed ended
/// the task before any of its calls ran: the step was never begun); an approval refused came after the cancel,
/// and the step holds no answer.
async fn an_approval_racing_a_cancel_is_in_the_record_exactly_when_it_was_answered(queue: &dyn Queue) {
    let who = worker("w", &[("race", "1")]);
    let mut outcomes = BTreeMap::new();
    for round in 0..24 {
        let id = format!("race-{round}");
        queue.submit(new_task(&id, &[("race", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
        let lease = claim_id(queue, &who, &id).await;
        queue
            .record_step(&id, lease.token, &held_step(0), Duration::from_secs(1), &Usage::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        queue
            .release(&id, lease.token, &Release::WaitForHuman { reason: "confirm the purchase".into() })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // Both at once; which is asked first alternates.
        let (approved, cancelled) = if round % 2 == 0 {
            tokio::join!(queue.decide(&id, &Decision::Approve), queue.cancel(&id))
        } else {
            let (cancelled, approved) = tokio::join!(queue.cancel(&id), queue.decide(&id, &Decision::Approve));
            (approved, cancelled)
        };
        let record = queue.get(&id).await.unwrap_or_else(|e| panic!("{e}"));
        let step = record.steps.first().unwrap_or_else(|| panic!("{id}: no step: {record:?}"));
        let approval = step.approval.clone().unwrap_or_else(|| panic!("{id}: no approval: {step:?}"));
        let said = format!("{id}: approve {approved:?}, cancel {cancelled:?}; record: {record:?}");
        assert_eq!(cancelled.as_ref().ok(), Some(&Cancelled::Now), "nobody runs it, so a cancel ends it: {said}");
        assert_eq!(record.state, TaskState::Cancelled, "{said}");
        match &approved {
            Ok(state) => {
                assert_eq!(*state, TaskState::Queued, "{said}");
                assert_eq!(approval.approved, Some(true), "answered 200, so the step says approved: {said}");
                assert!(!approval.started && step.results.is_empty(), "none of its calls ran: {said}");
            }
            Err(QueueError::WrongState { state: "cancelled", .. }) => {
                assert_eq!(approval.approved, None, "refused, so the step holds no answer: {said}");
            }
            Err(e) => panic!("{e}: {said}"),
        }
        *outcomes.entry(approved.is_ok()).or_insert(0) += 1;
    }
    assert_eq!(outcomes.len(), 2, "both orders were seen (approve first, cancel first): {outcomes:?}");
}

async fn events_are_ordered_and_resumable(queue: &dyn Queue) {
    queue.submit(new_task("events-1", &[("e", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
    let lease = claim_id(queue, &worker("w", &[("e", "1")]), "events-1").await;
    let batch: Vec<Event> = (0..5).map(|i| event("events-1", lease.next_seq + i, i as u32)).collect();
    queue.append_events("events-1", Some(lease.token), &batch).await.unwrap_or_else(|e| panic!("{e}"));
    let all = queue.events_after("events-1", 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    let tail = queue.events_after("events-1", 4, 100).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![5, 6]);
    assert_eq!(queue.events_after("events-1", 0, 2).await.unwrap_or_else(|e| panic!("{e}")).len(), 2);
    queue.finish("events-1", lease.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
}

async fn steps_are_journaled_and_returned(queue: &dyn Queue) {
    queue.submit(new_task("steps-1", &[("s", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
    let who = worker("w", &[("s", "1")]);
    let lease = claim_id(queue, &who, "steps-1").await;
    let mut pending = step(1);
    pending.finished = false;
    queue
        .record_step("steps-1", lease.token, &step(0), Duration::from_secs(1), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    queue
        .record_step("steps-1", lease.token, &pending, Duration::from_secs(2), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let record = queue.get("steps-1").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(record.steps.len(), 2);
    assert!(!record.steps[1].finished);
    queue
        .record_step("steps-1", lease.token, &step(1), Duration::from_secs(3), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        queue.get("steps-1").await.unwrap_or_else(|e| panic!("{e}")).steps[1].finished,
        "a second write replaces the first"
    );
    queue
        .release(
            "steps-1",
            lease.token,
            &Release::Requeue { count_attempt: false, delay: Duration::ZERO, reason: "x".into() },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let resumed = claim_id(queue, &who, "steps-1").await;
    assert_eq!(resumed.steps.len(), 2, "a resumed lease carries the journal");
    // What `GET /v1/tasks` says of each task: a step written twice counts once; a task with no step, or
    // unknown, is left out.
    queue.submit(new_task("steps-none", &[("never", "matches")])).await.unwrap_or_else(|e| panic!("{e}"));
    let ids = ["steps-1", "steps-none", "steps-unknown"].map(String::from);
    let counts = queue.step_counts(&ids).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(counts, BTreeMap::from([("steps-1".to_string(), 2)]));
    assert!(queue.step_counts(&[]).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    assert_eq!(resumed.elapsed, Duration::from_secs(3));
    queue.finish("steps-1", resumed.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
}

async fn listing_and_counts(queue: &dyn Queue) {
    let who = worker("w", &[("l", "1")]);
    for n in 0..3 {
        let done = format!("list-done-{n}");
        queue.submit(new_task(&done, &[("l", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
        let lease = claim_id(queue, &who, &done).await;
        queue.finish(&done, lease.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let id = TaskId::generate();
    queue.submit(new_task(id.as_str(), &[("never", "matches")])).await.unwrap_or_else(|e| panic!("{e}"));
    let newest = queue.list(&ListFilter { limit: 1, ..ListFilter::default() }).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0].id(), id.as_str(), "newest first");
    let queued = queue
        .list(&ListFilter { state: Some(TaskState::Queued), limit: 100, ..ListFilter::default() })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(queued.iter().all(|t| t.record().is_some_and(|r| r.state == TaskState::Queued)), "{queued:?}");
    assert!(queued.iter().any(|t| t.id() == id.as_str()));
    // By the id's beginning and end (an evaluation's runs): exact characters, `_` and `.` no wildcards.
    for run in ["ev_1.t1.m1.r1", "ev_1.t2.m1.r1", "evx1.t1.m1.r1", "ev_10.t1.m1.r1"] {
        queue.submit(new_task(run, &[("never", "matches")])).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let ids = |filter: ListFilter| async move {
        let mut ids: Vec<String> =
            queue.list(&filter).await.unwrap_or_else(|e| panic!("{e}")).iter().map(|t| t.id().to_string()).collect();
        ids.sort();
        ids
    };
    let prefix = ListFilter { limit: 100, id_prefix: Some("ev_1.t".into()), ..ListFilter::default() };
    assert_eq!(ids(prefix).await, ["ev_1.t1.m1.r1", "ev_1.t2.m1.r1"]);
    let suffix = ListFilter { limit: 100, id_suffix: Some("_1.t1.m1.r1".into()), ..ListFilter::default() };
    assert_eq!(ids(suffix).await, ["ev_1.t1.m1.r1"]);
    let both = ListFilter {
        state: Some(TaskState::Queued),
        limit: 100,
        id_prefix: Some("ev".into()),
        id_suffix: Some(".t1.m1.r1".into()),
    };
    assert_eq!(ids(both).await, ["ev_1.t1.m1.r1", "ev_10.t1.m1.r1", "evx1.t1.m1.r1"]);
    let counts = queue.counts().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(counts.get(&TaskState::Succeeded).copied().unwrap_or(0) >= 3, "{counts:?}");
    assert!(counts.get(&TaskState::Queued).copied().unwrap_or(0) >= 1, "{counts:?}");
}

fn desktop_task(id: &str, computer: serde_json::Value) -> NewTask {
    let json = serde_json::json!({
        "id": id, "instructions": "use the desktop", "computer": computer, "labels": {"suite": "desktops"}
    });
    let spec = TaskSpec::parse(&json.to_string(), "suite").unwrap_or_else(|e| panic!("suite spec: {e}"));
    NewTask { spec, max_attempts: 2 }
}

fn desktop_worker(name: &str, host: &str) -> WorkerIdentity {
    WorkerIdentity {
        name: name.to_string(),
        labels: [("suite".to_string(), "desktops".to_string())].into(),
        desktops: agentd::queue::desktop::DesktopScope::new(host, Some(":0"), None),
        pool: Vec::new(),
    }
}

/// Claims the next task of this check (`desk-…`), finishing any other check's task met on the way.
async fn claim_desk(queue: &dyn Queue, who: &WorkerIdentity, lease: Duration) -> Option<(String, i64)> {
    loop {
        match queue.claim(who, lease).await {
            Ok(Some(lease)) if lease.task_id.starts_with("desk-") => return Some((lease.task_id, lease.token)),
            Ok(Some(other)) => {
                let _ = queue.finish(&other.task_id, other.token, &finish(true)).await;
            }
            Ok(None) => return None,
            Err(e) => panic!("claim: {e}"),
        }
    }
}

/// A desktop takes one task at a time: a queued task whose desktop a running task holds under a live lease
/// is skipped (the rest of the queue is not held up); mock tasks each have their own; `:0` of two machines
/// are two desktops, a VNC address is one desktop for every machine; waiting for a human, finishing or an
/// expired lease lets the desktop go.
async fn one_task_per_desktop(queue: &dyn Queue) {
    let local = serde_json::json!({"provider": "local", "display": ":0"});
    let local_again = serde_json::json!({"provider": "local", "display": ":0.0", "monitor": 1});
    for (id, computer) in [
        ("desk-local-1", local.clone()),
        ("desk-local-2", local_again),
        ("desk-local-3", local.clone()),
        ("desk-vnc-1", serde_json::json!({"provider": "vnc", "address": "vm-1.example:5900"})),
        ("desk-vnc-2", serde_json::json!({"provider": "vnc", "address": "VM-1.example:5900"})),
        ("desk-mock-1", serde_json::json!({"provider": "mock"})),
        ("desk-mock-2", serde_json::json!({"provider": "mock"})),
    ] {
        queue.submit(desktop_task(id, computer)).await.unwrap_or_else(|e| panic!("submit {id}: {e}"));
    }
    let a = desktop_worker("desk-a", "host-a");
    let b = desktop_worker("desk-b", "host-b");
    let mut tokens = BTreeMap::new();
    let mut on_a = Vec::new();
    while let Some((id, token)) = claim_desk(queue, &a, LEASE).await {
        on_a.push(id.clone());
        tokens.insert(id, token);
    }
    assert_eq!(
        on_a,
        ["desk-local-1", "desk-vnc-1", "desk-mock-1", "desk-mock-2"],
        "one task per desktop; the later task of a busy desktop waits, the rest of the queue does not"
    );
    // Another machine's :0 is another desktop; the VNC server is the same one whoever connects.
    let (id, _) = claim_desk(queue, &b, LEASE).await.unwrap_or_else(|| panic!("host-b's :0 is free"));
    assert_eq!(id, "desk-local-2");
    assert_eq!(claim_desk(queue, &b, LEASE).await, None, "desk-vnc-2 waits for desk-vnc-1");

    // Waiting for a human holds no desktop.
    let wait = Release::WaitForHuman { reason: "may I?".into() };
    queue.release("desk-vnc-1", tokens["desk-vnc-1"], &wait).await.unwrap_or_else(|e| panic!("{e}"));
    let (id, token) = claim_desk(queue, &b, LEASE).await.unwrap_or_else(|| panic!("the VNC desktop is free"));
    assert_eq!(id, "desk-vnc-2");
    tokens.insert(id, token);
    // Approved, it waits its turn for the desktop it gave up.
    queue.decide("desk-vnc-1", &Decision::Approve).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(claim_desk(queue, &a, LEASE).await, None);

    // Finishing frees the desktop.
    queue.finish("desk-local-1", tokens["desk-local-1"], &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
    let (id, _) = claim_desk(queue, &a, Duration::from_millis(1)).await.unwrap_or_else(|| panic!(":0 is free"));
    assert_eq!(id, "desk-local-3");
    // So does a lease that expired (its worker died), before any rescue.
    queue.submit(desktop_task("desk-local-4", local)).await.unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(30)).await;
    let (id, _) = claim_desk(queue, &a, LEASE).await.unwrap_or_else(|| panic!("the lease on :0 expired"));
    assert_eq!(id, "desk-local-4");
    queue.finish("desk-vnc-2", tokens["desk-vnc-2"], &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
    let (id, _) = claim_desk(queue, &a, LEASE).await.unwrap_or_else(|| panic!("the VNC desktop is free again"));
    assert_eq!(id, "desk-vnc-1");
    for id in ["desk-local-2", "desk-local-3", "desk-local-4", "desk-vnc-1", "desk-mock-1", "desk-mock-2"] {
        let _ = queue.cancel(id).await;
    }
    let _ = queue.rescue_expired().await;
}

/// A step whose model turn called two `remote` tools and then `task_completion`, parked on the two.
fn parked_step(index: u32) -> StepRecord {
    use agentd::record::{CallKind, ToolCall};
    let function = |id: &str, name: &str, arguments: serde_json::Value| ToolCall {
        id: id.into(),
        kind: CallKind::Function { name: name.into(), arguments },
    };
    StepRecord {
        calls: vec![
            function("c1", "lookup_order", serde_json::json!({"order": 42})),
            function("c2", "confirm_with_client", serde_json::json!({"text": "ok?"})),
            function("c3", "task_completion", serde_json::json!({"success": true, "summary": "done"})),
        ],
        awaiting_tools: vec!["c1".into(), "c2".into()],
        finished: false,
        ..step(index)
    }
}

/// Claims `id`, journals a step parked on remote calls and parks the task.
async fn park(queue: &dyn Queue, who: &WorkerIdentity, id: &str) -> Lease {
    queue.submit(new_task(id, &[("r", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
    let lease = claim_id(queue, who, id).await;
    queue
        .record_step(id, lease.token, &parked_step(0), Duration::from_millis(5), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(
            queue.answer_tools(id, &[answer("c1", true)]).await,
            Err(QueueError::WrongState { state: "running", .. })
        ),
        "a running task takes no tool results"
    );
    queue.release(id, lease.token, &Release::AwaitTools).await.unwrap_or_else(|e| panic!("{e}"));
    lease
}

fn answer(id: &str, ok: bool) -> ToolAnswer {
    ToolAnswer { id: id.into(), ok, output: format!("answer to {id}"), details: None }
}

fn invalid_field(result: Result<(), QueueError>) -> (String, String) {
    match result {
        Err(QueueError::Invalid { field, message }) => (field, message),
        other => panic!("expected an invalid request, got {other:?}"),
    }
}

async fn remote_tools_park_and_take_one_answer_per_call(queue: &dyn Queue) {
    let who = worker("w", &[("r", "1")]);
    let id = "remote-yes";
    let lease = park(queue, &who, id).await;
    let waiting = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((waiting.state, waiting.worker.as_deref()), (TaskState::AwaitingTool, None), "no worker holds it");
    let pending: Vec<(&str, &str)> =
        waiting.pending_tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str())).collect();
    assert_eq!(pending, [("c1", "lookup_order"), ("c2", "confirm_with_client")]);
    assert_eq!(waiting.pending_tool_calls[0].arguments, serde_json::json!({"order": 42}));
    let document = serde_json::to_value(&waiting).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(document["pending_tool_calls"][1]["arguments"], serde_json::json!({"text": "ok?"}));
    assert!(queue.claim(&who, LEASE).await.unwrap_or_else(|e| panic!("{e}")).is_none(), "not claimable while waiting");
    assert_eq!(queue.counts().await.unwrap_or_else(|e| panic!("{e}")).get(&TaskState::AwaitingTool), Some(&1));

    // Refused whole, naming the field: (answers, the field, a word the message must hold)
    let table: [(Vec<ToolAnswer>, &str, &str); 4] = [
        (vec![], "results", "c1, c2"),
        (vec![answer("c1", true), answer("c9", true)], "results[1].id", "c9"),
        (vec![answer("c2", true), answer("c2", true)], "results[1].id", "second"),
        (vec![answer("c2", true)], "results", "missing c1"),
    ];
    for (answers, field, word) in table {
        let (got, message) = invalid_field(queue.answer_tools(id, &answers).await);
        assert_eq!(got, field, "{message}");
        assert!(message.contains(word), "{field}: {message}");
    }
    let untouched = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(untouched.state, TaskState::AwaitingTool);
    assert!(untouched.steps[0].call_results.is_empty(), "a refused request stores nothing");
    assert!(matches!(queue.answer_tools("nobody", &[answer("c1", true)]).await, Err(QueueError::NotFound(_))));

    // The answers in another order than the calls: they are stored in the model's order.
    let details = serde_json::json!({"order_id": 42, "status": "shipped"});
    let answers = [ToolAnswer { details: Some(details.clone()), ..answer("c2", false) }, answer("c1", true)];
    queue.answer_tools(id, &answers).await.unwrap_or_else(|e| panic!("{e}"));
    let answered = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answered.state, TaskState::Queued);
    assert!(answered.pending_tool_calls.is_empty());
    let step = &answered.steps[0];
    let results: Vec<(&str, bool, Option<&serde_json::Value>)> =
        step.call_results.iter().map(|r| (r.call_id.as_str(), r.ok, r.details.as_ref())).collect();
    assert_eq!(results, [("c1", true, None), ("c2", false, Some(&details))]);
    let envelope = &step.results[1];
    assert_eq!(
        (envelope.tool.as_deref(), envelope.call_id.as_deref(), envelope.message.as_str(), envelope.details.as_ref()),
        (Some("confirm_with_client"), Some("c2"), "answer to c2", Some(&details))
    );
    assert!(!step.finished, "the runner finishes the step when it continues the turn");
    let events = queue.events_after(id, 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
    let finished: Vec<(&str, bool)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolFinished { call_id, ok, .. } => Some((call_id.as_str(), *ok)),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [("c1", true), ("c2", false)]);

    // A second answer is refused with the state the task is in now.
    let again = queue.answer_tools(id, &[answer("c1", true), answer("c2", true)]).await;
    assert!(matches!(again, Err(QueueError::WrongState { state: "queued", .. })), "{again:?}");
    let resumed = claim_id(queue, &who, id).await;
    assert_eq!(resumed.attempt, lease.attempt, "waiting for tool results does not use an attempt");
    assert_eq!(resumed.steps.last().map(|s| s.approval.is_some()), Some(false), "answers are no approval");
    assert_eq!(resumed.steps.last().map(|s| s.call_results.len()), Some(2), "the lease carries the answers");
    queue.finish(id, resumed.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
}

async fn a_task_awaiting_tools_is_cancelled_at_once(queue: &dyn Queue) {
    let who = worker("w", &[("r", "1")]);
    let id = "remote-cancel";
    park(queue, &who, id).await;
    assert_eq!(queue.cancel(id).await.unwrap_or_else(|e| panic!("{e}")), Cancelled::Now);
    let cancelled = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cancelled.state, TaskState::Cancelled);
    assert!(cancelled.pending_tool_calls.is_empty());
    let late = queue.answer_tools(id, &[answer("c1", true), answer("c2", true)]).await;
    assert!(matches!(late, Err(QueueError::WrongState { state: "cancelled", .. })), "{late:?}");
    assert!(queue.claim(&who, LEASE).await.unwrap_or_else(|e| panic!("{e}")).is_none());
}

/// Claims `id`, journals a step whose `ask_human` call waits, and parks the task for the question.
async fn ask(queue: &dyn Queue, who: &WorkerIdentity, id: &str) -> Lease {
    use agentd::record::{CallKind, ToolCall};
    queue.submit(new_task(id, &[("r", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
    let lease = claim_id(queue, who, id).await;
    let call = ToolCall {
        id: "q1".into(),
        kind: CallKind::Function { name: "ask_human".into(), arguments: serde_json::json!({"question": "which?"}) },
    };
    let asking = StepRecord { calls: vec![call], awaiting_tools: vec!["q1".into()], finished: false, ..step(0) };
    queue
        .record_step(id, lease.token, &asking, Duration::from_millis(5), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text = HumanAnswer::Text("x".into());
    let running = queue.answer_question(id, &text).await;
    assert!(matches!(running, Err(QueueError::WrongState { state: "running", .. })), "{running:?}");
    let release = Release::WaitForHuman { reason: "which?".into() };
    queue.release(id, lease.token, &release).await.unwrap_or_else(|e| panic!("{e}"));
    lease
}

async fn a_question_takes_one_answer_and_two_at_once_leave_one_winner(queue: &dyn Queue) {
    use agentd::record::Waiting;
    let who = worker("w", &[("r", "1")]);
    let id = "question";
    let lease = ask(queue, &who, id).await;
    let waiting = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((waiting.state, waiting.worker.as_deref()), (TaskState::WaitingForHuman, None));
    assert_eq!(waiting.waiting, Some(Waiting::Question { step: 0, call_id: "q1".into(), question: "which?".into() }));
    assert!(waiting.pending_tool_calls.is_empty(), "a question is not a remote call");
    assert!(queue.claim(&who, LEASE).await.unwrap_or_else(|e| panic!("{e}")).is_none(), "not claimable");
    let unknown = queue.answer_question("nobody", &HumanAnswer::Text("x".into())).await;
    assert!(matches!(unknown, Err(QueueError::NotFound(_))), "{unknown:?}");

    // Two answers at once: exactly one is stored.
    let (first, second) = (HumanAnswer::Text("first".into()), HumanAnswer::Text("second".into()));
    let (a, b) = tokio::join!(queue.answer_question(id, &first), queue.answer_question(id, &second));
    assert!(a.is_ok() != b.is_ok(), "one wins: {a:?} {b:?}");
    let loser = if a.is_ok() { b } else { a };
    assert!(matches!(loser, Err(QueueError::WrongState { state: "queued", .. })), "{loser:?}");
    let answered = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((answered.state, answered.waiting.as_ref()), (TaskState::Queued, None));
    let results = &answered.steps[0].call_results;
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(["first", "second"].contains(&results[0].message.as_str()));
    let events = queue.events_after(id, 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
    let answers =
        events.iter().filter(|e| matches!(&e.kind, EventKind::ToolFinished { name, .. } if name == "ask_human"));
    assert_eq!(answers.count(), 1);
    let resumed = claim_id(queue, &who, id).await;
    assert_eq!(resumed.attempt, lease.attempt, "waiting for an answer does not use an attempt");
    assert_eq!(resumed.steps.last().map(|s| s.call_results.len()), Some(1), "the lease carries the answer");
    queue.finish(id, resumed.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));

    // A timeout names its call: another call's is refused; `fail` ends the task `timeout`.
    let id = "question-timeout";
    ask(queue, &who, id).await;
    let timed_out = |call: &str| HumanAnswer::TimedOut {
        call_id: call.into(),
        then: agentd::task::OnHumanTimeout::Fail,
        after_secs: 5,
    };
    let other = queue.answer_question(id, &timed_out("q0")).await;
    assert!(matches!(other, Err(QueueError::WrongState { .. })), "{other:?}");
    queue.answer_question(id, &timed_out("q1")).await.unwrap_or_else(|e| panic!("{e}"));
    let ended = queue.get(id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ended.state, TaskState::Failed);
    assert_eq!(ended.outcome.as_ref().map(|o| o.reason), Some(EndReason::Timeout));
    let again = queue.answer_question(id, &timed_out("q1")).await;
    assert!(matches!(again, Err(QueueError::WrongState { state: "failed", .. })), "{again:?}");
}

/// A task with two steps and some events, claimed by `who` (running).
async fn with_history(queue: &dyn Queue, who: &WorkerIdentity, id: &str, labels: &[(&str, &str)]) -> Lease {
    queue.submit(new_task(id, labels)).await.unwrap_or_else(|e| panic!("{e}"));
    let lease = claim_id(queue, who, id).await;
    for index in 0..2 {
        queue
            .record_step(id, lease.token, &step(index), Duration::from_millis(5), &agentd::record::Usage::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let batch: Vec<Event> = (0..3).map(|i| event(id, lease.next_seq + i, i as u32)).collect();
    queue.append_events(id, Some(lease.token), &batch).await.unwrap_or_else(|e| panic!("{e}"));
    lease
}

/// What a refused deletion must leave: the task, its steps and its events, as they were.
async fn untouched(queue: &dyn Queue, id: &str, state: TaskState, steps: usize) {
    let record = queue.get(id).await.unwrap_or_else(|e| panic!("{id}: {e}"));
    assert_eq!(record.state, state, "{id}");
    assert_eq!(record.steps.len(), steps, "{id}: steps kept");
    assert!(!queue.events_after(id, 0, 100).await.unwrap_or_else(|e| panic!("{e}")).is_empty(), "{id}: events kept");
}

async fn only_finished_tasks_are_deleted_with_their_steps_and_events(queue: &dyn Queue) {
    let who = worker("w", &[("d", "1")]);
    let labels = [("d", "1")];
    // Finished, with history.
    let done = with_history(queue, &who, "del-done", &labels).await;
    queue.finish("del-done", done.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
    // Running, waiting for a human, awaiting tools, queued: none of them may go.
    let running = with_history(queue, &who, "del-running", &labels).await;
    let waiting = with_history(queue, &who, "del-waiting", &labels).await;
    queue
        .release("del-waiting", waiting.token, &Release::WaitForHuman { reason: "ok?".into() })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    park(queue, &worker("w", &[("r", "1")]), "del-parked").await;
    queue.submit(new_task("del-queued", &[("d", "never")])).await.unwrap_or_else(|e| panic!("{e}"));
    for (id, state, steps) in [
        ("del-running", TaskState::Running, 2),
        ("del-waiting", TaskState::WaitingForHuman, 2),
        ("del-parked", TaskState::AwaitingTool, 1),
        ("del-queued", TaskState::Queued, 0),
    ] {
        match queue.delete(id).await {
            Err(QueueError::WrongState { state: got, message, .. }) => {
                assert_eq!(got, state.as_str(), "{id}");
                assert!(message.contains("only a finished task"), "{id}: {message}");
            }
            other => panic!("{id}: deleting a {} task: {other:?}", state.as_str()),
        }
        untouched(queue, id, state, steps).await;
    }
    assert!(matches!(queue.delete("del-unknown").await, Err(QueueError::NotFound(_))));
    assert!(queue.purges(10).await.unwrap_or_else(|e| panic!("{e}")).is_empty(), "refusals list nothing to purge");

    queue.delete("del-done").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(queue.get("del-done").await, Err(QueueError::NotFound(_))));
    assert!(queue.events_after("del-done", 0, 100).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    assert!(matches!(queue.delete("del-done").await, Err(QueueError::NotFound(_))), "a second delete: not found");
    assert_eq!(queue.purges(10).await.unwrap_or_else(|e| panic!("{e}")), vec!["del-done".to_string()]);
    queue.purged(&["del-done".to_string()]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(queue.purges(10).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    // The id is free again, and nothing of the old task comes back with it.
    queue.submit(new_task("del-done", &labels)).await.unwrap_or_else(|e| panic!("{e}"));
    let fresh = queue.get("del-done").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(fresh.steps.is_empty());
    let events = queue.events_after("del-done", 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1], "only the new task_queued");
    // The running task finishes after all, and can go then.
    queue.finish("del-running", running.token, &finish(false)).await.unwrap_or_else(|e| panic!("{e}"));
    queue.delete("del-running").await.unwrap_or_else(|e| panic!("{e}"));
    let _ = queue.cancel("del-done").await;
}

async fn retention_finds_and_deletes_only_old_finished_tasks(queue: &dyn Queue) {
    let who = worker("w", &[("o", "1")]);
    let labels = [("o", "1")];
    let mut finished = Vec::new();
    for id in ["old-1", "old-2", "old-3"] {
        let lease = with_history(queue, &who, id, &labels).await;
        queue.finish(id, lease.token, &finish(id != "old-2")).await.unwrap_or_else(|e| panic!("{e}"));
        finished.push(id.to_string());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    queue.submit(new_task("old-cancelled", &[("o", "never")])).await.unwrap_or_else(|e| panic!("{e}"));
    queue.cancel("old-cancelled").await.unwrap_or_else(|e| panic!("{e}"));
    finished.push("old-cancelled".to_string());
    let running = with_history(queue, &who, "old-running", &labels).await;
    queue.submit(new_task("old-queued", &[("o", "never")])).await.unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(20)).await;

    let due = queue.finished_before(Duration::ZERO, 100).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(due, finished, "every finished task, oldest first, and nothing else");
    assert_eq!(queue.finished_before(Duration::ZERO, 2).await.unwrap_or_else(|e| panic!("{e}")), finished[..2]);
    assert!(
        queue.finished_before(Duration::from_secs(3600), 100).await.unwrap_or_else(|e| panic!("{e}")).is_empty(),
        "none finished an hour ago"
    );

    // A batch that names tasks that are not finished (or unknown) deletes only the finished ones.
    let mut batch = due.clone();
    batch.extend(["old-running".to_string(), "old-queued".to_string(), "old-unknown".to_string()]);
    let mut deleted = queue.delete_finished(&batch).await.unwrap_or_else(|e| panic!("{e}"));
    deleted.sort();
    let mut expected = finished.clone();
    expected.sort();
    assert_eq!(deleted, expected);
    for id in &finished {
        assert!(matches!(queue.get(id).await, Err(QueueError::NotFound(_))), "{id}");
        assert!(queue.events_after(id, 0, 10).await.unwrap_or_else(|e| panic!("{e}")).is_empty(), "{id}: events");
    }
    untouched(queue, "old-running", TaskState::Running, 2).await;
    untouched(queue, "old-queued", TaskState::Queued, 0).await;
    let mut purges = queue.purges(100).await.unwrap_or_else(|e| panic!("{e}"));
    purges.sort();
    assert_eq!(purges, expected);
    assert_eq!(queue.purges(2).await.unwrap_or_else(|e| panic!("{e}")).len(), 2, "bounded");
    let counts = queue.counts().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(counts.values().sum::<u64>(), 2, "{counts:?}");
    assert!(queue.delete_finished(&[]).await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    queue.finish("old-running", running.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
}

/// docs/humans.md: a message to a finished task queues a new turn after its steps, with a fresh attempt count and time
/// budget; the next claim hands the worker the turns and every step; the turns survive the next ending. A
/// message to a task that is not finished, or to no task, changes nothing.
async fn a_message_to_a_finished_task_queues_a_new_turn(queue: &dyn Queue) {
    let who = worker("w", &[("turns", "1")]);
    queue.submit(new_task("talk", &[("turns", "1")])).await.unwrap_or_else(|e| panic!("{e}"));
    // Not finished yet: refused while queued and while running.
    assert!(matches!(queue.add_turn("talk", "too early").await, Err(QueueError::WrongState { state: "queued", .. })));
    let lease = claim_id(queue, &who, "talk").await;
    assert!(lease.turns.is_empty(), "a task never sent a message has no stored turns");
    assert!(matches!(queue.add_turn("talk", "too early").await, Err(QueueError::WrongState { state: "running", .. })));
    for index in 0..2 {
        queue
            .record_step(
                "talk",
                lease.token,
                &step(index),
                Duration::from_millis(700),
                &agentd::record::Usage::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    queue.finish("talk", lease.token, &finish(false)).await.unwrap_or_else(|e| panic!("{e}"));
    let finished = queue.get("talk").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(queue.add_turn("nobody", "hello").await, Err(QueueError::NotFound(_))));

    let record = queue.add_turn("talk", "now open Reports").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((record.state, record.outcome.as_ref(), record.finished_at), (TaskState::Queued, None, None));
    assert_eq!(record.turns.len(), 2);
    assert_eq!((record.turns[0].first_step, record.turns[0].last_step), (0, Some(1)));
    assert_eq!(record.turns[0].outcome, finished.outcome, "the first turn keeps its outcome");
    assert_eq!(record.turns[0].instructions, "task talk");
    assert_eq!(
        (record.turns[1].index, record.turns[1].instructions.as_str(), record.turns[1].first_step),
        (1, "now open Reports", 2)
    );
    let events = queue.events_after("talk", 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(events.last().map(|e| &e.kind), Some(&EventKind::TurnQueued { turn: 1 }));
    // A second message while the turn is queued is refused, and changes nothing.
    assert!(matches!(queue.add_turn("talk", "and May").await, Err(QueueError::WrongState { .. })));
    assert_eq!(queue.get("talk").await.unwrap_or_else(|e| panic!("{e}")).turns, record.turns);

    let next = claim_id(queue, &who, "talk").await;
    assert_eq!(next.attempt, 1, "a new turn counts its attempts afresh");
    assert_eq!(next.elapsed, Duration::ZERO, "and its time");
    assert_eq!(next.steps.len(), 2, "with every step of the earlier turn");
    assert_eq!(next.turns, record.turns);
    assert_eq!(next.next_seq, events.last().map_or(0, |e| e.seq) + 1, "events keep counting");
    queue
        .record_step("talk", next.token, &step(2), Duration::from_millis(100), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    queue.finish("talk", next.token, &finish(true)).await.unwrap_or_else(|e| panic!("{e}"));
    let done = queue.get("talk").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!((done.turns[1].first_step, done.turns[1].last_step), (2, Some(2)));
    assert_eq!(done.turns[1].outcome, done.outcome);
    assert!(done.turns[1].started_at.is_some() && done.turns[1].finished_at.is_some(), "{:?}", done.turns[1]);
    assert_eq!(done.turns[0], record.turns[0]);
}

/// Take-over (docs/humans.md): a queued task parks at once, a running one when its worker hands it back (the heartbeat
/// carries the request), a lost worker's at the rescue; `resume` queues it with the note the next claim
/// carries, once; a taken-over task takes no decision and a second pause or resume is refused.
async fn a_person_takes_the_desktop_over_and_hands_it_back(queue: &dyn Queue) {
    let who = worker("w", &[("t", "1")]);
    fn ok<T>(e: QueueError) -> T {
        panic!("{e}")
    }
    fn wrong<T>(result: Result<T, QueueError>) -> bool {
        matches!(result, Err(QueueError::WrongState { .. }))
    }

    queue.submit(new_task("take", &[("t", "1")])).await.unwrap_or_else(ok);
    assert_eq!(queue.pause("take").await.unwrap_or_else(ok), Paused::Now);
    let parked = queue.get("take").await.unwrap_or_else(ok);
    assert_eq!(
        (parked.state, parked.waiting.clone()),
        (TaskState::WaitingForHuman, Some(Waiting::Takeover { step: None }))
    );
    assert!(queue.claim(&who, LEASE).await.unwrap_or_else(ok).is_none(), "a taken-over task holds no worker");
    assert!(wrong(queue.decide("take", &Decision::Approve).await), "no decision while a person has the desktop");
    assert!(matches!(queue.pause("take").await, Err(QueueError::WrongState { .. })));
    queue.resume("take", Some("logged in")).await.unwrap_or_else(ok);
    assert!(wrong(queue.resume("take", None).await), "handed back once");
    let lease = claim_id(queue, &who, "take").await;
    assert_eq!(lease.handed_back, Some(HandBack { note: Some("logged in".into()) }));
    assert_eq!(lease.attempt, 1);

    // Running: the heartbeat carries the request; the worker parks the task after its step.
    let held = queue.heartbeat("take", lease.token, LEASE).await.unwrap_or_else(ok);
    assert_eq!(held, LeaseStatus::Held { cancel_requested: false, pause_requested: false });
    assert_eq!(queue.pause("take").await.unwrap_or_else(ok), Paused::Requested);
    assert_eq!(queue.pause("take").await.unwrap_or_else(ok), Paused::Requested, "asking again changes nothing");
    let held = queue.heartbeat("take", lease.token, LEASE).await.unwrap_or_else(ok);
    assert_eq!(held, LeaseStatus::Held { cancel_requested: false, pause_requested: true });
    queue
        .record_step("take", lease.token, &step(0), Duration::from_millis(5), &agentd::record::Usage::default())
        .await
        .unwrap_or_else(ok);
    queue.release("take", lease.token, &Release::TakeOver).await.unwrap_or_else(ok);
    let parked = queue.get("take").await.unwrap_or_else(ok);
    assert_eq!(parked.waiting, Some(Waiting::Takeover { step: Some(0) }));
    assert_eq!(parked.worker, None);
    queue.resume("take", None).await.unwrap_or_else(ok);
    let lease = claim_id(queue, &who, "take").await;
    assert_eq!(lease.handed_back, Some(HandBack { note: None }));
    assert_eq!((lease.attempt, lease.steps.len()), (1, 1), "the same attempt, with its steps");
    let held = queue.heartbeat("take", lease.token, LEASE).await.unwrap_or_else(ok);
    assert_eq!(held, LeaseStatus::Held { cancel_requested: false, pause_requested: false }, "the request is spent");

    // The worker dies with a pause asked for: the rescuer parks the task for the person.
    assert_eq!(queue.pause("take").await.unwrap_or_else(ok), Paused::Requested);
    let _ = queue.heartbeat("take", lease.token, Duration::ZERO).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rescued = queue.rescue_expired().await.unwrap_or_else(ok);
    assert!(rescued.iter().any(|r| r.task_id == "take" && r.new_state == TaskState::WaitingForHuman), "{rescued:?}");
    assert!(matches!(queue.finish("take", lease.token, &finish(true)).await, Err(QueueError::LeaseLost(_))));
    assert_eq!(queue.get("take").await.unwrap_or_else(ok).waiting, Some(Waiting::Takeover { step: Some(0) }));
    // A taken-over task is cancelled at once; a finished one is not paused.
    assert_eq!(queue.cancel("take").await.unwrap_or_else(ok), Cancelled::Now);
    assert!(matches!(queue.pause("take").await, Err(QueueError::WrongState { .. })));
    assert!(matches!(queue.pause("nobody").await, Err(QueueError::NotFound(_))));
    assert!(matches!(queue.resume("nobody", None).await, Err(QueueError::NotFound(_))));
    let events = queue.events_after("take", 0, 100).await.unwrap_or_else(ok);
    let parks = events.iter().filter(|e| matches!(e.kind, EventKind::WaitingForHuman { .. })).count();
    assert_eq!(parks, 2, "the queue's own parks (queued, rescued) are events: {events:?}");
}

/// While a person has a task's desktop (docs/humans.md take-over), no other task of that desktop starts; other
/// desktops go on; the hand-back frees it.
async fn a_taken_over_desktop_is_kept_for_the_person(queue: &dyn Queue) {
    fn ok<T>(e: QueueError) -> T {
        panic!("{e}")
    }
    let local = serde_json::json!({"provider": "local", "display": ":0"});
    let who = desktop_worker("w", "host-a");
    queue.submit(desktop_task("desk-first", local.clone())).await.unwrap_or_else(ok);
    let (id, token) = claim_desk(queue, &who, LEASE).await.expect("claimed");
    assert_eq!(id, "desk-first");
    assert_eq!(queue.pause("desk-first").await.unwrap_or_else(ok), Paused::Requested);
    queue.release("desk-first", token, &Release::TakeOver).await.unwrap_or_else(ok);
    queue.submit(desktop_task("desk-second", local.clone())).await.unwrap_or_else(ok);
    queue.submit(desktop_task("desk-mock", serde_json::json!({"provider": "mock"}))).await.unwrap_or_else(ok);
    let (other, token) = claim_desk(queue, &who, LEASE).await.expect("a mock task has its own desktop");
    assert_eq!(other, "desk-mock");
    queue.finish(&other, token, &finish(true)).await.unwrap_or_else(ok);
    assert_eq!(claim_desk(queue, &who, LEASE).await, None, "the person has :0 of host-a");
    let elsewhere = desktop_worker("w2", "host-b");
    let (second, token) = claim_desk(queue, &elsewhere, LEASE).await.expect(":0 of another machine is free");
    assert_eq!(second, "desk-second");
    queue.finish(&second, token, &finish(true)).await.unwrap_or_else(ok);
    queue.submit(desktop_task("desk-third", local)).await.unwrap_or_else(ok);
    assert_eq!(claim_desk(queue, &who, LEASE).await, None);
    queue.resume("desk-first", None).await.unwrap_or_else(ok);
    let (back, _) = claim_desk(queue, &who, LEASE).await.expect("handed back");
    assert_eq!(back, "desk-first", "the handed-back task first: it is the older");
}
