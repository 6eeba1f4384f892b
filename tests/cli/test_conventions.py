"""What every command of `llmp` does alike: --version, shell completion, --output json|table (and --json), --profile
and --region, the LLMP_ environment variables, help that reads at 80 columns, the documented exit statuses, and one
JSON document on stdout in a pipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib

import pytest
import typer.main
from typer.testing import CliRunner

from cli import aws as aws_module
from cli.app import app
from cli.errors import EXIT_TABLE, MEANINGS, CliError, Exit
from cli.reference import exit_table as cli_reference
from core import synth_record
from core.config import REPO_ROOT
from tests.cli.conftest import register_package


def leaf_commands(group, prefix: str = "") -> dict:
    """Every command a person runs, by its words ("status", "data ls"), through groups."""
    found = {}
    for name, command in group.commands.items():
        words = f"{prefix}{name}"
        found.update(leaf_commands(command, words + " ") if hasattr(command, "commands") else {words: command})
    return found


COMMANDS = leaf_commands(typer.main.get_command(app))


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})


# --- --version and completion -------------------------------------------------------------------------------------


def test_version_is_the_project_s():
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]

    result = run("--version")

    assert result.exit_code == 0
    assert result.stdout == f"llmp {declared}\n"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_shell_s_script_and_writes_nothing(shell, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))

    result = run("completion", shell)

    assert result.exit_code == 0, result.output
    assert "_LLMP_COMPLETE" in result.stdout
    assert f"complete_{shell}" in result.stdout  # the instruction the script sends back is the one llmp answers
    assert list(tmp_path.iterdir()) == []  # no rc file touched


def test_the_completion_script_s_callback_completes_commands_and_options():
    completed = run(env={"_LLMP_COMPLETE": "complete_bash", "COMP_WORDS": "llmp sta", "COMP_CWORD": "1"})
    options = run(env={"_LLMP_COMPLETE": "complete_bash", "COMP_WORDS": "llmp status --out", "COMP_CWORD": "2"})

    assert completed.stdout.split() == ["status", "stage-weights"]
    assert options.stdout.split() == ["--output"]


def test_completion_json_is_the_script_in_a_document():
    result = run("completion", "fish", "--output", "json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["shell"] == "fish"


# --- --output json|table, --json -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_takes_output_profile_and_region(command):
    options = {opt for param in COMMANDS[command].params for opt in param.opts}

    assert {"--output", "-o", "--json", "--profile", "--region"} <= options


def test_output_json_is_json_output_as_json_is(cli, deployed):
    as_json = cli("status", "--stage", "dev", "--json")
    as_output = cli("status", "--stage", "dev", "--output", "json")
    short = cli("status", "--stage", "dev", "-o", "JSON")
    table = cli("status", "--stage", "dev", "--output", "table")

    assert as_json.exit_code == as_output.exit_code == short.exit_code == table.exit_code == 0
    assert json.loads(as_output.stdout) == json.loads(as_json.stdout) == json.loads(short.stdout)
    assert table.stdout.startswith("dev  us-east-1")


# --- the environment: LLMP_CONFIG and LLMP_STAGE, not CI's STAGE and CONFIG ----------------------------------------


def test_llmp_stage_and_config_are_read_and_the_generic_names_are_not(config_file, moto):
    own = run("status", env={"LLMP_CONFIG": str(config_file), "LLMP_STAGE": "qa"})
    generic = run("status", "--json", env={"LLMP_CONFIG": str(config_file), "STAGE": "qa", "CONFIG": "/nonexistent"})

    assert own.exit_code == 2
    assert "no stage named 'qa'" in own.stderr
    assert generic.exit_code == 0, generic.output
    assert [s["stage"] for s in json.loads(generic.stdout)["stages"]] == ["dev", "prod"]


# --- --profile and --region reach the AWS access of the command -----------------------------------------------------


@pytest.fixture
def connections(monkeypatch):
    """What connect() was given, per command run; the command stops there."""
    made: list[tuple[str | None, str | None]] = []

    def connect():
        made.append((aws_module.chosen.profile, aws_module.chosen.region))
        raise CliError("stopped here", Exit.FAILED)

    monkeypatch.setattr(aws_module, "connect", connect)
    return made


@pytest.mark.parametrize(
    "args",
    [
        ["--profile", "ops", "--region", "eu-west-1", "finetune"],
        ["finetune", "--profile", "ops", "--region", "eu-west-1"],
        ["--profile", "ops", "finetune", "--region", "eu-west-1"],
    ],
)
def test_profile_and_region_before_or_after_the_command_reach_connect(cli, credentials, connections, args):
    cli(*args)
    cli("finetune")  # the next command line starts afresh

    assert connections == [("ops", "eu-west-1"), (None, None)]


def test_an_unknown_profile_is_exit_4_naming_the_flag(cli, credentials):
    result = cli("finetune", "--profile", "nosuchprofile")

    assert result.exit_code == 4, result.output
    assert "The config profile (nosuchprofile) could not be found: give --profile (or AWS_PROFILE)" in result.stderr


def test_region_sends_the_calls_to_that_region(credentials):
    aws = aws_module.Aws(profile=None, region="eu-west-1")

    assert aws.client("sts", "us-east-1").meta.region_name == "eu-west-1"


# --- help at 80 columns ----------------------------------------------------------------------------------------------


def _helps(command) -> list[str]:
    texts = [command.help or "", command.short_help or ""]
    return texts + [getattr(param, "help", None) or "" for param in command.params]


@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_help_text_has_no_line_break_inside_a_paragraph(command):
    """Rich keeps a help text's line breaks: one inside a sentence breaks it mid-line in an 80-column terminal."""
    root = typer.main.get_command(app)
    texts = _helps(root if command is None else COMMANDS[command])

    for text in texts:
        prose = [paragraph for paragraph in text.split("\n\n") if not paragraph.startswith("\b")]
        assert all("\n" not in paragraph for paragraph in prose), text


@pytest.mark.parametrize("command", [[], *[name.split() for name in sorted(COMMANDS)]])
def test_help_renders_at_80_columns(command):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})

    assert result.exit_code == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


# --- exit statuses: one table in the code, the same in --help and the docs ----------------------------------------


def test_every_exit_status_has_a_meaning_in_help_and_docs():
    assert set(MEANINGS) == set(Exit)
    assert all(f"{int(code)} {short}" in EXIT_TABLE for code, (short, _) in MEANINGS.items())


def test_the_docs_exit_status_table_is_the_code_s(capsys):
    """docs/operations.md's table is generated from cli/errors.py: `python -m cli.reference.exit_table --write`."""
    status = cli_reference.main(["--check"])

    assert status == 0, capsys.readouterr().err
    page = cli_reference.OPERATIONS.read_text()
    assert "| 5 | AWS could not be reached" in page


# --- plan refuses an assembly of another config -----------------------------------------------------------------------


@pytest.fixture
def recorded_assembly(assembly, tmp_path):
    """A copy of the default config's assembly, with the record app.py writes at synth."""
    copy = tmp_path / "cdk.out"
    shutil.copytree(assembly.outdir, copy)
    default = REPO_ROOT / "config" / "default.yaml"
    synth_record.write(copy, default, shown="config/default.yaml")
    return copy


def test_plan_reads_an_assembly_of_its_config(cli, recorded_assembly):
    result = cli("plan", "--assembly", str(recorded_assembly), "--config", str(REPO_ROOT / "config/default.yaml"))

    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def test_plan_refuses_an_assembly_synthesized_from_another_config(cli, recorded_assembly):
    result = cli("plan", "--assembly", str(recorded_assembly))

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"llmp: {recorded_assembly} was synthesized from config/default.yaml, not from {cli.config} as it is now: "
        f"run `make synth CONFIG={cli.config}`"
    )


def test_plan_refuses_an_assembly_of_its_config_before_an_edit(cli, recorded_assembly, tmp_path):
    edited = tmp_path / "default.yaml"
    edited.write_text((REPO_ROOT / "config/default.yaml").read_text())
    synth_record.write(recorded_assembly, edited, shown=str(edited))
    edited.write_text(edited.read_text() + "\n# edited\n")

    result = cli("plan", "--assembly", str(recorded_assembly), "--config", str(edited))

    assert result.exit_code == 2
    assert f"was synthesized from {edited} as it was then, not from {edited} as it is now" in result.stderr


def test_synth_records_the_config_it_synthesized(tmp_path):
    """app.py, run as `cdk synth` runs it (cdk.json's context, CDK_OUTDIR), writes the record `llmp plan` checks."""
    context = json.loads((REPO_ROOT / "cdk.json").read_text()).get("context", {})
    context.update(config="config/default.yaml", stage="dev")
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path), "CDK_CONTEXT_JSON": json.dumps(context)}
    env["PATH"] = os.pathsep.join([str(REPO_ROOT / "node_modules" / ".bin"), env["PATH"]])

    done = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stderr
    assert synth_record.read(tmp_path) == {
        "config": "config/default.yaml",
        "config_sha256": synth_record.config_digest(REPO_ROOT / "config" / "default.yaml"),
    }


# --- every command in a pipe: exactly one JSON document on stdout ---------------------------------------------------

# An invocation of each registered command against the deployed dev stage (moto); success or failure, stdout must be
# one JSON document. A new command needs a line here.
PIPED = {
    "status": ["status"],
    "upload-data": ["upload-data", "{data}"],
    "data ls": ["data", "ls"],
    "data rm": ["data", "rm", "train.jsonl", "--yes"],
    "stage-weights": ["stage-weights", "--no-follow"],
    "finetune": ["finetune", "--no-follow", "--param", "MaxSteps=10"],
    "follow": ["follow"],
    "approve": ["approve", "1", "-m", "reviewed", "--yes"],
    "reject": ["reject", "1", "-m", "no", "--yes"],
    "invoke": ["invoke", "hi", "--no-stream"],
    "plan": ["plan", "--assembly", "{tmp}"],
    "completion": ["completion", "bash"],
    "logs": ["logs", "--endpoint"],
}


def test_every_registered_command_has_a_piped_invocation():
    assert set(COMMANDS) <= set(PIPED)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_one_json_document_in_a_pipe(cli, deployed, command, tmp_path):
    register_package(deployed.group)
    (tmp_path / "train.jsonl").write_text('{"text": "hello"}\n')
    args = [arg.format(data=tmp_path / "train.jsonl", tmp=tmp_path) for arg in PIPED[command]]

    result = cli(*args, "--output", "json")  # CliRunner's streams are not terminals: a pipe

    document = json.loads(result.stdout)  # exactly one document: json.loads refuses anything after it
    assert isinstance(document, dict)
    if result.exit_code != 0:
        assert document["exit_status"] == result.exit_code, result.stderr
