"""The CDK app: one PlatformStage per environment in the config file, checked by cdk-nag.

    npx cdk synth                              # every stage of config/default.yaml
    npx cdk synth -c stage=dev                 # one stage
    npx cdk synth -c config=config/examples/opt-30b-g5.yaml

`make synth` runs this through the pinned CLI and prints the plan. This file is the only place that reads the
config file and CDK context; everything below it receives typed config objects.
"""

from __future__ import annotations

import sys

from aws_cdk import App, Aspects
from cdk_nag import AwsSolutionsChecks

from stacks.config import DEFAULT_CONFIG, ConfigError, PlatformConfig, load_config
from stacks.stage import PlatformStage


def build_app(app: App, config: PlatformConfig) -> App:
    """Add one stage per configured environment to `app`, each checked by cdk-nag."""
    for stage_name in config.stages:
        stage = PlatformStage(app, stage_name, config=config, stage_name=stage_name)
        # Aspects do not cross Stage boundaries: nag is added to each stage, not once to the app.
        Aspects.of(stage).add(AwsSolutionsChecks(verbose=True))
    return app


def main() -> None:
    app = App()
    config_path = app.node.try_get_context("config") or DEFAULT_CONFIG
    try:
        config = load_config(config_path, only_stage=app.node.try_get_context("stage"))
    except ConfigError as err:
        sys.exit(str(err))
    build_app(app, config).synth()


if __name__ == "__main__":
    main()
