"""One process of a multi-process SMP v2 LoRA job on CPU (gloo), started by test_training_lora_fsdp.py with the
environment torchrun gives each rank in the SMP v2 container (RANK, WORLD_SIZE, MASTER_ADDR, ...,
SM_HP_MP_PARAMETERS).

run_rank() installs the torch.sagemaker stand-in, runs train.py's run() in this process, and writes what this rank
saw to a JSON file: how often it read the pretrained weights, how many of the model's parameters were on the meta
device before the FSDP wrap, how many elements of the frozen base it held after it, and the stand-in's calls.

The processes are forked from a multiprocessing forkserver that has imported torch, transformers and peft once (the
PRELOAD list), instead of each rank importing them again: on 2 cores those imports are most of a tiny run's time.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (str(HERE), str(HERE.parents[1] / "training"), str(HERE.parents[1])):
    if path not in sys.path:
        sys.path.insert(0, path)

PRELOAD = ["torch", "torch.distributed.fsdp", "transformers", "peft", "accelerate", "safetensors.torch"]


def run_rank(environ: dict[str, str], arguments: list[str], observations: str, log: str, errors: str) -> None:
    """The process's entry point: stdout to `log`, stderr to `errors`; exit status 1 on an exception."""
    for stream, path in ((1, log), (2, errors)):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(descriptor, stream)
        os.close(descriptor)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115  (line-buffered, as PYTHONUNBUFFERED)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.update(environ)
    try:
        import torch

        # A rank of a tiny job needs no intra-op threads; and OpenMP's pool must not be used across the fork.
        torch.set_num_threads(1)
        _run(arguments, observations)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def _run(arguments: list[str], observations_path: str) -> None:
    import torch.distributed as dist
    import transformers
    from finetune import modeling
    from finetune.backends.lora_fsdp import LoraFsdpBackend
    from smp_standin_v2 import SmpV2
    from torch.distributed.fsdp import _init_utils
    from training_helpers import TRAINING_DIR, load_module

    tsm = SmpV2()
    sys.modules.update(tsm.modules())

    seen: dict = {"weight_reads": 0}
    auto = transformers.AutoModelForCausalLM
    from_pretrained, read_hf_weights = auto.from_pretrained, modeling.read_hf_weights

    def counting_from_pretrained(*args, **kwargs):
        seen["weight_reads"] += 1
        return from_pretrained(*args, **kwargs)

    def counting_read_hf_weights(*args, **kwargs):
        seen["weight_reads"] += 1
        return read_hf_weights(*args, **kwargs)

    auto.from_pretrained = counting_from_pretrained
    modeling.read_hf_weights = counting_read_hf_weights

    create_model, prepare = LoraFsdpBackend.create_model, LoraFsdpBackend.prepare

    def observed_create_model(self, build):
        model = create_model(self, build)
        frozen = [parameter for parameter in model.parameters() if not parameter.requires_grad]
        seen["frozen_parameters"] = len(frozen)
        seen["frozen_on_meta"] = sum(parameter.is_meta for parameter in frozen)
        seen["frozen_elements"] = sum(parameter.numel() for parameter in frozen)
        return model

    def observed_prepare(self, model, make_optimizer):
        wrapped, optimizer = prepare(self, model, make_optimizer)
        # FSDP's original parameters are views of this rank's shard once wrapped (use_orig_params).
        seen["local_frozen_elements"] = sum(p.numel() for p in self._fsdp.parameters() if not p.requires_grad)
        seen["optimizer_parameters"] = sum(len(group["params"]) for group in optimizer.param_groups)
        seen["trainable_parameters"] = sum(p.requires_grad for p in model.parameters())
        return wrapped, optimizer

    LoraFsdpBackend.create_model = observed_create_model
    LoraFsdpBackend.prepare = observed_prepare

    check_devices = _init_utils._check_module_states_for_sync_module_states

    def check_devices_on_gpus(module_states):
        # FSDP refuses sync_module_states over CPU tensors because NCCL cannot broadcast them; on GPUs it has moved
        # each unit to device_id by then. These ranks have only CPUs, and gloo broadcasts host tensors.
        if dist.get_backend() != "gloo":
            check_devices(module_states)

    _init_utils._check_module_states_for_sync_module_states = check_devices_on_gpus

    train = load_module("training_train_entry", TRAINING_DIR / "train.py")
    summary = train.run(arguments, os.environ)
    seen.update(summary=summary, calls=tsm.names(), materialized=tsm.materialized)
    Path(observations_path).write_text(json.dumps(seen, default=str))
