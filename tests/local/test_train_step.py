"""`make local-train`: the synthesized Train step, run through SageMaker's training toolkit on a tiny GPT-J."""

from __future__ import annotations

import json

import pytest

from local import train_step


@pytest.fixture(scope="module")
def local_run(assembly, tmp_path_factory):
    work = tmp_path_factory.mktemp("local-train")
    model_dir = train_step.run(assembly.outdir, "dev", work, max_steps=6, batch_size=4)
    return work / "opt" / "ml", model_dir


def test_the_synthesized_train_step_runs_through_the_toolkit_and_leaves_a_loadable_model(local_run):
    base, model_dir = local_run
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in model_dir.iterdir()}
    metrics = json.loads((base / "output" / "data" / "metrics.json").read_text())
    assert (metrics["final"]["step"], metrics["backend"]) == (6, "torch")
    assert metrics["final"]["val_perplexity"] > 1
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(model_dir).config.model_type == "gptj"


def test_hyperparameters_are_the_pipelines_except_the_printed_local_changes(assembly, local_run):
    base, _ = local_run
    pipeline = train_step.train_step(train_step.finetune_definition(assembly.outdir, "dev"))["HyperParameters"]
    written = json.loads((base / "input" / "config" / "hyperparameters.json").read_text())
    changed = {k for k in written if written[k] != pipeline.get(k)}
    assert changed == {
        "sagemaker_submit_directory", "sagemaker_mpi_enabled", "backend", "fp16", "checkpoint_dir",
        "max_steps", "train_batch_size", "lr",  # pipeline parameters, resolved
    }  # fmt: skip
    assert written["mp_parameters"] == pipeline["mp_parameters"]
    assert (written["max_steps"], written["train_batch_size"]) == ("6", "4")


def test_channels_are_the_train_steps(assembly, local_run):
    base, _ = local_run
    channels = json.loads((base / "input" / "config" / "inputdataconfig.json").read_text())
    pipeline = train_step.train_step(train_step.finetune_definition(assembly.outdir, "dev"))
    assert set(channels) == {c["ChannelName"] for c in pipeline["InputDataConfig"]} == {"train", "test", "model"}


def test_a_stage_without_a_pipeline_is_reported(assembly):
    with pytest.raises(train_step.LocalRunError, match="run `make synth` first"):
        train_step.finetune_definition(assembly.outdir, "qa")
