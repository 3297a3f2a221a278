//! The `http` check: a GET of the check's URL (no redirects followed, [`TIMEOUT`], a body of at most
//! [`MAX_BODY_BYTES`]) whose status is `expect_status` (any 2xx when absent) and whose JSON body holds
//! `expect_json`'s values at its pointers. The URL is reached only where the task's outbound policy allows,
//! and no message quotes what the server answered: a verifier is not a way to read a URL.

use std::sync::OnceLock;
use std::time::Duration;

use agentd_computer::outbound::{self, Outbound};
use serde_json::json;

use crate::record::CheckResult;
use crate::task::verify::HttpCheck;

/// How long the request may take, answer included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest body read.
pub const MAX_BODY_BYTES: usize = 1 << 20;

fn build(policy: &Outbound) -> Result<reqwest::Client, String> {
    outbound::http::apply(reqwest::Client::builder().timeout(TIMEOUT), policy, 0)
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// The client for `policy`: one shared by every open check, one per check otherwise (its resolver holds the
/// policy).
fn client(policy: &Outbound) -> Result<reqwest::Client, String> {
    static OPEN: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    if policy.is_restricted() { build(policy) } else { OPEN.get_or_init(|| build(policy)).clone() }
}

pub async fn check(check: &HttpCheck, policy: &Outbound) -> CheckResult {
    let (ok, message, evidence) = match run(check, policy).await {
        Ok(done) => done,
        Err(problem) => (false, format!("GET {}: {problem}", check.url), None),
    };
    CheckResult { kind: "http".into(), ok, message, evidence }
}

async fn run(check: &HttpCheck, policy: &Outbound) -> Result<(bool, String, Option<serde_json::Value>), String> {
    let url = reqwest::Url::parse(&check.url).map_err(|e| format!("not a URL: {e}"))?;
    outbound::http::check_url(policy, &url).map_err(|e| e.to_string())?;
    let mut response = client(policy)?.get(url).send().await.map_err(|e| match outbound::http::refusal(&e) {
        Some(refused) => refused.to_string(),
        None => e.without_url().to_string(),
    })?;
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
    let problems = super::pointers_unquoted(&check.expect_json, &document);
    if problems.is_empty() {
        Ok((true, format!("GET {} answered {status} with the expected JSON", check.url), evidence))
    } else {
        Ok((false, format!("GET {} answered {status}; its JSON differs: {}", check.url, problems.join("; ")), evidence))
    }
}
