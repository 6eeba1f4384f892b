"""The commands, one module per group; `register` adds them to the app in the order `llmp --help` lists them."""

from __future__ import annotations

import typer

from cli.commands import data, invoke, packages, plan, runs, status


def register(app: typer.Typer) -> None:
    app.command("status")(status.status)
    app.command("upload-data")(data.upload_data)
    app.command("stage-weights")(runs.stage_weights)
    app.command("finetune")(runs.finetune)
    app.command("follow")(runs.follow)
    app.command("approve")(packages.approve)
    app.command("reject")(packages.reject)
    app.command("invoke")(invoke.invoke)
    app.command("plan")(plan.plan)
