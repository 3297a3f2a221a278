//! The transport every vendor adapter shares: one HTTP client per process, one rate limiter per provider
//! endpoint, retries, timeouts, Server-Sent Events (parsed by [`crate::sse`]), error classification, and
//! secrets kept out of text.
//!
//! Retry policy (after the official Anthropic and OpenAI Python SDKs, `_base_client.py` at anthropic-sdk-python
//! 009b0353 / openai-python e43b4224, and `shared/reference/reliability.md`, section 3):
//! - retried: 408, 409, 429, every 5xx (529 `overloaded_error` included), connection errors, timeouts, a
//!   stream cut before its terminal event, an error event inside a stream that names a retryable type;
//!   `x-should-retry: true|false` overrides the status;
//! - never retried: any other 4xx, and OpenAI's 429 `insufficient_quota`;
//! - delay: the server's hint first — `retry-after-ms`, then `retry-after` (seconds, fractional, or an HTTP
//!   date), then Gemini's `google.rpc.RetryInfo.retryDelay` in the error body — else exponential backoff
//!   `min(0.5 s · 2^(n-1), 8 s)` with equal jitter (a random factor in [0.5, 1]);
//! - a hint above 60 s is not slept on: the call fails with [`ModelError::RateLimited`] so the task can be
//!   rescheduled without holding a worker;
//! - failures (5xx, 529, timeouts, 429 without a hint) use `max_retries`; throttling with a hint (429 +
//!   `retry-after`) is waited out within a separate time budget (`rate_limit_wait`), because waiting as
//!   asked is not a failure, and a storm shared by many tasks would otherwise exhaust every task's retries.
//!
//! The [`Limiter`] is shared by every task of the process that talks to one endpoint. It is an AIMD
//! concurrency window (halved on 429/529/5xx, +1 on success) with a gate: a 429 with a delay hint closes the
//! gate for everyone until the delay has passed, and then only one probe request goes out until one
//! succeeds — so N tasks in a storm send at the rate `retry-after` allows, not N times that. Ten
//! consecutive failures open the gate's circuit breaker for 30 s.
//!
//! All time goes through `tokio::time`, so tests run it on a paused clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{ModelError, ModelTurn};
use crate::budget::{Budget, Limits};
pub use crate::sse::{SseEvent, SseParser};

/// A secret (an API key). It never prints: `Debug` shows `Secret(***)`, and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into().trim().to_string())
    }

    /// The value, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the secret replaced (vendors sometimes echo part of a key back).
    pub fn redact(&self, text: &str) -> String {
        if self.0.len() < 4 { text.to_string() } else { text.replace(&self.0, "***") }
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Timeouts of one request attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    /// TCP + TLS connect.
    pub connect: Duration,
    /// Longest silence between two chunks of a response body (streams send pings well within it).
    pub idle: Duration,
    /// The whole attempt, from sending to the last byte.
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { connect: Duration::from_secs(5), idle: Duration::from_secs(60), total: Duration::from_secs(600) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after failures (5xx, 529, timeouts, 429 without a delay hint).
    pub max_retries: u32,
    pub base: Duration,
    pub cap: Duration,
    /// Longest server-requested delay that is slept on; longer ones fail the call as rate limited.
    pub max_hint: Duration,
    /// Total time one call may spend waiting out 429s that carry a delay hint.
    pub rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
            max_hint: Duration::from_secs(60),
            rate_limit_wait: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// The backoff before retry number `n` (1-based), with equal jitter.
    pub fn backoff(&self, n: u32) -> Duration {
        let exp = self.base.as_secs_f64() * 2f64.powi(n.saturating_sub(1).min(30) as i32);
        let capped = exp.min(self.cap.as_secs_f64());
        Duration::from_secs_f64(capped * (0.5 + 0.5 * fastrand::f64()))
    }
}

/// How an attempt went, as the limiter sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttemptOutcome {
    Success,
    /// 429 (with the server's delay, if it gave one).
    Throttled(Option<Duration>),
    /// 5xx, 529, a timeout, a broken connection.
    Failed,
    /// Says nothing about the server's load (a 400, a cancelled call).
    Neutral,
}

#[derive(Debug)]
struct LimiterState {
    window: f64,
    in_flight: u32,
    blocked_until: Option<Instant>,
    /// After throttling, one request at a time until one succeeds.
    probing: bool,
    consecutive_failures: u32,
}

/// The per-endpoint rate limiter shared by every task of the process (see the module docs).
#[derive(Debug)]
pub struct Limiter {
    state: Mutex<LimiterState>,
    notify: Notify,
    max_concurrency: u32,
}

/// Consecutive failures that open the circuit breaker, and how long it stays open.
const BREAKER_THRESHOLD: u32 = 10;
const BREAKER_OPEN: Duration = Duration::from_secs(30);

impl Limiter {
    pub fn new(max_concurrency: u32) -> Self {
        let max_concurrency = max_concurrency.max(1);
        Self {
            state: Mutex::new(LimiterState {
                window: f64::from(max_concurrency),
                in_flight: 0,
                blocked_until: None,
                probing: false,
                consecutive_failures: 0,
            }),
            notify: Notify::new(),
            max_concurrency,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LimiterState> {
        // The state stays consistent across a panic in a holder (every update is a few assignments).
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until a request may go out.
    pub async fn acquire(&self) -> Permit<'_> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wait_until = {
                let mut s = self.lock();
                let now = Instant::now();
                match s.blocked_until {
                    Some(until) if until > now => Some(until),
                    _ => {
                        s.blocked_until = None;
                        let cap = if s.probing { 1 } else { (s.window.floor() as u32).max(1) };
                        if s.in_flight < cap {
                            s.in_flight += 1;
                            return Permit { limiter: self, done: false };
                        }
                        None
                    }
                }
            };
            match wait_until {
                Some(until) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    fn release(&self, outcome: AttemptOutcome) {
        {
            let mut s = self.lock();
            s.in_flight = s.in_flight.saturating_sub(1);
            let now = Instant::now();
            match outcome {
                AttemptOutcome::Success => {
                    s.window = (s.window + 1.0).min(f64::from(self.max_concurrency));
                    s.probing = false;
                    s.consecutive_failures = 0;
                }
                AttemptOutcome::Throttled(hint) => {
                    s.window = (s.window / 2.0).max(1.0);
                    s.probing = true;
                    if let Some(hint) = hint {
                        let until = now + hint;
                        s.blocked_until = Some(s.blocked_until.map_or(until, |b| b.max(until)));
                    }
                }
                AttemptOutcome::Failed => {
                    s.window = (s.window / 2.0).max(1.0);
                    s.consecutive_failures += 1;
                    if s.consecutive_failures >= BREAKER_THRESHOLD {
                        s.consecutive_failures = 0;
                        s.probing = true;
                        let until = now + BREAKER_OPEN;
                        s.blocked_until = Some(s.blocked_until.map_or(until, |b| b.max(until)));
                        tracing::warn!("model endpoint failed {BREAKER_THRESHOLD} times in a row; pausing 30 s");
                    }
                }
                AttemptOutcome::Neutral => {}
            }
        }
        self.notify.notify_waiters();
    }

    /// The current concurrency window (for tests and metrics).
    pub fn window(&self) -> f64 {
        self.lock().window
    }
}

/// The right to send one request; released with the attempt's outcome (a dropped permit is neutral).
pub struct Permit<'a> {
    limiter: &'a Limiter,
    done: bool,
}

impl Permit<'_> {
    pub fn finish(mut self, outcome: AttemptOutcome) {
        self.done = true;
        self.limiter.release(outcome);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.limiter.release(AttemptOutcome::Neutral);
        }
    }
}

/// Why one attempt failed.
#[derive(Debug)]
pub enum AttemptError {
    /// Try again (after `hint` when the server gave one). `throttled` for rate limiting (429).
    Retry { message: String, hint: Option<Duration>, throttled: bool },
    /// Give up.
    Fatal(ModelError),
}

impl AttemptError {
    pub fn retry(message: impl Into<String>) -> Self {
        Self::Retry { message: message.into(), hint: None, throttled: false }
    }

    pub fn protocol(message: impl Into<String>) -> Self {
        Self::Fatal(ModelError::Protocol(message.into()))
    }
}

/// Turns a response (a JSON body or a stream of events) into an adapter's result. Reset before each attempt.
pub trait Decoder {
    type Output;
    /// Called before every attempt: forget what an earlier attempt decoded.
    fn start(&mut self);
    /// One event of a streamed response.
    fn event(&mut self, event: SseEvent) -> Result<(), AttemptError>;
    /// The whole body of a non-streamed response.
    fn body(&mut self, body: &[u8]) -> Result<(), AttemptError>;
    /// The response ended; a stream that ended before its terminal event should return a `Retry`.
    fn finish(&mut self) -> Result<Self::Output, AttemptError>;
}

/// How the API key travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer KEY`.
    Bearer,
    /// A named header (`x-api-key`, `x-goog-api-key`).
    Header(&'static str),
}

/// A prepared request. The body is JSON text; `stream` says how to read the response.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub stream: bool,
}

/// Largest non-streamed response body read.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Largest error body kept for the message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// One provider endpoint: the shared client and limiter, with this adapter's key, timeouts and retries.
#[derive(Clone)]
pub struct Endpoint {
    pub provider: &'static str,
    pub client: reqwest::Client,
    pub limiter: Arc<Limiter>,
    /// The vendor's per-minute budget (`crate::budget`): this process's, or the fleet's.
    pub budget: Arc<dyn Budget>,
    /// The endpoint's name in the budget (provider and origin).
    pub budget_key: String,
    pub limits: Limits,
    pub retry: RetryPolicy,
    pub timeouts: Timeouts,
    pub key: Option<Secret>,
    pub auth: Auth,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("retry", &self.retry)
            .field("timeouts", &self.timeouts)
            .field("key", &self.key)
            .finish()
    }
}

impl Endpoint {
    /// Text safe to show: the key removed.
    pub fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(key) => key.redact(text),
            None => text.to_string(),
        }
    }

    /// Sends `request` until it succeeds or the retry policy gives up.
    pub async fn execute<D: Decoder<Output = ModelTurn>>(
        &self,
        request: &HttpRequest,
        decoder: &mut D,
    ) -> Result<ModelTurn, ModelError> {
        let mut failures = 0u32;
        let mut throttled_for = Duration::ZERO;
        loop {
            self.within_budget().await;
            let permit = self.limiter.acquire().await;
            let attempt = tokio::time::timeout(self.timeouts.total, self.attempt(request, decoder)).await;
            let error = match attempt {
                Ok(Ok(output)) => {
                    permit.finish(AttemptOutcome::Success);
                    self.charge(&output.usage).await;
                    return Ok(output);
                }
                Ok(Err(error)) => error,
                Err(_) => {
                    AttemptError::retry(format!("no complete response within {} s", self.timeouts.total.as_secs_f64()))
                }
            };
            let (message, hint, throttled) = match error {
                AttemptError::Fatal(error) => {
                    permit.finish(AttemptOutcome::Neutral);
                    return Err(error);
                }
                AttemptError::Retry { message, hint, throttled } => (self.redact(&message), hint, throttled),
            };
            if throttled && let Some(hint) = hint {
                // Everyone who shares the vendor's limit waits too.
                self.pause_everyone(hint).await;
            }
            if let Some(hint) = hint
                && hint > self.retry.max_hint
            {
                permit.finish(AttemptOutcome::Throttled(Some(hint)));
                return Err(ModelError::RateLimited { retry_after_secs: hint.as_secs().max(1), message });
            }
            let delay = if throttled && let Some(hint) = hint {
                permit.finish(AttemptOutcome::Throttled(Some(hint)));
                throttled_for += hint;
                if throttled_for > self.retry.rate_limit_wait {
                    return Err(ModelError::RateLimited { retry_after_secs: hint.as_secs().max(1), message });
                }
                hint
            } else {
                permit.finish(if throttled { AttemptOutcome::Throttled(None) } else { AttemptOutcome::Failed });
                failures += 1;
                if failures > self.retry.max_retries {
                    return Err(ModelError::Unavailable(format!(
                        "{} after {} retries: {message}",
                        self.provider, self.retry.max_retries
                    )));
                }
                hint.unwrap_or_else(|| self.retry.backoff(failures))
            };
            tracing::warn!(provider = self.provider, failures, delay_ms = delay.as_millis() as u64, %message, "model request failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// Waits until the vendor's per-minute budget admits a request (counting it). A budget out of reach is
    /// passed over with a warning: the process's own limiter still holds.
    async fn within_budget(&self) {
        if self.limits.is_unlimited() && !self.budget.is_shared() {
            return;
        }
        loop {
            match self.budget.admit(&self.budget_key, &self.limits).await {
                Ok(wait) if wait.is_zero() => return,
                Ok(wait) => {
                    tracing::debug!(
                        provider = self.provider,
                        wait_ms = wait.as_millis() as u64,
                        "waiting for the rate budget"
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    tracing::warn!(provider = self.provider, error = %e, "the request goes without the shared rate budget");
                    return;
                }
            }
        }
    }

    async fn charge(&self, usage: &crate::record::Usage) {
        if self.limits.tokens_per_minute.is_none() {
            return;
        }
        let tokens = usage.input_tokens + usage.output_tokens;
        if let Err(e) = self.budget.charge(&self.budget_key, tokens, &self.limits).await {
            tracing::warn!(provider = self.provider, error = %e, "tokens not charged to the shared rate budget");
        }
    }

    async fn pause_everyone(&self, wait: Duration) {
        if let Err(e) = self.budget.pause(&self.budget_key, wait).await {
            tracing::warn!(provider = self.provider, error = %e, "the vendor's wait not shared");
        }
    }

    async fn attempt<D: Decoder>(&self, request: &HttpRequest, decoder: &mut D) -> Result<D::Output, AttemptError> {
        let mut builder = self
            .client
            .post(&request.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(request.body.clone());
        if request.stream {
            builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
        }
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        if let Some(key) = &self.key {
            builder = match self.auth {
                Auth::Bearer => builder.bearer_auth(key.expose()),
                Auth::Header(name) => builder.header(name, key.expose()),
            };
        }
        // A streamed response starts at once (headers, then events); a silent server there is as stuck as a
        // silent stream. A non-streamed one may think for minutes before its headers: only `total` bounds it.
        let sent = builder.send();
        let sent = if request.stream {
            tokio::time::timeout(self.timeouts.idle, sent).await.map_err(|_| {
                AttemptError::retry(format!("no response headers within {} s", self.timeouts.idle.as_secs_f64()))
            })?
        } else {
            sent.await
        };
        let mut response = sent.map_err(|e| AttemptError::retry(describe_reqwest(&e)))?;
        let status = response.status().as_u16();
        let request_id = ["request-id", "x-request-id"]
            .iter()
            .find_map(|name| response.headers().get(*name).and_then(|v| v.to_str().ok()))
            .unwrap_or_default();
        tracing::debug!(provider = self.provider, status, request_id, "model response");
        if !(200..300).contains(&status) {
            let headers = response.headers().clone();
            let body = read_limited(&mut response, self.timeouts.idle, MAX_ERROR_BODY).await.unwrap_or_default();
            return Err(classify(self.provider, status, &headers, &body, &|t| self.redact(t)));
        }
        decoder.start();
        if request.stream {
            let mut parser = SseParser::default();
            let mut events = Vec::new();
            loop {
                let chunk = next_chunk(&mut response, self.timeouts.idle).await?;
                let Some(chunk) = chunk else { break };
                parser.push(&chunk, &mut events).map_err(AttemptError::protocol)?;
                for event in events.drain(..) {
                    decoder.event(event)?;
                }
            }
        } else {
            let body = read_limited(&mut response, self.timeouts.idle, MAX_BODY).await?;
            decoder.body(&body)?;
        }
        decoder.finish()
    }
}

async fn next_chunk(response: &mut reqwest::Response, idle: Duration) -> Result<Option<bytes::Bytes>, AttemptError> {
    match tokio::time::timeout(idle, response.chunk()).await {
        Ok(Ok(chunk)) => Ok(chunk),
        Ok(Err(e)) => Err(AttemptError::retry(format!("the response broke off: {}", describe_reqwest(&e)))),
        Err(_) => Err(AttemptError::retry(format!("the response was silent for {} s", idle.as_secs_f64()))),
    }
}

async fn read_limited(response: &mut reqwest::Response, idle: Duration, limit: usize) -> Result<Vec<u8>, AttemptError> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                if out.len() + chunk.len() > limit {
                    return Err(AttemptError::protocol(format!("response body larger than {limit} bytes")));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(Ok(None)) => return Ok(out),
            Ok(Err(e)) => return Err(AttemptError::retry(format!("the response broke off: {}", describe_reqwest(&e)))),
            Err(_) => return Err(AttemptError::retry(format!("the response was silent for {} s", idle.as_secs_f64()))),
        }
    }
}

/// A transport error without its URL (URLs may carry a Gemini key in a query in other clients; ours never
/// do, but the rule is simple: no URLs in messages).
fn describe_reqwest(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "body error"
    } else if e.is_request() {
        "request error"
    } else {
        "transport error"
    };
    let mut text = kind.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The delay a response asks for: `retry-after-ms`, then `retry-after` (seconds or an HTTP date), then
/// Gemini's `RetryInfo` in the body. Zero or negative values count as no hint.
pub fn retry_hint(headers: &reqwest::header::HeaderMap, body: &serde_json::Value) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms > 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    if let Some(value) = header("retry-after") {
        if let Ok(secs) = value.parse::<f64>() {
            if secs.is_finite() && secs > 0.0 {
                return Some(Duration::from_secs_f64(secs.min(1e9)));
            }
        } else if let Some(at) = parse_http_date(value) {
            let now = time::OffsetDateTime::now_utc();
            let secs = (at - now).as_seconds_f64();
            if secs > 0.0 {
                return Some(Duration::from_secs_f64(secs.min(1e9)));
            }
        }
    }
    gemini_retry_delay(body)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (IMF-fixdate, RFC 9110, section 5.6.7).
fn parse_http_date(value: &str) -> Option<time::OffsetDateTime> {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::PrimitiveDateTime::parse(value, format).ok().map(|t| t.assume_utc())
}

/// `{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34.4s"}]}}`.
fn gemini_retry_delay(body: &serde_json::Value) -> Option<Duration> {
    let details = body.pointer("/error/details")?.as_array()?;
    details.iter().find_map(|d| {
        let kind = d.get("@type")?.as_str()?;
        if !kind.ends_with("google.rpc.RetryInfo") {
            return None;
        }
        let secs = d.get("retryDelay")?.as_str()?.strip_suffix('s')?.parse::<f64>().ok()?;
        (secs.is_finite() && secs > 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)))
    })
}

/// The vendor's error message from an error body (`{"error": {"message": …}}` in all three APIs).
pub fn error_message(body: &serde_json::Value, raw: &[u8]) -> String {
    let message = body
        .pointer("/error/message")
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .or_else(|| body.get("message").and_then(|m| m.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&raw[..raw.len().min(300)]).into_owned());
    let kind = body
        .pointer("/error/type")
        .or_else(|| body.pointer("/error/status"))
        .or_else(|| body.pointer("/error/code"))
        .and_then(|t| t.as_str());
    let mut message = match kind {
        Some(kind) if !message.contains(kind) => format!("{kind}: {message}"),
        _ => message,
    };
    if message.len() > 500 {
        let mut end = 500;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// Classifies a non-2xx response.
pub fn classify(
    provider: &str,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    raw: &[u8],
    redact: &dyn Fn(&str) -> String,
) -> AttemptError {
    let body: serde_json::Value = serde_json::from_slice(raw).unwrap_or(serde_json::Value::Null);
    let message = redact(&format!("HTTP {status}: {}", error_message(&body, raw)));
    let hint = retry_hint(headers, &body);
    let should_retry = headers.get("x-should-retry").and_then(|v| v.to_str().ok());
    let code = body.pointer("/error/code").and_then(|c| c.as_str()).unwrap_or_default();
    if status == 429 && code == "insufficient_quota" {
        return AttemptError::Fatal(ModelError::Rejected { status, message });
    }
    if status == 401 || status == 403 {
        return AttemptError::Fatal(ModelError::Auth(format!("{provider}: {message}")));
    }
    let retryable = match should_retry {
        Some("true") => true,
        Some("false") => false,
        _ => matches!(status, 408 | 409 | 429) || status >= 500,
    };
    if retryable {
        AttemptError::Retry { message, hint, throttled: status == 429 }
    } else {
        AttemptError::Fatal(ModelError::Rejected { status, message })
    }
}

/// An error event inside a stream (`event: error` from Anthropic, `error` / `response.failed` from OpenAI):
/// retried when its type says the server was overloaded or failed, fatal otherwise.
pub fn stream_error(provider: &str, body: &serde_json::Value, redact: &dyn Fn(&str) -> String) -> AttemptError {
    let message = redact(&format!("error in stream: {}", error_message(body, b"")));
    let kind = body
        .pointer("/error/type")
        .or_else(|| body.pointer("/error/code"))
        .or_else(|| body.pointer("/response/error/code"))
        .or_else(|| body.get("code"))
        .and_then(|t| t.as_str())
        .unwrap_or_default();
    match kind {
        "overloaded_error"
        | "api_error"
        | "timeout_error"
        | "rate_limit_error"
        | "server_error"
        | "rate_limit_exceeded"
        | "internal_error" => AttemptError::Retry { message, hint: None, throttled: kind.contains("rate_limit") },
        "authentication_error" | "permission_error" => {
            AttemptError::Fatal(ModelError::Auth(format!("{provider}: {message}")))
        }
        _ => AttemptError::Fatal(ModelError::Rejected { status: 200, message }),
    }
}

/// The process-wide HTTP clients (one per connect timeout) and limiters (one per provider endpoint).
#[derive(Default)]
pub struct Transport {
    clients: Mutex<HashMap<u64, reqwest::Client>>,
    limiters: Mutex<HashMap<String, Arc<Limiter>>>,
}

impl Transport {
    pub fn client(&self, connect: Duration) -> Result<reqwest::Client, ModelError> {
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = connect.as_millis() as u64;
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(connect)
            .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {e}")))?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// The limiter of an endpoint (`key` names the provider and base URL), created on first use.
    pub fn limiter(&self, key: &str, max_concurrency: u32) -> Arc<Limiter> {
        let mut limiters = self.limiters.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        limiters.entry(key.to_string()).or_insert_with(|| Arc::new(Limiter::new(max_concurrency))).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn retry_hints_in_their_order() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_hint(&h, &serde_json::Value::Null), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_hint(&h, &serde_json::Value::Null), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("0.25"));
        assert_eq!(retry_hint(&h, &serde_json::Value::Null), Some(Duration::from_millis(250)));
        let future = time::OffsetDateTime::now_utc() + time::Duration::seconds(120);
        let date = future
            .format(time::macros::format_description!(
                "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
            ))
            .unwrap();
        h.insert("retry-after", HeaderValue::from_str(&date).unwrap());
        let hint = retry_hint(&h, &serde_json::Value::Null).unwrap();
        assert!(hint > Duration::from_secs(100) && hint <= Duration::from_secs(121), "{hint:?}");
        let body = serde_json::json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34.4s"}]}});
        assert_eq!(retry_hint(&HeaderMap::new(), &body), Some(Duration::from_secs_f64(34.4)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_hint(&h, &serde_json::Value::Null), None);
    }

    #[test]
    fn classification() {
        let none = HeaderMap::new();
        let id = |t: &str| t.to_string();
        let retry = |status, body: &str| {
            matches!(classify("x", status, &none, body.as_bytes(), &id), AttemptError::Retry { .. })
        };
        for status in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(retry(status, "{}"), "{status}");
        }
        for status in [400, 404, 413, 422] {
            assert!(!retry(status, "{}"), "{status}");
        }
        assert!(matches!(classify("x", 401, &none, b"{}", &id), AttemptError::Fatal(ModelError::Auth(_))));
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert!(!retry(429, quota));
        let mut h = HeaderMap::new();
        h.insert("x-should-retry", HeaderValue::from_static("false"));
        assert!(matches!(classify("x", 503, &h, b"{}", &id), AttemptError::Fatal(_)));
        h.insert("x-should-retry", HeaderValue::from_static("true"));
        assert!(matches!(classify("x", 400, &h, b"{}", &id), AttemptError::Retry { .. }));
    }

    #[test]
    fn secrets_never_print() {
        let key = Secret::new("sk-ant-very-secret");
        assert_eq!(format!("{key:?}"), "Secret(***)");
        assert_eq!(key.redact("bad key sk-ant-very-secret given"), "bad key *** given");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        for n in 1..10 {
            let d = p.backoff(n);
            let full = (0.5 * 2f64.powi(n as i32 - 1)).min(8.0);
            assert!(d.as_secs_f64() <= full + 1e-9 && d.as_secs_f64() >= full / 2.0 - 1e-9, "{n}: {d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_closes_the_gate_then_one_probe_goes_out() {
        let limiter = Arc::new(Limiter::new(8));
        let first = limiter.acquire().await;
        let second = limiter.acquire().await;
        first.finish(AttemptOutcome::Throttled(Some(Duration::from_secs(5))));
        second.finish(AttemptOutcome::Neutral);
        let started = Instant::now();
        let probe = limiter.acquire().await;
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        // While the probe is out nobody else goes.
        let other = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let permit = limiter.acquire().await;
                let at = Instant::now();
                permit.finish(AttemptOutcome::Success);
                at
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!other.is_finished());
        probe.finish(AttemptOutcome::Success);
        let at = other.await.unwrap();
        assert_eq!(at - started, Duration::from_secs(8));
    }
}
