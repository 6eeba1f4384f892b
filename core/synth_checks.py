"""What synth checks once the whole config is known, before any construct is built: the limits on what the file
derives as a whole (names built from the project and stage, the promotion pipeline's source), and the images each
stage's region must have. (The CloudFormation resource types of every stack are checked against its region when
the app synthesizes: infrastructure/region_checks.py.) docs/synth-checks.md lists every check synth performs
(generators/synth_checks_page.py).
"""

from __future__ import annotations

from typing import Any

from core import api_limits, region_support
from core.config import ConfigError
from core.config.fields import aws_regions


def check(config: Any, *, config_path: str) -> None:
    """ConfigError with one line per problem."""
    problems = api_limits.check_platform(config) + region_support.image_problems(config, sorted(aws_regions()))
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise ConfigError(f"{config_path}: invalid configuration:\n{lines}")
