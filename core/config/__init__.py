"""The platform's configuration: one YAML file describing every environment, loaded into typed, frozen models.

These classes are the documentation of what can be configured. Loading validates everything before any construct is
built; a bad value fails with the file, the field path, the value and what would be accepted. Unknown keys are errors.
Only `app.py` calls `load_config`; stacks and constructs receive the typed objects.

The package keeps one module per part of the file: fields.py (shared field types), serving.py, training.py,
platform.py (stages and the promotion pipeline) and loading.py (YAML to models, errors for people).
"""

from core.config.fields import (
    DEFAULT_CONFIG,
    REPO_ROOT,
    AccountId,
    ConfigError,
    InstanceTypeName,
    ModelName,
    Region,
    Tags,
)
from core.config.loading import load_config
from core.config.platform import PipelineConfig, PlatformConfig, SourceConfig, StageConfig
from core.config.serving import (
    AlarmsConfig,
    AutoscalingConfig,
    DeploymentConfig,
    ServingConfig,
    WeightsConfig,
)
from core.config.training import SmpConfig, SpotConfig, TrainingConfig, VpcConfig

__all__ = [
    "DEFAULT_CONFIG",
    "REPO_ROOT",
    "AccountId",
    "AlarmsConfig",
    "AutoscalingConfig",
    "ConfigError",
    "DeploymentConfig",
    "InstanceTypeName",
    "ModelName",
    "PipelineConfig",
    "PlatformConfig",
    "Region",
    "ServingConfig",
    "SmpConfig",
    "SourceConfig",
    "SpotConfig",
    "StageConfig",
    "Tags",
    "TrainingConfig",
    "VpcConfig",
    "WeightsConfig",
    "load_config",
]
