//! The screens of the attempts running in this process, for the people who watch them (`GET
//! /v1/tasks/{id}/live`, the console's live view; docs/console.md).
//!
//! An attempt registers its computer here for as long as it runs ([`LiveScreens::register`]). While at least
//! one viewer watches a task, one capture loop (the task's *pump*) takes the computer's screen at most
//! `[console] live_fps` times a second, compares it with the last one it took, and only when it changed
//! scales it to the widest viewer's width and encodes it as a JPEG; every viewer of the task reads that one
//! frame. A viewer holds a `watch` receiver: one that reads slowly skips to the newest frame, never queues
//! old ones. The pump stops when the last viewer leaves or the attempt ends.
//!
//! Frames are taken through the provider's own `screenshot` beside the attempt's steps (every provider's
//! capture may run concurrently with its actions): they never delay a step, and a step never waits for them.
//! A capture that fails (the computer is busy or gone) is skipped; the attempt reports its own errors.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use agentd_computer::{ComputerProvider, Frame, Size};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::screen::coords::fit_within;

/// JPEG quality of the frames: text on a UI stays legible, a 1280x800 desktop is ~60–150 KB.
const QUALITY: u8 = 75;

/// One frame of a task's live view, as every viewer of it receives it.
#[derive(Debug)]
pub struct LiveFrame {
    /// Counts the frames of this attempt's pump, from 1.
    pub seq: u64,
    /// The JPEG's size (the screen's, scaled down to the widest viewer's width).
    pub size: Size,
    /// The screen's size: a point of the frame at (x, y) is (x * screen.width / size.width, …) on the screen.
    pub screen: Size,
    /// When the screen was captured.
    pub captured_at: SystemTime,
    pub jpeg: Vec<u8>,
}

/// The running attempts' screens of this process, by task id.
#[derive(Default)]
pub struct LiveScreens {
    screens: Mutex<HashMap<String, Arc<Screen>>>,
    /// Fires whenever an attempt registers (viewers waiting for their task to start here wake up).
    registered: Notify,
    viewers: AtomicU64,
}

/// One running attempt's screen.
struct Screen {
    computer: Arc<dyn ComputerProvider>,
    frames: watch::Sender<Option<Arc<LiveFrame>>>,
    /// Cancelled when the attempt ends: its pump stops and its viewers are told.
    ended: CancellationToken,
    /// The width each viewer asked for, by viewer.
    widths: Mutex<BTreeMap<u64, u32>>,
    /// Whether a pump runs for it now.
    pumping: Mutex<bool>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is one insert, remove or assignment: a panic left the value whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Held by an attempt for as long as it runs; dropping it ends the task's live view here.
pub struct Registration {
    screens: Arc<LiveScreens>,
    task_id: String,
    screen: Arc<Screen>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        {
            let mut screens = lock(&self.screens.screens);
            // A later attempt of the same task may have registered meanwhile: only this one's entry goes.
            if screens.get(&self.task_id).is_some_and(|s| Arc::ptr_eq(s, &self.screen)) {
                screens.remove(&self.task_id);
            }
        }
        // Told after it is gone, so that a viewer who looks again finds it gone.
        self.screen.ended.cancel();
    }
}

/// A viewer's end of a task's live view: the newest frame and the end of the attempt.
pub struct Viewer {
    pub frames: watch::Receiver<Option<Arc<LiveFrame>>>,
    /// Cancelled when the attempt ends (the task finished, paused, or went back to the queue).
    pub ended: CancellationToken,
    screen: Arc<Screen>,
    id: u64,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        lock(&self.screen.widths).remove(&self.id);
    }
}

impl LiveScreens {
    /// Registers the computer of task `task_id`'s attempt, which runs from now until the registration is
    /// dropped.
    pub fn register(self: &Arc<Self>, task_id: &str, computer: Arc<dyn ComputerProvider>) -> Registration {
        let screen = Arc::new(Screen {
            computer,
            frames: watch::channel(None).0,
            ended: CancellationToken::new(),
            widths: Mutex::default(),
            pumping: Mutex::new(false),
        });
        if let Some(earlier) = lock(&self.screens).insert(task_id.to_string(), screen.clone()) {
            earlier.ended.cancel();
        }
        self.registered.notify_waiters();
        Registration { screens: self.clone(), task_id: task_id.to_string(), screen }
    }

    /// Whether task `task_id` runs in this process now.
    pub fn is_running(&self, task_id: &str) -> bool {
        lock(&self.screens).contains_key(task_id)
    }

    /// Completes when some attempt registers after this was called and armed (`Notified::enable`): a viewer
    /// of a task that does not run here yet arms it, looks, and waits on it.
    pub fn registrations(&self) -> tokio::sync::futures::Notified<'_> {
        self.registered.notified()
    }

    /// A viewer of task `task_id`, when it runs in this process: frames at most `fps` a second, at most
    /// `width` pixels wide. Starts the task's pump if it has none.
    pub fn watch(&self, task_id: &str, width: u32, fps: u32) -> Option<Viewer> {
        let screen = lock(&self.screens).get(task_id).cloned()?;
        let id = self.viewers.fetch_add(1, Ordering::Relaxed);
        lock(&screen.widths).insert(id, width.max(1));
        let frames = screen.frames.subscribe();
        let mut pumping = lock(&screen.pumping);
        if !*pumping {
            *pumping = true;
            tokio::spawn(pump(screen.clone(), fps.max(1)));
        }
        drop(pumping);
        Some(Viewer { frames, ended: screen.ended.clone(), screen, id })
    }
}

/// The capture loop of one task's screen: runs while it has viewers and its attempt runs.
async fn pump(screen: Arc<Screen>, fps: u32) {
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(fps)));
    // A capture slower than the period delays the next one; frames never come in a burst.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Frame, Size)> = None;
    let mut seq = 0;
    loop {
        tokio::select! {
            () = screen.ended.cancelled() => break,
            _ = ticks.tick() => {}
        }
        {
            // Decided under the flag's lock, so that a viewer arriving now either is counted here or starts
            // a pump of its own.
            let mut pumping = lock(&screen.pumping);
            if screen.frames.receiver_count() == 0 {
                *pumping = false;
                return;
            }
        }
        let frame = match screen.computer.screenshot().await {
            Ok(frame) => frame,
            Err(e) => {
                tracing::debug!(error = %e, "live view: a capture failed; skipped");
                continue;
            }
        };
        let widest = lock(&screen.widths).values().copied().max().unwrap_or(frame.width());
        let size = fit_within(frame.size(), Size::new(widest.min(frame.width()), frame.height()));
        if last.as_ref().is_some_and(|(f, s)| *s == size && *f == frame) {
            continue;
        }
        let captured_at = SystemTime::now();
        let encoded = tokio::task::spawn_blocking(move || {
            let scaled = crate::screen::image::scale(&frame, size)?;
            crate::screen::image::encode_jpeg(&scaled, QUALITY).map(|jpeg| (frame, jpeg))
        })
        .await;
        let (frame, jpeg) = match encoded {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "live view: cannot encode a frame");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "live view: the encoder stopped");
                continue;
            }
        };
        seq += 1;
        let screen_size = frame.size();
        screen.frames.send_replace(Some(Arc::new(LiveFrame { seq, size, screen: screen_size, captured_at, jpeg })));
        last = Some((frame, size));
    }
    *lock(&screen.pumping) = false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_computer::Action;
    use agentd_mock::{MockDesktop, Scene};

    fn login(size: Size) -> Arc<MockDesktop> {
        let scene = Scene::builtin("login").expect("the built-in login scene");
        Arc::new(MockDesktop::new(scene, Some(size)).expect("a mock desktop"))
    }

    async fn next(viewer: &mut Viewer) -> Arc<LiveFrame> {
        tokio::time::timeout(Duration::from_secs(10), viewer.frames.wait_for(Option::is_some))
            .await
            .expect("a frame within 10 s")
            .expect("the pump is there")
            .clone()
            .expect("a frame")
    }

    #[tokio::test]
    async fn viewers_share_one_frame_sized_for_the_widest_and_an_unchanged_screen_sends_nothing() {
        let live = Arc::new(LiveScreens::default());
        assert!(live.watch("t", 320, 50).is_none(), "no viewer for a task that does not run here");
        let registration = live.register("t", login(Size::new(640, 400)));
        let mut small = live.watch("t", 320, 50).expect("running");
        let first = next(&mut small).await;
        assert_eq!(first.screen, Size::new(640, 400));
        assert_eq!(first.size, Size::new(320, 200));
        assert_eq!(&first.jpeg[..2], &[0xFF, 0xD8], "a JPEG");
        // A wider viewer: the next frame is encoded at its width (the screen did not change, the size did).
        let mut wide = live.watch("t", 1280, 50).expect("running");
        let wider = tokio::time::timeout(
            Duration::from_secs(10),
            wide.frames.wait_for(|f| f.as_ref().is_some_and(|f| f.size.width == 640)),
        )
        .await
        .expect("a frame at the wider width")
        .expect("pump")
        .clone()
        .expect("frame");
        assert_eq!(wider.size, Size::new(640, 400), "never wider than the screen");
        // Nothing changes on the mock desktop: no further frame for several periods.
        let seq = wider.seq;
        small.frames.mark_unchanged();
        let more = tokio::time::timeout(Duration::from_millis(300), small.frames.changed()).await;
        assert!(
            more.is_err(),
            "a frame was sent for an unchanged screen: {:?}",
            small.frames.borrow().as_ref().map(|f| f.seq)
        );
        assert_eq!(small.frames.borrow().as_ref().map(|f| f.seq), Some(seq));
        drop(registration);
        tokio::time::timeout(Duration::from_secs(10), small.ended.cancelled()).await.expect("the end is told");
        assert!(!live.is_running("t"));
    }

    #[tokio::test]
    async fn a_changed_screen_is_a_new_frame_and_a_later_attempt_keeps_its_registration() {
        let live = Arc::new(LiveScreens::default());
        let desktop = login(Size::new(640, 400));
        let first = live.register("t", desktop.clone());
        let mut viewer = live.watch("t", 640, 50).expect("running");
        let before = next(&mut viewer).await;
        let field = desktop.widget_center("username").expect("the username field");
        desktop
            .apply(&Action::Click { x: field.x, y: field.y, button: Default::default(), keys: Vec::new() })
            .expect("click");
        desktop.apply(&Action::Type { text: "hello".into() }).expect("type on the mock desktop");
        let after = tokio::time::timeout(
            Duration::from_secs(10),
            viewer.frames.wait_for(|f| f.as_ref().is_some_and(|f| f.seq > before.seq)),
        )
        .await;
        assert!(after.is_ok(), "no new frame after the screen changed (last seq {})", before.seq);
        // A second attempt registers before the first's registration is dropped: dropping the first leaves
        // the second's in place.
        let second = live.register("t", desktop.clone());
        drop(first);
        assert!(live.is_running("t"));
        drop(second);
        assert!(!live.is_running("t"));
    }
}
