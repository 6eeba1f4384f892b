"""What a run costs: the plan's $/h for what bills during each step, times the step's minutes; and the guard that
stops a run before a step that the dollar ceiling or the deadline would not cover.

GPU prices are the instance catalog's (core/catalog/instances.py), the same numbers `make synth`'s plan prints. The
catalog holds GPU types only: the CPU processing jobs (weights staging, prepare) are priced from the table below.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import StageConfig
from integ import steps as step_kinds
from integ.steps import Step

# SageMaker Processing on-demand, us-east-1, USD per instance-hour, rounded (https://aws.amazon.com/sagemaker/pricing/).
# A type not listed is priced as the dearest listed, so the estimate errs high.
CPU_USD_PER_HOUR = {"ml.m5.large": 0.115, "ml.m5.xlarge": 0.23, "ml.m5.2xlarge": 0.461, "ml.m5.4xlarge": 0.922}


def hourly_rates(stage: StageConfig) -> dict[str, float]:
    """$/h while each kind of step runs. Fine-tuning runs its jobs one after another: the dearest of them bills."""
    training, serving = stage.training, stage.serving
    cpu = CPU_USD_PER_HOUR.get(training.processing_instance_type, max(CPU_USD_PER_HOUR.values()))
    train = training.catalog_instance.hourly_usd * training.instance_count
    evaluate = _gpu_price(training.evaluate_instance_type)
    instances = max(serving.autoscaling.min_instances, 1)  # a first copy needs one instance
    return {
        step_kinds.NOTHING: 0.0,
        step_kinds.CPU_JOB: cpu,
        step_kinds.TRAINING: max(train, evaluate, cpu),
        step_kinds.ENDPOINT: serving.catalog_instance.hourly_usd * instances,
    }


def _gpu_price(instance_type: str) -> float:
    from core.catalog.instances import INSTANCE_TYPES

    return INSTANCE_TYPES[instance_type].hourly_usd


def step_cost(step: Step, rates: dict[str, float], minutes: float) -> float:
    return rates[step.bills] * minutes / 60


@dataclass(frozen=True)
class Estimate:
    expected_usd: float
    expected_minutes: float
    worst_usd: float  # every step and teardown at its timeout
    longest_minutes: float


def estimate(steps: tuple[Step, ...], rates: dict[str, float]) -> Estimate:
    every = (*steps, step_kinds.TEARDOWN)
    return Estimate(
        expected_usd=sum(step_cost(s, rates, s.expected_minutes) for s in every),
        expected_minutes=sum(s.expected_minutes for s in every),
        worst_usd=sum(step_cost(s, rates, s.timeout_minutes) for s in every),
        longest_minutes=sum(s.timeout_minutes for s in every),
    )


class LimitReached(Exception):
    """The next step would pass the dollar ceiling or the deadline: the run stops before it (and tears down)."""


@dataclass
class Budget:
    """The run's limits. `spent_usd` grows with each step's real duration at its rate; before a step, the spent
    amount plus the step's expected cost, and the elapsed time plus its expected minutes and teardown's, must fit."""

    ceiling_usd: float
    deadline_minutes: float
    rates: dict[str, float]
    spent_usd: float = 0.0

    def charge(self, step: Step, seconds: float) -> None:
        self.spent_usd += step_cost(step, self.rates, seconds / 60)

    def check_before(self, step: Step, elapsed_seconds: float) -> None:
        next_usd = step_cost(step, self.rates, step.expected_minutes)
        if self.spent_usd + next_usd > self.ceiling_usd:
            raise LimitReached(
                f"dollar ceiling: ${self.spent_usd:,.2f} spent (estimate) + ${next_usd:,.2f} expected for {step.name} "
                f"> ${self.ceiling_usd:,.2f}; raise --max-usd to go further"
            )
        elapsed = elapsed_seconds / 60
        needed = step.expected_minutes + step_kinds.TEARDOWN.expected_minutes
        if elapsed + needed > self.deadline_minutes:
            raise LimitReached(
                f"deadline: {elapsed:.0f} min elapsed + {step.expected_minutes:g} min expected for {step.name} + "
                f"{step_kinds.TEARDOWN.expected_minutes:g} min of teardown > {self.deadline_minutes:g} min; raise "
                "--deadline-minutes to go further"
            )

    def step_limit_seconds(self, step: Step, elapsed_seconds: float) -> float:
        """A step's own timeout, cut so that teardown still fits before the deadline."""
        left = (self.deadline_minutes - step_kinds.TEARDOWN.expected_minutes) * 60 - elapsed_seconds
        return max(min(step.timeout_minutes * 60, left), 1.0)
