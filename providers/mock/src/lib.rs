//! TEMPORARY stand-in for the mock desktop (replaced by the real crate on merge): a flat screen that records
//! actions. Lets the agent core compile and be tested while the mock desktop is built.

use std::path::Path;
use std::sync::Mutex;

use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{Action, ActionReport, ComputerProvider, Frame, Point, ProviderError, Size};
use async_trait::async_trait;

pub const DEFAULT_SIZE: Size = Size::new(1280, 800);

#[derive(Debug, Clone)]
pub struct Scene {
    pub name: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SceneError(String);

impl Scene {
    pub fn resolve(name: &str, _base: Option<&Path>) -> Result<Scene, SceneError> {
        match name {
            "blank" | "login" | "form" => Ok(Scene { name: name.into() }),
            other => Err(SceneError(format!("unknown scene {other:?}"))),
        }
    }
}

pub struct MockDesktop {
    size: Size,
    state: Mutex<(Vec<Action>, Point, u8)>,
}

impl MockDesktop {
    pub fn new(_scene: Scene, size: Option<Size>) -> Self {
        Self {
            size: size.unwrap_or(DEFAULT_SIZE),
            state: Mutex::new((Vec::new(), Point::new(0, 0), 0)),
        }
    }

    pub fn open_persistent(
        scene: Scene,
        size: Option<Size>,
        _dir: &Path,
    ) -> Result<Self, std::io::Error> {
        Ok(Self::new(scene, size))
    }
}

#[async_trait]
impl ComputerProvider for MockDesktop {
    fn kind(&self) -> &'static str {
        "mock"
    }
    async fn screen_size(&self) -> Result<Size, ProviderError> {
        Ok(self.size)
    }
    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        let shade = self.state.lock().map(|s| s.2).unwrap_or(0);
        Ok(Frame::filled(self.size, [shade, 100, 200]))
    }
    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        check_action(action, self.size)?;
        if let Some(done) = sleep_for(action).await {
            return Ok(done);
        }
        let mut state = self
            .state
            .lock()
            .map_err(|_| ProviderError::Failed("poisoned".into()))?;
        state.0.push(action.clone());
        state.2 = state.2.wrapping_add(10);
        if let Action::Move { x, y } = action {
            state.1 = Point::new(*x, *y);
        }
        Ok(ActionReport {
            message: None,
            cursor: matches!(action, Action::CursorPosition {}).then_some(state.1),
        })
    }
    async fn state(&self) -> Option<serde_json::Value> {
        let count = self.state.lock().map(|s| s.0.len()).unwrap_or(0);
        Some(serde_json::json!({"actions_received": count}))
    }
}
