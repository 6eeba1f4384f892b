"""What every command shares: the --config, --stage and --output (--json) options, the --profile and --region options
every command gets (LlmpCommand), loading the config, and `handled`, which turns whatever a command raises into one
line and an exit status (cli/errors.py)."""

from __future__ import annotations

import enum
import functools
import inspect
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.core
import typer.main

from cli import aws as aws_module
from cli.errors import BOTOCORE_ERRORS, CliError, Exit, translate
from cli.render import Output
from core import failures
from core.config import DEFAULT_CONFIG, ConfigError, PlatformConfig, load_config

# The environment variables are the CLI's own: CI systems set STAGE and CONFIG for other purposes. (make passes its
# STAGE= and CONFIG= to its own commands as --stage and --config; it runs no llmp command.)
CONFIG_ENV = "LLMP_CONFIG"
STAGE_ENV = "LLMP_STAGE"

ConfigOption = Annotated[
    Path,
    typer.Option(
        "--config",
        "-c",
        envvar=CONFIG_ENV,
        help="the platform's config file, as given to make synth (default: config/default.yaml)",
        show_default=False,
    ),
]
StageOption = Annotated[
    str | None,
    typer.Option(
        "--stage", "-s", envvar=STAGE_ENV, help="a stage of the config (default: its first)", show_default=False
    ),
]
AllStagesOption = Annotated[
    str | None,
    typer.Option("--stage", "-s", envvar=STAGE_ENV, help="only this stage (default: every stage)", show_default=False),
]
# `--json` is the short form of `--output json`: both set the command's `json_output` (LlmpCommand adds --output).
JsonOption = Annotated[bool, typer.Option("--json", help="the same as --output json", show_default=False)]
JSON_PARAMETER = "json_output"


class OutputFormat(enum.StrEnum):
    table = "table"
    json = "json"


# Where --output puts its choice until the command runs (LlmpCommand.invoke turns it into json_output).
_OUTPUT_META = "llmp.output"


def _choose_output(ctx: Any, param: Any, value: OutputFormat | None) -> None:
    if value is not None:
        ctx.meta[_OUTPUT_META] = OutputFormat(value)


def _choose_profile(ctx: Any, param: Any, value: str | None) -> None:
    aws_module.choose(profile=value)


def _choose_region(ctx: Any, param: Any, value: str | None) -> None:
    aws_module.choose(region=value)


def _shared_options(
    output: Annotated[
        OutputFormat | None,
        typer.Option(
            "--output",
            "-o",
            help="table: for people (the default); json: exactly one JSON document on stdout, notes on stderr",
            case_sensitive=False,
            expose_value=False,
            callback=_choose_output,
            show_default=False,
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            metavar="NAME",
            help="the AWS profile to use (default: AWS_PROFILE, else boto3's chain)",
            expose_value=False,
            callback=_choose_profile,
            show_default=False,
        ),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option(
            "--region",
            metavar="REGION",
            help="call AWS in this region instead of the stage's (from the config)",
            expose_value=False,
            callback=_choose_region,
            show_default=False,
        ),
    ] = None,
) -> None:
    """Declares the options every command shares; Typer builds them, LlmpCommand adds them."""


def unwrapped(text: str | None) -> str | None:
    """A docstring's paragraphs, each on one line: Rich's help keeps a docstring's line breaks, so a sentence broken
    at the source's 120 columns would break mid-line in an 80-column terminal. Rich wraps each line itself. A
    paragraph that starts with \b (click's mark for a table or list) keeps its lines."""
    if not text:
        return text
    paragraphs = [
        paragraph if paragraph.startswith("\b") else " ".join(paragraph.split())  # \b: click's "keep my lines"
        for paragraph in inspect.cleandoc(text).split("\n\n")
    ]
    return "\n\n".join(paragraph for paragraph in paragraphs if paragraph.strip())


def shared_options(*names: str) -> list[Any]:
    """Fresh click parameters of `_shared_options`, by option name (--output, --profile, --region)."""
    holder = typer.Typer()
    holder.command()(_shared_options)
    params = typer.main.get_command(holder).params
    return [param for name in names for param in params if name in param.opts]


class LlmpCommand(typer.core.TyperCommand):
    """A command with the options every command shares, added here so that no command declares them: --output
    (json sets the command's `json_output`, as --json does) and --profile / --region (for cli/aws.py connect())."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrapped(self.help)
        names = [param.name for param in self.params]
        at = names.index(JSON_PARAMETER) if JSON_PARAMETER in names else len(names)
        if JSON_PARAMETER in names:
            self.params[at:at] = shared_options("--output")
        self.params.extend(shared_options("--profile", "--region"))

    def invoke(self, ctx: Any) -> Any:
        chosen = ctx.meta.get(_OUTPUT_META)
        if chosen is not None and JSON_PARAMETER in ctx.params:
            ctx.params[JSON_PARAMETER] = chosen is OutputFormat.json or bool(ctx.params[JSON_PARAMETER])
        return super().invoke(ctx)


F = TypeVar("F", bound=Callable[..., Any])


def handled(command: F) -> F:
    """Run `command`; whatever it raises ends as one line on stderr (and JSON with --json) and an exit status."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        out = Output(json_mode=bool(kwargs.get("json_output")))
        try:
            return command(*args, **kwargs)
        except CliError as error:
            out.failure(error)
            raise typer.Exit(int(error.code)) from None
        except BOTOCORE_ERRORS as error:  # raised outside an aws_errors()
            failure = translate(error)
            out.failure(failure)
            raise typer.Exit(int(failure.code)) from None
        except ConfigError as error:  # already one line per problem, naming the file and the field
            out.failure(CliError(str(error), Exit.USAGE))
            raise typer.Exit(int(Exit.USAGE)) from None
        except KeyboardInterrupt:
            out.failure(CliError("interrupted", Exit.DETACHED))
            raise typer.Exit(int(Exit.DETACHED)) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:  # a bug: still one line, where it happened, and how to see the traceback
            if os.environ.get("DEBUG", "") not in ("", "0"):
                traceback.print_exc()
            out.failure(CliError(failures.describe(error, program="llmp").removeprefix("llmp: ")))
            raise typer.Exit(int(Exit.FAILED)) from None

    return run  # type: ignore[return-value]


def load(config_path: Path | None) -> tuple[PlatformConfig, str]:
    """The config, and its path as messages show it."""
    path = config_path or DEFAULT_CONFIG
    shown = str(path.relative_to(Path.cwd())) if path.is_absolute() and path.is_relative_to(Path.cwd()) else str(path)
    return load_config(path), shown
