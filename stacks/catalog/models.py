"""The language models this platform trains and serves, the shape facts sizing needs, and where their weights come
from.

Figures are from each model's Hugging Face config (layers, hidden size, heads, context, vocabulary) and its model
card (parameter count). `deepspeed_kernels` says whether DeepSpeed has a kernel-injection policy for the
architecture (research/lmi_serving.md §5).

A model's weights come from its Hugging Face repository (`hf_id`), or from one of its pre-sharded DeepSpeed
inference checkpoints (`checkpoints`), staged once into the models bucket (`StagedWeights`).
"""

from __future__ import annotations

from dataclasses import dataclass

# The revision the staging pipeline copies unless a run pins another (a branch, tag or commit).
DEFAULT_REVISION = "main"


@dataclass(frozen=True)
class DeepSpeedCheckpoint:
    """A pre-sharded DeepSpeed inference checkpoint of a model: `ds_inference_config.json` at the top of the
    repository lists the tensor-parallel shards (`tp_<rank>_<part>.pt`) and the rest (`non-tp.pt`: the embeddings and
    final norms), with `tp_size` and `dtype` (DeepSpeed's own format, written by init_inference's
    save_mp_checkpoint_path). The model is built on the meta device and each rank reads only its own shards, so no
    rank materializes the whole model in host memory. The weights are stored already in `dtype` (int8: quantized)
    and split for exactly `tensor_parallel_degree` ranks: it is served with that degree and dtype, or not at all.
    """

    name: str  # what a config names it by (serving.weights.checkpoint)
    hf_id: str
    revision: str  # the commit staged by default
    dtype: str  # the weights as stored, in the config's terms: int8, fp16
    tensor_parallel_degree: int


@dataclass(frozen=True)
class StagedWeights:
    """One repository the staging pipeline copies, and the name of its prefix in the models bucket
    (pretrained/<name>/), which the training pipeline or the endpoint reads."""

    name: str
    hf_id: str
    revision: str
    deepspeed: DeepSpeedCheckpoint | None = None  # None: a Hugging Face model folder


@dataclass(frozen=True)
class Model:
    name: str
    hf_id: str  # where the pretrained weights come from, once, when they are staged in S3
    architecture: str  # Hugging Face model_type
    parameters: int
    layers: int
    hidden_size: int
    attention_heads: int
    context_tokens: int
    vocab_size: int
    deepspeed_kernels: bool
    checkpoints: tuple[DeepSpeedCheckpoint, ...] = ()

    @property
    def billions(self) -> float:
        return self.parameters / 1e9

    @property
    def embedding_parameters(self) -> int:
        """The token embedding (tied with the LM head in BLOOM): what a DeepSpeed checkpoint keeps out of the
        tensor-parallel shards, unquantized."""
        return self.vocab_size * self.hidden_size

    def checkpoint(self, name: str) -> DeepSpeedCheckpoint:
        """The pre-sharded checkpoint `name`; a KeyError that lists this model's checkpoints otherwise."""
        for checkpoint in self.checkpoints:
            if checkpoint.name == name:
                return checkpoint
        known = ", ".join(c.name for c in self.checkpoints) or "none"
        raise KeyError(f"{self.name} has no pre-sharded checkpoint {name!r}; its checkpoints: {known}")

    def staged(self, checkpoint: str | None = None) -> StagedWeights:
        """What staging copies for this model: its Hugging Face weights into pretrained/<model>/, or a pre-sharded
        checkpoint into pretrained/<model>-<checkpoint>/ (a sibling prefix: a download of one never includes the
        other)."""
        if checkpoint is None:
            return StagedWeights(self.name, self.hf_id, DEFAULT_REVISION)
        found = self.checkpoint(checkpoint)
        return StagedWeights(f"{self.name}-{found.name}", found.hf_id, found.revision, found)


# BLOOM-176B as DeepSpeed published it for 8-way tensor parallelism. The int8 commit is the one the AWS LMI
# reference staged (amazon-sagemaker-examples@f8f8b5889:inference/nlp/realtime/llm/bloom_176b/
# djl_deepspeed_deploy.ipynb); both model cards: "the tensors are split into 8 shards to target 8 GPUs".
BLOOM_CHECKPOINTS = (
    DeepSpeedCheckpoint(
        "deepspeed-int8-tp8",
        "microsoft/bloom-deepspeed-inference-int8",
        "aa00a6626f6484a2eef68e06d1e089e4e32aa571",
        dtype="int8",
        tensor_parallel_degree=8,
    ),
    DeepSpeedCheckpoint(
        "deepspeed-fp16-tp8",
        "microsoft/bloom-deepspeed-inference-fp16",
        DEFAULT_REVISION,
        dtype="fp16",
        tensor_parallel_degree=8,
    ),
)

# fmt: off
MODELS: dict[str, Model] = {
    m.name: m
    for m in [
        Model("gpt-j-6b", "EleutherAI/gpt-j-6b", "gptj", 6_053_381_344, 28, 4096, 16, 2048, 50400, True),
        Model("gpt-neox-20b", "EleutherAI/gpt-neox-20b", "gpt_neox", 20_554_567_680, 44, 6144, 64, 2048, 50432, True),
        Model("opt-30b", "facebook/opt-30b", "opt", 29_974_865_920, 48, 7168, 56, 2048, 50272, True),
        Model("bloom-176b", "bigscience/bloom", "bloom", 176_247_271_424, 70, 14336, 112, 2048, 250880, True,
              BLOOM_CHECKPOINTS),
    ]
}
# fmt: on


def model(name: str) -> Model:
    """The catalog entry for `name`; a KeyError that lists the known models otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a known model; known: {', '.join(MODELS)}") from None
