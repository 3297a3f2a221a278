//! The S3 artifact store (docs/operations.md): artifacts as objects of one bucket, under an optional key prefix, on
//! AWS S3 or
//! any S3-compatible store (MinIO, Ceph, moto) through aws-sdk-s3.
//!
//! It owns the client configuration (region, endpoint, path-style addressing, the checksum option, timeouts),
//! the mapping from artifact keys to object keys, the stable `s3://bucket/prefix/key` URL that goes into step
//! records and events, presigned GET URLs for status documents, and the classification of SDK errors: anything
//! that may succeed later — including credential, permission and missing-bucket errors, which an operator can
//! fix — is [`ArtifactError::Unavailable`], so the uploader keeps the artifact and retries. Error messages name
//! the bucket and the endpoint, never credentials or signatures.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::environment::EnvironmentVariableRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::ProfileFileRegionProvider;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use thiserror::Error;

use super::{ArtifactError, ArtifactStore, Removed, check_key, check_prefix};
use crate::config::ArtifactsConfig;

/// How long to wait for a TCP (and TLS) connection to the store.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one attempt of one request may take (a screenshot is a few hundred kilobytes).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest lifetime SigV4 allows a presigned URL.
pub const MAX_PRESIGN_SECS: u64 = 7 * 24 * 3600;
/// The region used when neither the config, the environment nor the AWS profile names one.
const FALLBACK_REGION: &str = "us-east-1";
/// Service error codes that can never succeed for the key that got them: the artifact is dropped (and logged)
/// rather than retried forever. Everything else is retried.
const NEVER_SUCCEEDS: &[&str] = &["KeyTooLongError", "EntityTooLarge", "MetadataTooLarge", "InvalidObjectName"];

/// A problem with the `[artifacts]` settings of an S3 store (exit code 2).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum S3ConfigError {
    #[error("artifacts.bucket: backend \"s3\" needs a bucket")]
    NoBucket,
    #[error("artifacts.bucket: {0:?} is not a bucket name (no '/', no spaces, 3 to 63 characters)")]
    BadBucket(String),
    #[error("artifacts.prefix: {0:?} is not a key prefix (no empty, '.' or '..' segments, no '\\')")]
    BadPrefix(String),
    #[error("artifacts.endpoint: {url:?} is not an http:// or https:// URL: {reason}")]
    BadEndpoint { url: String, reason: String },
    #[error("artifacts.presign_secs: must be between 1 and {MAX_PRESIGN_SECS} (7 days, the SigV4 limit), got {0}")]
    BadPresign(u64),
    #[error("artifacts.checksum: must be \"when_supported\" or \"when_required\", got {0:?}")]
    BadChecksum(String),
}

/// Artifacts as objects in an S3 bucket.
pub struct S3Store {
    client: Client,
    bucket: String,
    /// Without leading or trailing '/'; empty for none.
    prefix: String,
    endpoint: Option<String>,
    region: String,
    presign: Duration,
}

impl S3Store {
    /// Checks the settings and builds the client. Nothing is sent yet: [`ArtifactStore::health`] finds out
    /// whether the bucket can be reached. Credentials come from the default AWS chain (environment, profile,
    /// web identity, ECS, IMDS).
    pub async fn new(config: &ArtifactsConfig) -> Result<Self, S3ConfigError> {
        let bucket = config.bucket.clone().ok_or(S3ConfigError::NoBucket)?;
        check_bucket(&bucket)?;
        let prefix = normalize_prefix(&config.prefix)?;
        let endpoint = match config.endpoint.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(url) => Some(check_endpoint(url)?),
        };
        if config.presign_secs == 0 || config.presign_secs > MAX_PRESIGN_SECS {
            return Err(S3ConfigError::BadPresign(config.presign_secs));
        }
        let when_required = match config.checksum.as_str() {
            "when_supported" => false,
            "when_required" => true,
            other => return Err(S3ConfigError::BadChecksum(other.to_string())),
        };

        // The config's region, else the environment's or the AWS profile's, else us-east-1 (IMDS is not asked:
        // on EC2, name the region in the config).
        let configured =
            config.region.as_deref().map(str::trim).filter(|r| !r.is_empty()).map(|r| Region::new(r.to_string()));
        let region = RegionProviderChain::first_try(configured)
            .or_else(EnvironmentVariableRegionProvider::new())
            .or_else(ProfileFileRegionProvider::new())
            .region()
            .await
            .unwrap_or_else(|| Region::new(FALLBACK_REGION));

        let timeouts = TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .operation_attempt_timeout(ATTEMPT_TIMEOUT)
            .build();
        let mut loader =
            aws_config::defaults(BehaviorVersion::latest()).region(region.clone()).timeout_config(timeouts);
        if let Some(url) = &endpoint {
            loader = loader.endpoint_url(url.clone());
        }
        let shared = loader.load().await;
        let mut builder = aws_sdk_s3::config::Builder::from(&shared).force_path_style(config.force_path_style);
        if when_required {
            builder = builder
                .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
                .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        }
        Ok(Self {
            client: Client::from_conf(builder.build()),
            bucket,
            prefix,
            endpoint,
            region: region.to_string(),
            presign: Duration::from_secs(config.presign_secs),
        })
    }

    /// The SDK client (tests use it to create buckets).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The object key of an artifact key: the prefix as a folder, then the key.
    pub fn object_key(&self, key: &str) -> String {
        if self.prefix.is_empty() { key.to_string() } else { format!("{}/{key}", self.prefix) }
    }

    /// The artifact key of an object key (the inverse of [`S3Store::object_key`]).
    fn artifact_key<'a>(&self, object: &'a str) -> &'a str {
        if self.prefix.is_empty() {
            object
        } else {
            object.strip_prefix(&self.prefix).and_then(|rest| rest.strip_prefix('/')).unwrap_or(object)
        }
    }

    /// One page (at most 1000) of the objects under an artifact key prefix: (object key, size), and the token
    /// of the next page.
    async fn list_page(
        &self,
        prefix: &str,
        continuation: Option<String>,
    ) -> Result<(Vec<(String, u64)>, Option<String>), ArtifactError> {
        let object_prefix = self.object_key(prefix);
        let output = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&object_prefix)
            .set_continuation_token(continuation)
            .send()
            .await
            .map_err(|e| self.failure("list", &object_prefix, e))?;
        let objects = output
            .contents()
            .iter()
            .filter_map(|o| Some((o.key()?.to_string(), o.size().unwrap_or(0).max(0) as u64)))
            .collect();
        let next = if output.is_truncated() == Some(true) { output.next_continuation_token } else { None };
        Ok((objects, next))
    }

    /// Where requests go, for messages.
    fn where_(&self) -> String {
        match &self.endpoint {
            Some(url) => url.clone(),
            None => format!("AWS S3 in {}", self.region),
        }
    }

    /// An SDK failure of `op` on `object`, classified (see the module doc) and described without secrets.
    fn failure<E>(&self, op: &str, object: &str, error: SdkError<E, HttpResponse>) -> ArtifactError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let target = format!("{op} s3://{}/{object}", self.bucket);
        match &error {
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                let code = service.err().code().unwrap_or_default();
                let message = service.err().message().unwrap_or_default();
                let text = format!("{target}: {} (HTTP {status} from {})", service_text(code, message), self.where_());
                if NEVER_SUCCEEDS.contains(&code) {
                    ArtifactError::Failed(redact(&text))
                } else {
                    ArtifactError::Unavailable(redact(&text))
                }
            }
            SdkError::TimeoutError(_) => {
                ArtifactError::Unavailable(format!("{target}: timed out talking to {}", self.where_()))
            }
            SdkError::DispatchFailure(_) if is_credentials_problem(&error) => {
                ArtifactError::Unavailable(redact(&format!("{target}: {NO_CREDENTIALS}: {}", chain(&error))))
            }
            SdkError::DispatchFailure(_) => ArtifactError::Unavailable(redact(&format!(
                "{target}: cannot reach {}: {}",
                self.where_(),
                chain(&error)
            ))),
            SdkError::ConstructionFailure(_) => ArtifactError::Unavailable(redact(&format!(
                "{target}: cannot make the request ({NO_CREDENTIALS}?): {}",
                chain(&error)
            ))),
            _ => ArtifactError::Unavailable(redact(&format!(
                "{target}: bad response from {}: {}",
                self.where_(),
                chain(&error)
            ))),
        }
    }
}

#[async_trait]
impl ArtifactStore for S3Store {
    fn describe(&self) -> String {
        let location = if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        };
        match &self.endpoint {
            Some(url) => format!("{location} (endpoint {url})"),
            None => format!("{location} (region {})", self.region),
        }
    }

    async fn put(&self, key: &str, bytes: &[u8], content_type: &str) -> Result<(), ArtifactError> {
        check_key(key)?;
        let object = self.object_key(key);
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&object)
            .content_type(content_type)
            .body(ByteStream::from(bytes::Bytes::copy_from_slice(bytes)))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.failure("put", &object, e))
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
        check_key(key)?;
        let object = self.object_key(key);
        let output = match self.client.get_object().bucket(&self.bucket).key(&object).send().await {
            Ok(output) => output,
            Err(e) => {
                let missing_key = match &e {
                    SdkError::ServiceError(service) => {
                        service.err().is_no_such_key()
                            || (service.raw().status().as_u16() == 404 && service.err().code() != Some("NoSuchBucket"))
                    }
                    _ => false,
                };
                return Err(if missing_key {
                    ArtifactError::NotFound(key.to_string())
                } else {
                    self.failure("get", &object, e)
                });
            }
        };
        let body = output.body.collect().await.map_err(|e| {
            ArtifactError::Unavailable(redact(&format!(
                "get s3://{}/{object}: reading the body from {}: {}",
                self.bucket,
                self.where_(),
                chain(&e)
            )))
        })?;
        Ok(body.into_bytes().to_vec())
    }

    /// `s3://bucket/prefix/key`: stable, unsigned, what step records and events keep.
    fn url(&self, key: &str) -> String {
        format!("s3://{}/{}", self.bucket, self.object_key(key))
    }

    /// A presigned GET URL valid for `artifacts.presign_secs` (local HMAC work, no request).
    async fn shareable_url(&self, key: &str) -> Result<String, ArtifactError> {
        check_key(key)?;
        let object = self.object_key(key);
        let presigning =
            PresigningConfig::expires_in(self.presign).map_err(|e| ArtifactError::Failed(format!("presign: {e}")))?;
        let request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&object)
            .presigned(presigning)
            .await
            .map_err(|e| self.failure("presign", &object, e))?;
        Ok(request.uri().to_string())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArtifactError> {
        check_prefix(prefix)?;
        let mut all = Vec::new();
        let mut continuation = None;
        loop {
            let (objects, next) = self.list_page(prefix, continuation).await?;
            all.extend(objects.into_iter().map(|(object, size)| (self.artifact_key(&object).to_string(), size)));
            match next {
                Some(token) => continuation = Some(token),
                None => return Ok(all),
            }
        }
    }

    /// ListObjectsV2, then DeleteObjects on what it listed (at most 1000 keys, the API's bound), until
    /// nothing is left. A key the store refuses to delete is an error naming it.
    async fn delete_prefix(&self, prefix: &str) -> Result<Removed, ArtifactError> {
        use aws_sdk_s3::types::{Delete, ObjectIdentifier};
        check_prefix(prefix)?;
        let mut removed = Removed::default();
        loop {
            // Always the first page: what the last round deleted is gone from it.
            let (objects, _) = self.list_page(prefix, None).await?;
            if objects.is_empty() {
                return Ok(removed);
            }
            let identifiers = objects
                .iter()
                .map(|(object, _)| ObjectIdentifier::builder().key(object).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ArtifactError::Failed(e.to_string()))?;
            let delete = Delete::builder()
                .set_objects(Some(identifiers))
                .quiet(true)
                .build()
                .map_err(|e| ArtifactError::Failed(e.to_string()))?;
            let object_prefix = self.object_key(prefix);
            let output = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| self.failure("delete", &object_prefix, e))?;
            if let Some(error) = output.errors().first() {
                return Err(ArtifactError::Unavailable(redact(&format!(
                    "delete s3://{}/{}: {} ({} of {} keys refused)",
                    self.bucket,
                    error.key().unwrap_or_default(),
                    service_text(error.code().unwrap_or_default(), error.message().unwrap_or_default()),
                    output.errors().len(),
                    objects.len()
                ))));
            }
            removed.objects += objects.len() as u64;
            removed.bytes += objects.iter().map(|(_, size)| size).sum::<u64>();
        }
    }

    async fn health(&self) -> Result<(), ArtifactError> {
        // One retry at most: health is asked by `config check` and `/healthz`, which should answer quickly.
        let result = self
            .client
            .head_bucket()
            .bucket(&self.bucket)
            .customize()
            .config_override(aws_sdk_s3::Config::builder().retry_config(RetryConfig::standard().with_max_attempts(2)))
            .send()
            .await;
        let error = match result {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        let bucket = &self.bucket;
        let at = self.where_();
        let message = match &error {
            SdkError::ServiceError(service) => {
                let raw = service.raw();
                let status = raw.status().as_u16();
                match status {
                    404 => format!("bucket {bucket} does not exist at {at} (create it, or fix artifacts.bucket)"),
                    403 => format!(
                        "access denied to bucket {bucket} at {at}: check the AWS credentials (AWS_ACCESS_KEY_ID / \
                         AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the instance role) and the bucket policy"
                    ),
                    301 | 400 if raw.headers().get("x-amz-bucket-region").is_some() => format!(
                        "bucket {bucket} is in region {}, not {} (set artifacts.region)",
                        raw.headers().get("x-amz-bucket-region").unwrap_or_default(),
                        self.region
                    ),
                    _ => {
                        let code = service.err().code().unwrap_or_default();
                        let text = service.err().message().unwrap_or_default();
                        format!("bucket {bucket} at {at}: {} (HTTP {status})", service_text(code, text))
                    }
                }
            }
            SdkError::TimeoutError(_) => format!("bucket {bucket}: timed out reaching {at}"),
            SdkError::DispatchFailure(dispatch) => {
                let detail = chain(&error);
                if is_credentials_problem(&error) {
                    format!("bucket {bucket}: {NO_CREDENTIALS}: {detail}")
                } else if dispatch.is_timeout() {
                    format!("bucket {bucket}: timed out connecting to {at}: {detail}")
                } else if detail.contains("refused") {
                    format!("bucket {bucket}: connection refused by {at} (is the store running?)")
                } else {
                    format!("bucket {bucket}: cannot reach {at}: {detail}")
                }
            }
            SdkError::ConstructionFailure(_) => {
                format!("bucket {bucket}: cannot make the request ({NO_CREDENTIALS}?): {}", chain(&error))
            }
            _ => format!("bucket {bucket}: bad response from {at}: {}", chain(&error)),
        };
        Err(ArtifactError::Unavailable(redact(&message)))
    }
}

const NO_CREDENTIALS: &str = "no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
     AWS_PROFILE, or give the machine a role)";

/// Whether a dispatch failure came from the credential chain rather than the network.
fn is_credentials_problem<E, R>(error: &SdkError<E, R>) -> bool
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    chain(error).contains("credentials")
}

fn service_text(code: &str, message: &str) -> String {
    match (code.is_empty(), message.is_empty()) {
        (true, true) => "error".to_string(),
        (false, true) => code.to_string(),
        (true, false) => message.to_string(),
        (false, false) => format!("{code}: {message}"),
    }
}

/// An error and its sources, `a: b: c`, without repeats and without the debug dumps (raw responses) the SDK's
/// own reporter appends.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// Cuts query strings that carry SigV4 material (`X-Amz-Credential`, `X-Amz-Signature`, session tokens) out
/// of a message, in case an underlying error quotes a presigned URL.
fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match word.split_once('?') {
            Some((head, query)) if query.contains("X-Amz-") || query.contains("Signature=") => {
                out.push_str(head);
                out.push_str("?[redacted]");
            }
            _ => out.push_str(word),
        }
    }
    out
}

/// Bucket names as S3-compatible stores accept them (AWS is stricter; it will say so itself).
fn check_bucket(bucket: &str) -> Result<(), S3ConfigError> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if ok { Ok(()) } else { Err(S3ConfigError::BadBucket(bucket.to_string())) }
}

/// `"/runs/"` → `"runs"`; `""` stays empty; segments are checked like artifact keys.
fn normalize_prefix(prefix: &str) -> Result<String, S3ConfigError> {
    let trimmed = prefix.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    check_key(trimmed).map_err(|_| S3ConfigError::BadPrefix(prefix.to_string()))?;
    Ok(trimmed.to_string())
}

/// An endpoint must be an absolute http(s) URL with a host and no query; a trailing '/' is dropped.
fn check_endpoint(url: &str) -> Result<String, S3ConfigError> {
    let bad = |reason: &str| S3ConfigError::BadEndpoint { url: url.to_string(), reason: reason.to_string() };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("it must not have a query or fragment"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("credentials do not belong in the URL; use the AWS credential chain"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ArtifactsConfig {
        ArtifactsConfig {
            backend: crate::config::ArtifactsBackend::S3,
            bucket: Some("agentd-artifacts".into()),
            region: Some("eu-west-1".into()),
            endpoint: Some("http://127.0.0.1:9000/".into()),
            force_path_style: true,
            ..ArtifactsConfig::default()
        }
    }

    #[tokio::test]
    async fn keys_urls_and_description() {
        let store = S3Store::new(&ArtifactsConfig { prefix: "/fleet/runs/".into(), ..config() }).await.unwrap();
        assert_eq!(store.object_key("tasks/t/1/00000.png"), "fleet/runs/tasks/t/1/00000.png");
        assert_eq!(store.url("tasks/t/1/00000.png"), "s3://agentd-artifacts/fleet/runs/tasks/t/1/00000.png");
        assert_eq!(store.describe(), "s3://agentd-artifacts/fleet/runs (endpoint http://127.0.0.1:9000)");
        let bare = S3Store::new(&ArtifactsConfig { endpoint: None, ..config() }).await.unwrap();
        assert_eq!(bare.url("tasks/t/1/00000.png"), "s3://agentd-artifacts/tasks/t/1/00000.png");
        assert_eq!(bare.describe(), "s3://agentd-artifacts (region eu-west-1)");
        assert!(matches!(store.put("../x", b"", "").await, Err(ArtifactError::InvalidKey(_))));
    }

    #[tokio::test]
    async fn bad_settings_are_config_errors() {
        let cases = [
            (ArtifactsConfig { bucket: None, ..config() }, "needs a bucket"),
            (ArtifactsConfig { bucket: Some("a/b".into()), ..config() }, "not a bucket name"),
            (ArtifactsConfig { prefix: "a//b".into(), ..config() }, "not a key prefix"),
            (ArtifactsConfig { prefix: "../x".into(), ..config() }, "not a key prefix"),
            (ArtifactsConfig { endpoint: Some("not a url".into()), ..config() }, "artifacts.endpoint"),
            (ArtifactsConfig { endpoint: Some("ftp://host".into()), ..config() }, "scheme"),
            (ArtifactsConfig { endpoint: Some("http://k:s@host".into()), ..config() }, "credentials"),
            (ArtifactsConfig { presign_secs: 0, ..config() }, "presign_secs"),
            (ArtifactsConfig { presign_secs: MAX_PRESIGN_SECS + 1, ..config() }, "presign_secs"),
            (ArtifactsConfig { checksum: "always".into(), ..config() }, "checksum"),
        ];
        for (config, expected) in cases {
            let error = S3Store::new(&config).await.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains(expected), "{config:?}: {error:?}");
        }
    }

    #[test]
    fn signatures_never_reach_messages() {
        let text = "get failed for http://h/b/k?X-Amz-Credential=AKIA%2F&X-Amz-Signature=abc: refused";
        let clean = redact(text);
        assert!(!clean.contains("AKIA") && !clean.contains("abc:"), "{clean}");
        assert!(clean.contains("http://h/b/k?[redacted]"), "{clean}");
        assert_eq!(redact("plain message? yes"), "plain message? yes");
    }
}
