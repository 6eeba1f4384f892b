"""The `llmp` command: its options, its commands, and how every failure becomes one line and an exit status.

    llmp status                       every stage: stacks, endpoint, last pipeline runs, models awaiting approval
    llmp upload-data data/            training text into the data bucket's raw/ (what the pipeline reads)
    llmp stage-weights gpt-j-6b       copy the pretrained weights into S3 (once per model and commit)
    llmp finetune --param MaxSteps=200
    llmp approve 3 / llmp reject 3    a registered model version
    llmp invoke "The capital of France is"
    llmp plan                         what `make synth` printed

Every command takes --config (or CONFIG=...; default config/default.yaml), --stage (or STAGE=...; default the first
stage of the config) and --json.
"""

from __future__ import annotations

import typer

from cli import commands
from cli.errors import EXIT_TABLE

app = typer.Typer(
    name="llmp",
    help="The LLM platform's operator command line: it reads the config (as make synth does) and the deployed "
    "stacks' outputs. Every command takes --config (CONFIG), --stage (STAGE) and --json.",
    epilog=EXIT_TABLE.replace("\n", " "),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


commands.register(app)


def main() -> None:
    """The console script `llmp`."""
    app()
