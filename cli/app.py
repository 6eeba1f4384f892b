"""The `llmp` command: its options, its commands, and how every failure becomes one line and an exit status.

    llmp status                       every stage: stacks, endpoint, last pipeline runs, models awaiting approval
    llmp upload-data data/            training text into the data bucket's raw/ (what the pipeline reads)
    llmp stage-weights gpt-j-6b       copy the pretrained weights into S3 (once per model and commit)
    llmp finetune --param MaxSteps=200
    llmp approve 3 / llmp reject 3    a registered model version
    llmp invoke "The capital of France is"
    llmp plan                         what `make synth` printed
    llmp completion bash              the shell completion script (eval "$(llmp completion bash)")

Every command takes --config (or LLMP_CONFIG=...; default config/default.yaml), --stage (or LLMP_STAGE=...; default
the first stage of the config), --output table|json (--json for short), --profile and --region. A usage error (an
unknown option, a bad value, a missing argument) is one line on stderr too, and under --output json also a JSON
document on stdout, with exit status 2.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

# Typer 0.29 runs on its own copy of click (typer._click): its exceptions are the ones raised here, not click's.
from typer._click import exceptions as click_errors

from cli import aws as aws_module
from cli import commands
from cli.errors import EXIT_TABLE, Exit
from cli.options import shared_options, unwrapped

PROGRAM = "llmp"
DISTRIBUTION = "llm-platform"  # pyproject.toml's [project] name, which installs the console script


def version() -> str:
    """The project's version: pyproject.toml's beside this package (a checkout), else the installed metadata."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == DISTRIBUTION and "version" in project:
            return project["version"]
    return importlib.metadata.version(DISTRIBUTION)


def wants_json(args: Sequence[str]) -> bool:
    """Whether a command line asks for JSON, read from its words (for a usage error, which no option parsed)."""
    words = list(args)
    for at, word in enumerate(words):
        if word == "--":
            break
        if word == "--json" or word.lower() in ("--output=json", "-ojson"):
            return True
        if word in ("--output", "-o") and at + 1 < len(words) and words[at + 1].lower() == "json":
            return True
    return False


def usage_failure(error: click_errors.UsageError, args: Sequence[str]) -> int:
    """A usage error as one line on stderr (and the JSON failure document on stdout under --output json)."""
    command = error.ctx.command_path if error.ctx is not None else PROGRAM
    message = " ".join(error.format_message().split()).rstrip(".")
    line = f"{message}: see `{command} --help`"
    typer.echo(f"{PROGRAM}: {line}", err=True)
    if wants_json(args):
        typer.echo(json.dumps({"error": line, "exit_status": int(Exit.USAGE)}))
    return int(Exit.USAGE)


class LlmpGroup(typer.core.TyperGroup):
    """The command group: --profile and --region before the command too (`llmp --profile p status`), and a `main`
    that turns click's usage errors into llmp's one line (not Rich's box)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrapped(self.help)
        self.params.extend(shared_options("--profile", "--region"))

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        words = list(sys.argv[1:] if args is None else args)
        try:
            try:
                code = super().main(words, prog_name or PROGRAM, complete_var, standalone_mode=False, **extra)
            except click_errors.NoArgsIsHelpError as error:
                typer.echo(error.ctx.get_help() if error.ctx else "")
                code = int(Exit.USAGE)
            except click_errors.UsageError as error:
                code = usage_failure(error, words)
            except click_errors.ClickException as error:  # a bad file argument (click.FileError) and the like
                typer.echo(f"{PROGRAM}: {' '.join(error.format_message().split())}", err=True)
                code = error.exit_code
            except typer.Abort:
                typer.echo(f"{PROGRAM}: aborted", err=True)
                code = int(Exit.FAILED)
        finally:
            aws_module.choose(reset=True)
        code = code if isinstance(code, int) else 0  # a command's return value is not an exit status
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name=PROGRAM,
    cls=LlmpGroup,
    help="The LLM platform's operator command line: it reads the config (as make synth does) and the deployed "
    "stacks' outputs. Every command takes --config (LLMP_CONFIG), --stage (LLMP_STAGE), --output table|json "
    "(--json), --profile and --region.",
    epilog=EXIT_TABLE,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"{PROGRAM} {version()}")
        raise typer.Exit()


@app.callback()
def main_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print llmp's version and exit"),
    ] = False,
) -> None:
    """The LLM platform's operator command line."""


commands.register(app)


def main() -> None:
    """The console script `llmp`."""
    app()
