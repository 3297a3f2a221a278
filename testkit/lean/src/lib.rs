//! agentd as a library with default features off (docs/library.md): no queue, HTTP server, S3, OpenTelemetry
//! or real desktops, the public API only. The test below is a whole embedding: an agent on the mock desktop,
//! driven by the scripted model, with an in-process typed tool, run to completion.

#[cfg(test)]
mod tests {
    use agentd::{Agent, CallContext, EventKind, TaskState, ToolOutcome, mock_desktop, scripted_model, tool_fn};
    use futures_util::StreamExt;

    /// The arguments of the tool: the model is given their JSON Schema, derived from this type.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Lookup {
        /// The order number shown on screen.
        order: String,
    }

    #[tokio::test]
    async fn a_run_on_the_mock_desktop_with_a_scripted_model_completes() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("agentd-lean-{}", std::process::id()));
        let script = serde_json::json!({"turns": [
            {"say": "I click the name field.", "actions": [{"type": "click", "x": 640, "y": 370}, {"type": "type", "text": "alice"}]},
            {"calls": [{"name": "lookup_order", "arguments": {"order": "A-1001"}}]},
            {"complete": {"success": true, "summary": "A-1001 ships tomorrow"}}
        ]});
        let agent = Agent::builder()
            .instructions("Find out when order A-1001 ships")
            .model(scripted_model(&script)?)
            .computer(mock_desktop("login")?)
            .tool(tool_fn("lookup_order", "Looks an order up", |args: Lookup, _: CallContext| async move {
                ToolOutcome::ok(format!("order {} ships tomorrow", args.order))
            }))
            .data_dir(&dir)
            .build()
            .await?;
        let mut run = agent.run();
        let mut kinds = Vec::new();
        while let Some(event) = run.next().await {
            kinds.push(event.kind);
        }
        let report = run.finish().await;
        let _ = std::fs::remove_dir_all(&dir);

        assert!(matches!(kinds.first(), Some(EventKind::TaskStarted { .. })), "first event: {:?}", kinds.first());
        assert!(
            matches!(kinds.last(), Some(EventKind::TaskFinished { state: TaskState::Succeeded, .. })),
            "last event: {:?}",
            kinds.last()
        );
        assert_eq!(report.outcome.summary, "A-1001 ships tomorrow");
        assert_eq!(report.steps.len(), 3, "a step per turn of the script");
        // The tool's answer went to the model: the second step's result.
        let results = serde_json::to_string(&report.steps[1])?;
        assert!(results.contains("order A-1001 ships tomorrow"), "{results}");
        // The mock desktop's state: the name typed into the field the click focused.
        let state = serde_json::to_string(&report.computer_state)?;
        assert!(state.contains("alice"), "{state}");
        report.into_result()?;
        Ok(())
    }
}
