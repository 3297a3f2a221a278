//! What every provider does the same with the pointer and its screens: wheel notches for a scroll distance,
//! the intermediate points of a drag, the monitors a screen is made of, and the one provider per
//! configuration a process keeps open.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, OnceLock};

use crate::Point;

/// One wheel notch per this many pixels of `scroll_x`/`scroll_y` (rounded, at least one notch for any
/// non-zero amount). Model adapters that count in notches multiply by this.
pub const PIXELS_PER_NOTCH: i32 = 100;
/// Most wheel notches one scroll action sends per axis.
pub const MAX_NOTCHES: i32 = 100;

/// Wheel notches for a scroll of `pixels`, sign kept: rounded to the nearest notch, at least one for any
/// non-zero distance, at most [`MAX_NOTCHES`].
pub fn notches(pixels: i32) -> i32 {
    if pixels == 0 {
        return 0;
    }
    let n = (i64::from(pixels).abs() + i64::from(PIXELS_PER_NOTCH / 2)) / i64::from(PIXELS_PER_NOTCH);
    n.clamp(1, i64::from(MAX_NOTCHES)) as i32 * pixels.signum()
}

/// Intermediate pointer positions from `a` to `b` (excluding `a`, including `b`): about one every 20 pixels
/// (at most 50), so applications that track motion (drag thresholds, drawing) see a continuous path.
pub fn interpolate(a: Point, b: Point) -> Vec<Point> {
    let (dx, dy) = (f64::from(b.x - a.x), f64::from(b.y - a.y));
    let steps = ((dx.hypot(dy) / 20.0).ceil() as usize).clamp(1, 50);
    (1..=steps)
        .map(|i| {
            let t = i as f64 / steps as f64;
            Point::new(a.x + (dx * t).round() as i32, a.y + (dy * t).round() as i32)
        })
        .collect()
}

/// One monitor of a screen, in the screen's own pixels (a provider whose screen is one monitor of several
/// lists them all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorInfo {
    pub index: usize,
    pub name: String,
    pub x: i32,
    pub y: i32,
    pub width: u32,
    pub height: u32,
    pub primary: bool,
}

/// The providers a process keeps open, one per configuration, shared by every task that asks for the same
/// one (a connection, an input thread and held keys live as long as the process, not one task). A `static`
/// of a provider crate: `static OPEN: Shared<Config, Provider> = Shared::new();`.
pub struct Shared<K, P> {
    open: OnceLock<tokio::sync::Mutex<HashMap<K, Arc<P>>>>,
}

impl<K: Eq + Hash + Clone, P> Shared<K, P> {
    pub const fn new() -> Self {
        Self { open: OnceLock::new() }
    }

    /// The provider for `key`, opened with `open` the first time (a failure is not kept: the next call
    /// tries again).
    pub async fn get_or_open<E, F, Fut>(&self, key: K, open: F) -> Result<Arc<P>, E>
    where
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = Result<P, E>>,
    {
        let mut open_now = self.open.get_or_init(|| tokio::sync::Mutex::new(HashMap::new())).lock().await;
        if let Some(provider) = open_now.get(&key) {
            return Ok(provider.clone());
        }
        let provider = Arc::new(open(key.clone()).await?);
        open_now.insert(key, provider.clone());
        Ok(provider)
    }
}

impl<K: Eq + Hash + Clone, P> Default for Shared<K, P> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scroll_notches_round_and_keep_sign() {
        assert_eq!(notches(0), 0);
        assert_eq!(notches(-30), -1);
        assert_eq!(notches(149), 1);
        assert_eq!(notches(150), 2);
        assert_eq!(notches(250), 3);
        assert_eq!(notches(i32::MIN), -MAX_NOTCHES);
    }

    #[test]
    fn interpolation_ends_on_target_in_small_steps() {
        let path = interpolate(Point::new(0, 0), Point::new(100, 0));
        assert_eq!(path.len(), 5);
        assert_eq!(path.last(), Some(&Point::new(100, 0)));
        assert!(path.windows(2).all(|w| (w[1].x - w[0].x).abs() <= 20));
        assert_eq!(interpolate(Point::new(5, 5), Point::new(5, 5)), vec![Point::new(5, 5)]);
        assert_eq!(interpolate(Point::new(0, 0), Point::new(10_000, 0)).len(), 50);
    }

    #[tokio::test]
    async fn one_provider_per_key_and_a_failure_is_not_kept() {
        let shared: Shared<u32, String> = Shared::new();
        let a = shared.get_or_open(1, |k| async move { Ok::<_, ()>(format!("p{k}")) }).await.unwrap();
        let b = shared.get_or_open(1, |_| async { Err(()) }).await.unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(shared.get_or_open(2, |_| async { Err::<String, _>("no") }).await.is_err());
        assert_eq!(*shared.get_or_open(2, |_| async { Ok::<_, ()>("p2".into()) }).await.unwrap(), "p2");
    }
}
