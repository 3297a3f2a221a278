//! agentd as a library: an agent with an in-process tool of its own, on the mock desktop's login screen, driven
//! by the scripted model (a stand-in for a vision model: the script types a user name, calls the tool with
//! typed arguments, and completes with what the tool said). Prints every event as a JSON line on stdout and
//! the outcome last: `cargo run --example library [DATA_DIR]`.

use agentd::{Agent, CallContext, ToolOutcome, mock_desktop, scripted_model, tool_fn};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;

/// The arguments of `lookup_account`: the model is given their JSON Schema, derived from this type.
#[derive(Deserialize, JsonSchema)]
struct LookupAccount {
    /// The user name typed on the login screen.
    username: String,
    /// Whether to include the account's roles.
    #[serde(default)]
    with_roles: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lookup = tool_fn(
        "lookup_account",
        "Looks a user's account up in the company directory",
        |args: LookupAccount, ctx: CallContext| async move {
            ctx.output(format!("searching the directory for {}", args.username));
            match args.username.as_str() {
                "alice" => {
                    let roles = if args.with_roles { " (roles: admin, reports)" } else { "" };
                    ToolOutcome::ok(format!("alice is Alice Liddell, account active{roles}"))
                        .with_details(serde_json::json!({"directory_id": 1001}))
                }
                other => ToolOutcome::error(format!("no account named {other:?}")),
            }
        },
    );
    let script = serde_json::json!({"turns": [
        {"say": "I type the user name.", "actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
        {"say": "I look the account up.", "calls": [{"name": "lookup_account", "arguments": {"username": "alice", "with_roles": true}}]},
        {"complete": {"success": true, "summary": "alice is Alice Liddell, account active (roles: admin, reports)"}}
    ]});
    let mut builder = Agent::builder()
        .instructions("Type alice as the user name, then find out whose account it is")
        .model(scripted_model(&script)?)
        .computer(mock_desktop("login")?)
        .tool(lookup);
    if let Some(dir) = std::env::args().nth(1) {
        builder = builder.data_dir(dir);
    }
    let agent = builder.build().await?;

    let mut run = agent.run();
    while let Some(event) = run.next().await {
        println!("{}", serde_json::to_string(&event)?);
    }
    let report = run.finish().await;
    println!("outcome: {}", serde_json::to_string(&report.outcome)?);
    eprintln!("{} step(s); screenshots under {}", report.steps.len(), agent.data_dir().display());
    report.into_result()?;
    Ok(())
}
