//! Builds runtime objects from config values: the computer a task operates, the model that drives it, the
//! artifact store. A closed `match` per kind, no registry: adding a provider is adding an arm.
//!
//! Errors say whether the input was wrong ([`BuildError::Invalid`], exit 2) or a backend could not be
//! reached ([`BuildError::Unreachable`], exit 3).

use std::path::Path;
use std::sync::Arc;

use agentd_computer::{ComputerProvider, Size};
use thiserror::Error;

use crate::artifacts::{ArtifactStore, FsStore};
use crate::config::{ArtifactsBackend, Config};
use crate::model::scripted::{Script, ScriptedModel};
use crate::model::{Model, ModelError, Shared};
use crate::task::{CompatibleSpec, ComputerSpec, MockSpec, ModelSpec, ScriptSource, ScriptedSpec};

#[derive(Debug, Error)]
pub enum BuildError {
    /// The task or config asks for something invalid (a bad scene or script file, an unknown setting).
    #[error("{0}")]
    Invalid(String),
    /// A backend the task needs cannot be reached.
    #[error("{0}")]
    Unreachable(String),
}

/// How a computer is opened.
pub struct ComputerContext<'a> {
    /// Relative scene paths resolve against this directory (the task file's).
    pub base_dir: Option<&'a Path>,
    /// Keep the mock desktop's state here so it survives a restart (the daemon); `None` keeps it in memory.
    pub persist_dir: Option<&'a Path>,
}

/// Opens the computer a task names.
pub async fn computer(spec: &ComputerSpec, ctx: &ComputerContext<'_>) -> Result<Arc<dyn ComputerProvider>, BuildError> {
    match spec {
        ComputerSpec::Mock(MockSpec { scene, width, height }) => {
            let name = scene.as_deref().unwrap_or("blank");
            let scene = agentd_mock::Scene::resolve(name, ctx.base_dir)
                .map_err(|e| BuildError::Invalid(format!("field `computer.scene`: {e}")))?;
            let size = match (width, height) {
                (None, None) => None,
                (w, h) => Some(Size::new(
                    w.map_or(agentd_mock::DEFAULT_SIZE.width, |w| w.get()),
                    h.map_or(agentd_mock::DEFAULT_SIZE.height, |h| h.get()),
                )),
            };
            let desktop = match ctx.persist_dir {
                Some(dir) => agentd_mock::MockDesktop::open_persistent(scene, size, dir)
                    .map_err(|e| BuildError::Unreachable(format!("mock desktop state in {}: {e}", dir.display())))?,
                None => agentd_mock::MockDesktop::new(scene, size)
                    .map_err(|e| BuildError::Invalid(format!("field `computer`: {e}")))?,
            };
            Ok(Arc::new(desktop))
        }
        ComputerSpec::Local(_) => Err(BuildError::Invalid(
            "field `computer.provider`: the local provider is not part of this build yet".into(),
        )),
        ComputerSpec::Vnc(_) => {
            Err(BuildError::Invalid("field `computer.provider`: the vnc provider is not part of this build yet".into()))
        }
    }
}

/// Builds the model a task names, drawing HTTP clients, rate limiters, prices and keys from `shared` (one per
/// process). Script paths resolve against `base_dir`.
pub fn model(spec: &ModelSpec, shared: &Shared, base_dir: Option<&Path>) -> Result<Arc<dyn Model>, BuildError> {
    use crate::model::{anthropic, compatible, gemini, openai};
    let invalid = |e: ModelError| BuildError::Invalid(format!("field `model`: {e}"));
    let options = spec.options();
    match spec {
        ModelSpec::Scripted(ScriptedSpec { script }) => {
            let script = match script {
                ScriptSource::Inline(script) => script.clone(),
                ScriptSource::Path(path) => {
                    let path = match base_dir {
                        Some(base) if Path::new(path).is_relative() => base.join(path),
                        _ => Path::new(path).to_path_buf(),
                    };
                    Script::load(&path).map_err(|e| BuildError::Invalid(format!("field `model.script`: {e}")))?
                }
            };
            Ok(Arc::new(ScriptedModel::new(script)))
        }
        ModelSpec::Anthropic(vendor) => {
            let settings =
                shared.settings("anthropic", &options, vendor.tool_version.as_deref(), None).map_err(invalid)?;
            Ok(Arc::new(anthropic::AnthropicModel::new(settings).map_err(invalid)?))
        }
        ModelSpec::Openai(vendor) => {
            let settings =
                shared.settings("openai", &options, vendor.tool_version.as_deref(), None).map_err(invalid)?;
            Ok(Arc::new(openai::OpenAiModel::new(settings).map_err(invalid)?))
        }
        ModelSpec::Gemini(_) => {
            let settings = shared.settings("gemini", &options, None, None).map_err(invalid)?;
            Ok(Arc::new(gemini::GeminiModel::new(settings).map_err(invalid)?))
        }
        ModelSpec::OpenaiCompatible(CompatibleSpec { base_url, .. }) => {
            let settings =
                shared.settings("openai-compatible", &options, None, base_url.as_deref()).map_err(invalid)?;
            Ok(Arc::new(compatible::CompatibleModel::new(settings).map_err(invalid)?))
        }
    }
}

/// Builds the artifact store the config names.
pub async fn artifact_store(config: &Config) -> Result<Arc<dyn ArtifactStore>, BuildError> {
    match config.artifacts.backend {
        ArtifactsBackend::Fs => Ok(Arc::new(FsStore::new(config.artifacts_dir()))),
        ArtifactsBackend::S3 => {
            Err(BuildError::Invalid("artifacts.backend: the s3 store is not part of this build yet".into()))
        }
    }
}
