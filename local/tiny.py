"""Tiny causal language models and a tiny tokenizer, built offline, for tests and local runs.

Nothing here downloads anything: the tokenizer is a byte-level BPE trained on generated sentences and the models are
randomly initialized from small configs of the real architectures (GPT-J, OPT, BLOOM, GPT-NeoX, GPT-2), so the code
paths are the ones the full-size models take.

    python -m local.tiny OUT_DIR [--arch gptj]     # writes an HF model folder (config, safetensors, tokenizer)
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
from pathlib import Path

EOS_TOKEN = "<|endoftext|>"
# The small configs are declared with the architectures (core/catalog/architectures.py, tiny_config); read from the
# generated copy, as the containers read it, so this module imports nothing of the platform.
_RECORDS_FILE = Path(__file__).resolve().parent.parent / "training" / "finetune" / "architectures.json"
_TINY_RECORDS = {
    name: record
    for name, record in json.loads(_RECORDS_FILE.read_text())["architectures"].items()
    if record["tiny_config"] is not None
}
ARCHITECTURES = tuple(_TINY_RECORDS)

_SUBJECTS = ["the model", "a cat", "the engineer", "my friend", "the endpoint", "a small dog", "the team", "this film"]
_VERBS = ["likes", "trains", "serves", "watches", "builds", "loves", "hates", "reads"]
_OBJECTS = ["the data", "a long story", "fresh bread", "the weights", "green tea", "old books", "the plan", "music"]
_ENDINGS = ["today", "every day", "at night", "with care", "again", "slowly", "on weekends", "in the rain"]


def sentences(count: int, seed: int = 0) -> list[str]:
    """Simple, learnable English-like sentences: a model's loss on them falls within a few dozen steps."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_ENDINGS)}."
        for _ in range(count)
    ]


def build_tokenizer(vocab_size: int = 512, seed: int = 0):
    """A byte-level BPE tokenizer with GPT-J's special token conventions (one EOS token, no pad token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(sentences(400, seed), trainer=trainer)
    # Pass the raw Tokenizer: the ByteLevelBPETokenizer wrapper breaks on the first padded call.
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        bos_token=EOS_TOKEN,
        unk_token=EOS_TOKEN,
        model_max_length=128,
        # What causal LMs take; without it transformers 4.x also returns token_type_ids, which GPT-J would embed.
        model_input_names=["input_ids", "attention_mask"],
    )


def build_config(arch: str = "gptj", vocab_size: int = 512, context: int = 128):
    """A config of the real architecture, shrunk: 2 layers, hidden size 64, 4 heads."""
    import transformers

    eos = 0  # EOS_TOKEN is the first special token, so its id is 0
    if arch not in _TINY_RECORDS:
        raise ValueError(f"unknown architecture {arch!r}; expected one of {', '.join(ARCHITECTURES)}")
    record = _TINY_RECORDS[arch]
    kwargs = {**record["tiny_config"], "vocab_size": vocab_size, "bos_token_id": eos, "eos_token_id": eos}
    if record["tiny_context_key"]:
        kwargs[record["tiny_context_key"]] = context
    return transformers.AutoConfig.for_model(arch, **kwargs)


def build_model(arch: str = "gptj", vocab_size: int = 512, seed: int = 0):
    """A randomly initialized tiny model in eval mode; the same seed gives the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(build_config(arch, vocab_size))
    return model.eval()


def save_tiny_model(out_dir: str | Path, arch: str = "gptj", seed: int = 0) -> Path:
    """Write an HF model folder (config.json, model.safetensors, tokenizer files) and return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed=seed)
    model = build_model(arch, vocab_size=len(tokenizer), seed=seed)
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        model.save_pretrained(out, safe_serialization=True)
    else:  # transformers 4.21 (the SMP v1 image) writes only pickles: the same files through huggingface_hub
        from huggingface_hub import save_torch_state_dict

        model.config.save_pretrained(out)
        save_torch_state_dict(model.state_dict(), str(out), shared_tensors_to_discard=["lm_head.weight"])
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", help="folder to write the model into (created if missing)")
    parser.add_argument("--arch", choices=ARCHITECTURES, default="gptj", help="architecture (default: gptj)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the tokenizer corpus and the weights")
    args = parser.parse_args()
    print(save_tiny_model(args.out_dir, args.arch, args.seed))


if __name__ == "__main__":
    main()
