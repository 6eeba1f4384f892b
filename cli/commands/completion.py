"""`llmp completion SHELL`: the shell's completion script, printed (nothing is written into your rc files).

eval "$(llmp completion bash)"                  # in ~/.bashrc
eval "$(llmp completion zsh)"                   # in ~/.zshrc
llmp completion fish | source                   # in ~/.config/fish/config.fish
"""

from __future__ import annotations

import enum
import sys
from typing import Annotated

import typer

# Typer 0.29 runs on its own copy of click (typer._click): its registry of completion classes, where Typer's own
# (whose scripts call `llmp` back the way Typer answers) are added by completion_init.
from typer._click.shell_completion import get_completion_class
from typer._completion_classes import completion_init

from cli.options import JsonOption, handled
from cli.render import Output

# The shell asks `llmp` itself for completions with this variable set; the script printed names it.
COMPLETE_VAR = "_LLMP_COMPLETE"


class Shell(enum.StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@handled
def completion(
    ctx: typer.Context,
    shell: Annotated[Shell, typer.Argument(help="the shell: bash, zsh or fish", case_sensitive=False)],
    json_output: JsonOption = False,
) -> None:
    """Print the completion script of a shell, to eval in its rc file: eval "$(llmp completion bash)"."""
    out = Output(json_mode=json_output)
    completion_init()  # Typer's completion classes: their scripts call back `llmp` the way Typer answers
    root = ctx.find_root().command  # the whole command line: completion answers for every command
    script = get_completion_class(shell.value)(root, {}, "llmp", COMPLETE_VAR).source()
    out.result({"shell": shell.value, "script": script}, lambda console: sys.stdout.write(script + "\n"))
