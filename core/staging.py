"""Which Hugging Face repositories a stage stages into pretrained/, and what the staging step is told about each:
read by the weights-staging pipeline, the API-limit rules (its volume) and the plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.version import Version

from core.catalog import images
from core.catalog.models import Model as CatalogModel
from core.catalog.models import StagedWeights
from core.training_job import training_readers

if TYPE_CHECKING:
    from core.config import ServingConfig, TrainingConfig


def staged_repositories(training: TrainingConfig, serving: ServingConfig) -> list[tuple[CatalogModel, StagedWeights]]:
    """Every repository and revision a stage reads from pretrained/, each once, with its model: the training model's
    Hugging Face weights, and the endpoint's staged weights (none when it serves S3 or a model package)."""
    found: dict[tuple[str, str | None], tuple[CatalogModel, StagedWeights]] = {}
    candidates = [(training.catalog_model, training.staged_weights)]
    if serving.staged_weights is not None:
        candidates.append((serving.catalog_model, serving.staged_weights))
    for model, staged in candidates:
        found.setdefault((staged.name, staged.revision), (model, staged))
    return list(found.values())


def staging_readers(training: TrainingConfig, serving: ServingConfig, staged: StagedWeights) -> str:
    """stage_model.py's --readers for one repository: the oldest version of each library that reads it in the stage,
    among the training jobs (when training stages it) and the endpoint's engine (when serving does). Empty when no
    reader has a limit this project checks (weights only the vllm engine reads)."""
    same = (staged.name, staged.revision)
    found = (
        [training_readers(training)] if (training.staged_weights.name, training.staged_weights.revision) == same else []
    )
    if serving.staged_weights is not None and (serving.staged_weights.name, serving.staged_weights.revision) == same:
        found.append(dict(images.lmi_image(serving.engine).folder_readers))
    oldest: dict[str, str] = {}
    for readers in found:
        for library, version in readers.items():
            if library not in oldest or Version(version) < Version(oldest[library]):
                oldest[library] = version
    return ",".join(f"{library}={version}" for library, version in sorted(oldest.items()))


def staging_step_name(staged: StagedWeights, others: list[StagedWeights]) -> str:
    """Stage-<name>; with the commit's first 12 digits (or main) when training and serving stage one repository at
    two revisions."""
    twice = sum(other.name == staged.name for other in others) > 1
    return f"Stage-{staged.name}" + (f"-{staged.staged_revision[:12]}" if twice else "")
