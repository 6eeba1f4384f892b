"""Run the Train step of a synthesized pipeline on this machine, through SageMaker's own training toolkit.

    make local-train [STAGE=dev] [CONFIG=...]           # synthesizes first
    python -m local.train_step --assembly cdk.out --stage dev --work-dir .local-train

It takes the stage's fine-tuning pipeline definition from the cloud assembly, lays out the training container's
/opt/ml tree from its Train step (hyperparameters.json, inputdataconfig.json, resourceconfig.json, one folder per
channel) and runs `sagemaker-training` (the toolkit the training containers run) against it, on CPU, with a tiny
GPT-J and a tiny dataset. That shows the definition, the packaged code and the script agree: the toolkit turns every
hyperparameter the pipeline passes into flags train.py accepts, the channels are where the script looks, and the
model lands in the model directory.

What differs from SageMaker, and is printed when it runs:
- the code archive is built here from training/ (the same deterministic archive the deploy builds) and passed as
  a local path instead of its S3 key;
- no MPI, no SMP library and no GPU: sagemaker_mpi_enabled=false, backend=torch, fp16/bf16 off;
- one host called localhost (SageMaker's are algo-1, algo-2, ...); the checkpoint directory is under the work
  directory instead of /opt/ml/checkpoints;
- the pipeline parameters are the tiny run's (MaxSteps, TrainBatchSize), as a pipeline run would override them;
- training/requirements.txt (the hashed lock for the images' Pythons 3.9 and 3.11) is not installed: this
  virtualenv already has what the containers lack, at the suite's versions. Synth refuses a file pip would not
  install in hash-checking mode, and tests/training/test_requirements_lock.py runs the toolkit's own install.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINING_DIR = REPO_ROOT / "training"
TRAIN_STEP = "Train"
# The toolkit entry point with one change: it does not pip-install the code's requirements.txt into this venv.
TOOLKIT = (
    "import sagemaker_training.modules as modules\n"
    "modules.install_requirements = lambda *a, **k: print('local run: requirements.txt not installed', flush=True)\n"
    "from sagemaker_training.cli.train import main\n"
    "main()\n"
)


class LocalRunError(RuntimeError):
    """The step did not run or did not produce what the pipeline expects."""


def finetune_definition(assembly: Path, stage: str) -> dict[str, Any]:
    """The fine-tuning pipeline's definition (placeholders left in) from a synthesized stage."""
    from generators.plan import AssemblyError, stage_stacks

    try:
        stacks = stage_stacks(assembly, stage)
    except AssemblyError as err:
        raise LocalRunError(str(err)) from None
    for _, template in stacks:
        for resource in template.get("Resources", {}).values():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::SageMaker::Pipeline" and props.get("PipelineName", "").endswith("-finetune"):
                body = props["PipelineDefinition"]["PipelineDefinitionBody"]
                return json.loads(body["Fn::Sub"][0] if isinstance(body, dict) else body)
    raise LocalRunError(f"stage {stage!r} in {assembly} has no fine-tuning pipeline; run `make synth` first")


def first_stage(assembly: Path) -> str:
    """The first stage of the assembly (stages are synthesized in promotion order)."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    for artifact in manifest["artifacts"].values():
        if artifact["type"] == "cdk:cloud-assembly":
            return artifact["properties"]["displayName"]
    raise LocalRunError(f"{assembly} holds no synthesized stage; run `make synth` first")


def train_step(definition: dict[str, Any]) -> dict[str, Any]:
    for step in definition["Steps"]:
        if step["Name"] == TRAIN_STEP:
            return step["Arguments"]
    raise LocalRunError(f"the pipeline has no step named {TRAIN_STEP!r}")


def resolve(value: Any, parameters: dict[str, Any]) -> Any:
    """A pipeline expression with parameters filled in ({"Get": "Parameters.X"}, {"Std:Join": ...})."""
    if isinstance(value, dict) and "Get" in value:
        name = value["Get"]
        if not name.startswith("Parameters."):
            raise LocalRunError(f"{name} is only known inside a pipeline run")
        return parameters[name.removeprefix("Parameters.")]
    if isinstance(value, dict) and "Std:Join" in value:
        join = value["Std:Join"]
        return join["On"].join(str(resolve(v, parameters)) for v in join["Values"])
    return value


def build_code_archive(path: Path) -> Path:
    """training/ as the deploy packages it (infrastructure/constructs/code_package/runtime/deterministic_archive.py)."""
    sys.path.insert(0, str(REPO_ROOT / "infrastructure" / "constructs" / "code_package" / "runtime"))
    from deterministic_archive import members_from_directory, write_archive

    with path.open("wb") as out:
        write_archive(members_from_directory(TRAINING_DIR), out)
    return path


def prepare_tiny_inputs(work: Path) -> dict[str, Path]:
    """A tiny GPT-J (the `model` channel) and packed blocks from prepare_data.py (the `train` and `test` channels)."""
    from local import tiny

    model_dir = tiny.save_tiny_model(work / "inputs" / "model", arch="gptj")
    raw = work / "inputs" / "raw"
    raw.mkdir(parents=True)
    with (raw / "sentences.jsonl").open("w") as f:
        f.writelines(json.dumps({"sentence": s}) + "\n" for s in tiny.sentences(600))
    prepared = work / "inputs" / "prepared"
    subprocess.run(
        [sys.executable, "prepare_data.py", "--input_dir", str(raw), "--tokenizer_dir", str(model_dir),
         "--block_size", "32", "--train_output_dir", str(prepared / "train"),
         "--validation_output_dir", str(prepared / "validation")],
        cwd=TRAINING_DIR, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return {"train": prepared / "train", "test": prepared / "validation", "model": model_dir}


def lay_out(
    base: Path, args: dict[str, Any], parameters: dict[str, Any], channels: dict[str, Path], archive: Path, work: Path
) -> dict[str, Any]:
    """Write /opt/ml (under `base`) as SageMaker would for this step; return the hyperparameters written."""
    hyperparameters = {k: str(resolve(v, parameters)) for k, v in args["HyperParameters"].items()}
    local_changes = {
        "sagemaker_submit_directory": json.dumps(str(archive)),
        "sagemaker_mpi_enabled": "false",
        "backend": json.dumps("torch"),
        "fp16": "false",
        "bf16": "false",
        "checkpoint_dir": json.dumps(str(work / "checkpoints")),
    }
    for key, value in local_changes.items():
        print(f"local run: {key}={value} (pipeline: {hyperparameters.get(key, '-')})", flush=True)
    hyperparameters.update(local_changes)

    config = base / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters, indent=2))
    wanted = {c["ChannelName"]: c for c in args["InputDataConfig"]}
    if set(wanted) != set(channels):
        raise LocalRunError(f"the Train step's channels are {sorted(wanted)}; this run provides {sorted(channels)}")
    (config / "inputdataconfig.json").write_text(
        json.dumps(
            {
                name: {
                    "TrainingInputMode": args["AlgorithmSpecification"]["TrainingInputMode"],
                    "S3DistributionType": c["DataSource"]["S3DataSource"]["S3DataDistributionType"],
                    "RecordWrapperType": "None",
                }
                for name, c in wanted.items()
            }
        )
    )
    # One host, named so that it resolves here (the toolkit waits until every host name resolves).
    (config / "resourceconfig.json").write_text(
        json.dumps({"current_host": "localhost", "hosts": ["localhost"], "network_interface_name": "lo"})
    )
    for name, source in channels.items():
        shutil.copytree(source, base / "input" / "data" / name)
    for folder in ("model", "output/data", "code"):
        (base / folder).mkdir(parents=True, exist_ok=True)
    return hyperparameters


def run(assembly: Path, stage: str, work: Path, *, max_steps: int, batch_size: int) -> Path:
    """Run the stage's Train step locally; return the model directory it wrote."""
    work = work.resolve()  # scripts below run from training/
    definition = finetune_definition(assembly, stage)
    args = train_step(definition)
    parameters = {p["Name"]: p.get("DefaultValue") for p in definition["Parameters"]}
    parameters.update({"MaxSteps": max_steps, "TrainBatchSize": batch_size})
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    print(
        f"local run: {stage}'s {TRAIN_STEP} step, image {args['AlgorithmSpecification']['TrainingImage']}", flush=True
    )
    channels = prepare_tiny_inputs(work)
    archive = build_code_archive(work / "sourcedir.tar.gz")
    base = work / "opt" / "ml"
    lay_out(base, args, parameters, channels, archive, work)

    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(base), "PYTHONUNBUFFERED": "1"}
    env.pop("SAGEMAKER_TRAINING_MODULE", None)  # the base toolkit runs the user entry point itself
    result = subprocess.run([sys.executable, "-c", TOOLKIT], env=env, check=False)
    failure = base / "output" / "failure"
    if result.returncode != 0 or failure.exists():
        reason = failure.read_text() if failure.exists() else f"exit status {result.returncode}"
        raise LocalRunError(f"the Train step failed: {reason}")
    model_dir = base / "model"
    missing = [f for f in ("config.json", "model.safetensors") if not (model_dir / f).exists()]
    if missing:
        raise LocalRunError(f"the Train step finished but {model_dir} lacks {', '.join(missing)}")
    print(f"local run: done; model in {model_dir}, metrics in {base / 'output' / 'data'}", flush=True)
    return model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assembly", type=Path, default=REPO_ROOT / "cdk.out", help="synthesized cloud assembly")
    parser.add_argument("--stage", default=None, help="whose pipeline to run (default: the first stage)")
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / ".local-train", help="replaced on each run")
    parser.add_argument("--max-steps", type=int, default=30, help="the MaxSteps pipeline parameter")
    parser.add_argument("--batch-size", type=int, default=8, help="the TrainBatchSize pipeline parameter")
    args = parser.parse_args()
    try:
        stage = args.stage or first_stage(args.assembly)
        run(args.assembly, stage, args.work_dir, max_steps=args.max_steps, batch_size=args.batch_size)
    except LocalRunError as error:
        raise SystemExit(f"local.train_step: {error}") from None


if __name__ == "__main__":
    main()
