//! Test doubles at the edges, each failing in one named way: a screen that records and visibly reacts, a
//! provider that is unreachable, one that hangs, one that panics; a model that hangs, one that fails, one
//! that records what it was shown.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agentd::model::{DeltaSink, Model, ModelError, ModelRequest, ModelTurn};
use agentd::screen::coords::CoordinateMap;
use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{Action, ActionReport, ComputerProvider, Frame, Point, ProviderError, Size};
use async_trait::async_trait;

/// A screen that paints a band per action received, so consecutive screenshots differ after input.
pub struct RecordingScreen {
    pub size: Size,
    pub actions: Mutex<Vec<Action>>,
    pointer: Mutex<Point>,
}

impl RecordingScreen {
    pub fn new(size: Size) -> Arc<Self> {
        Arc::new(Self { size, actions: Mutex::new(Vec::new()), pointer: Mutex::new(Point::new(0, 0)) })
    }

    pub fn received(&self) -> Vec<Action> {
        self.actions.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl ComputerProvider for RecordingScreen {
    fn kind(&self) -> &'static str {
        "recording"
    }
    async fn screen_size(&self) -> Result<Size, ProviderError> {
        Ok(self.size)
    }
    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        let count = self.actions.lock().map(|a| a.len()).unwrap_or(0);
        let mut pixels = vec![255u8; self.size.area() as usize * 3];
        let band = (count * 4).min(self.size.height as usize);
        for row in 0..band {
            let start = row * self.size.width as usize * 3;
            for px in pixels[start..start + self.size.width as usize * 3].chunks_exact_mut(3) {
                px.copy_from_slice(&[20, 40, (row * 7 % 256) as u8]);
            }
        }
        Frame::from_rgb(self.size, pixels).map_err(|e| ProviderError::Failed(e.to_string()))
    }
    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        check_action(action, self.size)?;
        if let Some(done) = sleep_for(action).await {
            return Ok(done);
        }
        if let Action::Move { x, y, .. } | Action::Click { x, y, .. } = action
            && let Ok(mut p) = self.pointer.lock()
        {
            *p = Point::new(*x, *y);
        }
        self.actions.lock().map_err(|_| ProviderError::Failed("poisoned".into()))?.push(action.clone());
        let cursor = matches!(action, Action::CursorPosition {})
            .then(|| self.pointer.lock().map(|p| *p).unwrap_or(Point::new(0, 0)));
        Ok(ActionReport { message: None, cursor })
    }
    async fn state(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "actions_received": self.received().len() }))
    }
}

/// How a broken provider breaks.
#[derive(Clone, Copy, Debug)]
pub enum Breakage {
    /// Screenshots fail as if the connection were gone.
    Unreachable,
    /// `perform` never returns.
    HangsOnAction,
    /// `perform` panics.
    PanicsOnAction,
}

pub struct BrokenScreen {
    pub inner: Arc<RecordingScreen>,
    pub breakage: Breakage,
}

#[async_trait]
impl ComputerProvider for BrokenScreen {
    fn kind(&self) -> &'static str {
        "broken"
    }
    async fn screen_size(&self) -> Result<Size, ProviderError> {
        Ok(self.inner.size)
    }
    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        match self.breakage {
            Breakage::Unreachable => Err(ProviderError::Unavailable("connection refused".into())),
            _ => self.inner.screenshot().await,
        }
    }
    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        match self.breakage {
            Breakage::HangsOnAction => std::future::pending().await,
            Breakage::PanicsOnAction => panic!("provider double panics on purpose"),
            Breakage::Unreachable => self.inner.perform(action).await,
        }
    }
}

/// How a broken model breaks.
#[derive(Clone, Copy, Debug)]
pub enum ModelBreakage {
    Hangs,
    Unavailable,
    Rejects,
}

pub struct BrokenModel(pub ModelBreakage);

#[async_trait]
impl Model for BrokenModel {
    fn describe(&self) -> String {
        format!("broken model ({:?})", self.0)
    }
    fn coordinates(&self, screen: Size) -> CoordinateMap {
        CoordinateMap::identity(screen)
    }
    async fn next_turn(&self, _request: ModelRequest<'_>, _deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        match self.0 {
            ModelBreakage::Hangs => std::future::pending().await,
            ModelBreakage::Unavailable => Err(ModelError::Unavailable("HTTP 529 overloaded, retries exhausted".into())),
            ModelBreakage::Rejects => Err(ModelError::Rejected { status: 400, message: "bad request".into() }),
        }
    }
}

/// What a model was shown at one call.
#[derive(Debug, Clone)]
pub struct Seen {
    pub history_len: usize,
    pub images_in_history: usize,
    pub notes: Vec<String>,
    pub screenshot_size: Size,
    pub last_results: Vec<(bool, String)>,
}

/// Wraps a model, recording what each call was shown, and optionally working in another coordinate space.
pub struct Observed<M> {
    pub inner: M,
    pub seen: Mutex<Vec<Seen>>,
    pub space: Option<Size>,
    pub calls: AtomicU32,
}

impl<M> Observed<M> {
    pub fn new(inner: M) -> Arc<Self> {
        Arc::new(Self { inner, seen: Mutex::new(Vec::new()), space: None, calls: AtomicU32::new(0) })
    }

    pub fn scaled(inner: M, space: Size) -> Arc<Self> {
        Arc::new(Self { inner, seen: Mutex::new(Vec::new()), space: Some(space), calls: AtomicU32::new(0) })
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl<M: Model> Model for Observed<M> {
    fn describe(&self) -> String {
        format!("observed {}", self.inner.describe())
    }
    fn coordinates(&self, screen: Size) -> CoordinateMap {
        match self.space {
            Some(space) => CoordinateMap::scaled(screen, space),
            None => self.inner.coordinates(screen),
        }
    }
    async fn next_turn(&self, request: ModelRequest<'_>, deltas: DeltaSink<'_>) -> Result<ModelTurn, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let seen = Seen {
            history_len: request.history.len(),
            images_in_history: request.history.iter().filter(|e| e.screenshot.is_some()).count(),
            notes: request.notes.to_vec(),
            screenshot_size: request.screenshot.size,
            last_results: request
                .history
                .last()
                .map(|e| e.results.iter().map(|r| (r.ok, r.message.clone())).collect())
                .unwrap_or_default(),
        };
        if let Ok(mut all) = self.seen.lock() {
            all.push(seen);
        }
        self.inner.next_turn(request, deltas).await
    }
}
