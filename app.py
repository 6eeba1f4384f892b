"""The CDK app: one PlatformStage per environment in the config file, checked by cdk-nag (AwsSolutions, NIST 800-53
R5 and HIPAA Security).

    npx cdk synth                              # every stage of config/default.yaml
    npx cdk synth -c stage=dev                 # one stage
    npx cdk synth -c config=config/examples/opt-30b-g5.yaml
    npx cdk synth -c release=<id>              # deploy-time lookups (latest approved model) run again
    npx cdk synth -c overlay=config/overlays/x.yaml   # merged over the config (e.g. the moto rehearsal's)

`make synth` runs this through the pinned CLI and prints the plan. This file is the only place that reads the
config file and CDK context; everything below it receives typed config objects.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aws_cdk import App, Environment

from stacks import compliance
from stacks.config import DEFAULT_CONFIG, REPO_ROOT, ConfigError, PlatformConfig, load_config
from stacks.pipeline_stack import PipelineStack
from stacks.stage import PlatformStage


def build_app(app: App, config: PlatformConfig, *, config_path: str = "config/default.yaml", release: str = "") -> App:
    """Add one stage per configured environment to `app`, and the promotion pipeline when the config has one;
    everything is checked by cdk-nag."""
    for stage_name in config.stages:
        stage = PlatformStage(app, stage_name, config=config, stage_name=stage_name, release=release)
        # Aspects do not cross Stage boundaries: the checks are added to each stage, not once to the app.
        compliance.check(stage)
    if config.pipeline:
        pipeline = PipelineStack(
            app,
            "Pipeline",
            stack_name=f"{config.project}-pipeline",
            description=f"{config.project}: promotion of each commit and approved model through the stages",
            env=Environment(account=config.pipeline.account, region=config.pipeline.region),
            config=config,
            config_path=config_path,
            release=release,
        )
        compliance.check(pipeline)
    return app


def main(app: App | None = None) -> None:
    """Synthesize what the CLI's context asks for (`app`: one built with that context, for tests)."""
    app = app or App()
    config_path = app.node.try_get_context("config") or DEFAULT_CONFIG
    try:
        overlays = tuple(p for p in (app.node.try_get_context("overlay") or "").split(",") if p)
        config = load_config(config_path, only_stage=app.node.try_get_context("stage"), overlays=overlays)
    except ConfigError as err:
        sys.exit(str(err))
    release = app.node.try_get_context("release") or ""
    build_app(app, config, config_path=relative_to_repo(config_path), release=release).synth()


def relative_to_repo(path: str | Path) -> str:
    """The config path as the pipeline's checkout sees it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(path)


if __name__ == "__main__":
    main()
