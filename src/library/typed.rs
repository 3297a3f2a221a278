//! In-process tools with typed arguments: [`tool_fn`] turns an async function of a
//! `#[derive(Deserialize, JsonSchema)]` struct into a [`Tool`] whose parameters schema is derived with
//! schemars, so the schema the model is given and the type the function receives cannot drift apart.

use std::future::Future;
use std::marker::PhantomData;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::model::ToolSpec;
use crate::tools::{Tool, ToolContext, ToolOutcome};

/// What a [`tool_fn`] function may use while it runs. Owned, so the function's future may keep it.
#[derive(Clone)]
pub struct CallContext {
    cancel: CancellationToken,
    output: mpsc::UnboundedSender<String>,
}

impl CallContext {
    /// Streams a piece of output while the tool runs (a `tool_output` event; the model reads only the
    /// final [`ToolOutcome`]).
    pub fn output(&self, text: impl Into<String>) {
        // The receiver lives as long as the call; after it, output has nowhere to go.
        let _ = self.output.send(text.into());
    }

    /// Cancelled when the run is aborted or reaches its time limit; a tool should stop soon after.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Resolves when the run is aborted or reaches its time limit.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// A [`Tool`] made by [`tool_fn`].
pub struct FnTool<A, F> {
    spec: ToolSpec,
    function: F,
    arguments: PhantomData<fn(A)>,
}

/// Makes an in-process tool of an async function whose arguments are a type deriving `Deserialize` and
/// `JsonSchema`: the tool's parameters are that type's JSON Schema (inlined, without `$schema` and `title`,
/// `"type": "object"`), the model's arguments are checked against it before the function runs, and the
/// function receives them deserialized.
///
/// ```
/// use agentd::{CallContext, ToolOutcome, tool_fn};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// /// Looks an order up by its number.
/// #[derive(Deserialize, JsonSchema)]
/// struct Lookup {
///     /// The order number, as shown on screen.
///     order: String,
/// }
///
/// let tool = tool_fn("lookup_order", "Finds an order in the order system", |args: Lookup, _ctx: CallContext| async move {
///     ToolOutcome::ok(format!("order {} ships tomorrow", args.order))
/// });
/// # let _ = tool;
/// ```
///
/// A type whose schema is not an object (a tool's arguments are always one) is refused when the agent is
/// built, naming the tool.
pub fn tool_fn<A, F, Fut>(name: impl Into<String>, description: impl Into<String>, function: F) -> FnTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ToolOutcome> + Send + 'static,
{
    let spec = ToolSpec { name: name.into(), description: description.into(), parameters: parameters_of::<A>() };
    FnTool { spec, function, arguments: PhantomData }
}

/// The JSON Schema of `A` as a tool's parameters: every subschema inlined (some vendors accept no `$ref`),
/// no `$schema` or `title` at the top.
pub fn parameters_of<A: JsonSchema>() -> serde_json::Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let schema = settings.into_generator().into_root_schema_for::<A>();
    let mut value = schema.to_value();
    if let Some(object) = value.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    value
}

#[async_trait]
impl<A, F, Fut> Tool for FnTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ToolOutcome> + Send + 'static,
{
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: serde_json::Value, context: ToolContext<'_>) -> ToolOutcome {
        let args: A = match serde_path_to_error::deserialize(arguments) {
            Ok(args) => args,
            Err(e) => {
                let at = e.path().to_string();
                let at = if at == "." { String::new() } else { format!(" at {at}") };
                return ToolOutcome::error(format!("invalid arguments for {}{at}: {}", self.spec.name, e.inner()));
            }
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let call = (self.function)(args, CallContext { cancel: context.cancel.clone(), output: tx });
        tokio::pin!(call);
        // The function's output is forwarded as it comes; what is left when it returns is forwarded before
        // its outcome.
        let outcome = loop {
            tokio::select! {
                outcome = &mut call => break outcome,
                Some(text) = rx.recv() => (context.output)(&text),
            }
        };
        while let Ok(text) = rx.try_recv() {
            (context.output)(&text);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use std::sync::Mutex;

    /// Arguments with a nested type, an optional field and an enum.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// The customer's name.
        name: String,
        count: u32,
        #[serde(default)]
        note: Option<String>,
        address: Address,
        kind: Kind,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Address {
        city: String,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Retail,
        Wholesale,
    }

    #[test]
    fn the_derived_schema_is_an_inlined_object_schema_agentd_accepts() {
        let schema = parameters_of::<Args>();
        assert_eq!(schema["type"], "object", "{schema}");
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none(), "{schema}");
        assert!(!schema.to_string().contains("$ref"), "subschemas are inlined: {schema}");
        assert_eq!(schema["properties"]["address"]["properties"]["city"]["type"], "string", "{schema}");
        assert_eq!(schema["properties"]["name"]["description"], "The customer's name.");
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
        assert!(required.contains(&"name") && required.contains(&"count") && !required.contains(&"note"));
        crate::task::tools::JsonSchema::new(schema).expect("agentd accepts the derived schema");
    }

    #[tokio::test]
    async fn a_typed_tool_is_checked_by_the_toolbox_and_receives_its_arguments() {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let tool = tool_fn("order", "orders", move |args: Args, ctx: CallContext| {
            let record = record.clone();
            async move {
                ctx.output("looking");
                record.lock().unwrap().push((args.name.clone(), args.count, args.address.city.clone()));
                ToolOutcome::ok(format!("{} x{}", args.name, args.count)).with_details(json!({"count": args.count}))
            }
        });
        let toolbox = crate::tools::Toolbox::empty().with_tool(std::sync::Arc::new(tool)).expect("toolbox");
        let streamed = Mutex::new(Vec::<String>::new());
        let stream = |s: &str| streamed.lock().unwrap().push(s.to_string());
        let context = || ToolContext { cancel: CancellationToken::new(), output: &stream };
        let good = json!({"name": "ada", "count": 2, "address": {"city": "Oslo"}, "kind": "retail"});
        let crate::tools::Called::Done(outcome, _) = toolbox.call("order", &good, context()).await else {
            panic!("not run")
        };
        assert_eq!(outcome, ToolOutcome::ok("ada x2").with_details(json!({"count": 2})));
        assert_eq!(*seen.lock().unwrap(), vec![("ada".to_string(), 2, "Oslo".to_string())]);
        assert_eq!(*streamed.lock().unwrap(), vec!["looking".to_string()]);
        // The schema refuses a bad argument before the function runs.
        let bad = json!({"name": "ada", "count": -1, "address": {"city": "Oslo"}, "kind": "retail"});
        let crate::tools::Called::Done(outcome, _) = toolbox.call("order", &bad, context()).await else {
            panic!("not run")
        };
        assert!(!outcome.ok && outcome.message.contains("invalid arguments for order"), "{outcome:?}");
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn arguments_the_type_refuses_are_a_tool_error_naming_the_field() {
        let tool = tool_fn("order", "orders", |_: Args, _| async { ToolOutcome::ok("ran") });
        let outcome = Tool::call(
            &tool,
            json!({"name": "ada", "count": 1, "address": {"city": 3}, "kind": "retail"}),
            ToolContext { cancel: CancellationToken::new(), output: &|_: &str| {} },
        )
        .await;
        assert!(!outcome.ok, "{outcome:?}");
        assert!(outcome.message.contains("at address.city"), "{outcome:?}");
    }
}
