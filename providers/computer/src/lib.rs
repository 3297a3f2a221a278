//! The boundary between agentd and a computer it operates.
//!
//! This crate owns what every provider shares and nothing more: the [`Action`] vocabulary (the JSON form of
//! docs/task-file.md), key-name parsing to X keysyms ([`keys`]), an X server's keyboard mapping as XTest providers use it
//! ([`keymap`]), the raw [`Frame`] a provider captures,
//! the [`ComputerProvider`] trait with its typed [`ProviderError`], and a [`conformance`] kit every provider
//! runs in its tests; and [`locate`], the one field locator of the JSON files people write (task files,
//! scripts, scenes), which agentd and the mock provider share; [`outbound`], the one policy for where a
//! task may connect, which agentd and the providers that open connections apply; and [`mod@pointer`], what every
//! provider does the same with the pointer and its screens (wheel notches, drag paths, monitors, one provider
//! per configuration per process). Providers know nothing of queues, models or
//! storage; the agent loop knows providers only through this crate.

pub mod action;
pub mod conformance;
pub mod frame;
pub mod keymap;
pub mod keys;
pub mod locate;
pub mod outbound;
pub mod pointer;
pub mod provider;

pub use action::{Action, ActionError, MouseButton, Point, Size};
pub use frame::Frame;
pub use keys::{Key, KeyError};
pub use pointer::{MAX_NOTCHES, MonitorInfo, PIXELS_PER_NOTCH, Shared, interpolate, notches};
pub use provider::{ActionReport, ComputerProvider, Download, GuestOutput, PageInfo, ProviderError};
