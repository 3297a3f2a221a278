//! [`MockDesktop`]: the `ComputerProvider` over a [`World`]. It validates and records every action, applies it,
//! renders only when something changed (an unchanged screenshot is a copy of the cached pixels), and, when
//! opened on a directory, saves itself after every action so that a new process can resume it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use agentd_computer::provider::{check_action, sleep_for};
use agentd_computer::{Action, ActionReport, ComputerProvider, Frame, Key, MouseButton, Point, ProviderError, Size};
use async_trait::async_trait;
use thiserror::Error;

use crate::canvas::{Canvas, Color};
use crate::font::GlyphCache;
use crate::persist::{Saved, Seal, Store};
use crate::render::render;
use crate::scene::Scene;
use crate::world::{MockState, Mods, World};

/// The screen size when none is given.
pub const DEFAULT_SIZE: Size = Size::new(1280, 800);
/// The smallest and largest screens a mock desktop accepts.
pub const MIN_SIZE: Size = Size::new(320, 240);
pub const MAX_SIZE: Size = Size::new(7680, 4320);

/// Why a mock desktop could not be created or resumed.
#[derive(Debug, Error)]
pub enum MockError {
    #[error("screen size {size} is outside {MIN_SIZE}..={MAX_SIZE}")]
    Size { size: Size },
    #[error("mock desktop state {}: {source}", path.display())]
    Persist { path: PathBuf, source: std::io::Error },
    #[error("cannot resume the mock desktop from {}: {message}", path.display())]
    Resume { path: PathBuf, message: String },
}

struct Inner {
    world: World,
    actions: Vec<Action>,
    canvas: Canvas,
    /// Whether `canvas` no longer shows `world`.
    dirty: bool,
    /// `canvas` as a frame, while it has not changed.
    frame: Option<Frame>,
    glyphs: GlyphCache,
    store: Option<Store>,
}

impl Inner {
    fn render_if_dirty(&mut self) {
        if self.dirty {
            render(&self.world, &mut self.canvas, &mut self.glyphs);
            self.dirty = false;
            self.frame = None;
        }
    }

    /// The canvas as a frame, copied out once per change (frames share their pixels).
    fn current_frame(&mut self) -> Frame {
        self.render_if_dirty();
        match &self.frame {
            Some(frame) => frame.clone(),
            None => {
                let frame = self.canvas.to_frame();
                self.frame = Some(frame.clone());
                frame
            }
        }
    }
}

/// A deterministic virtual desktop: a [`Scene`] operated through the actions of the agent loop.
pub struct MockDesktop {
    size: Size,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MockDesktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockDesktop").field("size", &self.size).finish_non_exhaustive()
    }
}

fn check_size(size: Size) -> Result<Size, MockError> {
    let ok = (MIN_SIZE.width..=MAX_SIZE.width).contains(&size.width)
        && (MIN_SIZE.height..=MAX_SIZE.height).contains(&size.height);
    if ok { Ok(size) } else { Err(MockError::Size { size }) }
}

impl MockDesktop {
    /// A desktop showing `scene`'s start screen, `size` pixels large (default 1280x800).
    pub fn new(scene: Scene, size: Option<Size>) -> Result<MockDesktop, MockError> {
        let size = check_size(size.unwrap_or(DEFAULT_SIZE))?;
        let world = World::new(Arc::new(scene), size);
        Ok(Self::from_world(world, Vec::new(), None))
    }

    /// A desktop saved in `dir`: resumed from it when it holds a saved desktop (same screen, values, pointer and
    /// recorded actions), else new; saved there after every action from now on.
    pub fn open_persistent(scene: Scene, size: Option<Size>, dir: &Path) -> Result<MockDesktop, MockError> {
        Self::open_sealed(scene, size, dir, Seal::default())
    }

    /// Like [`Self::open_persistent`], with `seal`'s values never written to `dir` (saved as their
    /// placeholders, read back as the values).
    pub fn open_sealed(scene: Scene, size: Option<Size>, dir: &Path, seal: Seal) -> Result<MockDesktop, MockError> {
        let size = check_size(size.unwrap_or(DEFAULT_SIZE))?;
        let (store, loaded) = Store::open(dir, seal)?;
        let mut world = World::new(Arc::new(scene), size);
        let state_path = dir.join(crate::persist::STATE_FILE);
        let mut applied = 0usize;
        // A new directory gets its snapshot at once: it names the scene and size the log belongs to.
        let no_snapshot = loaded.saved.is_none();
        if let Some(saved) = loaded.saved {
            if saved.scene != world.scene.name || saved.size != size {
                return Err(MockError::Resume {
                    path: state_path,
                    message: format!(
                        "it holds scene {:?} at {}, not scene {:?} at {size}",
                        saved.scene, saved.size, world.scene.name
                    ),
                });
            }
            if !world.accepts(&saved.state) {
                return Err(MockError::Resume {
                    path: state_path,
                    message: format!(
                        "the saved state does not fit scene {:?} (was the scene file changed?)",
                        saved.scene
                    ),
                });
            }
            applied = usize::try_from(saved.state.actions_received).unwrap_or(usize::MAX);
            world.state = saved.state;
        }
        // Actions logged after the last snapshot (the process died between the two writes) are replayed.
        let behind = loaded.actions.len() > applied;
        for action in loaded.actions.iter().skip(applied) {
            world.state.actions_received += 1;
            let _ = apply(&mut world, action, size);
        }
        let desktop = Self::from_world(world, loaded.actions, Some(store));
        if behind || no_snapshot {
            let inner = desktop.lock();
            if let Some(store) = &inner.store {
                store.save(&Saved::new(&inner.world.scene.name, size, &inner.world.state))?;
            }
        }
        Ok(desktop)
    }

    fn from_world(world: World, actions: Vec<Action>, store: Option<Store>) -> MockDesktop {
        let size = world.size;
        let canvas = Canvas::new(size, Color::rgb(0, 0, 0));
        let inner = Inner { world, actions, canvas, dirty: true, frame: None, glyphs: GlyphCache::default(), store };
        MockDesktop { size, inner: Mutex::new(inner) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the world half-changed in a way that matters more than
        // refusing to serve: keep going with what is there.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn size(&self) -> Size {
        self.size
    }

    /// The scene's name.
    pub fn scene_name(&self) -> String {
        self.lock().world.scene.name.clone()
    }

    /// Every action received, in order (rejected ones included).
    pub fn actions(&self) -> Vec<Action> {
        self.lock().actions.clone()
    }

    /// The desktop's state as reported in `computer_state`.
    pub fn mock_state(&self) -> MockState {
        self.lock().world.report()
    }

    /// Where a widget of the current screen is: the top-left corner and size of its interactive part (the
    /// field box, the button, the checkbox row, …), clipped to what is visible; `None` when the widget is not
    /// on the current screen or is scrolled out of view. Meant for tests and scripts that drive the mock.
    pub fn widget_bounds(&self, id: &str) -> Option<(Point, Size)> {
        let inner = self.lock();
        let widget = inner.world.scene.widget(id)?;
        let layout = inner.world.layout();
        let (w, item) = layout.item(widget)?;
        let visible = item.control.intersect(layout.windows[w].body);
        (!visible.is_empty()).then(|| (Point::new(visible.x, visible.y), Size::new(visible.w as u32, visible.h as u32)))
    }

    /// The centre of [`Self::widget_bounds`].
    pub fn widget_center(&self, id: &str) -> Option<Point> {
        let (p, size) = self.widget_bounds(id)?;
        Some(Point::new(p.x + size.width as i32 / 2, p.y + size.height as i32 / 2))
    }

    /// The current frame (rendered if anything changed since the last one).
    pub fn frame(&self) -> Frame {
        self.lock().current_frame()
    }

    /// Renders the current state from scratch, bypassing the cache (for benchmarks and tests).
    pub fn render_uncached(&self) -> Frame {
        let mut inner = self.lock();
        let Inner { world, canvas, glyphs, .. } = &mut *inner;
        render(world, canvas, glyphs);
        inner.dirty = false;
        inner.frame = None;
        inner.canvas.to_frame()
    }

    /// Performs an action at once: like [`ComputerProvider::perform`] but `wait` and `hold_key` do not sleep.
    pub fn apply(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        let mut inner = self.lock();
        inner.actions.push(action.clone());
        inner.world.state.actions_received += 1;
        let result = apply(&mut inner.world, action, self.size);
        if result.is_ok() && action.is_input() {
            inner.dirty = true;
        }
        let Inner { world, store, .. } = &mut *inner;
        if let Some(store) = store {
            store.append(action).map_err(|e| ProviderError::Failed(e.to_string()))?;
            // The log is the record; a snapshot now and then keeps the replay on open short.
            if world.state.actions_received % crate::persist::SNAPSHOT_EVERY == 0 {
                store
                    .save(&Saved::new(&world.scene.name, self.size, &world.state))
                    .map_err(|e| ProviderError::Failed(e.to_string()))?;
            }
        }
        result
    }
}

/// Applies one action to a world. Coordinates and keys are checked here, whatever the caller did.
fn apply(world: &mut World, action: &Action, size: Size) -> Result<ActionReport, ProviderError> {
    check_action(action, size)?;
    let keys = |names: &[String]| -> Result<Vec<Key>, ProviderError> {
        names.iter().map(|n| Key::parse(n).map_err(|e| ProviderError::InvalidAction(e.to_string()))).collect()
    };
    match action {
        Action::Click { x, y, button, keys: held } => {
            let mods = Mods::from_keys(&keys(held)?);
            if *button == MouseButton::Left {
                world.click(Point::new(*x, *y), mods, 1);
            } else {
                world.move_pointer(Point::new(*x, *y));
            }
        }
        Action::DoubleClick { x, y } => {
            for count in 1..=2 {
                world.click(Point::new(*x, *y), Mods::default(), count);
            }
        }
        Action::TripleClick { x, y } => {
            for count in 1..=3 {
                world.click(Point::new(*x, *y), Mods::default(), count);
            }
        }
        Action::MouseDown { button, keys: held } => {
            if *button == MouseButton::Left {
                world.press(Mods::from_keys(&keys(held)?), 1);
            }
        }
        Action::MouseUp { button } => {
            if *button == MouseButton::Left {
                world.release();
            }
        }
        Action::Move { x, y, .. } => world.move_pointer(Point::new(*x, *y)),
        Action::Drag { path, button, keys: held } => {
            // The desktop's widgets answer the left button only; another button just moves the pointer.
            let left = *button == MouseButton::Left;
            if let Some((first, rest)) = path.split_first() {
                world.move_pointer(*first);
                if left {
                    world.press(Mods::from_keys(&keys(held)?), 1);
                }
                for p in rest {
                    world.move_pointer(*p);
                }
                if left {
                    world.release();
                }
            }
        }
        Action::Scroll { x, y, scroll_y, .. } => world.scroll(Point::new(*x, *y), *scroll_y),
        Action::Type { text } => world.type_text(text),
        Action::Keypress { keys: names } | Action::HoldKey { keys: names, .. } => world.keypress(&keys(names)?),
        Action::Wait { .. } => {}
        Action::CursorPosition {} => {
            let p = world.state.pointer;
            return Ok(ActionReport { message: Some(format!("pointer at {},{}", p.x, p.y)), cursor: Some(p) });
        }
        Action::Navigate { .. } | Action::Back {} | Action::Forward {} | Action::Reload {} => {
            return Err(ProviderError::Unsupported {
                provider: "mock",
                action: action.kind(),
                reason: "the mock desktop has no pages".into(),
            });
        }
        Action::Screenshot {} | Action::Zoom { .. } => {
            return Ok(ActionReport {
                message: Some(format!("{} is taken by the agent loop; nothing to do", action.kind())),
                cursor: None,
            });
        }
    }
    Ok(ActionReport::default())
}

#[async_trait]
impl ComputerProvider for MockDesktop {
    fn frames_are_synchronous(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "mock"
    }

    async fn screen_size(&self) -> Result<Size, ProviderError> {
        Ok(self.size)
    }

    async fn screenshot(&self) -> Result<Frame, ProviderError> {
        Ok(self.frame())
    }

    async fn perform(&self, action: &Action) -> Result<ActionReport, ProviderError> {
        agentd_computer::provider::refuse_navigation("mock", action)?;
        // Sleep (outside the lock) only for actions that are going to be accepted.
        if check_action(action, self.size).is_ok() {
            match action {
                Action::Wait { .. } => {
                    sleep_for(action).await;
                }
                Action::HoldKey { duration_ms, .. } => {
                    tokio::time::sleep(std::time::Duration::from_millis(*duration_ms)).await;
                }
                _ => {}
            }
        }
        self.apply(action)
    }

    async fn state(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self.mock_state()).ok()
    }
}
