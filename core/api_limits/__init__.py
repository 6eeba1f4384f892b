"""Synth refuses what an AWS API would refuse: every config field, or value derived from one, that reaches an API
member, checked against that member's limits when the config loads, with the field named.

The rules (core/api_limits/rules.py) map each field to the member it reaches: `max_runtime_hours` x 3600 into
CreateTrainingJob's StoppingCondition.MaxRuntimeInSeconds, the project and stage names into the endpoint's,
pipelines' and role's names, and so on. The limits come from the committed tables of core/api_limits/aws_tables.py
(read from botocore's service models and CloudFormation's schemas), plus the few that only the API documentation
states in prose (`Limit`, each with the sentence it rests on) or that the job's own code sets. The same rules render
the table of docs/synth-checks.md.

Training and serving rules run in those models' validators; rules on names built from the project and stage, and on
the promotion pipeline, run once the whole file is known (`check_platform`, from app.py's build_app).
"""

from __future__ import annotations

from typing import Any

from core.api_limits.rules import RULES, Stage

# --- running the rules ------------------------------------------------------------------------------------------


def check(scope: str, subject: Any) -> list[str]:
    """Every problem of the rules of `scope` (training or serving) for `subject`: `field: what is wrong` lines."""
    return [problem for rule in RULES if rule.scope == scope for problem in rule.problems(subject)]


def check_platform(config: Any) -> list[str]:
    """The rules on what the whole file derives (names from project and stage, the promotion pipeline), as
    `field path: what is wrong` lines."""
    found = [problem for rule in RULES if rule.scope == "platform" for problem in rule.problems(config)]
    for name in config.stages:
        stage = Stage(config, name)
        found += [
            f"stages.{name}: {problem}" for rule in RULES if rule.scope == "stage" for problem in rule.problems(stage)
        ]
    return found


def api_members() -> list[str]:
    """Every API member the rules use: what core/api_limits/aws_tables.py extracts into its table."""
    return sorted({member for rule in RULES for member in rule.members})
