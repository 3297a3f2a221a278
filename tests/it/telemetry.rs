//! What the daemon tells operators, through the real binary: JSON log lines that each parse and carry the task
//! and step they belong to; OpenTelemetry spans posted over OTLP/HTTP to a receiver run by the test, decoded
//! with the protocol's own types (the span tree task → step → model call / action / upload, with the model's
//! usage); TLS on the TCP listener with certificates made by the test, reloaded on SIGHUP.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

use crate::support::{Daemon, http};

/// Two steps: a click (with usage reported for the turn), then completion.
fn clicking_task() -> String {
    json!({
        "instructions": "click once, then finish",
        "computer": {"provider": "mock", "scene": "blank"},
        "model": {"provider": "scripted", "script": {"turns": [
            {"say": "clicking", "actions": [{"type": "click", "x": 20, "y": 30}],
             "usage": {"input_tokens": 1200, "output_tokens": 34, "cache_read_tokens": 1000,
                       "cache_write_tokens": 100, "cost_usd": 0.0042}},
            {"complete": {"success": true, "summary": "clicked"},
             "usage": {"input_tokens": 1300, "output_tokens": 12}}
        ]}}
    })
    .to_string()
}

fn submit(daemon: &Daemon, body: &str) -> String {
    let (status, reply) = http(&daemon.socket, "POST", "/v1/tasks", Some(body.as_bytes()), &[]).expect("submit");
    assert_eq!(status, 201, "{reply}");
    let reply: Value = serde_json::from_str(&reply).expect("JSON");
    reply["id"].as_str().expect("task id").to_string()
}

#[test]
fn json_logs_are_one_object_a_line_with_the_task_and_step() {
    // `AGENTD_LOG_FORMAT` is the `[log] format` key, set the way every key can be.
    let mut daemon =
        Daemon::start_with_env("", &[("AGENTD_LOG_FORMAT", "json"), ("AGENTD_LOG", "debug,hyper=info,sqlx=info")]);
    let id = submit(&daemon, &clicking_task());
    let record = daemon.wait_terminal(&id, Duration::from_secs(30));
    assert_eq!(record["state"], "succeeded", "{record:#}");
    daemon.signal(libc::SIGTERM);
    assert_eq!(daemon.wait(), Some(0));

    let log = daemon.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\n{log}")))
        .collect();
    for line in &lines {
        for key in ["timestamp", "level", "target"] {
            assert!(line[key].is_string(), "no {key}: {line}");
        }
    }
    assert!(lines.iter().any(|l| l["message"] == "agentd ready"), "{log}");
    let of_task: Vec<&Value> = lines.iter().filter(|l| l["task_id"] == id.as_str()).collect();
    assert!(of_task.iter().any(|l| l["message"] == "task finished" && l["attempt"] == 1), "{log}");
    // Lines inside a step carry it (and the task's fields, outermost span first).
    let steps: Vec<u64> = of_task.iter().filter_map(|l| l["step"].as_u64()).collect();
    assert!(steps.contains(&0) && steps.contains(&1), "steps {steps:?} in\n{log}");
    assert!(
        lines.iter().filter(|l| l["step"].is_number()).all(|l| l["task_id"] == id.as_str() && l["attempt"] == 1),
        "{log}"
    );
}

/// A receiver of OTLP/HTTP trace exports on loopback: every request's body, decoded.
pub(crate) struct Receiver {
    pub(crate) endpoint: String,
    requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        listener.set_nonblocking(true).expect("nonblocking");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (got, stopped) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stopped.load(Ordering::SeqCst) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let got = got.clone();
                        std::thread::spawn(move || serve_exports(stream, &got));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Self { endpoint, requests, stop }
    }

    pub(crate) fn spans(&self) -> Vec<Span> {
        let requests = self.requests.lock().expect("lock");
        requests
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Answers `POST /v1/traces` requests on one keep-alive connection with an empty success.
fn serve_exports(mut stream: TcpStream, got: &Mutex<Vec<ExportTraceServiceRequest>>) {
    stream.set_nonblocking(false).expect("blocking");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut buffer = Vec::new();
    loop {
        let head_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        assert!(head.starts_with("post /v1/traces "), "{head}");
        assert!(head.contains("content-type: application/x-protobuf"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("content-length");
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buffer.drain(..head_end + length).skip(head_end).collect();
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP trace export");
        got.lock().expect("lock").push(request);
        let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes.iter().find(|kv: &&KeyValue| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn int(span: &Span, key: &str) -> Option<i64> {
    match attribute(span, key)? {
        AnyValue::IntValue(v) => Some(*v),
        _ => None,
    }
}

fn text<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attribute(span, key)? {
        AnyValue::StringValue(v) => Some(v),
        _ => None,
    }
}

#[test]
fn traces_reach_an_otlp_receiver_as_task_step_model_call_action_and_upload() {
    let receiver = Receiver::start();
    let mut daemon =
        Daemon::start(&format!("[otel]\nendpoint = {:?}\nservice_name = \"agentd-test\"\n", receiver.endpoint));
    let id = submit(&daemon, &clicking_task());
    let record = daemon.wait_terminal(&id, Duration::from_secs(30));
    assert_eq!(record["state"], "succeeded", "{record:#}");
    // The last spans leave with the batch flushed at shutdown.
    daemon.signal(libc::SIGTERM);
    assert_eq!(daemon.wait(), Some(0), "{}", daemon.log());

    let spans = receiver.spans();
    let names = || spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>();
    let requests = receiver.requests.lock().expect("lock").clone();
    let service = requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .filter_map(|r| r.resource.as_ref())
        .flat_map(|r| &r.attributes)
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| kv.value.as_ref()?.value.clone());
    assert_eq!(service, Some(AnyValue::StringValue("agentd-test".into())));

    let task = spans
        .iter()
        .find(|s| s.name == "task" && text(s, "task_id") == Some(id.as_str()))
        .unwrap_or_else(|| panic!("no task span among {:?}", names()));
    assert_eq!(int(task, "attempt"), Some(1));
    assert!(task.parent_span_id.is_empty(), "the task is the root");
    let children = |parent: &Span| -> Vec<&Span> {
        spans.iter().filter(|s| s.parent_span_id == parent.span_id && s.trace_id == parent.trace_id).collect()
    };
    let mut steps: Vec<&Span> = children(task).into_iter().filter(|s| s.name == "step").collect();
    steps.sort_by_key(|s| int(s, "step"));
    assert_eq!(steps.len(), 2, "{:?}", names());
    assert_eq!((int(steps[0], "step"), int(steps[1], "step")), (Some(0), Some(1)));

    let first = children(steps[0]);
    let call = first.iter().find(|s| s.name.starts_with("chat")).unwrap_or_else(|| panic!("{:?}", names()));
    assert_eq!(text(call, "gen_ai.system"), Some("scripted"));
    assert_eq!(text(call, "gen_ai.operation.name"), Some("chat"));
    assert!(text(call, "gen_ai.request.model").is_some());
    assert_eq!(int(call, "gen_ai.usage.input_tokens"), Some(1200));
    assert_eq!(int(call, "gen_ai.usage.output_tokens"), Some(34));
    assert_eq!(int(call, "gen_ai.usage.cache_read.input_tokens"), Some(1000));
    assert_eq!(int(call, "gen_ai.usage.cache_creation.input_tokens"), Some(100));
    assert_eq!(attribute(call, "agentd.cost_usd"), Some(&AnyValue::DoubleValue(0.0042)));
    let action = first.iter().find(|s| s.name == "action click").unwrap_or_else(|| panic!("{:?}", names()));
    assert_eq!(text(action, "action"), Some("click"));
    // The model call comes before the action it asked for.
    assert!(call.end_time_unix_nano <= action.start_time_unix_nano);
    let upload = first.iter().find(|s| s.name == "upload").unwrap_or_else(|| panic!("{:?}", names()));
    assert!(text(upload, "artifact.key").is_some_and(|k| k.starts_with(&format!("tasks/{id}/1/"))), "{upload:?}");
    let second = children(steps[1]);
    let last_call = second.iter().find(|s| s.name.starts_with("chat")).expect("second model call");
    assert_eq!(int(last_call, "gen_ai.usage.input_tokens"), Some(1300));
    // Nothing of the task outside its trace.
    assert!(spans.iter().filter(|s| s.name == "step").all(|s| s.trace_id == task.trace_id));
}

/// A CA and a certificate it signed for 127.0.0.1 and localhost: (CA PEM, certificate PEM, key PEM).
fn certificate(name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, name);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key")).expect("CA");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("certificate");
    (ca.pem(), leaf.pem(), key.serialize_pem())
}

fn https_client(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA")])
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

#[test]
fn the_tcp_listener_speaks_tls_and_reloads_its_certificate_on_sighup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificate("agentd test CA one");
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, &cert).expect("cert");
    std::fs::write(&key_file, &key).expect("key");
    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).expect("token");
    let port = TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let path = |p: &Path| format!("{:?}", p.display().to_string());
    let mut daemon = Daemon::start_with_api(
        &format!(
            "listen = \"127.0.0.1:{port}\"\ntoken_file = {}\ntls_cert = {}\ntls_key = {}\n",
            path(&token_file),
            path(&cert_file),
            path(&key_file)
        ),
        "",
    );
    let url = format!("https://127.0.0.1:{port}/v1/tasks");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let get = |client: &reqwest::Client, bearer: Option<&str>| {
        let mut request = client.get(&url);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        runtime.block_on(async { request.send().await.map(|r| r.status().as_u16()) })
    };

    let one = https_client(&ca);
    assert_eq!(get(&one, Some(token)).expect("HTTPS with the token"), 200);
    assert_eq!(get(&one, None).expect("HTTPS without a token"), 401);
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = http(
        Path::new(&format!("127.0.0.1:{port}")),
        "GET",
        "/v1/tasks",
        None,
        &[("host", &format!("127.0.0.1:{port}")), ("authorization", &format!("Bearer {token}"))],
    );
    assert!(matches!(plain, Err(_) | Ok((0, _))), "{plain:?}");
    // A client that does not trust the certificate is refused by its own side.
    let (other_ca, new_cert, new_key) = certificate("agentd test CA two");
    let two = https_client(&other_ca);
    assert!(get(&two, Some(token)).is_err());

    // SIGHUP with a new certificate: new connections get it.
    std::fs::write(&cert_file, &new_cert).expect("cert");
    std::fs::write(&key_file, &new_key).expect("key");
    daemon.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&https_client(&other_ca), Some(token)).is_err() {
        assert!(Instant::now() < deadline, "the new certificate was not served:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(get(&https_client(&ca), Some(token)).is_err(), "the old certificate is still served");

    // A reload that fails keeps the certificate in use, and says why.
    std::fs::write(&cert_file, "not a certificate\n").expect("cert");
    daemon.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().contains("not reloaded") {
        assert!(Instant::now() < deadline, "no reload error logged:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(daemon.log().contains("api.tls_cert"), "{}", daemon.log());
    assert_eq!(get(&https_client(&other_ca), Some(token)).expect("still served"), 200);
    assert!(daemon.child.is_some());
    daemon.signal(libc::SIGTERM);
    assert_eq!(daemon.wait(), Some(0), "{}", daemon.log());
}

#[test]
fn config_check_refuses_half_or_broken_tls_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef").expect("token");
    let (_, cert, key) = certificate("agentd test CA");
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, &cert).expect("cert");
    std::fs::write(&key_file, &key).expect("key");
    let (_, other_cert, _) = certificate("another CA");
    let other_file = dir.path().join("other.pem");
    std::fs::write(&other_file, other_cert).expect("other");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n").expect("garbage");
    let missing = dir.path().join("missing.pem");
    let p = |p: &Path| format!("{:?}", p.display().to_string());
    let listen = format!("listen = \"127.0.0.1:1\"\ntoken_file = {}\n", p(&token_file));
    for (tls, field, fragment) in [
        (format!("tls_cert = {}\n", p(&cert_file)), "api.tls_key", "needs api.tls_key"),
        (format!("tls_key = {}\n", p(&key_file)), "api.tls_cert", "needs api.tls_cert"),
        (format!("tls_cert = {}\ntls_key = {}\n", p(&missing), p(&key_file)), "api.tls_cert", "No such file"),
        (format!("tls_cert = {}\ntls_key = {}\n", p(&cert_file), p(&missing)), "api.tls_key", "No such file"),
        (format!("tls_cert = {}\ntls_key = {}\n", p(&garbage), p(&key_file)), "api.tls_cert", "not a PEM"),
        (format!("tls_cert = {}\ntls_key = {}\n", p(&cert_file), p(&cert_file)), "api.tls_key", "no PRIVATE KEY"),
        (format!("tls_cert = {}\ntls_key = {}\n", p(&other_file), p(&key_file)), "api.tls_key", "not the key of"),
    ] {
        let agentd = crate::support::Agentd::with_config(&format!("[api]\n{listen}{tls}"));
        let check = agentd.run(&["config", "check"]);
        assert_eq!(check.code, 2, "{tls}: {}", check.stderr);
        assert!(check.stderr.contains(field) && check.stderr.contains(fragment), "{tls}: {}", check.stderr);
    }
}
