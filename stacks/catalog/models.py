"""The language models this platform trains and serves, the shape facts sizing needs, and where their weights come
from.

Figures are from each model's Hugging Face config (layers, hidden size, intermediate size, attention and key/value
heads, context, vocabulary, tied embeddings) and its model card (parameter count, license, whether the repository is
gated). `deepspeed_kernels` says whether DeepSpeed 0.12.6 (LMI 0.27.0) has a kernel-injection policy that fits the
architecture (microsoft/DeepSpeed@v0.12.6 deepspeed/module_inject/containers/); `min_transformers` is the first
transformers release that loads its config, which decides whether LMI 0.27.0's transformers can load it at all.

A model's weights come from its Hugging Face repository (`hf_id`), or from one of its pre-sharded DeepSpeed
inference checkpoints (`checkpoints`), staged into the models bucket at one exact commit (`StagedWeights`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stacks import layout

# A revision the platform stages and serves: a full commit. Branches and tags move, and the hub serves refs/pr/<n>,
# which anyone can push to; only a commit names fixed files.
COMMIT_PATTERN = r"^[0-9a-f]{40}$"
# With no commit pinned (in the config or below), staging follows this branch: it resolves it to its commit when it
# runs, stages that commit, and records which one it was (StagedWeights.record_key) for the readers.
FOLLOWED_BRANCH = "main"
# Weights staged under a config that accepts PyTorch pickles live under their own name, so a reader that does not
# accept them can never be pointed at a staging that holds them, even after the config stops allowing them.
PICKLE_SUFFIX = "-pickle"
# The transformers the LMI 0.27.0 DeepSpeed image ships (djl-serving@0.27.0-dlc:serving/docker/deepspeed.Dockerfile,
# ARG transformers_version=4.39.0): a model whose config needs a later release does not load there.
LMI_DEEPSPEED_TRANSFORMERS = "4.39.0"


def version_tuple(version: str) -> tuple[int, ...]:
    """'4.43.0' -> (4, 43, 0): release numbers only, compared as numbers."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def is_commit(revision: str | None) -> bool:
    return revision is not None and re.fullmatch(COMMIT_PATTERN, revision) is not None


def check_commit(revision: str) -> str:
    """A config's revision, or a ValueError that says why only a full commit will do."""
    if not is_commit(revision):
        raise ValueError(
            "a revision is a full commit, 40 lowercase hex digits (the hub's sha): a branch or tag moves, "
            f"refs/pr/<n> serves whatever anyone pushed, a short commit can match another; leave it out to follow "
            f"{FOLLOWED_BRANCH}, whose commit each staging records"
        )
    return revision


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
    revision: str | None  # the commit staged unless the config pins another; None: main's, when staged
    dtype: str  # the weights as stored, in the config's terms: int8, fp16
    tensor_parallel_degree: int
    # The shards are torch.save pickles (.pt), which run code when loaded: serving one needs weights.allow_pickle.
    pickled: bool = True


@dataclass(frozen=True)
class StagedWeights:
    """One repository the staging pipeline copies, at one commit, into the models bucket, and what its readers (the
    training pipeline, the endpoint) read:

        pretrained/<name>/<commit>/   the files of that commit (never rewritten by a staging of another commit)
        pretrained/<name>/<commit>.json   its record, written after the last file: the staging is complete
        pretrained/<name>/main.json   when following main: the record of the commit main had when last staged

    A reader reads a record first and then only that commit's files, so a half-finished staging is never read. With
    `revision` pinned, readers read that commit's record; without, main's, which names the commit.
    """

    name: str
    hf_id: str
    revision: str | None  # a pinned commit, or None: follow FOLLOWED_BRANCH
    allow_pickle: bool = False
    deepspeed: DeepSpeedCheckpoint | None = None  # None: a Hugging Face model folder
    gated: bool = False  # the hub serves it only with the token of an account granted access

    def __post_init__(self) -> None:
        if self.revision is not None and not is_commit(self.revision):
            raise ValueError(f"{self.hf_id}: revision {self.revision!r} is not a full 40-hex commit")
        if self.deepspeed is not None and self.deepspeed.pickled and not self.allow_pickle:
            raise ValueError(f"{self.hf_id}: the shards of {self.deepspeed.name} are PyTorch pickles")

    @property
    def pinned(self) -> bool:
        return self.revision is not None

    @property
    def staged_revision(self) -> str:
        """What the staging step is asked for: the pinned commit, or the branch it follows."""
        return self.revision or FOLLOWED_BRANCH

    @property
    def prefix(self) -> str:
        return f"{layout.PRETRAINED}{self.name}/"

    def files_prefix(self, commit: str) -> str:
        return f"{self.prefix}{commit}/"

    @property
    def record_key(self) -> str:
        """The record a reader reads first: the pinned commit's, or the followed branch's (naming its commit)."""
        return f"{self.prefix}{self.staged_revision}.json"

    @property
    def read_prefix(self) -> str:
        """The narrowest prefix a reader needs: the pinned commit's files, or every commit's when following main."""
        return self.files_prefix(self.revision) if self.revision else self.prefix

    def describe(self) -> str:
        at = f"commit {self.revision}" if self.revision else f"the commit {FOLLOWED_BRANCH} had when last staged"
        return f"{self.hf_id} at {at}"


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
    # num_key_value_heads: fewer than attention_heads with grouped-query attention; None: multi-head (as many).
    key_value_heads: int | None = None
    intermediate_size: int | None = None  # the MLP's inner width; None where the catalog does not need it
    tied_embeddings: bool = False  # the LM head shares the token embedding's weights (tie_word_embeddings)
    # Gated on the hub: downloading needs a token of an account the owner granted access (the staging job's secret).
    gated: bool = False
    license: str = ""  # the model card's license id
    min_transformers: str = "4.21.0"  # the first transformers release that loads the config (model_type, rope_scaling)

    def __post_init__(self) -> None:
        kv = self.kv_heads
        if self.attention_heads % kv or self.hidden_size % self.attention_heads:
            raise ValueError(
                f"{self.name}: {self.attention_heads} attention heads must be a multiple of its {kv} key/value heads "
                f"and divide its hidden size {self.hidden_size}"
            )

    @property
    def billions(self) -> float:
        return self.parameters / 1e9

    @property
    def kv_heads(self) -> int:
        """The key/value heads of each layer: what the KV cache holds, and what tensor parallelism splits."""
        return self.key_value_heads or self.attention_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.attention_heads

    def loads_with_transformers(self, version: str) -> bool:
        return version_tuple(version) >= version_tuple(self.min_transformers)

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

    def staged(
        self, checkpoint: str | None = None, *, revision: str | None = None, allow_pickle: bool = False
    ) -> StagedWeights:
        """What staging copies for this model: its Hugging Face weights into pretrained/<model>/ (-pickle when the
        config accepts pickles), or a pre-sharded checkpoint into pretrained/<model>-<checkpoint>/ (a sibling prefix:
        a download of one never includes the other), at `revision` if pinned, else the catalog's commit, else main's
        commit when staged."""
        if checkpoint is None:
            name = self.name + (PICKLE_SUFFIX if allow_pickle else "")
            return StagedWeights(name, self.hf_id, revision, allow_pickle, gated=self.gated)
        found = self.checkpoint(checkpoint)
        return StagedWeights(f"{self.name}-{found.name}", found.hf_id, revision or found.revision, allow_pickle, found)


# BLOOM-176B as DeepSpeed published it for 8-way tensor parallelism. The int8 commit is the one the AWS LMI
# reference staged (amazon-sagemaker-examples@f8f8b5889:inference/nlp/realtime/llm/bloom_176b/
# djl_deepspeed_deploy.ipynb; still in generative_ai/sm-djl_deepspeed_bloom_176b_deploy.ipynb at 2d519b52c); both
# model cards: "the tensors are split into 8 shards to target 8 GPUs". No source pins a commit of the fp16 one (nor of
# the Hugging Face repositories below): they follow main unless the config pins one (weights.revision,
# training.pretrained.revision), and what is served is still one exact commit, recorded when staged.
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
        None,
        dtype="fp16",
        tensor_parallel_degree=8,
    ),
)

# The current open models, with grouped-query attention. Figures from each repository's config.json, as vendored
# verbatim in mlc-ai/mlc-llm@01ced331:python/mlc_llm/model/model_preset.py (presets llama3_1_8b, llama3_1_70b,
# mistral_7b_v03; its qwen2_7b preset has Qwen2.5-7B's shape too). For Qwen2.5 the figures are those of the
# Qwen2.5-7B-Instruct and Qwen2.5-72B-Instruct config.json (transformers_version 4.43.1), which fine-tuning leaves
# unchanged from the base models'. Parameters: each model built from those figures on the meta device with
# transformers, summed; they reproduce the cards' 8.03B, 70.6B, 7.25B, 7.61B and 72.7B, and
# tests/stacks/test_model_catalog.py recomputes them from the figures. Context: the config's max_position_embeddings;
# for Qwen2.5 the 32,768 tokens it was trained on (QwenLM/Qwen2.5@905ca20:docs/source/getting_started/concepts.md:
# 131,072 only with YaRN, which neither engine turns on by itself).
# Gated: the Llama 3.1 repositories ask each account to accept the Llama 3.1 Community License; mistralai gated its
# repositories in May 2024 (huggingface/alignment-handbook#166, TransformerLens#769); Qwen's are open.
# min_transformers: rope_scaling {"rope_type": "llama3"} needs transformers 4.43.0 (Llama 3.1's release; 4.39's
# LlamaConfig refuses any rope_scaling but {type, factor}); model_type mistral arrived in 4.34.0, qwen2 in 4.37.0.
# None of them has a DeepSpeed 0.12.6 kernel-injection policy that fits: its Llama container concatenates q, k and v
# as if every layer had as many key/value heads as query heads (module_inject/containers/llama.py, get_hidden_heads
# and attention @v0.12.6), and there is none for Mistral or Qwen2.
# fmt: off
CURRENT_MODELS = (
    Model("llama-3.1-8b", "meta-llama/Llama-3.1-8B", "llama", 8_030_261_248, 32, 4096, 32, 131072, 128256, False,
          key_value_heads=8, intermediate_size=14336, gated=True, license="llama3.1", min_transformers="4.43.0"),
    Model("llama-3.1-70b", "meta-llama/Llama-3.1-70B", "llama", 70_553_706_496, 80, 8192, 64, 131072, 128256, False,
          key_value_heads=8, intermediate_size=28672, gated=True, license="llama3.1", min_transformers="4.43.0"),
    Model("mistral-7b-v0.3", "mistralai/Mistral-7B-v0.3", "mistral", 7_248_023_552, 32, 4096, 32, 32768, 32768, False,
          key_value_heads=8, intermediate_size=14336, gated=True, license="apache-2.0", min_transformers="4.34.0"),
    Model("qwen2.5-7b", "Qwen/Qwen2.5-7B", "qwen2", 7_615_616_512, 28, 3584, 28, 32768, 152064, False,
          key_value_heads=4, intermediate_size=18944, license="apache-2.0", min_transformers="4.37.0"),
    # "All our open-source models, except for the 3B and 72B variants, are licensed under Apache 2.0" (README).
    Model("qwen2.5-72b", "Qwen/Qwen2.5-72B", "qwen2", 72_706_203_648, 80, 8192, 64, 32768, 152064, False,
          key_value_heads=8, intermediate_size=29568, license="qwen", min_transformers="4.37.0"),
)

MODELS: dict[str, Model] = {
    m.name: m
    for m in [
        Model("gpt-j-6b", "EleutherAI/gpt-j-6b", "gptj", 6_053_381_344, 28, 4096, 16, 2048, 50400, True,
              license="apache-2.0"),
        Model("gpt-neox-20b", "EleutherAI/gpt-neox-20b", "gpt_neox", 20_554_567_680, 44, 6144, 64, 2048, 50432, True,
              license="apache-2.0"),
        Model("opt-30b", "facebook/opt-30b", "opt", 29_974_865_920, 48, 7168, 56, 2048, 50272, True,
              tied_embeddings=True, license="other"),
        Model("bloom-176b", "bigscience/bloom", "bloom", 176_247_271_424, 70, 14336, 112, 2048, 250880, True,
              BLOOM_CHECKPOINTS, tied_embeddings=True, license="bigscience-bloom-rail-1.0"),
        *CURRENT_MODELS,
    ]
}
# fmt: on


def model(name: str) -> Model:
    """The catalog entry for `name`; a KeyError that lists the known models otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a known model; known: {', '.join(MODELS)}") from None
