"""The commands, one module per group; `register` adds them to the app in the order `llmp --help` lists them, each
with the options every command shares (cli/options.py LlmpCommand: --output, --profile, --region)."""

from __future__ import annotations

import typer

from cli.commands import completion, data, invoke, logs, packages, plan, runs, status
from cli.options import LlmpCommand


def register(app: typer.Typer) -> None:
    app.command("status", cls=LlmpCommand)(status.status)
    app.command("upload-data", cls=LlmpCommand)(data.upload_data)
    app.add_typer(data.app, name="data")
    app.command("stage-weights", cls=LlmpCommand)(runs.stage_weights)
    app.command("finetune", cls=LlmpCommand)(runs.finetune)
    app.command("follow", cls=LlmpCommand)(runs.follow)
    app.command("logs", cls=LlmpCommand)(logs.logs)
    app.command("approve", cls=LlmpCommand)(packages.approve)
    app.command("reject", cls=LlmpCommand)(packages.reject)
    app.command("invoke", cls=LlmpCommand)(invoke.invoke)
    app.command("plan", cls=LlmpCommand)(plan.plan)
    app.command("completion", cls=LlmpCommand)(completion.completion)
