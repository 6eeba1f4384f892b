"""The CDK app: one PlatformStage per environment in the config file, checked by cdk-nag (AwsSolutions, NIST 800-53
R5 and HIPAA Security).

    npx cdk synth                              # every stage of config/default.yaml
    npx cdk synth -c stage=dev                 # one stage
    npx cdk synth -c config=config/examples/opt-30b-g5.yaml
    npx cdk synth -c release=<id>              # deploy-time lookups (latest approved model) run again
    npx cdk synth -c overlay=config/overlays/x.yaml   # merged over the config (e.g. the moto rehearsal's)

`make synth` runs this through the pinned CLI and prints the plan. This file is the only place that reads the
config file and CDK context; everything below it receives typed config objects. Any failure ends it with one
message on stderr and exit status 2 (core/failures.py); an error in the CDK's validation report is one
(infrastructure/validation_report.py).
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from core import failures

if TYPE_CHECKING:
    from aws_cdk import App

    from core.config import PlatformConfig

REPO_ROOT = Path(__file__).resolve().parent


def build_app(app: App, config: PlatformConfig, *, config_path: str = "config/default.yaml", release: str = "") -> App:
    """Add one stage per configured environment to `app`, and the promotion pipeline when the config has one;
    everything is checked by cdk-nag."""
    # deferred: imported when main() runs, so that a broken install is reported like any other failure (one
    # message, exit status 2) rather than as Python's traceback.
    from aws_cdk import Environment

    from core import synth_checks
    from infrastructure import compliance
    from infrastructure.pipeline_stack import PipelineStack
    from infrastructure.region_checks import ResourceTypesInRegion
    from infrastructure.stage import PlatformStage

    synth_checks.check(config, config_path=config_path)
    app.node.add_validation(ResourceTypesInRegion(app))
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
    """Synthesize what the CLI's context asks for (`app`: one built with that context, for tests). Whatever fails,
    a config error, an error of the CDK's template validation or a bug, is one message on stderr and exit status 2
    (DEBUG=1 adds the traceback)."""
    failures.exit_on_failure(lambda: _synthesize(app), program="app.py")


def _synthesize(app: App | None) -> None:
    # deferred: as in build_app, a broken import is reported by main().
    from core import synth_record
    from core.config import DEFAULT_CONFIG, load_config
    from infrastructure import template_validation, validation_report

    # The CLI tells the app not to fail on its validation report, then does not read it: the app reads it itself.
    # An app made here validates its templates through the synth cache; one given (tests) keeps its own validation.
    cached_validation = app is None
    app = app or template_validation.new_app(post_cli_context={validation_report.FAIL_SYNTH_CONTEXT: False})
    config_path = app.node.try_get_context("config") or DEFAULT_CONFIG
    overlays = tuple(p for p in (app.node.try_get_context("overlay") or "").split(",") if p)
    config = load_config(config_path, only_stage=app.node.try_get_context("stage"), overlays=overlays)
    release = app.node.try_get_context("release") or ""
    build_app(app, config, config_path=relative_to_repo(config_path), release=release)
    if cached_validation:
        template_validation.install(app)
    validation_report.synthesize(app)
    # Which config this assembly holds, for `llmp plan` to refuse an assembly of another config (core/synth_record.py).
    synth_record.write(app.outdir, config_path, shown=relative_to_repo(config_path))


def relative_to_repo(path: str | Path) -> str:
    """The config path as the pipeline's checkout sees it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(path)


def exit_without_teardown() -> None:
    """Exit 0 now that the cloud assembly is written, without waiting for what only tears down: the interpreter's
    own teardown of the app's modules and jsii objects, and the jsii node process's exit (together ~1.5 s of each
    `cdk synth` of the default config; the CLI waits for this process). Every atexit handler still runs, and
    jsii's temporary copy of its runtime is removed as jsii's own exit does; node, told to exit, ends by itself.
    Where jsii's internals differ from those expected, this returns and the exit is the ordinary one."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        from jsii._kernel import Kernel  # deferred: only this exit path reaches into jsii's internals

        node = Kernel().provider._process  # jsii's _NodeProcess: the one piece of jsii this reaches into
        node._process.stdin.write(b'{"exit":0}\n')  # what jsii's own stop() sends, but without the wait after it
        node._process.stdin.close()
        atexit.unregister(node.stop)
        node._ctx_stack.close()  # jsii's temporary directory (its runtime's files, loaded by node already)
    except Exception:  # any surprise: the ordinary exit, which is correct, only slower
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    exit_without_teardown()
