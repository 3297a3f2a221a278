//! The sink that numbers a task's events (docs/events.md; the event types are `record::events`).
//!
//! Every event is `{seq, task_id, ts, type, …}`; `seq` is per task, strictly increasing, and continues
//! across attempts (a resumed task starts its sink after the last stored seq). The sink never blocks: it
//! hands events to an unbounded channel whose reader (a progress printer, the daemon's event store) runs
//! beside the loop.
//!
//! The sink is also where events are redacted (docs/security.md): once [`EventSink::seal`] gives it a task's secrets,
//! every
//! event — from the loop, the uploader's callback, the attempt's `task_finished` — has each secret's value
//! replaced by its placeholder before it is numbered, so the event store, SSE and progress output never see
//! one. (The loop redacts at the source too; this is the one place every event passes.)

use std::sync::{Arc, Mutex};

use time::OffsetDateTime;
use tokio::sync::mpsc;

use crate::record::events::{Event, EventKind};
use crate::tools::secrets::Secrets;

/// Numbers, timestamps and forwards a task's events. Cheap to clone; safe to use from several tasks.
#[derive(Clone)]
pub struct EventSink {
    task_id: Arc<str>,
    /// The next seq and the channel, under one lock so events enter the channel in seq order.
    inner: Arc<Mutex<(u64, Option<mpsc::UnboundedSender<Event>>)>>,
    /// The task's secrets, redacted out of every event.
    secrets: Arc<Mutex<Secrets>>,
}

impl EventSink {
    /// A sink whose first event gets `next_seq`, and the receiving end.
    pub fn channel(task_id: &str, next_seq: u64) -> (Self, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Mutex::new((next_seq, Some(tx))));
        (Self { task_id: task_id.into(), inner, secrets: Arc::default() }, rx)
    }

    /// A sink that numbers events and drops them (for embedding without observers).
    pub fn discard(task_id: &str) -> Self {
        Self { task_id: task_id.into(), inner: Arc::new(Mutex::new((1, None))), secrets: Arc::default() }
    }

    /// Redacts `secrets` out of every event emitted from now on, through this sink and all its clones.
    pub fn seal(&self, secrets: Secrets) {
        *self.secrets.lock().unwrap_or_else(|p| p.into_inner()) = secrets;
    }

    /// The secrets this sink redacts (none before [`EventSink::seal`]).
    pub fn secrets(&self) -> Secrets {
        self.secrets.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn emit(&self, kind: EventKind) {
        let secrets = self.secrets.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let kind = match secrets.redact_serde(&kind) {
            Ok(None) => kind,
            Ok(Some(redacted)) => redacted,
            // The redacted event no longer reads as one (a value equal to a field's tag): withheld.
            Err(()) => EventKind::Error {
                step: None,
                message: format!("a `{}` event was withheld: it contained a secret", kind.type_name()),
                retryable: false,
            },
        };
        let mut guard = match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let seq = guard.0;
        guard.0 += 1;
        if let Some(tx) = &guard.1 {
            let event = Event { seq, task_id: self.task_id.to_string(), ts: OffsetDateTime::now_utc(), kind };
            // A closed receiver means nobody listens any more; the task goes on regardless.
            let _ = tx.send(event);
        }
    }

    /// The seq of the last event emitted (0 before the first of this sink, or the seq before `next_seq`).
    pub fn last_seq(&self) -> u64 {
        match self.inner.lock() {
            Ok(guard) => guard.0.saturating_sub(1),
            Err(poisoned) => poisoned.into_inner().0.saturating_sub(1),
        }
    }

    pub fn task_id(&self) -> &str {
        &self.task_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_numbered_in_order_and_serialize_with_type() {
        let (sink, mut rx) = EventSink::channel("t1", 7);
        sink.emit(EventKind::StepStarted { step: 0, by: crate::record::By::Model });
        sink.emit(EventKind::WaitingForHuman { reason: "x".into(), question: None, call_id: None });
        let a = rx.try_recv().unwrap();
        let b = rx.try_recv().unwrap();
        assert_eq!((a.seq, b.seq), (7, 8));
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["type"], "step_started");
        assert_eq!(json["task_id"], "t1");
        assert_eq!(json["step"], 0);
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn a_sealed_sink_redacts_every_event_of_every_clone() {
        use crate::task::secrets::SecretName;
        let (sink, mut rx) = EventSink::channel("t1", 1);
        let clone = sink.clone();
        let secrets = Secrets::new(vec![(SecretName::parse("pw").unwrap(), "pa55-word".into())]).unwrap();
        sink.seal(secrets);
        clone.emit(EventKind::ActionFinished {
            step: 0,
            index: 0,
            ok: false,
            message: "cannot type pa55-word".into(),
            duration_ms: 1,
        });
        clone.emit(EventKind::ToolStarted {
            step: 0,
            call_id: "c".into(),
            name: "t".into(),
            arguments: serde_json::json!({"p": "pa55-word"}),
        });
        for _ in 0..2 {
            let json = serde_json::to_string(&rx.try_recv().unwrap()).unwrap();
            assert!(!json.contains("pa55-word") && json.contains("<secret:pw>"), "{json}");
        }
    }
}
