"""What the CLI reads from a deployed stage is what the stacks create: their names, their outputs, the pipelines'
parameters and steps; and `llmp plan` prints what `make synth` prints. Checked on the default config's assembly,
synthesized once per run (tests/conftest.py)."""

from __future__ import annotations

import json

import pytest

from cli import follow as following
from cli.aws import OUTPUTS, STACK_PARTS, stages
from cli.run_parameters import pipeline_parameters
from core.config import DEFAULT_CONFIG, load_config
from generators import plan as planning

CONFIG = load_config(DEFAULT_CONFIG)


def pipeline_definitions(template: dict) -> dict[str, dict]:
    """Pipeline name -> its definition, as CloudFormation receives it (the ${Name}s are Fn::Sub's, inside strings)."""
    found = {}
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::SageMaker::Pipeline":
            body = resource["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]
            text = body["Fn::Sub"][0] if isinstance(body, dict) else body
            found[resource["Properties"]["PipelineName"]] = json.loads(text)
    return found


@pytest.mark.parametrize("stage", list(CONFIG.stages))
def test_the_cli_finds_each_stack_by_the_name_the_stage_gives_it(assembly, stage):
    (target,) = stages(CONFIG, "config/default.yaml", stage)

    synthesized = [name for name, _ in planning.stage_stacks(assembly.outdir, stage)]

    assert sorted(target.stack_name(part) for part in STACK_PARTS) == synthesized


@pytest.mark.parametrize("part", STACK_PARTS)
def test_every_output_the_cli_reads_is_one_the_stack_has(assembly, part):
    template = assembly.template("dev", part.capitalize())

    assert set(OUTPUTS[part]) <= set(template["Outputs"])


def test_the_finetune_parameters_and_steps_the_cli_reads_are_in_the_synthesized_definition(assembly):
    training = assembly.template("dev", "Training")
    names = {o: training["Outputs"][o]["Value"] for o in ("FinetunePipelineName", "StagingPipelineName")}
    definitions = pipeline_definitions(training)

    finetune = json.dumps(definitions[names["FinetunePipelineName"]])
    assert pipeline_parameters(["MaxSteps=10", "LearningRate=2e-5", "InputData=s3://b/raw/x/"], finetune, "p") == {
        "MaxSteps": "10",
        "LearningRate": "2e-5",
        "InputData": "s3://b/raw/x/",
    }
    steps, on_path = following.definition_steps(finetune)
    assert steps[:3] == ["PrepareData", "Train", "Evaluate"]
    assert on_path == len(steps) - 1  # one branch of CheckPerplexity runs
    # The staging pipeline takes no parameters: stage-weights starts it with none.
    assert definitions[names["StagingPipelineName"]]["Parameters"] == []


def test_plan_prints_what_make_synth_prints(cli, assembly):
    result = cli("plan", "--assembly", str(assembly.outdir), "--config", str(DEFAULT_CONFIG))

    assert result.exit_code == 0, result.output
    assert result.stdout == planning.render(CONFIG, assembly.outdir)


def test_plan_json_lists_each_stage_stacks_with_their_resources(cli, assembly):
    result = cli(
        "plan", "--assembly", str(assembly.outdir), "--config", str(DEFAULT_CONFIG), "--stage", "prod", "--json"
    )

    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert list(plan["stages"]) == ["prod"]
    assert set(plan["stages"]["prod"]) == {
        "llm-platform-prod-storage",
        "llm-platform-prod-training",
        "llm-platform-prod-serving",
    }
    assert plan["text"].startswith("Plan for llm-platform: 1 stage(s)")


def test_plan_without_an_assembly_says_to_synthesize(cli, tmp_path):
    result = cli("plan", "--assembly", str(tmp_path))

    assert result.exit_code == 2
    assert (
        result.stderr.strip() == f"llmp: {tmp_path}: no cloud assembly here; run `make synth CONFIG={cli.config}` first"
    )
