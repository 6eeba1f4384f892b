"""The ordered steps of an integration run: each one's name, what it checks, how long it is expected to take, the
most it may take, and what bills while it runs. No AWS here: the dry run prints exactly this.

Expected minutes are this suite's own assumptions for integ/config.yaml (one L4 per job; Qwen2.5-7B's 15 GiB staged
once), not measurements; the report records what each step really took, so they can be corrected from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import StageConfig

# What bills while a step runs (estimate.py prices each): nothing, the CPU jobs of the staging and prepare steps, the
# fine-tuning pipeline's GPU jobs, or the endpoint (from its creation until teardown has deleted it).
NOTHING, CPU_JOB, TRAINING, ENDPOINT = "nothing", "cpu-job", "training", "endpoint"


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    expected_minutes: float
    timeout_minutes: float
    bills: str


STEPS = (
    Step("synth-checks", "make synth CONFIG=integ/config.yaml: every synth check, offline", 4, 20, NOTHING),
    Step("deploy", "cdk deploy the storage and training stacks (no endpoint yet)", 12, 45, NOTHING),
    Step("stage-weights", "llmp stage-weights: the pretrained weights into the models bucket", 25, 90, CPU_JOB),
    Step("upload-data", "llmp upload-data: a small generated text set into raw/integ/", 1, 10, NOTHING),
    Step("fine-tune", "llmp finetune: prepare, train (a few steps), evaluate, register", 40, 120, TRAINING),
    Step(
        "package-pending",
        "the new model package is PendingManualApproval and carries its evaluation report",
        1,
        5,
        NOTHING,
    ),
    Step("approve", "llmp approve: the new version Approved", 1, 5, NOTHING),
    Step("deploy-serving", "cdk deploy the whole stage: the endpoint serves the approved version", 25, 75, ENDPOINT),
    Step("in-service", "the endpoint is InService", 1, 30, ENDPOINT),
    Step("invoke", "each model answers 200 in LMI's schema, with token counts; tokens/s measured", 2, 10, ENDPOINT),
    Step("stream", "the streamed answer is the greedy non-streamed one, token by token", 2, 10, ENDPOINT),
    Step("bad-request", "a malformed request is refused with a 4xx", 1, 5, ENDPOINT),
    Step("alarms-and-scaling", "the stack's CloudWatch alarms and scaling policies exist", 1, 5, ENDPOINT),
    Step("cold-start", "scale the components to zero, then time the first answer", 25, 60, ENDPOINT),
)
# Teardown is not a step: it always runs. Its limits count in the deadline and the estimate all the same.
TEARDOWN = Step("teardown", "stop runs, delete model versions, cdk destroy, list what remains", 20, 60, ENDPOINT)


def steps_for(stage: StageConfig) -> tuple[Step, ...]:
    """The steps this stage can run: the cold start needs inference components that may scale to zero."""
    serving = stage.serving
    scales_to_zero = serving.autoscaling.min_instances == 0 and any(c.min_copies == 0 for c in serving.components)
    return tuple(s for s in STEPS if s.name != "cold-start" or scales_to_zero)


def longest_minutes(steps: tuple[Step, ...]) -> float:
    """The most a run can take: every step at its timeout, then teardown at its own."""
    return sum(s.timeout_minutes for s in steps) + TEARDOWN.timeout_minutes
