//! Settle instead of sleep: after a step's actions, wait until the screen stops changing rather than for a
//! fixed delay.
//!
//! The loop polls `screenshot()` every `interval` and calls the screen settled once it has stayed the same —
//! or changed by no more than `tolerance_pixels` (a blinking caret, a pointer drawn by a VNC server) — for
//! `quiet` in a row, giving up after `timeout`. The last frame becomes the next step's screenshot, so settling
//! costs no extra capture. Providers whose frames reflect every action the moment it returns and never change
//! by themselves (the mock desktop) are not polled at all. Comparing frames is a digest first (cheap) and a
//! pixel count only when the digests differ.
//!
//! Typed text is expected to show: after a step that typed, a screen that has not changed yet is not taken
//! for a settled one until it changes or the timeout passes. An application busy with a long burst of key
//! events (hundreds of characters) may redraw only once it has handled them all, later than `quiet` on a
//! loaded machine; the screenshot after typing must show the text. Any changed pixel counts as the text
//! showing, whatever `tolerance_pixels` says: one typed character changes fewer pixels than the default
//! tolerance, and waiting for more would cost every short `type` the whole timeout.

use std::time::{Duration, Instant};

use tokio::time::Instant as Clock;

use agentd_computer::{ComputerProvider, Frame, ProviderError};

use crate::config::SettlePolicy;

/// What settling found.
#[derive(Debug)]
pub struct Settled {
    /// The screen once settled (or at the timeout).
    pub frame: Frame,
    /// How long the loop waited.
    pub waited: Duration,
    /// Whether the screen differs (beyond the tolerance) from `before`.
    pub changed: bool,
    /// The timeout ended the wait, not a quiet screen.
    pub timed_out: bool,
}

/// Whether two frames differ by more than `tolerance` pixels.
pub fn differs(a: &Frame, b: &Frame, tolerance: u64) -> bool {
    if a.size() != b.size() {
        return true;
    }
    a.differs_by_more_than(b, tolerance)
}

/// [`differs`] on the blocking pool: comparing two full frames is a few milliseconds of pixel work that the
/// async runtime's threads (shared with every other task and the API) should not do.
async fn differs_off_runtime(a: &Frame, b: &Frame, tolerance: u64) -> bool {
    let (a, b) = (a.clone(), b.clone());
    tokio::task::spawn_blocking(move || differs(&a, &b, tolerance)).await.unwrap_or(true)
}

/// Waits for the screen to settle after actions; `before` is the screen the actions started from.
/// `expect_change`: the actions typed text, so an unchanged screen is waited on (up to the timeout) rather
/// than taken as settled.
pub async fn settle(
    computer: &dyn ComputerProvider,
    policy: &SettlePolicy,
    before: &Frame,
    deadline: Instant,
    expect_change: bool,
) -> Result<Settled, ProviderError> {
    // tokio's clock, so that tests can pause it; `deadline` comes from the loop's std clock.
    let started = Clock::now();
    let deadline = Clock::from_std(deadline);
    let mut frame = computer.screenshot().await?;
    if !policy.enabled || computer.frames_are_synchronous() {
        let changed = differs_off_runtime(before, &frame, policy.tolerance_pixels).await;
        return Ok(Settled { frame, waited: started.elapsed(), changed, timed_out: false });
    }
    let quiet = Duration::from_millis(policy.quiet_ms);
    let interval = Duration::from_millis(policy.interval_ms.max(1));
    let give_up = (started + Duration::from_millis(policy.timeout_ms)).min(deadline);
    let mut quiet_since = Clock::now();
    let mut changed_yet = !expect_change || differs_off_runtime(before, &frame, 0).await;
    loop {
        if changed_yet && quiet_since.elapsed() >= quiet {
            break;
        }
        if Clock::now() >= give_up {
            let changed = differs_off_runtime(before, &frame, policy.tolerance_pixels).await;
            return Ok(Settled { frame, waited: started.elapsed(), changed, timed_out: true });
        }
        tokio::time::sleep(interval).await;
        let next = computer.screenshot().await?;
        if differs_off_runtime(&frame, &next, policy.tolerance_pixels).await {
            quiet_since = Clock::now();
            changed_yet = true;
        } else if !changed_yet && differs_off_runtime(before, &next, 0).await {
            // The text showed, by fewer pixels than the tolerance: quiet counts from here.
            quiet_since = Clock::now();
            changed_yet = true;
        }
        frame = next;
    }
    let changed = differs_off_runtime(before, &frame, policy.tolerance_pixels).await;
    Ok(Settled { frame, waited: started.elapsed(), changed, timed_out: false })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_computer::{Action, ActionReport, Size};
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A screen that keeps changing for its first `busy` captures, then holds still.
    struct Animating {
        captures: AtomicU32,
        busy: u32,
    }

    #[async_trait]
    impl ComputerProvider for Animating {
        fn kind(&self) -> &'static str {
            "animating"
        }
        async fn screen_size(&self) -> Result<Size, ProviderError> {
            Ok(Size::new(64, 64))
        }
        async fn screenshot(&self) -> Result<Frame, ProviderError> {
            let n = self.captures.fetch_add(1, Ordering::SeqCst).min(self.busy);
            Ok(Frame::filled(Size::new(64, 64), [n as u8, 0, 0]))
        }
        async fn perform(&self, _: &Action) -> Result<ActionReport, ProviderError> {
            Ok(ActionReport::default())
        }
    }

    fn policy() -> SettlePolicy {
        SettlePolicy { enabled: true, quiet_ms: 100, interval_ms: 20, timeout_ms: 2000, tolerance_pixels: 0 }
    }

    /// A screen that shows `before` for its first `late` captures (an application still busy with a burst of
    /// key events), then the typed text.
    struct Late {
        captures: AtomicU32,
        late: u32,
    }

    #[async_trait]
    impl ComputerProvider for Late {
        fn kind(&self) -> &'static str {
            "late"
        }
        async fn screen_size(&self) -> Result<Size, ProviderError> {
            Ok(Size::new(64, 64))
        }
        async fn screenshot(&self) -> Result<Frame, ProviderError> {
            let n = self.captures.fetch_add(1, Ordering::SeqCst);
            Ok(Frame::filled(Size::new(64, 64), if n < self.late { [99, 0, 0] } else { [1, 2, 3] }))
        }
        async fn perform(&self, _: &Action) -> Result<ActionReport, ProviderError> {
            Ok(ActionReport::default())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn after_typing_an_unchanged_screen_is_waited_on_until_it_shows_the_text() {
        let before = Frame::filled(Size::new(64, 64), [99, 0, 0]);
        let far = Instant::now() + Duration::from_secs(60);
        // The redraw comes after 20 polls (500 ms), well past the 100 ms of quiet.
        let typed =
            settle(&Late { captures: AtomicU32::new(0), late: 20 }, &policy(), &before, far, true).await.unwrap();
        assert!(typed.changed && !typed.timed_out, "{typed:?}");
        assert_eq!(typed.frame.as_rgb()[0], 1, "the frame with the text");
        // Without typing, a still screen is a settled one (a click on nothing must not cost the timeout).
        let clicked =
            settle(&Late { captures: AtomicU32::new(0), late: 20 }, &policy(), &before, far, false).await.unwrap();
        assert!(!clicked.changed, "{clicked:?}");
    }

    /// One typed character: a few pixels, fewer than the tolerance (a blinking caret's allowance).
    struct OneCharacter;

    #[async_trait]
    impl ComputerProvider for OneCharacter {
        fn kind(&self) -> &'static str {
            "one character"
        }
        async fn screen_size(&self) -> Result<Size, ProviderError> {
            Ok(Size::new(64, 64))
        }
        async fn screenshot(&self) -> Result<Frame, ProviderError> {
            let mut rgb = vec![0u8; 64 * 64 * 3];
            rgb[..30].fill(255);
            Ok(Frame::from_rgb(Size::new(64, 64), rgb).expect("frame"))
        }
        async fn perform(&self, _: &Action) -> Result<ActionReport, ProviderError> {
            Ok(ActionReport::default())
        }
    }

    /// A short `type` settles once the screen is quiet, not at the timeout: its few changed pixels are the
    /// text showing (each one-letter `type` on the local display cost the whole 3 s timeout before).
    #[tokio::test(start_paused = true)]
    async fn after_typing_a_change_smaller_than_the_tolerance_is_the_text_showing() {
        let before = Frame::filled(Size::new(64, 64), [0, 0, 0]);
        let mut p = policy();
        p.tolerance_pixels = 256;
        p.timeout_ms = 3000;
        let settled = settle(&OneCharacter, &p, &before, Instant::now() + Duration::from_secs(60), true).await.unwrap();
        assert!(!settled.timed_out, "{settled:?}");
        assert!(settled.waited < Duration::from_millis(200), "{:?}", settled.waited);
    }

    #[tokio::test(start_paused = true)]
    async fn waits_until_the_screen_is_quiet() {
        let screen = Animating { captures: AtomicU32::new(0), busy: 10 };
        let before = Frame::filled(Size::new(64, 64), [99, 0, 0]);
        let far = Instant::now() + Duration::from_secs(60);
        let settled = settle(&screen, &policy(), &before, far, false).await.unwrap();
        assert!(!settled.timed_out);
        assert!(settled.changed);
        assert_eq!(settled.frame.as_rgb()[0], 10, "the frame after the animation");
        // 10 changing polls of 20 ms, then 100 ms of quiet.
        assert!(settled.waited >= Duration::from_millis(280), "{:?}", settled.waited);
        assert!(settled.waited <= Duration::from_millis(360), "{:?}", settled.waited);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_at_the_timeout_and_reports_no_change() {
        let screen = Animating { captures: AtomicU32::new(0), busy: u32::MAX };
        let mut p = policy();
        p.timeout_ms = 500;
        let before = Frame::filled(Size::new(64, 64), [0, 0, 0]);
        let settled = settle(&screen, &p, &before, Instant::now() + Duration::from_secs(60), false).await.unwrap();
        assert!(settled.timed_out);
        assert!(settled.waited >= Duration::from_millis(500) && settled.waited < Duration::from_millis(600));

        let still = Animating { captures: AtomicU32::new(0), busy: 0 };
        let settled =
            settle(&still, &policy(), &before, Instant::now() + Duration::from_secs(60), false).await.unwrap();
        assert!(!settled.changed, "no visual change after the action");
    }

    #[test]
    fn tolerance_ignores_a_small_area() {
        let a = Frame::filled(Size::new(32, 32), [0, 0, 0]);
        let mut pixels = a.as_rgb().to_vec();
        for p in pixels.iter_mut().take(30) {
            *p = 255;
        }
        let b = Frame::from_rgb(Size::new(32, 32), pixels).unwrap();
        assert!(!differs(&a, &b, 10));
        assert!(differs(&a, &b, 9));
    }
}
