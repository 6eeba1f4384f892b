"""What every command shares: the --config, --stage and --json options, loading the config, and `handled`, which
turns whatever a command raises into one line and an exit status (cli/errors.py)."""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from cli.errors import CliError, Exit
from cli.render import Output
from core import failures
from core.config import DEFAULT_CONFIG, ConfigError, PlatformConfig, load_config

ConfigOption = Annotated[
    Path,
    typer.Option(
        "--config", "-c", envvar="CONFIG", help="the platform's config file, as given to make synth", show_default=False
    ),
]
StageOption = Annotated[
    str | None,
    typer.Option(
        "--stage", "-s", envvar="STAGE", help="a stage of the config (default: its first)", show_default=False
    ),
]
AllStagesOption = Annotated[
    str | None,
    typer.Option("--stage", "-s", envvar="STAGE", help="only this stage (default: every stage)", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout, for scripts")]

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
