//! A model provider's per-minute budget of requests and tokens (docs/models.md: `[models.NAME]
//! requests_per_minute`, `tokens_per_minute`) and a vendor's "wait" (a 429's retry-after), kept where every
//! caller that shares the vendor's limit sees them: in this process ([`LocalBudget`]), or in the fleet's
//! PostgreSQL (`queue::postgres`), so that ten nodes spend one budget, not ten, and a 429 on one node pauses
//! the others too.
//!
//! The decision is the generic cell rate algorithm (GCRA), written once here as pure functions of a
//! provider's [`Cells`] and the time: a request is a cell of 60/rpm seconds, a token one of 60/tpm seconds,
//! and neither may run more than a minute ahead of now — a bucket of one minute's budget refilled
//! continuously, as the vendors describe their limits. A request is counted when it is admitted. Tokens are
//! known only when an answer arrives: they are charged then, and the next request waits while the tokens
//! spent run more than a minute ahead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

/// The budget's window: a minute's requests and tokens may be spent at once.
const WINDOW: f64 = 60.0;
/// The longest single wait [`Budget::admit`] asks for: a caller asks again after it (the budget may have
/// been paused or freed meanwhile, by another node).
const MAX_WAIT: f64 = 60.0;

/// A provider's limits; `None` (or 0): not limited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

impl Limits {
    fn requests(&self) -> Option<f64> {
        self.requests_per_minute.filter(|&n| n > 0).map(f64::from)
    }

    fn tokens(&self) -> Option<f64> {
        self.tokens_per_minute.filter(|&n| n > 0).map(|n| n as f64)
    }

    /// Neither requests nor tokens are limited.
    pub fn is_unlimited(&self) -> bool {
        self.requests().is_none() && self.tokens().is_none()
    }
}

/// One provider's state, in seconds on the budget's clock: when the next request and the next token would be
/// due if they came evenly (GCRA's theoretical arrival times), and until when calls are paused.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cells {
    pub requests_at: f64,
    pub tokens_at: f64,
    pub paused_until: f64,
}

/// Whether a request may go out at `now`: `Ok` with the cells that count it, or `Err` with the seconds to
/// wait before asking again (nothing counted).
pub fn admit(cells: Cells, now: f64, limits: &Limits) -> Result<Cells, f64> {
    if cells.paused_until > now {
        return Err((cells.paused_until - now).min(MAX_WAIT));
    }
    if limits.tokens().is_some() && cells.tokens_at - now > WINDOW {
        return Err((cells.tokens_at - now - WINDOW).min(MAX_WAIT));
    }
    let mut next = cells;
    if let Some(rpm) = limits.requests() {
        let at = cells.requests_at.max(now) + WINDOW / rpm;
        if at - now > WINDOW {
            return Err((at - now - WINDOW).min(MAX_WAIT));
        }
        next.requests_at = at;
    }
    Ok(next)
}

/// The cells after a call that used `tokens`.
pub fn charge(cells: Cells, now: f64, tokens: u64, limits: &Limits) -> Cells {
    match limits.tokens() {
        Some(tpm) if tokens > 0 => {
            Cells { tokens_at: cells.tokens_at.max(now) + tokens as f64 * WINDOW / tpm, ..cells }
        }
        _ => cells,
    }
}

/// The cells after a vendor said to wait `wait` seconds from `now` (a 429's retry-after).
pub fn pause(cells: Cells, now: f64, wait: f64) -> Cells {
    Cells { paused_until: cells.paused_until.max(now + wait.max(0.0)), ..cells }
}

/// The budget could not be read or written (the database is out of reach): the caller goes on without it.
#[derive(Debug, thiserror::Error)]
#[error("the shared model rate budget is out of reach: {0}")]
pub struct BudgetError(pub String);

/// Where the budgets of a process's model providers are kept. `key` names a provider's endpoint
/// (`anthropic https://api.anthropic.com:443`).
#[async_trait]
pub trait Budget: Send + Sync + std::fmt::Debug {
    /// Counts a request and returns zero, or returns how long to wait before asking again.
    async fn admit(&self, key: &str, limits: &Limits) -> Result<Duration, BudgetError>;
    /// Charges the tokens a call used.
    async fn charge(&self, key: &str, tokens: u64, limits: &Limits) -> Result<(), BudgetError>;
    /// No call to `key` from anyone sharing this budget before `wait` has passed.
    async fn pause(&self, key: &str, wait: Duration) -> Result<(), BudgetError>;
    /// Whether other processes share it (then even an unlimited provider asks it, for the pauses).
    fn is_shared(&self) -> bool;
}

/// The budget of this process alone.
#[derive(Debug)]
pub struct LocalBudget {
    start: Instant,
    cells: Mutex<HashMap<String, Cells>>,
}

impl Default for LocalBudget {
    fn default() -> Self {
        Self { start: Instant::now(), cells: Mutex::new(HashMap::new()) }
    }
}

impl LocalBudget {
    fn update<T>(&self, key: &str, change: impl FnOnce(Cells, f64) -> (Cells, T)) -> T {
        let now = self.start.elapsed().as_secs_f64();
        // A panic while the map was held left it whole (every change is one insert).
        let mut cells = self.cells.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = cells.entry(key.to_string()).or_default();
        let (next, out) = change(*entry, now);
        *entry = next;
        out
    }
}

#[async_trait]
impl Budget for LocalBudget {
    async fn admit(&self, key: &str, limits: &Limits) -> Result<Duration, BudgetError> {
        Ok(self.update(key, |cells, now| match admit(cells, now, limits) {
            Ok(next) => (next, Duration::ZERO),
            Err(wait) => (cells, Duration::from_secs_f64(wait)),
        }))
    }

    async fn charge(&self, key: &str, tokens: u64, limits: &Limits) -> Result<(), BudgetError> {
        self.update(key, |cells, now| (charge(cells, now, tokens, limits), ()));
        Ok(())
    }

    async fn pause(&self, key: &str, wait: Duration) -> Result<(), BudgetError> {
        self.update(key, |cells, now| (pause(cells, now, wait.as_secs_f64()), ()));
        Ok(())
    }

    fn is_shared(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RPM: Limits = Limits { requests_per_minute: Some(12), tokens_per_minute: None };

    /// Admits requests at `now` until one must wait; how many went.
    fn burst(cells: &mut Cells, now: f64, limits: &Limits) -> u32 {
        let mut n = 0;
        while let Ok(next) = admit(*cells, now, limits) {
            *cells = next;
            n += 1;
        }
        n
    }

    #[test]
    fn a_minutes_requests_go_at_once_then_one_every_sixtieth_of_a_minute_over_the_rate() {
        let mut cells = Cells::default();
        assert_eq!(burst(&mut cells, 100.0, &RPM), 12);
        // The 13th waits for the first cell to drain: 5 s at 12 a minute.
        assert_eq!(admit(cells, 100.0, &RPM), Err(5.0));
        assert_eq!(burst(&mut cells, 105.0, &RPM), 1);
        assert_eq!(burst(&mut cells, 107.0, &RPM), 0);
        // Over any minute, at most a minute's budget beyond the first burst: 12 more in the next 60 s.
        let more: u32 = (0..60).map(|s| burst(&mut cells, 105.0 + f64::from(s) + 1.0, &RPM)).sum();
        assert_eq!(more, 12);
    }

    #[test]
    fn tokens_spent_beyond_a_minutes_budget_hold_the_next_request() {
        let limits = Limits { requests_per_minute: None, tokens_per_minute: Some(1000) };
        let cells = Cells::default();
        let cells = charge(admit(cells, 0.0, &limits).unwrap_or_default(), 0.0, 1500, &limits);
        // 1,500 tokens at 1,000 a minute run 90 s ahead: 30 s over the window.
        assert_eq!(admit(cells, 0.0, &limits), Err(30.0));
        assert!(admit(cells, 30.0, &limits).is_ok());
    }

    #[test]
    fn a_pause_holds_every_request_until_it_ends_even_without_limits() {
        let cells = pause(Cells::default(), 10.0, 20.0);
        assert_eq!(admit(cells, 15.0, &Limits::default()), Err(15.0));
        assert!(admit(cells, 30.0, &Limits::default()).is_ok());
        // A shorter pause does not shorten a longer one.
        assert_eq!(pause(cells, 12.0, 1.0).paused_until, 30.0);
    }

    #[tokio::test]
    async fn the_local_budget_keeps_one_state_per_endpoint() {
        let budget = LocalBudget::default();
        for _ in 0..12 {
            assert_eq!(budget.admit("a", &RPM).await.ok(), Some(Duration::ZERO));
        }
        assert!(budget.admit("a", &RPM).await.is_ok_and(|wait| wait > Duration::from_secs(4)));
        assert_eq!(budget.admit("b", &RPM).await.ok(), Some(Duration::ZERO));
    }
}
