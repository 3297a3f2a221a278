//! The vendors' browser modes on the browser computer: a Gemini, an OpenAI and an Anthropic stand-in (the
//! local fakes of `agentd_testkit::fake`, which check every request against the vendor's wire rules) drive
//! a task through the real loop on Debian's Chromium, from `about:blank` to a form this test serves: the
//! browser functions open it, the form is filled and sent (the server's own record proves it), and the
//! browser goes back. What each request carried (the page's URL, the declared functions) is checked on the
//! wire.

use std::sync::Arc;
use std::time::Duration;

use agentd::agent::Ending;
use agentd::backends;
use agentd::record::StepRecord;
use agentd_browser::{BrowserConfig, BrowserProvider};
use agentd_computer::{ComputerProvider, Size};
use agentd_testkit::fake::{self, FakeServer, Recorded, Vendor};
use serde_json::{Value, json};

use crate::browser::{FormServer, chromium};
use crate::models::{KEY, one_attempt, shared_for, spec, task, turns_in};

const SIZE: Size = Size::new(1024, 700);

async fn browser(executable: std::path::PathBuf) -> Arc<dyn ComputerProvider> {
    let config = BrowserConfig { executable: Some(executable), size: SIZE, ..Default::default() };
    Arc::new(BrowserProvider::open(config).await.expect("the browser opens"))
}

/// Runs one attempt of the form task with `provider`'s stand-in; returns the steps and the requests.
async fn drive(
    server: &FakeServer,
    provider: &str,
    model: Value,
    chromium: std::path::PathBuf,
) -> (Vec<StepRecord>, Vec<Recorded>) {
    let model_spec = spec(model);
    let built =
        backends::model(&model_spec, &shared_for(provider, &server.url, "stream = false"), None).expect("model");
    let output = one_attempt(
        task(model_spec, 12, 3),
        browser(chromium).await,
        built,
        Arc::new(agentd::tools::Toolbox::empty()),
        Vec::new(),
    )
    .await;
    assert!(
        matches!(&output.ending, Ending::Finished(o) if o.success),
        "{:?}\nsteps: {:#?}",
        output.ending,
        output.steps.iter().map(|s| (&s.actions, &s.results)).collect::<Vec<_>>()
    );
    assert!(server.problems().is_empty(), "wire problems: {:#?}", server.problems());
    (output.steps, server.requests())
}

fn actions_of(steps: &[StepRecord]) -> Vec<String> {
    steps
        .iter()
        .flat_map(|s| {
            s.actions.iter().map(|a| serde_json::to_value(a).map(|v| v["type"].to_string()).unwrap_or_default())
        })
        .map(|t| t.trim_matches('"').to_string())
        .collect()
}

/// The `url` of every function response in the newest user turn of a Gemini request.
fn gemini_urls(request: &Recorded) -> Vec<String> {
    let contents = request.body["contents"].as_array().cloned().unwrap_or_default();
    let last = contents.last().cloned().unwrap_or_default();
    last["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.pointer("/functionResponse/response/url").and_then(Value::as_str).map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_browser_functions_drive_the_browser_and_every_response_names_the_page() {
    let Some(chromium) = chromium() else { return };
    let _load = crate::support::timing_sensitive();
    let site = FormServer::start();
    let form = format!("http://127.0.0.1:{}/", site.port);
    let target = form.clone();
    // Grid coordinates (0–999) of the form's fields at 1024×700.
    let call = |name: &str, args: Value| json!({"functionCall": {"name": name, "args": args}});
    let server = FakeServer::start(
        Vendor::Gemini { key: KEY.into() },
        Box::new(move |r| {
            let parts = match turns_in(r) {
                0 => vec![call("navigate", json!({"url": target}))],
                1 => {
                    vec![call("type_text_at", json!({"x": 215, "y": 54, "text": "Ada Lovelace", "press_enter": false}))]
                }
                2 => vec![call("click_at", json!({"x": 31, "y": 217})), call("click_at", json!({"x": 117, "y": 314}))],
                3 => vec![call("go_back", json!({}))],
                _ => vec![call("task_completion", json!({"success": true, "summary": "sent"}))],
            };
            fake::gemini_reply(parts, json!({"promptTokenCount": 100, "candidatesTokenCount": 10}), false)
        }),
    )
    .await
    .expect("fake");
    let (steps, requests) = drive(&server, "gemini", json!({"provider": "gemini"}), chromium).await;

    assert_eq!(site.wait_submitted(Duration::from_secs(10)), vec!["name=Ada+Lovelace&email=&agree=on".to_string()]);
    assert_eq!(requests.len(), 5, "one request per turn");
    let computer_use = &requests[0].body["tools"][0]["computerUse"];
    assert!(computer_use.get("excludedPredefinedFunctions").is_none(), "nothing excluded on a browser: {computer_use}");
    assert_eq!(gemini_urls(&requests[1]), vec![form.clone()], "after navigate");
    let sent = format!("{form}submit");
    assert_eq!(gemini_urls(&requests[3]), vec![sent.clone(), sent], "both calls of the turn name the page after it");
    assert_eq!(gemini_urls(&requests[4]), vec![form.clone()], "after go_back");
    let actions = actions_of(&steps);
    assert_eq!(actions.first().map(String::as_str), Some("navigate"), "{actions:?}");
    assert!(actions.contains(&"back".to_string()), "{actions:?}");
    assert_eq!(steps[1].page.as_ref().map(|p| p.title.as_str()), Some("Sign up"), "the step records the page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_browser_environment_with_goto_and_back() {
    let Some(chromium) = chromium() else { return };
    let _load = crate::support::timing_sensitive();
    let site = FormServer::start();
    let form = format!("http://127.0.0.1:{}/", site.port);
    let target = form.clone();
    let server = FakeServer::start(
        Vendor::OpenAi { key: KEY.into() },
        Box::new(move |r| {
            let n = turns_in(r);
            let function = |name: &str, arguments: Value| {
                json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"), "name": name,
                       "arguments": arguments.to_string(), "status": "completed"})
            };
            let computer = |action: Value| {
                json!({"type": "computer_call", "id": format!("cu_{n}"), "call_id": format!("call_{n}"),
                       "status": "completed", "action": action, "pending_safety_checks": []})
            };
            let output = match n {
                0 => function("goto", json!({"url": target})),
                1 => computer(json!({"type": "click", "button": "left", "x": 220, "y": 38})),
                2 => computer(json!({"type": "type", "text": "Ada Lovelace"})),
                3 => computer(json!({"type": "click", "button": "left", "x": 32, "y": 152})),
                4 => computer(json!({"type": "click", "button": "left", "x": 120, "y": 220})),
                5 => function("back", json!({})),
                _ => function("task_completion", json!({"success": true, "summary": "sent"})),
            };
            fake::openai_reply(vec![output], json!({"input_tokens": 100, "output_tokens": 10}), false)
        }),
    )
    .await
    .expect("fake");
    let (steps, requests) =
        drive(&server, "openai", json!({"provider": "openai", "model": "computer-use-preview"}), chromium).await;

    assert_eq!(site.wait_submitted(Duration::from_secs(10)), vec!["name=Ada+Lovelace&email=&agree=on".to_string()]);
    let tools = requests[0].body["tools"].as_array().cloned().unwrap_or_default();
    assert_eq!(tools[0]["environment"], "browser", "{:#}", tools[0]);
    let functions: Vec<&str> =
        tools.iter().filter(|t| t["type"] == "function").filter_map(|t| t["name"].as_str()).collect();
    for name in ["goto", "back", "forward", "reload"] {
        assert!(functions.contains(&name), "{name} declared: {functions:?}");
    }
    // Every screenshot answer names the page it shows.
    let last = requests.last().expect("requests");
    let urls: Vec<&str> = last.body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "computer_call_output")
        .map(|i| i.pointer("/output/current_url").and_then(Value::as_str).unwrap_or("(none)"))
        .collect();
    let sent = format!("{form}submit");
    assert_eq!(urls, vec![form.as_str(), form.as_str(), form.as_str(), sent.as_str()], "current_url of each answer");
    let actions = actions_of(&steps);
    assert_eq!(actions.first().map(String::as_str), Some("navigate"), "{actions:?}");
    assert_eq!(steps.last().and_then(|s| s.page.as_ref()).map(|p| p.url.clone()), Some(form), "back on the form");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_gets_navigation_functions_beside_its_computer_tool() {
    let Some(chromium) = chromium() else { return };
    let _load = crate::support::timing_sensitive();
    let site = FormServer::start();
    let form = format!("http://127.0.0.1:{}/", site.port);
    let target = form.clone();
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(move |r| {
            let n = turns_in(r);
            let tool = |name: &str, input: Value| json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": input});
            let content = match n {
                0 => tool("goto", json!({"url": target})),
                1 => tool("computer", json!({"action": "left_click", "coordinate": [220, 38]})),
                2 => tool("computer", json!({"action": "type", "text": "Ada Lovelace"})),
                3 => tool("computer", json!({"action": "left_click", "coordinate": [32, 152]})),
                4 => tool("computer", json!({"action": "left_click", "coordinate": [120, 220]})),
                5 => tool("back", json!({})),
                _ => tool("task_completion", json!({"success": true, "summary": "sent"})),
            };
            fake::anthropic_reply(vec![content], json!({"input_tokens": 100, "output_tokens": 10}), false)
        }),
    )
    .await
    .expect("fake");
    let (steps, requests) =
        drive(&server, "anthropic", json!({"provider": "anthropic", "model": "claude-sonnet-4-5"}), chromium).await;

    assert_eq!(site.wait_submitted(Duration::from_secs(10)), vec!["name=Ada+Lovelace&email=&agree=on".to_string()]);
    let names: Vec<&str> =
        requests[0].body["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["computer", "task_completion", "goto", "back", "forward", "reload"]);
    let actions = actions_of(&steps);
    assert_eq!(actions.first().map(String::as_str), Some("navigate"), "{actions:?}");
    assert!(actions.contains(&"back".to_string()), "{actions:?}");
    assert_eq!(steps.last().and_then(|s| s.page.as_ref()).map(|p| p.url.clone()), Some(form), "back on the form");
}

/// On a desktop nothing of a browser mode is declared, and a navigation asked for anyway is a tool error.
#[tokio::test(flavor = "current_thread")]
async fn on_a_desktop_no_browser_mode_is_declared_and_navigation_is_a_tool_error() {
    let server = FakeServer::start(
        Vendor::Anthropic { key: KEY.into() },
        Box::new(move |r| {
            let n = turns_in(r);
            let tool = |name: &str, input: Value| json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": input});
            let content = match n {
                0 => tool("goto", json!({"url": "https://example.org/"})),
                _ => tool("task_completion", json!({"success": true, "summary": "could not"})),
            };
            fake::anthropic_reply(vec![content], json!({"input_tokens": 100, "output_tokens": 10}), false)
        }),
    )
    .await
    .expect("fake");
    let model_spec = spec(json!({"provider": "anthropic", "model": "claude-sonnet-4-5"}));
    let built =
        backends::model(&model_spec, &shared_for("anthropic", &server.url, "stream = false"), None).expect("model");
    let desktop = crate::models::login_desktop(Size::new(1280, 800));
    let output =
        one_attempt(task(model_spec, 5, 3), desktop, built, Arc::new(agentd::tools::Toolbox::empty()), Vec::new())
            .await;
    assert!(matches!(&output.ending, Ending::Finished(o) if o.success), "{:?}", output.ending);
    let requests = server.requests();
    let names: Vec<&str> =
        requests[0].body["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["computer", "task_completion"], "no navigation on a desktop");
    let result = &output.steps[0].results[0];
    assert!(!result.ok, "an undeclared function is refused: {result:?}");
}
