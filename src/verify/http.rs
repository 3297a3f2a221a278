//! The `http` check: a GET of the check's URL (no redirects followed, [`TIMEOUT`], a body of at most
//! [`MAX_BODY_BYTES`]) whose status is `expect_status` (any 2xx when absent) and whose JSON body holds
//! `expect_json`'s values at its pointers.

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::json;

use crate::record::CheckResult;
use crate::task::verify::HttpCheck;

/// How long the request may take, answer included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest body read.
pub const MAX_BODY_BYTES: usize = 1 << 20;

fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .timeout(TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| format!("cannot make an HTTP client: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

pub async fn check(check: &HttpCheck) -> CheckResult {
    let (ok, message, evidence) = match run(check).await {
        Ok(done) => done,
        Err(problem) => (false, format!("GET {}: {problem}", check.url), None),
    };
    CheckResult { kind: "http".into(), ok, message, evidence }
}

async fn run(check: &HttpCheck) -> Result<(bool, String, Option<serde_json::Value>), String> {
    let mut response = client()?.get(&check.url).send().await.map_err(|e| e.without_url().to_string())?;
    let status = response.status().as_u16();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.without_url().to_string())? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(format!("the answer is larger than {MAX_BODY_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    let evidence = Some(json!({"status": status}));
    let status_ok = match check.expect_status {
        Some(want) => status == want.get(),
        None => (200..300).contains(&status),
    };
    if !status_ok {
        let want = check.expect_status.map_or("a 2xx status".to_string(), |s| format!("status {}", s.get()));
        return Ok((false, format!("GET {} answered {status}, expected {want}", check.url), evidence));
    }
    if check.expect_json.is_empty() {
        return Ok((true, format!("GET {} answered {status}", check.url), evidence));
    }
    let document: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(document) => document,
        Err(e) => return Ok((false, format!("GET {} answered {status} but not JSON: {e}", check.url), evidence)),
    };
    let problems = super::pointers(&check.expect_json, &document);
    if problems.is_empty() {
        Ok((true, format!("GET {} answered {status} with the expected JSON", check.url), evidence))
    } else {
        Ok((false, format!("GET {} answered {status}; its JSON differs: {}", check.url, problems.join("; ")), evidence))
    }
}
