//! The rules a configuration must keep beyond the shape of each section (bounds, keys that need each other,
//! URLs and addresses), run once every section is read; each broken rule is a (field, message) problem.

use super::{ArtifactsBackend, ComputerEnvironment, Config, HookCommand, MODEL_PROVIDERS, QueueBackend};

pub(super) fn validate(config: &Config) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let mut problem = |field: &str, message: String| problems.push((field.to_string(), message));
    if config.data_dir.as_os_str().is_empty() {
        problem("data_dir", "must not be empty".into());
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, desktop) in config.desktops.iter().enumerate() {
        if !names.insert(desktop.name.as_str()) {
            problem(&format!("desktops[{i}].name"), format!("{:?} names another desktop too", desktop.name.as_str()));
        }
        if matches!(desktop.computer, crate::task::ComputerSpec::Desktop(_)) {
            problem(&format!("desktops[{i}].computer"), "needs a `provider` (local, vnc, computer-server, …)".into());
        }
        if desktop.timeout_secs == 0 || desktop.timeout_secs > 3600 {
            problem(
                &format!("desktops[{i}].timeout_secs"),
                format!("must be between 1 and 3600, got {}", desktop.timeout_secs),
            );
        }
        for (what, command) in [("setup", &desktop.setup), ("reset", &desktop.reset), ("teardown", &desktop.teardown)] {
            if command.as_ref().is_some_and(HookCommand::is_empty) {
                problem(&format!("desktops[{i}].{what}"), "must not be empty".into());
            }
        }
    }
    if config.worker.concurrency == 0 || config.worker.concurrency > 256 {
        problem("worker.concurrency", format!("must be between 1 and 256, got {}", config.worker.concurrency));
    }
    if config.queue.lease_secs < 2 {
        problem("queue.lease_secs", format!("must be at least 2, got {}", config.queue.lease_secs));
    }
    if config.queue.heartbeat_secs == 0 || config.queue.heartbeat_secs * 2 > config.queue.lease_secs {
        problem(
            "queue.heartbeat_secs",
            format!(
                "must be at least 1 and at most half of queue.lease_secs ({}), got {}",
                config.queue.lease_secs, config.queue.heartbeat_secs
            ),
        );
    }
    if config.queue.max_attempts == 0 {
        problem("queue.max_attempts", "must be at least 1".into());
    }
    for (i, pattern) in config.browser.allowed_urls.iter().enumerate() {
        if pattern.trim().is_empty() {
            problem(&format!("browser.allowed_urls[{i}]"), "an empty pattern (use `*` for any characters)".into());
        }
    }
    for (i, entry) in config.outbound.allow.iter().enumerate() {
        if let Err(message) = agentd_computer::outbound::Outbound::restricted(std::slice::from_ref(entry)) {
            problem(&format!("outbound.allow[{i}]"), message);
        }
    }
    if !(1..=super::MAX_LIVE_FPS).contains(&config.console.live_fps) {
        problem(
            "console.live_fps",
            format!("must be between 1 and {}, got {}", super::MAX_LIVE_FPS, config.console.live_fps),
        );
    }
    if config.retention.interval_secs == 0 {
        problem("retention.interval_secs", "must be at least 1".into());
    }
    if config.retention.batch == 0 || config.retention.batch > 1000 {
        problem("retention.batch", format!("must be between 1 and 1000, got {}", config.retention.batch));
    }
    if config.settle.interval_ms == 0 {
        problem("settle.interval_ms", "must be at least 1".into());
    }
    if config.settle.timeout_ms > 60_000 {
        problem("settle.timeout_ms", format!("must be at most 60000, got {}", config.settle.timeout_ms));
    }
    if config.queue.poll_ms == 0 {
        problem("queue.poll_ms", "must be at least 1".into());
    }
    if config.queue.max_connections < 2 {
        problem("queue.max_connections", format!("must be at least 2, got {}", config.queue.max_connections));
    }
    match config.queue.backend {
        QueueBackend::Postgres if config.queue.url.is_none() => {
            problem("queue.url", "backend \"postgres\" needs url (postgres://user@host/db)".into())
        }
        QueueBackend::Postgres if config.queue.path.is_some() => {
            problem("queue.path", "path is for backend \"sqlite\"; postgres uses url".into())
        }
        QueueBackend::Sqlite if config.queue.url.is_some() => {
            problem("queue.url", "url is for backend \"postgres\"; sqlite uses path".into())
        }
        _ => {}
    }
    if let Some(url) = &config.queue.url
        && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
    {
        problem("queue.url", "must start with postgres:// or postgresql://".into());
    }
    // The queue is the daemon's: a library without it (no feature `daemon`, no sqlx) has no queue to check for.
    #[cfg(feature = "daemon")]
    if let Some(url) = &config.queue.url
        && (url.starts_with("postgres://") || url.starts_with("postgresql://"))
        && let Err(e) = url.parse::<sqlx::postgres::PgConnectOptions>()
    {
        // The parser's messages never repeat the URL, so no password reaches the terminal.
        problem("queue.url", format!("not a valid PostgreSQL URL: {e}"));
    }
    #[cfg(not(unix))]
    if config.api.socket.is_some() {
        problem("api.socket", "this platform has no Unix socket: the API listens on TCP only (api.listen)".into());
    }
    if let Some(listen) = &config.api.listen {
        if listen.parse::<std::net::SocketAddr>().is_err() {
            problem("api.listen", format!("{listen:?} is not an address like 127.0.0.1:8787"));
        }
        if config.api.token_file.is_none() {
            problem("api.token_file", "a TCP listener (api.listen) needs a bearer token file".into());
        }
    }
    match (&config.api.tls_cert, &config.api.tls_key) {
        (Some(_), None) => {
            problem("api.tls_key", "api.tls_cert needs api.tls_key (the certificate's private key)".into())
        }
        (None, Some(_)) => problem("api.tls_cert", "api.tls_key needs api.tls_cert (the certificate chain)".into()),
        (Some(_), Some(_)) if config.api.listen.is_none() => {
            problem("api.tls_cert", "TLS is for the TCP listener: set api.listen too".into())
        }
        _ => {}
    }
    if let Some(endpoint) = &config.otel.endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        problem("otel.endpoint", format!("{endpoint:?} is not an http or https URL (http://127.0.0.1:4318)"));
    }
    if config.otel.service_name.trim().is_empty() {
        problem("otel.service_name", "must not be empty".into());
    }
    if config.otel.timeout_secs == 0 || config.otel.timeout_secs > 600 {
        problem("otel.timeout_secs", format!("must be between 1 and 600, got {}", config.otel.timeout_secs));
    }
    if config.api.max_body_bytes < 1024 {
        problem("api.max_body_bytes", "must be at least 1024".into());
    }
    // Past a day a timeout protects nothing (and huge values would overflow the timer).
    for (key, value, max) in [
        ("api.header_timeout_secs", config.api.header_timeout_secs, 86_400),
        ("api.body_timeout_secs", config.api.body_timeout_secs, 86_400),
        ("api.write_timeout_secs", config.api.write_timeout_secs, 86_400),
        ("api.max_connections", config.api.max_connections as u64, 1_000_000),
    ] {
        if !(1..=max).contains(&value) {
            problem(key, format!("must be between 1 and {max}"));
        }
    }
    match config.artifacts.backend {
        ArtifactsBackend::S3 if config.artifacts.bucket.is_none() => {
            problem("artifacts.bucket", "backend \"s3\" needs a bucket".into())
        }
        ArtifactsBackend::Fs if config.artifacts.bucket.is_some() => {
            problem("artifacts.bucket", "bucket is for backend \"s3\"; fs uses dir".into())
        }
        _ => {}
    }
    if !matches!(config.artifacts.checksum.as_str(), "when_supported" | "when_required") {
        problem(
            "artifacts.checksum",
            format!("must be \"when_supported\" or \"when_required\", got {:?}", config.artifacts.checksum),
        );
    }
    for name in config.models.keys() {
        if !MODEL_PROVIDERS.contains(&name.as_str()) {
            problem(
                &format!("models.{name}"),
                format!("unknown model provider; expected one of {}", MODEL_PROVIDERS.join(", ")),
            );
        }
    }
    for (name, model) in &config.models {
        for (key, value) in [
            ("timeout_secs", model.timeout_secs),
            ("connect_timeout_secs", model.connect_timeout_secs),
            ("idle_timeout_secs", model.idle_timeout_secs),
            ("max_concurrency", model.max_concurrency.map(u64::from)),
            ("requests_per_minute", model.requests_per_minute.map(u64::from)),
            ("tokens_per_minute", model.tokens_per_minute),
            ("screenshot_chunk", model.screenshot_chunk.map(u64::from)),
            ("max_tokens", model.max_tokens.map(u64::from)),
        ] {
            if value == Some(0) {
                problem(&format!("models.{name}.{key}"), "must be at least 1".into());
            }
        }
        if name == "gemini"
            && let Some(environment) = model.environment
            && environment != ComputerEnvironment::Browser
        {
            problem(
                "models.gemini.environment",
                format!("{:?}: the Gemini computer-use tool has only \"browser\"", environment.as_str()),
            );
        }
        for (model_id, price) in &model.prices {
            let values = [Some(price.input), Some(price.output), price.cache_read, price.cache_write];
            if values.into_iter().flatten().any(|v| !v.is_finite() || v < 0.0) {
                problem(&format!("models.{name}.prices"), format!("{model_id:?}: prices must be non-negative numbers"));
            }
        }
        if let Some(url) = &model.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            problem(&format!("models.{name}.base_url"), format!("{url:?} must start with http:// or https://"));
        }
        for url in &model.allowed_base_urls {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                problem(
                    &format!("models.{name}.allowed_base_urls"),
                    format!("{url:?} must start with http:// or https://"),
                );
            }
        }
    }
    for path in &config.api.allowed_secret_paths {
        if !path.is_absolute() {
            problem("api.allowed_secret_paths", format!("{:?} must be an absolute path", path.display().to_string()));
        }
    }
    for dir in &config.api.allowed_paths {
        if !dir.is_absolute() {
            problem("api.allowed_paths", format!("{:?} must be an absolute directory", dir.display().to_string()));
        }
    }
    for name in &config.worker.allowed_env {
        if name.is_empty() || name.contains(['=', '\0']) {
            problem("worker.allowed_env", format!("{name:?} is not an environment variable name"));
        }
    }
    problems
}
