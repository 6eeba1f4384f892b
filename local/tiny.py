"""Tiny causal language models and a tiny tokenizer, built offline, for tests and local runs.

Nothing here downloads anything: the tokenizer is a byte-level BPE trained on generated sentences and the models are
randomly initialized from small configs of the real architectures (GPT-J, OPT, BLOOM, GPT-NeoX, GPT-2), so the code
paths are the ones the full-size models take.

    python -m local.tiny OUT_DIR [--arch gptj]     # writes an HF model folder (config, safetensors, tokenizer)
"""

from __future__ import annotations

import argparse
import inspect
import random
from pathlib import Path

EOS_TOKEN = "<|endoftext|>"
ARCHITECTURES = ("gptj", "opt", "bloom", "gpt_neox", "gpt2")

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
    common = {"vocab_size": vocab_size, "bos_token_id": eos, "eos_token_id": eos}
    if arch == "gptj":
        return transformers.GPTJConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, n_positions=context, **common)
    if arch == "opt":
        return transformers.OPTConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            ffn_dim=128,
            word_embed_proj_dim=64,
            max_position_embeddings=context,
            pad_token_id=1,
            **common,
        )
    if arch == "bloom":
        return transformers.BloomConfig(n_layer=2, hidden_size=64, n_head=4, **common)
    if arch == "gpt_neox":
        return transformers.GPTNeoXConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=context,
            **common,
        )
    if arch == "gpt2":
        return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=context, **common)
    raise ValueError(f"unknown architecture {arch!r}; expected one of {', '.join(ARCHITECTURES)}")


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
