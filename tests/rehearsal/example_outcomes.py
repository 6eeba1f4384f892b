"""The documented outcome of the deploy rehearsal of each file in config/examples/ (docs/local-runs.md): PASS, or the
reason the rehearsal gives for not deploying it. The fast test (test_overlay.py) and the matrix
(test_rehearse_examples.py, `make rehearse-examples`) both hold the tool to it; an example not listed here must PASS.
Today every example passes: the emulator takes every endpoint instance type SageMaker's API does, and a stage that
deletes its data is rehearsed against that promise."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Documented:
    reason: str  # in the rehearsal's "cannot rehearse" line
    details: tuple[str, ...] = ()  # each in the reasons it gives per candidate instance type


UNREHEARSABLE: dict[str, Documented] = {}

# The stage each example's rehearsal deploys, and that stage's removal_policy (what is checked after destroy).
REHEARSED_STAGE = {
    "bloom-176b-int8-p4d.yaml": ("prod", "retain"),
    "inference-components.yaml": ("staging", "retain"),
    "llama-3.1-8b-vllm-g5.yaml": ("prod", "retain"),
    "llama-70b-lora.yaml": ("dev", "destroy"),
    "llama-lora.yaml": ("dev", "destroy"),
    "opt-30b-g5.yaml": ("prod", "retain"),
    "promotion.yaml": ("staging", "retain"),
    "qwen-lora.yaml": ("dev", "destroy"),
}
