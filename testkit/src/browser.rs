//! A small harness over headless Chromium for tests that look at what a browser shows: the web console's, and
//! any later page agentd serves or writes. It speaks the DevTools protocol through the browser provider's own
//! client and launcher (`agentd_browser::cdp`, `agentd_browser::launch`): one CDP implementation in the
//! workspace, and no second, generated one to compile for the tests.
//!
//! [`Browser::launch`] starts Chromium from `$AGENTD_TEST_CHROMIUM` (`scripts/setup/40-browser.sh` sets it),
//! else `/usr/bin/chromium`, with a fresh profile that is removed when the browser is dropped; `None` when
//! neither exists (the caller skips, saying so). A [`Tab`] has a fixed viewport and offers what tests need:
//! navigate, evaluate JavaScript, wait for a condition, click, press keys, and save a screenshot;
//! [`pixel_spread`] tells a blank PNG from a page with something on it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentd_browser::cdp::{Connection, Event};
use agentd_browser::launch::{self, Launch, Profile};
use base64::Engine;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

/// Anything the harness fails at, as text for a test's panic message.
pub type Error = String;

/// How long the browser gets to start, and any one DevTools call to be answered.
const BOUND: Duration = Duration::from_secs(30);

/// The sessions of the documents that fired their load event, in order, and a wake-up when one does.
#[derive(Default)]
struct Loads {
    seen: Mutex<Vec<String>>,
    changed: Notify,
}

/// A headless Chromium with a fresh profile.
pub struct Browser {
    conn: Arc<Connection>,
    loads: Arc<Loads>,
    pump: tokio::task::JoinHandle<()>,
    /// Never read, only held: dropped last, it kills the browser's process group and removes its profile.
    _process: launch::Process,
}

/// The Chromium binary to drive: `$AGENTD_TEST_CHROMIUM`, else `/usr/bin/chromium` when it exists.
pub fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("AGENTD_TEST_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let default = PathBuf::from("/usr/bin/chromium");
    default.exists().then_some(default)
}

impl Browser {
    /// Starts headless Chromium, or `None` (after saying the caller skips) when none is installed.
    pub async fn launch() -> Result<Option<Self>, Error> {
        let Some(executable) = chromium() else {
            agentd_testenv::skip("no Chromium (set AGENTD_TEST_CHROMIUM; scripts/setup/40-browser.sh installs it)");
            return Ok(None);
        };
        let process = launch::launch(Launch {
            executable: &executable,
            profile: &Profile::Fresh,
            headless: true,
            width: 1280,
            height: 800,
            timeout: BOUND,
        })
        .await
        .map_err(|e| format!("launching Chromium: {e}"))?;
        let (conn, events) =
            Connection::open(&process.ws_url, BOUND).await.map_err(|e| format!("connecting to Chromium: {e}"))?;
        let loads = Arc::new(Loads::default());
        let pump = tokio::spawn(pump(events, loads.clone()));
        Ok(Some(Self { conn: Arc::new(conn), loads, pump, _process: process }))
    }

    /// A new tab whose viewport is `width`×`height` CSS pixels (`mobile`: a phone's, with touch).
    pub async fn tab(&self, width: u32, height: u32, mobile: bool) -> Result<Tab, Error> {
        let call = |method: &'static str, params: Value| async move {
            self.conn.call(None, method, params).await.map_err(|e| format!("new tab: {e}"))
        };
        let target = call("Target.createTarget", json!({"url": "about:blank"})).await?;
        let target = target["targetId"].as_str().ok_or("new tab: no target id")?;
        let attached = call("Target.attachToTarget", json!({"targetId": target, "flatten": true})).await?;
        let session = attached["sessionId"].as_str().ok_or("new tab: no session id")?.to_string();
        let tab = Tab { conn: self.conn.clone(), loads: self.loads.clone(), session };
        tab.call("Page.enable", json!({})).await?;
        tab.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        )
        .await?;
        Ok(tab)
    }

    /// Closes the browser and waits for it to exit.
    pub async fn close(self) {
        let _ = self.conn.call_within(None, "Browser.close", json!({}), Duration::from_secs(5)).await;
        // Dropping the browser stops the event pump, then reaps the browser process (killing what is left of
        // its group) and removes the profile.
        drop(self);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

/// Notes every document's load event (`Page.loadEventFired`), for [`Tab::goto`] to wait on.
async fn pump(mut events: mpsc::UnboundedReceiver<Event>, loads: Arc<Loads>) {
    while let Some(event) = events.recv().await {
        if event.method != "Page.loadEventFired" {
            continue;
        }
        let Some(session) = event.session else { continue };
        if let Ok(mut seen) = loads.seen.lock() {
            seen.push(session);
        }
        loads.changed.notify_waiters();
    }
}

/// One tab.
pub struct Tab {
    conn: Arc<Connection>,
    loads: Arc<Loads>,
    session: String,
}

impl Tab {
    async fn call(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.conn.call(Some(&self.session), method, params).await.map_err(|e| e.to_string())
    }

    /// Navigates to `url` and waits for a document of this tab to fire its load event: the new one, or the one
    /// it went on to (a page that submits a form as it loads never finishes loading itself). A change of the
    /// fragment only is no new document: nothing is waited for.
    pub async fn goto(&self, url: &str) -> Result<(), Error> {
        let before = self.loads.seen.lock().map(|seen| seen.len()).unwrap_or(0);
        let navigated =
            self.call("Page.navigate", json!({"url": url})).await.map_err(|e| format!("goto {url}: {e}"))?;
        if let Some(error) = navigated["errorText"].as_str() {
            return Err(format!("goto {url}: {error}"));
        }
        if navigated["loaderId"].as_str().is_none() {
            return Ok(());
        }
        let deadline = Instant::now() + BOUND;
        loop {
            let changed = self.loads.changed.notified();
            if self.loads.seen.lock().is_ok_and(|seen| seen.iter().skip(before).any(|s| *s == self.session)) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, changed).await.is_err() {
                return Err(format!("goto {url}: the page did not finish loading within {BOUND:?}"));
            }
        }
    }

    /// The value of a JavaScript expression (awaited when it is a promise).
    pub async fn eval<T: serde::de::DeserializeOwned>(&self, expression: &str) -> Result<T, Error> {
        let value = self.evaluate(expression).await?;
        serde_json::from_value(value).map_err(|e| format!("evaluate {expression}: {e}"))
    }

    async fn evaluate(&self, expression: &str) -> Result<Value, Error> {
        let mut answer = self
            .call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}))
            .await
            .map_err(|e| format!("evaluate {expression}: {e}"))?;
        if let Some(details) = answer.get("exceptionDetails") {
            let text = details["exception"]["description"].as_str().or(details["text"].as_str()).unwrap_or("");
            return Err(format!("evaluate {expression}: {text}"));
        }
        Ok(answer["result"]["value"].take())
    }

    /// Waits until `expression` is truthy, polling every 25 ms; an error names it when `timeout` passes.
    pub async fn wait_for(&self, expression: &str, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let check = format!("!!({expression})");
        loop {
            // A navigation in progress destroys the context: try again.
            if let Ok(true) = self.eval::<bool>(&check).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                let url = self.url().await;
                return Err(format!("waited {timeout:?} for `{expression}` on {url}"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The centre of the element `selector` finds, scrolled into view, in viewport coordinates.
    async fn centre(&self, selector: &str) -> Result<(f64, f64), Error> {
        let quoted = serde_json::to_string(selector).map_err(|e| e.to_string())?;
        let point: Option<(f64, f64)> = self
            .eval(&format!(
                "(() => {{ const e = document.querySelector({quoted}); if (!e) return null; \
                 e.scrollIntoView({{block: 'center', inline: 'center'}}); const r = e.getBoundingClientRect(); \
                 return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
            ))
            .await
            .map_err(|e| format!("find {selector}: {e}"))?;
        point.ok_or_else(|| format!("find {selector}: no element matches"))
    }

    /// Clicks the element `selector` finds (a real mouse click at its centre).
    pub async fn click(&self, selector: &str) -> Result<(), Error> {
        let (x, y) = self.centre(selector).await?;
        self.click_at(x, y).await.map_err(|e| format!("click {selector}: {e}"))
    }

    /// A real left mouse click at (`x`, `y`) in the page's CSS pixels.
    pub async fn click_at(&self, x: f64, y: f64) -> Result<(), Error> {
        for (kind, buttons) in [("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)] {
            let mut event = json!({"type": kind, "x": x, "y": y, "buttons": buttons});
            if kind != "mouseMoved" {
                event["button"] = json!("left");
                event["clickCount"] = json!(1);
            }
            self.call("Input.dispatchMouseEvent", event).await.map_err(|e| format!("click at ({x}, {y}): {e}"))?;
        }
        Ok(())
    }

    /// Types `text` to whatever has the focus, key by key (`\n` presses Enter).
    pub async fn type_keys(&self, text: &str) -> Result<(), Error> {
        for c in text.chars() {
            if c == '\n' {
                self.press("Enter", false).await?;
                continue;
            }
            let key = c.to_string();
            for kind in ["keyDown", "keyUp"] {
                let mut event = json!({"type": kind, "key": key});
                if kind == "keyDown" {
                    event["text"] = json!(key);
                    event["unmodifiedText"] = json!(key);
                }
                self.call("Input.dispatchKeyEvent", event).await.map_err(|e| format!("type {text:?}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Types `text` into the input or text area `selector` finds (clicked, and focused in case the click missed),
    /// key by key, and checks it then holds the text.
    pub async fn type_into(&self, selector: &str, text: &str) -> Result<(), Error> {
        self.click(selector).await?;
        // The click lands where the element was when its box was read; a page that re-laid itself out in
        // between (an image loaded above it) moves it, and the keys would go elsewhere. Focus it for sure.
        let quoted = serde_json::to_string(selector).map_err(|e| e.to_string())?;
        let _: bool = self
            .eval(&format!("(() => {{ document.querySelector({quoted}).focus(); return true; }})()"))
            .await
            .map_err(|e| format!("focus {selector}: {e}"))?;
        self.type_keys(text).await.map_err(|e| format!("type into {selector}: {e}"))?;
        let value: Option<String> = self
            .eval(&format!("(() => {{ const v = document.querySelector({quoted}).value; return v ?? null; }})()"))
            .await
            .map_err(|e| format!("read {selector}: {e}"))?;
        match value {
            Some(value) if value.ends_with(text) => Ok(()),
            other => Err(format!("typed {text:?} into {selector}, and it holds {other:?}")),
        }
    }

    /// Presses and releases one key, as a keyboard would: `Tab`, `Enter`, `ArrowRight`, ` ` …; `shift` holds
    /// Shift down.
    pub async fn press(&self, key: &str, shift: bool) -> Result<(), Error> {
        let (code, key_code, text) = match key {
            "Tab" => ("Tab", 9, None),
            "Enter" => ("Enter", 13, Some("\r")),
            " " => ("Space", 32, Some(" ")),
            "ArrowLeft" => ("ArrowLeft", 37, None),
            "ArrowRight" => ("ArrowRight", 39, None),
            "ArrowUp" => ("ArrowUp", 38, None),
            "ArrowDown" => ("ArrowDown", 40, None),
            "Home" => ("Home", 36, None),
            "End" => ("End", 35, None),
            "Escape" => ("Escape", 27, None),
            other => return Err(format!("press: no key {other:?} in the harness's table")),
        };
        let modifiers = if shift { 8 } else { 0 };
        let down = if text.is_some() { "keyDown" } else { "rawKeyDown" };
        for kind in [down, "keyUp"] {
            let mut event = json!({
                "type": kind, "key": key, "code": code, "modifiers": modifiers,
                "windowsVirtualKeyCode": key_code, "nativeVirtualKeyCode": key_code,
            });
            if let Some(text) = text {
                event["text"] = json!(text);
            }
            self.call("Input.dispatchKeyEvent", event).await.map_err(|e| format!("press {key}: {e}"))?;
        }
        Ok(())
    }

    /// The focused element, described as `tag#id` or `tag "text"` (what keyboard tests follow).
    pub async fn focused(&self) -> Result<String, Error> {
        self.eval(
            "(() => { const e = document.activeElement; if (!e) return ''; \
             const tag = e.tagName.toLowerCase(); if (e.id) return `${tag}#${e.id}`; \
             return `${tag} \"${(e.getAttribute('aria-label') || e.textContent || '').trim().slice(0, 60)}\"`; })()",
        )
        .await
    }

    /// The page's current URL.
    pub async fn url(&self) -> String {
        self.eval("location.href").await.unwrap_or_default()
    }

    /// A PNG of the viewport, also written to `path` (its directory is created).
    pub async fn screenshot(&self, path: &Path) -> Result<Vec<u8>, Error> {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await
            .map_err(|e| format!("screenshot: {e}"))?;
        let data = shot["data"].as_str().ok_or("screenshot: no data")?;
        let png = base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("screenshot: {e}"))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(path, &png).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(png)
    }
}

/// The standard deviation of a PNG's luma (0–255): about 0 for a blank page, tens for one with content.
pub fn pixel_spread(png_bytes: &[u8]) -> Result<f64, Error> {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().map_err(|e| format!("PNG: {e}"))?;
    let mut buffer = vec![0; reader.output_buffer_size().ok_or("PNG: too large")?];
    let info = reader.next_frame(&mut buffer).map_err(|e| format!("PNG: {e}"))?;
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        other => return Err(format!("PNG: colour type {other:?}")),
    };
    if info.bit_depth != png::BitDepth::Eight {
        return Err(format!("PNG: bit depth {:?}", info.bit_depth));
    }
    let pixels = &buffer[..info.buffer_size()];
    let luma: Vec<f64> =
        pixels
            .chunks_exact(channels)
            .map(|p| {
                if channels >= 3 {
                    0.299 * p[0] as f64 + 0.587 * p[1] as f64 + 0.114 * p[2] as f64
                } else {
                    p[0] as f64
                }
            })
            .collect();
    let n = luma.len().max(1) as f64;
    let mean = luma.iter().sum::<f64>() / n;
    Ok((luma.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt())
}
