"""What each model architecture (a Hugging Face `model_type`) can do here: the one place these facts are written.

A catalog model (core/catalog/models.py) names its architecture and takes these traits from it. The code that runs
inside SageMaker's containers cannot import core/, so `python -m generators.architectures --write` (make docs)
writes the records as JSON into each container folder (ARCHITECTURE_FILES), which training/finetune/adapters.py and
layout.py, model_artifacts/deepspeed/lmi_loading.py and local/tiny.py read; a test fails when a copy is stale.

Sources of each fact, kept with the fact:

- `lora_targets`: the linear layers of the architecture's transformer block, by the attribute names PEFT matches on
  (the last part of each module's name); the default a LoRA run adapts: attention and MLP projections, as QLoRA
  (Dettmers et al. 2023) found that adapting every linear layer is what matches full fine-tuning. Names from each
  transformers modeling file: modeling_llama.py (LlamaAttention q/k/v/o_proj, LlamaMLP gate/up/down_proj), which
  Mistral and Qwen2 copy; modeling_gptj.py (q/k/v/out_proj, fc_in/fc_out); modeling_gpt_neox.py and
  modeling_bloom.py (query_key_value, dense, dense_h_to_4h, dense_4h_to_h); modeling_opt.py (q/k/v/out_proj,
  fc1/fc2). Empty: no default list (a run names its modules).
- `vllm_lora`: vLLM's model class implements SupportsLoRA (vllm/model_executor/models: LlamaForCausalLM,
  MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM); GPTJForCausalLM, OPTForCausalLM, GPTNeoXForCausalLM,
  BloomForCausalLM and GPT2LMHeadModel do not, vLLM has no GPT-Neo, and vLLM refuses enable_lora for them.
- `smp_v1_tensor_parallel`: SMP v1 has a tensor-parallel module for it that this pipeline translates back to HF names
  for the final model: GPT-J, the reference job. SMP v1 also distributes GPT-2, GPT-Neo and GPT-NeoX, but not OPT or
  BLOOM, which it would silently train without tensor parallelism.
- `smp_v2_tensor_parallel`: SMP v2 can tensor-parallelize it (AWS doc "Tensor parallelism" for SMP v2). GPT-J is not
  among them.
- `deepspeed_kernels`: a kernel-injection policy in deepspeed/module_inject/replace_policy.py, 0.12.6 and 0.19.x,
  that fits. Llama's (module_inject/containers/llama.py @v0.12.6) does not fit the catalog's grouped-query models:
  it concatenates q, k and v as if every layer had as many key/value heads as query heads (get_hidden_heads and
  attention), and there is none for Mistral, Qwen2 or Mixtral.
- `deepspeed_meta_checkpoint`: the kernel-injection container loads a checkpoint into a meta model
  (MetaTensorContainer in deepspeed/module_inject/containers/{bloom,gptj,gptneo,gptneox,opt}.py @ v0.12.6). GPT-2's
  does not: it asserts "Meta tensors are not supported for this model currently." (containers/base.py,
  check_meta_tensor_support).
- `deepspeed_kernels_max_transformers`: deepspeed >= 0.16.3 raises for BLOOM kernel injection with transformers
  > 4.43.4 (BLOOM's modules changed there).
- `min_transformers`: the first transformers release whose config class loads the model_type, as its release notes
  list the model among the "new model additions" (github.com/huggingface/transformers/releases): llama 4.28.0,
  mistral 4.34.0, mixtral 4.36.0, qwen2 4.37.0; the older architectures load in every release the platform runs, from
  SMP v1's pinned 4.21.0 on, which is what they record. A model whose config needs more (Llama 3.1's rope_scaling)
  says so itself (Model.config_min_transformers).
- `tiny_config`: local/tiny.py's small config of the real architecture (2 layers, hidden size 64, 4 heads), as
  `transformers.AutoConfig.for_model(model_type, **tiny_config)` builds it, so the tests' code paths are the ones
  the full-size models take; `tiny_context_key` is the attribute its context window goes in (None: BLOOM's ALiBi
  has no position limit). None: no tiny model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
# Each container folder is packaged into S3 on its own, so each holds its own copy of the generated records.
ARCHITECTURE_FILES = (
    REPO_ROOT / "training" / "finetune" / "architectures.json",
    REPO_ROOT / "model_artifacts" / "deepspeed" / "architectures.json",
)
# The transformers release every architecture without a later need records: SMP v1's pin, the oldest here.
OLDEST_TRANSFORMERS = "4.21.0"

_LLAMA_LIKE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_FUSED_QKV = ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h")


@dataclass(frozen=True)
class Architecture:
    model_type: str  # Hugging Face config's model_type
    lora_targets: tuple[str, ...]
    vllm_lora: bool
    smp_v1_tensor_parallel: bool
    smp_v2_tensor_parallel: bool
    deepspeed_kernels: bool
    deepspeed_meta_checkpoint: bool = False
    deepspeed_kernels_max_transformers: str | None = None  # None: no upper limit known
    min_transformers: str = OLDEST_TRANSFORMERS
    # A dict is not hashable: left out of the record's hash, which the other fields decide.
    tiny_config: dict[str, Any] | None = field(default=None, hash=False)
    tiny_context_key: str | None = None

    def __post_init__(self) -> None:
        if self.deepspeed_meta_checkpoint and not self.deepspeed_kernels:
            raise ValueError(f"{self.model_type}: meta-device checkpoints load only with kernel injection")

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


ARCHITECTURE_RECORDS = (
    Architecture(
        model_type="gptj",
        lora_targets=("q_proj", "k_proj", "v_proj", "out_proj", "fc_in", "fc_out"),
        vllm_lora=False,
        smp_v1_tensor_parallel=True,
        smp_v2_tensor_parallel=False,
        deepspeed_kernels=True,
        deepspeed_meta_checkpoint=True,
        tiny_config={"n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8},
        tiny_context_key="n_positions",
    ),
    Architecture(
        model_type="opt",
        lora_targets=("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"),
        vllm_lora=False,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=False,
        deepspeed_kernels=True,
        deepspeed_meta_checkpoint=True,
        tiny_config={
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "ffn_dim": 128,
            "word_embed_proj_dim": 64,
            "pad_token_id": 1,
        },
        tiny_context_key="max_position_embeddings",
    ),
    Architecture(
        model_type="bloom",
        lora_targets=_FUSED_QKV,
        vllm_lora=False,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=False,
        deepspeed_kernels=True,
        deepspeed_meta_checkpoint=True,
        deepspeed_kernels_max_transformers="4.43.4",
        tiny_config={"n_layer": 2, "hidden_size": 64, "n_head": 4},
    ),
    Architecture(
        model_type="gpt_neox",
        lora_targets=_FUSED_QKV,
        vllm_lora=False,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=True,
        deepspeed_kernels=True,
        deepspeed_meta_checkpoint=True,
        tiny_config={"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128},
        tiny_context_key="max_position_embeddings",
    ),
    Architecture(
        model_type="gpt2",
        lora_targets=(),
        vllm_lora=False,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=False,
        deepspeed_kernels=True,
        tiny_config={"n_layer": 2, "n_embd": 64, "n_head": 4},
        tiny_context_key="n_positions",
    ),
    Architecture(
        model_type="gpt_neo",
        lora_targets=(),
        vllm_lora=False,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=False,
        deepspeed_kernels=True,
        deepspeed_meta_checkpoint=True,
    ),
    Architecture(
        model_type="llama",
        lora_targets=_LLAMA_LIKE,
        vllm_lora=True,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=True,
        deepspeed_kernels=False,
        min_transformers="4.28.0",
    ),
    Architecture(
        model_type="mistral",
        lora_targets=_LLAMA_LIKE,
        vllm_lora=True,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=True,
        deepspeed_kernels=False,
        min_transformers="4.34.0",
    ),
    Architecture(
        model_type="qwen2",
        lora_targets=_LLAMA_LIKE,
        vllm_lora=True,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=False,
        deepspeed_kernels=False,
        min_transformers="4.37.0",
    ),
    Architecture(
        model_type="mixtral",
        lora_targets=(),
        vllm_lora=True,
        smp_v1_tensor_parallel=False,
        smp_v2_tensor_parallel=True,
        deepspeed_kernels=False,
        min_transformers="4.36.0",
    ),
)

ARCHITECTURES: dict[str, Architecture] = {record.model_type: record for record in ARCHITECTURE_RECORDS}


def architecture(model_type: str) -> Architecture:
    """The record of `model_type`; a KeyError that lists the known architectures otherwise."""
    try:
        return ARCHITECTURES[model_type]
    except KeyError:
        raise KeyError(f"{model_type!r} is not a known architecture; known: {', '.join(ARCHITECTURES)}") from None
