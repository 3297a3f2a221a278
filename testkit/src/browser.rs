//! A small harness over headless Chromium (the DevTools protocol, through `chromiumoxide`) for tests that
//! look at what a browser shows: the web console's, and any later page agentd serves or writes.
//!
//! [`Browser::launch`] starts Chromium from `$AGENTD_TEST_CHROMIUM` (`scripts/setup/40-browser.sh` sets it),
//! else `/usr/bin/chromium`, with a private profile that is removed when the browser is dropped; `None` when
//! neither exists (the caller skips, saying so). A [`Tab`] has a fixed viewport and offers what tests need:
//! navigate, evaluate JavaScript, wait for a condition, click, press keys, and save a screenshot;
//! [`pixel_spread`] tells a blank PNG from a page with something on it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chromiumoxide::cdp::browser_protocol::emulation::SetDeviceMetricsOverrideParams;
use chromiumoxide::cdp::browser_protocol::input::{DispatchKeyEventParams, DispatchKeyEventType};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::page::ScreenshotParams;
use futures_util::StreamExt;

/// Anything the harness fails at, as text for a test's panic message.
pub type Error = String;

/// A headless Chromium with a private profile.
pub struct Browser {
    browser: chromiumoxide::Browser,
    handler: tokio::task::JoinHandle<()>,
    profile: tempfile::TempDir,
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
        let profile = tempfile::tempdir().map_err(|e| format!("browser profile: {e}"))?;
        let config = chromiumoxide::BrowserConfig::builder()
            .chrome_executable(executable)
            .user_data_dir(profile.path())
            .new_headless_mode()
            .no_sandbox()
            .viewport(None)
            .args(["--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars"])
            .build()?;
        let (browser, mut handler) =
            chromiumoxide::Browser::launch(config).await.map_err(|e| format!("launching Chromium: {e}"))?;
        let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Ok(Some(Self { browser, handler, profile }))
    }

    /// A new tab whose viewport is `width`×`height` CSS pixels (`mobile`: a phone's, with touch).
    pub async fn tab(&self, width: u32, height: u32, mobile: bool) -> Result<Tab, Error> {
        let page = self.browser.new_page("about:blank").await.map_err(|e| format!("new tab: {e}"))?;
        page.execute(SetDeviceMetricsOverrideParams::new(width as i64, height as i64, 1.0, mobile))
            .await
            .map_err(|e| format!("viewport: {e}"))?;
        Ok(Tab { page })
    }

    /// Where the browser keeps its profile (cookies and all): removed when the browser is dropped.
    pub fn profile(&self) -> &Path {
        self.profile.path()
    }

    /// Closes the browser and waits for it to exit.
    pub async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        self.handler.abort();
    }
}

/// One tab.
pub struct Tab {
    page: chromiumoxide::Page,
}

impl Tab {
    /// Navigates to `url` and waits for the load.
    pub async fn goto(&self, url: &str) -> Result<(), Error> {
        self.page.goto(url).await.map_err(|e| format!("goto {url}: {e}"))?;
        Ok(())
    }

    /// The value of a JavaScript expression (awaited when it is a promise).
    pub async fn eval<T: serde::de::DeserializeOwned>(&self, expression: &str) -> Result<T, Error> {
        let result = self.page.evaluate(expression).await.map_err(|e| format!("evaluate {expression}: {e}"))?;
        result.into_value().map_err(|e| format!("evaluate {expression}: {e}"))
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

    /// Clicks the element `selector` finds (a real mouse click at its centre).
    pub async fn click(&self, selector: &str) -> Result<(), Error> {
        let element = self.page.find_element(selector).await.map_err(|e| format!("find {selector}: {e}"))?;
        element.click().await.map_err(|e| format!("click {selector}: {e}"))?;
        Ok(())
    }

    /// Types `text` into the input or text area `selector` finds (clicked, and focused in case the click missed),
    /// and checks it then holds the text.
    pub async fn type_into(&self, selector: &str, text: &str) -> Result<(), Error> {
        let element = self.page.find_element(selector).await.map_err(|e| format!("find {selector}: {e}"))?;
        element.click().await.map_err(|e| format!("click {selector}: {e}"))?;
        // The click lands where the element was when its box was read; a page that re-laid itself out in
        // between (an image loaded above it) moves it, and the keys would go elsewhere. Focus it for sure.
        element.focus().await.map_err(|e| format!("focus {selector}: {e}"))?;
        element.type_str(text).await.map_err(|e| format!("type into {selector}: {e}"))?;
        let value = element
            .call_js_fn("function() { return this.value; }", false)
            .await
            .map_err(|e| format!("read {selector}: {e}"))?
            .result
            .value;
        match value.as_ref().and_then(|v| v.as_str()) {
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
        let event = |kind: DispatchKeyEventType| {
            let mut builder = DispatchKeyEventParams::builder()
                .r#type(kind)
                .key(key)
                .code(code)
                .windows_virtual_key_code(key_code)
                .native_virtual_key_code(key_code)
                .modifiers(modifiers);
            if let Some(text) = text {
                builder = builder.text(text);
            }
            builder.build()
        };
        let down = if text.is_some() { DispatchKeyEventType::KeyDown } else { DispatchKeyEventType::RawKeyDown };
        for kind in [down, DispatchKeyEventType::KeyUp] {
            let params = event(kind)?;
            self.page.execute(params).await.map_err(|e| format!("press {key}: {e}"))?;
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
        self.page.url().await.ok().flatten().unwrap_or_default()
    }

    /// A PNG of the viewport, also written to `path` (its directory is created).
    pub async fn screenshot(&self, path: &Path) -> Result<Vec<u8>, Error> {
        let params = ScreenshotParams::builder().format(CaptureScreenshotFormat::Png).build();
        let png = self.page.screenshot(params).await.map_err(|e| format!("screenshot: {e}"))?;
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
