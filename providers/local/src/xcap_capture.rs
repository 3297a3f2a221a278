//! Capture through the xcap crate (cargo feature `xcap`), kept to measure against the MIT-SHM path.
//!
//! xcap opens a new X connection and reads the screen with `GetImage` for every capture, and it finds
//! the display only through `$DISPLAY`, so this path serves a provider whose display is `$DISPLAY`.

use agentd_computer::{Frame, Size};

use crate::error::LocalError;

pub struct XcapCapture;

impl XcapCapture {
    pub fn new(display: &str) -> Result<Self, LocalError> {
        match std::env::var("DISPLAY") {
            Ok(env) if env == display => Ok(Self),
            _ => Err(LocalError::Invalid(format!("capture with xcap reads $DISPLAY only; it is not {display}"))),
        }
    }

    /// Captures `size` pixels from `origin` (root coordinates) of the monitor that holds it.
    pub fn capture(&self, origin: (i32, i32), size: Size) -> Result<Frame, LocalError> {
        let failed = |e: xcap::XCapError| LocalError::Request(format!("xcap: {e}"));
        let monitors = xcap::Monitor::all().map_err(failed)?;
        let mut chosen = None;
        for monitor in &monitors {
            let (x, y) = (monitor.x().map_err(failed)?, monitor.y().map_err(failed)?);
            let (w, h) = (monitor.width().map_err(failed)?, monitor.height().map_err(failed)?);
            if origin.0 >= x && origin.1 >= y && origin.0 < x + w as i32 && origin.1 < y + h as i32 {
                chosen = Some((monitor, x, y));
                break;
            }
        }
        let (monitor, x, y) = chosen.ok_or_else(|| LocalError::Request("xcap: no monitor holds the region".into()))?;
        let image = monitor
            .capture_region((origin.0 - x) as u32, (origin.1 - y) as u32, size.width, size.height)
            .map_err(failed)?;
        let rgb: Vec<u8> = image.as_raw().chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
        Frame::from_rgb(Size::new(image.width(), image.height()), rgb)
            .map_err(|e| LocalError::PixelFormat(e.to_string()))
    }
}
