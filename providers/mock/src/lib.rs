//! The mock desktop of agentd: a deterministic virtual desktop rendered in memory, with real pixels and real
//! text, for testing automations in CI.
//!
//! A [`Scene`] (a built-in name or a JSON file, see `SCENES.md`) describes screens of windows and widgets —
//! labels, buttons, text fields, checkboxes, dropdowns, lists, scrolling text boxes, sliders — and what buttons
//! do. A [`MockDesktop`] operates a scene as the [`agentd_computer::ComputerProvider`] of kind `mock`: it
//! reacts to clicks, drags, scrolling, keys and typing as a user would expect, records every action, and
//! reports its state ([`MockState`], the task result's `computer_state`). Same actions, same frames, byte for
//! byte.
//!
//! Module map: `scene` (format, validation, built-ins; error positions from `agentd_computer::locate`); `widgets` (values and
//! text editing); `world` (behaviour: input and effects); `layout` (geometry); `render`, `canvas` and `font`
//! (pixels); `desktop` (the provider); `persist` (saving to a directory).

mod canvas;
mod desktop;
mod font;
mod layout;
mod persist;
mod render;
mod scene;
mod widgets;
mod world;

pub use desktop::{DEFAULT_SIZE, MAX_SIZE, MIN_SIZE, MockDesktop, MockError};
pub use persist::{ACTIONS_FILE, STATE_FILE, Seal};
pub use scene::{Scene, SceneError};
pub use world::MockState;
