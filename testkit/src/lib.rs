//! Test-only doubles for agentd, kept out of the library a user links: the root package takes this crate as a
//! dev-dependency only, so neither a release build nor the public API carries any of it.
//!
//! - [`fake`]: local fake servers of the four vendor model APIs that check every request against the
//!   documented wire format and answer with scripted replies.
//! - [`browser`]: headless Chromium over the DevTools protocol, for tests of pages agentd serves.

pub mod browser;
pub mod fake;
