//! The conformance kit: behaviour every `ComputerProvider` must show, as one function a provider's tests call.
//!
//! ```ignore
//! let report = agentd_computer::conformance::run(&provider, &Options::default()).await;
//! report.assert_passed();
//! ```
//! Each check is named; a failing report lists every failed check with what was seen, so one run shows all
//! the gaps of a new provider. Checks leave the desktop in an arbitrary state: run the kit on a scratch screen.

use std::future::Future;
use std::time::Duration;

use crate::action::{Action, MouseButton, Point, Size};
use crate::provider::{ComputerProvider, ProviderError};

/// What a provider promises beyond the baseline.
#[derive(Debug, Clone)]
pub struct Options {
    /// The screen shows nothing that changes by itself (no clock, no blinking caret), so two captures with no
    /// action between them must be identical.
    pub static_screen: bool,
    /// `cursor_position` reports where the last `move` put the pointer.
    pub tracks_cursor: bool,
    /// The longest a single action or capture may take before the kit calls it hung.
    pub action_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self { static_screen: false, tracks_cursor: true, action_timeout: Duration::from_secs(10) }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub passed: Vec<&'static str>,
    pub failed: Vec<(&'static str, String)>,
}

impl Report {
    /// Panics with every failed check listed (for use in tests).
    pub fn assert_passed(&self) {
        if !self.failed.is_empty() {
            let lines: Vec<String> = self.failed.iter().map(|(name, why)| format!("  {name}: {why}")).collect();
            panic!("{} conformance check(s) failed:\n{}", self.failed.len(), lines.join("\n"));
        }
    }

    fn record(&mut self, name: &'static str, result: Result<(), String>) {
        match result {
            Ok(()) => self.passed.push(name),
            Err(why) => self.failed.push((name, why)),
        }
    }
}

async fn timed<T>(options: &Options, what: &str, fut: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(options.action_timeout, fut)
        .await
        .map_err(|_| format!("{what} did not finish within {:?}", options.action_timeout))
}

/// Every action of the vocabulary that reaches `perform`, placed inside a screen of `size`.
pub fn sample_actions(size: Size) -> Vec<Action> {
    let cx = (size.width / 2) as i32;
    let cy = (size.height / 2) as i32;
    let mut actions = Vec::new();
    for button in [MouseButton::Left, MouseButton::Right, MouseButton::Middle, MouseButton::Back, MouseButton::Forward]
    {
        actions.push(Action::Click { x: cx, y: cy, button, keys: vec![] });
    }
    actions.extend([
        Action::Click { x: 1, y: 1, button: MouseButton::Left, keys: vec!["shift".into(), "ctrl".into()] },
        Action::DoubleClick { x: cx, y: cy },
        Action::TripleClick { x: cx, y: cy },
        Action::Move { x: 0, y: 0, keys: Vec::new() },
        Action::Move { x: size.width as i32 - 1, y: size.height as i32 - 1, keys: Vec::new() },
        Action::MouseDown { button: MouseButton::Left, keys: Vec::new() },
        Action::Move { x: cx, y: cy, keys: Vec::new() },
        Action::MouseUp { button: MouseButton::Left },
        Action::Drag {
            path: vec![Point::new(cx - 10, cy - 10), Point::new(cx, cy), Point::new(cx + 10, cy + 5)],
            button: Default::default(),
            keys: Vec::new(),
        },
        Action::Scroll { x: cx, y: cy, scroll_x: 0, scroll_y: 120, keys: Vec::new() },
        Action::Scroll { x: cx, y: cy, scroll_x: 0, scroll_y: -120, keys: Vec::new() },
        Action::Scroll { x: cx, y: cy, scroll_x: 60, scroll_y: 0, keys: Vec::new() },
        Action::Type { text: "Hello, wörld €".into() },
        Action::Keypress { keys: vec!["ctrl".into(), "a".into()] },
        Action::Keypress { keys: vec!["BackSpace".into()] },
        Action::Keypress { keys: vec!["Escape".into()] },
        Action::HoldKey { keys: vec!["shift".into()], duration_ms: 20 },
        Action::Reload {},
        Action::Wait { duration_ms: 10 },
        Action::CursorPosition {},
    ]);
    actions
}

/// Runs every check against `provider` and reports each by name.
pub async fn run(provider: &dyn ComputerProvider, options: &Options) -> Report {
    let mut report = Report::default();

    let size = match timed(options, "screen_size", provider.screen_size()).await {
        Ok(Ok(size)) if size.width > 0 && size.height > 0 => {
            report.passed.push("screen_size");
            size
        }
        Ok(Ok(size)) => {
            report.failed.push(("screen_size", format!("empty screen {size}")));
            return report;
        }
        Ok(Err(e)) => {
            report.failed.push(("screen_size", e.to_string()));
            return report;
        }
        Err(e) => {
            report.failed.push(("screen_size", e));
            return report;
        }
    };

    let health = timed(options, "health", provider.health()).await.and_then(|r| r.map_err(|e| e.to_string()));
    report.record("health", health);

    let first = capture_matches(provider, options, size).await;
    report.record("screenshot_matches_screen_size", first.as_ref().map(drop).map_err(Clone::clone));

    if options.static_screen
        && let Ok(first) = &first
    {
        let second = capture_matches(provider, options, size).await;
        report.record(
            "static_screen_is_stable",
            second.and_then(|second| {
                let changed = first.changed_pixels(&second);
                if changed == 0 { Ok(()) } else { Err(format!("{changed} pixels changed with no action")) }
            }),
        );
    }

    let mut every_action = Ok(());
    for action in sample_actions(size) {
        match timed(options, action.kind(), provider.perform(&action)).await {
            // A provider that can tell its input would go nowhere (no focused window) says so instead.
            Ok(Ok(_)) | Ok(Err(ProviderError::Unsupported { .. } | ProviderError::NotDelivered(_))) => {}
            Ok(Err(e)) => {
                every_action = Err(format!("{}: {e}", action.summary()));
                break;
            }
            Err(e) => {
                every_action = Err(e);
                break;
            }
        }
    }
    report.record("every_action_performs_or_is_unsupported", every_action);

    report.record("screenshot_after_actions", capture_matches(provider, options, size).await.map(drop));

    if options.tracks_cursor {
        let target = Point::new((size.width / 3) as i32, (size.height / 4) as i32);
        let result = async {
            timed(options, "move", provider.perform(&Action::Move { x: target.x, y: target.y, keys: Vec::new() }))
                .await?
                .map_err(|e| e.to_string())?;
            let report = timed(options, "cursor_position", provider.perform(&Action::CursorPosition {}))
                .await?
                .map_err(|e| e.to_string())?;
            match report.cursor {
                Some(p) if p == target => Ok(()),
                other => Err(format!("moved to {target:?}, cursor_position said {other:?}")),
            }
        }
        .await;
        report.record("cursor_position_follows_move", result);
    }

    let off_screen = [
        Action::Click { x: size.width as i32, y: 0, button: MouseButton::Left, keys: vec![] },
        Action::Move { x: -1, y: 5, keys: Vec::new() },
        Action::Scroll { x: 0, y: size.height as i32 + 10, scroll_x: 0, scroll_y: 10, keys: Vec::new() },
        Action::Drag {
            path: vec![Point::new(1, 1), Point::new(1, size.height as i32)],
            button: Default::default(),
            keys: Vec::new(),
        },
    ];
    let mut rejects = Ok(());
    for action in off_screen {
        match timed(options, action.kind(), provider.perform(&action)).await {
            Ok(Err(ProviderError::InvalidAction(_))) => {}
            Ok(other) => {
                rejects = Err(format!("{} gave {other:?}, expected InvalidAction", action.summary()));
                break;
            }
            Err(e) => {
                rejects = Err(e);
                break;
            }
        }
    }
    report.record("off_screen_coordinates_rejected", rejects);

    let bad_key = Action::Keypress { keys: vec!["ctrl".into(), "no_such_key".into()] };
    let bad_key_result = match timed(options, "keypress", provider.perform(&bad_key)).await {
        Ok(Err(ProviderError::InvalidAction(msg))) if msg.contains("no_such_key") => Ok(()),
        Ok(other) => Err(format!("gave {other:?}, expected InvalidAction naming the key")),
        Err(e) => Err(e),
    };
    report.record("unknown_key_rejected", bad_key_result);

    let nudge = Action::Move { x: 2, y: 2, keys: Vec::new() };
    let concurrent = async {
        let captures = futures_join4(
            provider.screenshot(),
            provider.screenshot(),
            provider.screen_size(),
            provider.perform(&nudge),
        );
        let (a, b, c, d) = timed(options, "concurrent calls", captures).await?;
        a.map_err(|e| e.to_string())?;
        b.map_err(|e| e.to_string())?;
        c.map_err(|e| e.to_string())?;
        d.map_err(|e| e.to_string())?;
        Ok(())
    }
    .await;
    report.record("concurrent_calls", concurrent);

    report.record(
        "health_after_everything",
        timed(options, "health", provider.health()).await.and_then(|r| r.map_err(|e| e.to_string())),
    );
    report
}

async fn capture_matches(
    provider: &dyn ComputerProvider,
    options: &Options,
    size: Size,
) -> Result<crate::Frame, String> {
    let frame = timed(options, "screenshot", provider.screenshot()).await?.map_err(|e| e.to_string())?;
    if frame.size() != size {
        return Err(format!("screenshot is {} but screen_size is {size}", frame.size()));
    }
    if frame.as_rgb().len() != size.width as usize * size.height as usize * 3 {
        return Err("frame buffer has the wrong length".into());
    }
    Ok(frame)
}

async fn futures_join4<A, B, C, D>(
    a: impl Future<Output = A>,
    b: impl Future<Output = B>,
    c: impl Future<Output = C>,
    d: impl Future<Output = D>,
) -> (A, B, C, D) {
    tokio::join!(a, b, c, d)
}
