//! Browser navigation for vendors whose computer tool has none (Anthropic's; OpenAI's, whose own browser
//! sample adds it the same way): on a browser computer the adapter declares these function tools beside its
//! computer tool, and a call of one becomes a computer call of the matching action, so it runs, is recorded
//! and is replayed like any other action.
//!
//! The names and the `goto` schema are those of OpenAI's computer-use sample (openai-cua-sample-app
//! eb2d58ba, `examples/playwright_with_custom_functions.py`: `back`, `goto {url}`), with `forward` and
//! `reload` added for the other two navigation actions. A task tool of the same name wins: the adapter then
//! neither declares nor claims that navigation function.

use agentd_computer::Action;
use serde_json::{Value, json};

use super::{CallKind, ModelRequest, ModelTurn, ToolSpec};

/// The navigation functions: name, description, and whether it takes a `url`.
const FUNCTIONS: [(&str, &str, bool); 4] = [
    ("goto", "Go to a specific URL in the browser.", true),
    ("back", "Go back to the previous page in the browser.", false),
    ("forward", "Go forward to the next page in the browser's history.", false),
    ("reload", "Reload the page the browser shows.", false),
];

fn shadowed(request: &ModelRequest<'_>, name: &str) -> bool {
    request.tools.iter().any(|t| t.name == name)
}

/// The navigation function tools to declare for `request`: none on a desktop.
pub fn tools(request: &ModelRequest<'_>) -> Vec<ToolSpec> {
    if !request.browser {
        return Vec::new();
    }
    FUNCTIONS
        .iter()
        .filter(|(name, _, _)| !shadowed(request, name))
        .map(|(name, description, takes_url)| ToolSpec {
            name: (*name).to_string(),
            description: (*description).to_string(),
            parameters: if *takes_url {
                json!({"type": "object", "additionalProperties": false, "required": ["url"],
                       "properties": {"url": {"type": "string", "description": "Fully qualified URL to navigate to."}}})
            } else {
                json!({"type": "object", "properties": {}, "additionalProperties": false})
            },
        })
        .collect()
}

/// Whether `name` is a navigation function `request` declares.
pub fn is_declared(request: &ModelRequest<'_>, name: &str) -> bool {
    request.browser && FUNCTIONS.iter().any(|(n, _, _)| *n == name) && !shadowed(request, name)
}

/// The action a navigation function call stands for; `Err` names what is wrong with its arguments.
pub fn action(name: &str, arguments: &Value) -> Result<Action, String> {
    Ok(match name {
        "goto" => match arguments.get("url").and_then(Value::as_str) {
            Some(url) => Action::Navigate { url: url.to_string() },
            None => return Err("goto needs a `url` string".into()),
        },
        "back" => Action::Back {},
        "forward" => Action::Forward {},
        "reload" => Action::Reload {},
        other => return Err(format!("{other} is not a navigation function")),
    })
}

/// Turns `turn`'s calls of declared navigation functions into computer calls of their actions (a call with
/// bad arguments stays a function call named for the problem, which the loop answers with an error). The
/// turn's `raw` is untouched: the vendor's items are replayed as the vendor sent them.
pub fn claim(request: &ModelRequest<'_>, turn: &mut ModelTurn) {
    for call in &mut turn.calls {
        let CallKind::Function { name, arguments } = &call.kind else { continue };
        if !is_declared(request, name) {
            continue;
        }
        *call = match action(name, arguments) {
            Ok(action) => super::wire::computer(call.id.clone(), vec![action]),
            Err(why) => super::wire::unsupported(call.id.clone(), &why, arguments.clone()),
        };
    }
}

#[cfg(test)]
mod tests {
    use agentd_computer::Size;

    use super::*;
    use crate::model::{ModelImage, ToolCall};

    fn request<'a>(image: &'a ModelImage, tools: &'a [ToolSpec], browser: bool) -> ModelRequest<'a> {
        ModelRequest {
            instructions: "",
            history: &[],
            screenshot: image,
            notes: &[],
            tools,
            screen: Size::new(10, 10),
            browser,
            page: None,
            step: 0,
            summary: None,
        }
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall { id: name.into(), kind: CallKind::Function { name: name.into(), arguments } }
    }

    #[test]
    fn declared_on_a_browser_only_and_never_over_a_task_tool() {
        let image = ModelImage::new(Size::new(1, 1), "image/png", vec![0u8].into());
        assert!(tools(&request(&image, &[], false)).is_empty());
        let names: Vec<String> = tools(&request(&image, &[], true)).into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["goto", "back", "forward", "reload"]);
        let own = [ToolSpec { name: "back".into(), description: "the task's".into(), parameters: json!({}) }];
        let shadowed = request(&image, &own, true);
        let names: Vec<String> = tools(&shadowed).into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["goto", "forward", "reload"]);
        let mut turn = ModelTurn { calls: vec![call("back", json!({}))], ..Default::default() };
        claim(&shadowed, &mut turn);
        assert!(matches!(&turn.calls[0].kind, CallKind::Function { name, .. } if name == "back"));
    }

    #[test]
    fn calls_become_actions_and_bad_arguments_stay_errors() {
        let image = ModelImage::new(Size::new(1, 1), "image/png", vec![0u8].into());
        let browser = request(&image, &[], true);
        let mut turn = ModelTurn {
            calls: vec![
                call("goto", json!({"url": "https://example.org/"})),
                call("back", json!({})),
                call("forward", json!({})),
                call("reload", json!({})),
                call("goto", json!({})),
                call("task_completion", json!({"success": true})),
            ],
            ..Default::default()
        };
        claim(&browser, &mut turn);
        let kinds: Vec<String> = turn
            .calls
            .iter()
            .map(|c| match &c.kind {
                CallKind::Computer { actions } => actions.iter().map(|a| a.kind().to_string()).collect(),
                CallKind::Function { name, .. } => name.clone(),
            })
            .collect();
        assert_eq!(
            kinds,
            ["navigate", "back", "forward", "reload", "unsupported: goto needs a `url` string", "task_completion"]
        );
        let mut desktop_turn = ModelTurn { calls: vec![call("back", json!({}))], ..Default::default() };
        claim(&request(&image, &[], false), &mut desktop_turn);
        assert!(matches!(&desktop_turn.calls[0].kind, CallKind::Function { name, .. } if name == "back"));
    }
}
