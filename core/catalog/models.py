"""The language models this platform trains and serves, the shape facts sizing needs, and where their weights come
from.

Figures are from each model's Hugging Face config (layers, hidden size, intermediate size, attention and key/value
heads, context, vocabulary, tied embeddings) and its model card (parameter count, license, whether the repository is
gated). What its architecture can do (DeepSpeed kernel injection, LoRA targets, tensor parallelism, the transformers
release that loads it) comes from the architecture's record (core/catalog/architectures.py): adding a model of a
known architecture is one entry below, then `make docs`.

A model's weights come from its Hugging Face repository (`hf_id`), or from one of its pre-sharded DeepSpeed
inference checkpoints (`checkpoints`), staged into the models bucket at one exact commit (`StagedWeights`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core import bucket_layout
from core.catalog.architectures import Architecture, architecture

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


def unpinned_pickles(hf_id: str, field: str) -> str:
    """Why pickles are accepted only from a pinned commit, and the config key that pins one."""
    return (
        f"pickles are accepted from {hf_id} without a pinned commit: each staging would copy whatever commit "
        f"{FOLLOWED_BRANCH} has then, and a pickle from a changed or hijacked repository runs its code in the jobs and "
        f"on the endpoint (torch.load's weights_only is no boundary before torch 2.6, CVE-2025-32434); set {field} to "
        "the 40-hex commit you reviewed"
    )


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
        if self.allow_pickle and self.revision is None:
            raise ValueError(unpinned_pickles(self.hf_id, "its revision"))

    @property
    def pinned(self) -> bool:
        return self.revision is not None

    @property
    def staged_revision(self) -> str:
        """What the staging step is asked for: the pinned commit, or the branch it follows."""
        return self.revision or FOLLOWED_BRANCH

    @property
    def prefix(self) -> str:
        return f"{bucket_layout.PRETRAINED}{self.name}/"

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


@dataclass(frozen=True, kw_only=True)
class Model:
    name: str
    hf_id: str  # where the pretrained weights come from, once, when they are staged in S3
    architecture: str  # Hugging Face model_type: a key of core/catalog/architectures.py ARCHITECTURES
    parameters: int
    layers: int
    hidden_size: int
    attention_heads: int
    context_tokens: int
    vocab_size: int
    checkpoints: tuple[DeepSpeedCheckpoint, ...] = ()
    # num_key_value_heads: fewer than attention_heads with grouped-query attention; None: multi-head (as many).
    key_value_heads: int | None = None
    intermediate_size: int | None = None  # the MLP's inner width; None where the catalog does not need it
    tied_embeddings: bool = False  # the LM head shares the token embedding's weights (tie_word_embeddings)
    # Gated on the hub: downloading needs a token of an account the owner granted access (the staging job's secret).
    gated: bool = False
    license: str = ""  # the model card's license id
    # A later transformers release than its architecture needs, where this model's config uses something newer
    # (Llama 3.1's rope_scaling); None: the architecture's min_transformers.
    config_min_transformers: str | None = None
    # The README's LoRA / QLoRA cell: where synth's sizing lets adapters train and be evaluated, as a reader needs it
    # (`make synth` decides for a given config). Required: whoever adds a model states it, from what synth accepts.
    adapters_summary: str

    def __post_init__(self) -> None:
        architecture(self.architecture)  # a KeyError naming the known architectures
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

    @property
    def traits(self) -> Architecture:
        """What its architecture can do here (core/catalog/architectures.py)."""
        return architecture(self.architecture)

    @property
    def deepspeed_kernels(self) -> bool:
        """DeepSpeed 0.12.6 (LMI 0.27.0) has a kernel-injection policy that fits its architecture."""
        return self.traits.deepspeed_kernels

    @property
    def min_transformers(self) -> str:
        """The first transformers release that loads its config (model_type, rope_scaling): whether LMI 0.27.0's
        transformers can load it at all."""
        needed = [self.traits.min_transformers, self.config_min_transformers or self.traits.min_transformers]
        return max(needed, key=version_tuple)

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
            return StagedWeights(
                name=name, hf_id=self.hf_id, revision=revision, allow_pickle=allow_pickle, gated=self.gated
            )
        found = self.checkpoint(checkpoint)
        return StagedWeights(
            name=f"{self.name}-{found.name}",
            hf_id=found.hf_id,
            revision=revision or found.revision,
            allow_pickle=allow_pickle,
            deepspeed=found,
        )


# BLOOM-176B as DeepSpeed published it for 8-way tensor parallelism. The int8 commit is the one the AWS LMI
# reference staged (amazon-sagemaker-examples@f8f8b5889:inference/nlp/realtime/llm/bloom_176b/
# djl_deepspeed_deploy.ipynb; still in generative_ai/sm-djl_deepspeed_bloom_176b_deploy.ipynb at 2d519b52c); both
# model cards: "the tensors are split into 8 shards to target 8 GPUs". No source pins a commit of the fp16 one (nor of
# the Hugging Face repositories below): they follow main unless the config pins one (weights.revision,
# training.pretrained.revision), and what is served is still one exact commit, recorded when staged.
BLOOM_CHECKPOINTS = (
    DeepSpeedCheckpoint(
        name="deepspeed-int8-tp8",
        hf_id="microsoft/bloom-deepspeed-inference-int8",
        revision="aa00a6626f6484a2eef68e06d1e089e4e32aa571",
        dtype="int8",
        tensor_parallel_degree=8,
    ),
    DeepSpeedCheckpoint(
        name="deepspeed-fp16-tp8",
        hf_id="microsoft/bloom-deepspeed-inference-fp16",
        revision=None,
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
# tests/core/test_model_catalog.py recomputes them from the figures. Context: the config's max_position_embeddings;
# for Qwen2.5 the 32,768 tokens it was trained on (QwenLM/Qwen2.5@905ca20:docs/source/getting_started/concepts.md:
# 131,072 only with YaRN, which neither engine turns on by itself).
# Gated: the Llama 3.1 repositories ask each account to accept the Llama 3.1 Community License; mistralai gated its
# repositories in May 2024 (huggingface/alignment-handbook#166, TransformerLens#769); Qwen's are open.
# config_min_transformers: rope_scaling {"rope_type": "llama3"} needs transformers 4.43.0 (Llama 3.1's release; 4.39's
# LlamaConfig refuses any rope_scaling but {type, factor}).
CURRENT_MODELS = (
    Model(
        name="llama-3.1-8b",
        hf_id="meta-llama/Llama-3.1-8B",
        architecture="llama",
        parameters=8_030_261_248,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        key_value_heads=8,
        intermediate_size=14336,
        context_tokens=131072,
        vocab_size=128256,
        gated=True,
        license="llama3.1",
        config_min_transformers="4.43.0",
        adapters_summary="yes / yes",
    ),
    Model(
        name="llama-3.1-70b",
        hf_id="meta-llama/Llama-3.1-70B",
        architecture="llama",
        parameters=70_553_706_496,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        key_value_heads=8,
        intermediate_size=28672,
        context_tokens=131072,
        vocab_size=128256,
        gated=True,
        license="llama3.1",
        config_min_transformers="4.43.0",
        adapters_summary="yes: sharded (p4d, p4de, p5) / 80 GB GPUs (p4de, p5)",
    ),
    Model(
        name="mistral-7b-v0.3",
        hf_id="mistralai/Mistral-7B-v0.3",
        architecture="mistral",
        parameters=7_248_023_552,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        key_value_heads=8,
        intermediate_size=14336,
        context_tokens=32768,
        vocab_size=32768,
        gated=True,
        license="apache-2.0",
        adapters_summary="yes / yes",
    ),
    Model(
        name="qwen2.5-7b",
        hf_id="Qwen/Qwen2.5-7B",
        architecture="qwen2",
        parameters=7_615_616_512,
        layers=28,
        hidden_size=3584,
        attention_heads=28,
        key_value_heads=4,
        intermediate_size=18944,
        context_tokens=32768,
        vocab_size=152064,
        license="apache-2.0",
        adapters_summary="yes / yes",
    ),
    Model(
        name="qwen2.5-14b",
        hf_id="Qwen/Qwen2.5-14B",
        architecture="qwen2",
        parameters=14_770_033_664,
        layers=48,
        hidden_size=5120,
        attention_heads=40,
        key_value_heads=8,
        intermediate_size=13824,
        context_tokens=32768,
        vocab_size=152064,
        # Figures: Qwen/Qwen2.5-14B's config.json (hidden_size 5120, 48 layers, 40 heads, 8 key/value heads,
        # intermediate_size 13824, vocab_size 152064, untied embeddings); the card's 14.7B parameters.
        license="apache-2.0",
        adapters_summary="yes: on one 40 GB GPU or larger (g6e, p4d, p4de, p5) or sharded (g5.12xlarge, g6.12xlarge "
        "and up) / yes",
    ),
    Model(
        name="qwen2.5-72b",
        hf_id="Qwen/Qwen2.5-72B",
        architecture="qwen2",
        parameters=72_706_203_648,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        key_value_heads=8,
        intermediate_size=29568,
        context_tokens=32768,
        vocab_size=152064,
        # "All our open-source models, except for the 3B and 72B variants, are licensed under Apache 2.0" (README).
        license="qwen",
        adapters_summary="yes: sharded (p4d, p4de, p5) / no: no Evaluate GPU holds its 4-bit base",
    ),
)

MODELS: dict[str, Model] = {
    m.name: m
    for m in [
        Model(
            name="gpt-j-6b",
            hf_id="EleutherAI/gpt-j-6b",
            architecture="gptj",
            parameters=6_053_381_344,
            layers=28,
            hidden_size=4096,
            attention_heads=16,
            context_tokens=2048,
            vocab_size=50400,
            license="apache-2.0",
            adapters_summary="yes / yes",
        ),
        Model(
            name="gpt-neox-20b",
            hf_id="EleutherAI/gpt-neox-20b",
            architecture="gpt_neox",
            parameters=20_554_567_680,
            layers=44,
            hidden_size=6144,
            attention_heads=64,
            context_tokens=2048,
            vocab_size=50432,
            license="apache-2.0",
            adapters_summary="yes: on one 48 GB GPU (g6e, p4de, p5) or sharded (g5.12xlarge, p4d) / yes",
        ),
        Model(
            name="opt-30b",
            hf_id="facebook/opt-30b",
            architecture="opt",
            parameters=29_974_865_920,
            layers=48,
            hidden_size=7168,
            attention_heads=56,
            context_tokens=2048,
            vocab_size=50272,
            tied_embeddings=True,
            license="other",
            adapters_summary=(
                "yes: on 80 GB GPUs (p4de, p5; not sharded: OPT ties its embeddings) / "
                "40 GB GPUs and up (p4d, g6e, ...)"
            ),
        ),
        Model(
            name="bloom-176b",
            hf_id="bigscience/bloom",
            architecture="bloom",
            parameters=176_247_271_424,
            layers=70,
            hidden_size=14336,
            attention_heads=112,
            context_tokens=2048,
            vocab_size=250880,
            checkpoints=BLOOM_CHECKPOINTS,
            tied_embeddings=True,
            license="bigscience-bloom-rail-1.0",
            adapters_summary="no: no Evaluate instance holds its base",
        ),
        *CURRENT_MODELS,
    ]
}


def model(name: str) -> Model:
    """The catalog entry for `name`; a KeyError that lists the known models otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a known model; known: {', '.join(MODELS)}") from None
