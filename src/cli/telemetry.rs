//! What the process tells operators about itself: log lines on stderr (`[log] format`, text or JSON, the
//! events `AGENTD_LOG` lets through) and, in builds with the cargo feature `otel`, OpenTelemetry traces over
//! OTLP/HTTP (`[otel] endpoint`).
//!
//! The spans that give log lines and traces their shape are made where the work happens: `task` (one attempt:
//! `task_id`, `attempt`) by the worker and `agentd run`, `step` (`step`) by the loop, `model call` (with the
//! `gen_ai.*` attributes of OpenTelemetry's semantic conventions and the turn's usage and cost), `action`,
//! `tool` and `upload`. The `task` and `step` spans are at ERROR level so that whatever filter lets a line
//! through also keeps the task and step it belongs to; the others are at INFO and reach the log only when
//! `AGENTD_LOG` asks for them. The trace layer has its own filter: every span of agentd, no events (an event's
//! message may quote what a task saw; span fields are identifiers, names and numbers).
//!
//! No line shows a secret's value: a JSON line's strings are redacted before they are escaped, and every line,
//! text or JSON, passes `tools::secrets::RedactingWriter` on its way out.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::{Config, LogFormat};
use crate::tools::secrets::{RedactingWriter, redact_logged};

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// What must be done before the process exits: traces still in the batch are sent.
#[must_use = "call shutdown before the process exits, or the last spans are lost"]
pub struct Telemetry {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans not yet exported (waiting at most the export timeout) and stops the exporter. Call it
    /// outside the async runtime: the exporter's client blocks.
    pub fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            crate::cli::print_stderr(&format!("warning: sending the last traces: {e}"));
        }
    }
}

/// Installs the process's log subscriber: `config`'s `[log] format` (text when there is no config), and the
/// trace exporter of `[otel]` when `traces` (the daemon and `agentd run`; the client commands send none).
/// Problems setting up traces are printed as warnings: logs and the command go on without them.
pub fn init(config: Option<&Config>, traces: bool) -> Telemetry {
    use std::io::IsTerminal;
    // The TLS verifier logs a refused certificate as an error of its own; the client says it, with what to do.
    let filter =
        EnvFilter::try_from_env("AGENTD_LOG").unwrap_or_else(|_| EnvFilter::new("warn,rustls_platform_verifier=off"));
    let format = config.map(|c| c.log.format).unwrap_or_default();
    // Every line is filtered for the values of running tasks' secrets (docs/security.md).
    let writer = || RedactingWriter(std::io::stderr());
    let log: BoxedLayer = match format {
        LogFormat::Text => {
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(std::io::stderr().is_terminal() && !no_color);
            // Under systemd (`JOURNAL_STREAM` names stderr's stream) no timestamp: journald stamps every line.
            if std::env::var_os("JOURNAL_STREAM").is_some() {
                layer.without_time().with_filter(filter).boxed()
            } else {
                layer.with_filter(filter).boxed()
            }
        }
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .with_filter(filter)
            .boxed(),
    };
    #[cfg_attr(not(feature = "otel"), allow(unused_mut))]
    let mut layers = vec![log];
    let telemetry = Telemetry {
        #[cfg(feature = "otel")]
        provider: match config.filter(|_| traces).map(|c| otel::layer(&c.otel)) {
            Some(Ok(Some((layer, provider)))) => {
                layers.push(layer);
                Some(provider)
            }
            Some(Err(e)) => {
                crate::cli::print_stderr(&format!("warning: otel: {e}; no traces are sent"));
                None
            }
            _ => None,
        },
    };
    #[cfg(not(feature = "otel"))]
    if traces && config.is_some_and(|c| c.otel.endpoint.is_some()) {
        crate::cli::print_stderr("warning: otel.endpoint is set but this agentd was built without the `otel` feature");
    }
    let _ = tracing_subscriber::registry().with(layers).try_init();
    telemetry
}

#[cfg(feature = "otel")]
mod otel {
    use std::time::Duration;

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::filter_fn;

    use super::BoxedLayer;
    use crate::config::OtelConfig;

    /// The layer that turns agentd's spans into OpenTelemetry spans, and the provider that batches and exports
    /// them (from a thread of its own); none without an endpoint.
    pub(super) fn layer(config: &OtelConfig) -> Result<Option<(BoxedLayer, SdkTracerProvider)>, String> {
        let Some(url) = config.traces_url() else {
            return Ok(None);
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(Duration::from_secs(config.timeout_secs))
            .build()
            .map_err(|e| e.to_string())?;
        let resource = opentelemetry_sdk::Resource::builder().with_service_name(config.service_name.clone()).build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        let tracer = provider.tracer("agentd");
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            // Spans only, and only agentd's: events may quote what a task saw.
            .with_filter(filter_fn(|meta| meta.is_span() && meta.target().starts_with("agentd")))
            .boxed();
        Ok(Some((layer, provider)))
    }
}

/// One JSON object per line: `timestamp` (RFC 3339, UTC), `level`, `target`, the event's fields (`message`
/// among them), and the fields of every span it happened in, outermost first (`task_id`, `attempt`, `step`, …;
/// an event's own field wins over a span's of the same name). Strings are redacted before they are escaped, so
/// a secret's value with a quote or a backslash in it is caught too.
struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut line = serde_json::Map::new();
        let now = time::OffsetDateTime::now_utc();
        let timestamp = now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        line.insert("timestamp".into(), timestamp.into());
        line.insert("level".into(), event.metadata().level().as_str().into());
        line.insert("target".into(), event.metadata().target().into());
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                // JsonFields keeps a span's fields as the text of a JSON object.
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(&fields.fields)
                {
                    line.extend(fields);
                }
            }
        }
        event.record(&mut JsonVisitor(&mut line));
        let mut value = serde_json::Value::Object(line);
        redact_strings(&mut value);
        writeln!(writer, "{value}")
    }
}

/// Records an event's fields into a JSON object.
struct JsonVisitor<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}").into());
    }
}

/// Every string of `value` with the values of live secrets replaced.
fn redact_strings(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(redacted) = redact_logged(s) {
                *s = redacted;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_strings),
        Value::Object(map) => map.values_mut().for_each(redact_strings),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;
    use crate::task::secrets::SecretName;
    use crate::tools::secrets::Secrets;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = RedactingWriter<Buffer>;
        fn make_writer(&'a self) -> Self::Writer {
            RedactingWriter(self.clone())
        }
    }

    #[test]
    fn json_lines_carry_the_span_fields_and_no_secret_even_escaped() {
        // A value JSON escapes: the writer alone, seeing `a\"b`, would miss it.
        let value = "pa\"ss\\word-7f3";
        let secrets = Secrets::new(vec![(SecretName::parse("pw").expect("name"), value.to_string())]).expect("secrets");
        let buffer = Buffer::default();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(buffer.clone())
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let task = tracing::error_span!("task", task_id = "t-1", attempt = 2u32);
            let _task = task.enter();
            let step = tracing::error_span!("step", step = 3u32);
            let _step = step.enter();
            tracing::warn!(detail = value, count = 5u64, "typed {value} into the form");
        });
        drop(secrets);
        let text = String::from_utf8(buffer.0.lock().expect("lock").clone()).expect("UTF-8");
        assert_eq!(text.lines().count(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
        assert_eq!(line["task_id"], "t-1", "{line}");
        assert_eq!(line["attempt"], 2, "{line}");
        assert_eq!(line["step"], 3, "{line}");
        assert_eq!(line["level"], "WARN", "{line}");
        assert_eq!(line["count"], 5, "{line}");
        assert_eq!(line["detail"], "<secret:pw>", "{line}");
        assert_eq!(line["message"], "typed <secret:pw> into the form", "{line}");
        assert!(!text.contains("ss\\\\word") && !text.contains("word-7f3"), "{text}");
    }
}
