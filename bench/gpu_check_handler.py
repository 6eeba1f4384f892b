"""What every GPU unit of `make gpu-check` shares: small random models of the real architectures, written with
save_pretrained and loaded by the handler as it loads any model folder; the handler's own TextGenerator serving them,
with what generate made recorded; and the comparison of two such runs.

The models' initializer range is 0.05 (not 0.02), so that their greedy choices have clear margins. Functions that
take `device` also run on CPU: the tests run them there with tiny models and no kernels.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu import _dtype_argument
from bench.gpu_check import FAIL, REPO_ROOT, PartResult, compare_greedy, judge_agreement

HANDLER_DIR = REPO_ROOT / "model_artifacts" / "deepspeed"
INIT_RANGE = 0.05
CONTEXT = 256
NEW_TOKENS = 32
# The real models' shapes, shrunk: GPT-J-6B's head size 256 with rotary 64, OPT's and BLOOM's head size 64.
SIZES = {
    "gptj": {"layers": 4, "hidden": 1024, "heads": 4},
    "opt": {"layers": 4, "hidden": 1024, "heads": 16},
    "bloom": {"layers": 4, "hidden": 1024, "heads": 16},
}


def use_handler_modules() -> None:
    """The handler's modules import each other by bare name, as DJL loads them from the model folder."""
    for path in (str(HANDLER_DIR), str(REPO_ROOT)):
        if path not in sys.path:
            sys.path.insert(0, path)


def requests() -> tuple[tuple[str, ...], ...]:
    """One prompt, then three of different lengths (a left-padded batch), as a client would send them."""
    from local.tiny import sentences

    s = sentences(6, seed=11)
    return ((s[0],), (s[1], f"{s[1]} {s[2]}", f"{s[3]} {s[4]} {s[5]}"))


def guarded(name: str, part: Callable[[], PartResult]) -> PartResult:
    """The part's result, or a FAIL naming the error and where it was raised (DeepSpeed 0.12.6 even calls sys.exit)."""
    started = time.monotonic()
    try:
        result = part()
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        result = PartResult(name, FAIL, f"{brief(error)} (at {where(error)})")
    result.name, result.seconds = name, round(time.monotonic() - started, 1)
    return result


def brief(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = lines[0][:240] if lines else ""
    if len(lines) > 1:
        text += f" ... {lines[-1][:240]}"
    return f"{type(error).__name__}: {text}"


def where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if str(REPO_ROOT) in frame.filename]
    shown = ([ours[-1]] if ours else []) + ([frames[-1]] if frames and (not ours or frames[-1] is not ours[-1]) else [])
    return " > ".join(f"{Path(frame.filename).name}:{frame.lineno} {frame.name}" for frame in shown) or "?"


def model_config(arch: str, vocab_size: int, sizes: dict[str, int], init_range: float = INIT_RANGE) -> Any:
    import transformers

    layers, hidden, heads = sizes["layers"], sizes["hidden"], sizes["heads"]
    common = {"vocab_size": vocab_size, "bos_token_id": 0, "eos_token_id": 0, "initializer_range": init_range}
    if arch == "gptj":
        rotary = min(64, hidden // heads)
        return transformers.GPTJConfig(
            n_layer=layers, n_embd=hidden, n_head=heads, rotary_dim=rotary, n_positions=CONTEXT, **common
        )
    if arch == "opt":  # transformers 4.x initializes OPT from init_std, 5.x from initializer_range
        return transformers.OPTConfig(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            ffn_dim=4 * hidden,
            word_embed_proj_dim=hidden,
            max_position_embeddings=CONTEXT,
            pad_token_id=1,
            init_std=init_range,
            **common,
        )
    if arch == "bloom":
        return transformers.BloomConfig(n_layer=layers, hidden_size=hidden, n_head=heads, **common)
    raise ValueError(f"unknown architecture {arch!r}")


def build_folder(arch: str, folder: Path, sizes: dict[str, int], *, torch_save_copy: Path | None = None) -> Path:
    """A Hugging Face model folder (config, safetensors, tokenizer); optionally the weights also in fp16 as torch.save
    files (pytorch_model.bin), which is what DeepSpeed's checkpoint loader reads (torch.load)."""
    import torch
    from transformers import AutoModelForCausalLM

    from local.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(model_config(arch, len(tokenizer), sizes))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if torch_save_copy is not None:
        model.to(torch.float16).save_pretrained(torch_save_copy, safe_serialization=False)
    return folder


def load_reference(folder: Path, dtype: str, device: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = torch.float32 if dtype == "fp32" else torch.float16
    model = AutoModelForCausalLM.from_pretrained(folder, **_dtype_argument(torch_dtype)).to(device).eval()
    return model, AutoTokenizer.from_pretrained(folder)


@dataclass
class Call:
    input_ids: list[list[int]]
    new_tokens: list[list[int]]
    margins: list[list[float]] | None  # per row and step: top-1 minus top-2 of the scores generate chose from


class Recorder:
    """Stands in for the model inside TextGenerator: every call passes through to it, and what generate made is kept
    (with the top-1/top-2 margins of its scores when `scores`)."""

    def __init__(self, model: Any, *, scores: bool) -> None:
        self._model, self._scores, self.calls = model, scores, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def generate(self, **kwargs: Any) -> Any:
        import torch

        wants_dict = bool(kwargs.get("return_dict_in_generate"))
        if self._scores:
            kwargs.update(output_scores=True, return_dict_in_generate=True)
        output = self._model.generate(**kwargs)
        sequences = output.sequences if self._scores or wants_dict else output
        margins = None
        if self._scores:
            top = torch.stack(output.scores, dim=1).float().topk(2, dim=-1).values
            margins = (top[..., 0] - top[..., 1]).tolist()
        width = kwargs["input_ids"].shape[1]
        self.calls.append(Call(kwargs["input_ids"].tolist(), sequences[:, width:].tolist(), margins))
        return output if wants_dict else sequences


def serve(model: Any, tokenizer: Any, *, context_length: int, max_input_length: int, scores: bool, tolerate: bool):
    """Each request of requests() through lmi_generation.TextGenerator, in order; ([Call, or the error as text for
    a request that raised when `tolerate`], the EOS ids the generator stops at)."""
    from lmi_generation import TextGenerator
    from lmi_requests import RequestLimits, parse_request

    recorder = Recorder(model, scores=scores)
    generator = TextGenerator(recorder, tokenizer, context_length=context_length, max_input_length=max_input_length)
    limits = RequestLimits(max_batch_size=4, max_new_tokens=NEW_TOKENS)
    outcomes: list[Call | str] = []
    for prompts in requests():
        body = json.dumps({"inputs": list(prompts), "parameters": {"max_new_tokens": NEW_TOKENS}})
        try:
            generator.generate([generator.prepare(parse_request(body, limits))])
            outcomes.append(recorder.calls[-1])
        except Exception as error:
            if not tolerate:
                raise
            outcomes.append(f"{brief(error)} (at {where(error)})")
    return outcomes, generator.eos_token_ids


def compare_calls(reference: Sequence[Call], candidate: Sequence[Call | str], *, tolerance: float, eos_ids):
    """The candidate's outcome of each request against the reference's: (passed, why, numbers)."""
    rows, problems = [], []
    for index, (expected, got) in enumerate(zip(reference, candidate, strict=True)):
        label = f"request {index + 1} ({len(expected.input_ids)} prompt(s))"
        if isinstance(got, str):
            if index and not isinstance(candidate[0], str):
                got += (
                    f"; it came after a {len(reference[0].input_ids)}-prompt request, and DeepSpeed sizes its kernel "
                    "workspace by the first forward's batch (ds_transformer.py allocate_workspace; "
                    "deepspeedai/DeepSpeed#3402)"
                )
            problems.append(f"{label} failed: {got}")
        elif got.input_ids != expected.input_ids:
            problems.append(f"{label}: the prompts were tokenized or padded differently")
        else:
            for want, have, margins in zip(expected.new_tokens, got.new_tokens, expected.margins, strict=True):
                rows.append(compare_greedy(want, have, margins, tolerance=tolerance, eos_ids=eos_ids))
    passed, text, numbers = judge_agreement(rows, tolerance=tolerance) if rows else (False, "nothing compared", {})
    return not problems and passed, "; ".join([*problems, text]), numbers


def injected_layers(model: Any) -> int:
    from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference

    return sum(isinstance(module, DeepSpeedTransformerInference) for module in model.modules())


def int8_weights(model: Any) -> tuple[int, int]:
    """(int8 weight tensors, those carrying a quantization scale): DeepSpeed's int8 GEMMs dequantize with it."""
    import torch

    tensors = [parameter for parameter in model.parameters() if parameter.dtype == torch.int8]
    return len(tensors), sum(1 for p in tensors if getattr(p, "scale", None) is not None and p.scale.numel() > 1)


def release() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def handler_model(folder: Path, dtype: str, kernel_injection: str, device: str) -> tuple[Any, Any, Any]:
    """What the handler's initialize() does with these serving.properties: HandlerConfig, then load_model."""
    from lmi_config import HandlerConfig
    from lmi_loading import load_model

    properties = {"weights_dir": str(folder), "dtype": dtype, "kernel_injection": kernel_injection}
    config = HandlerConfig.from_properties(properties, environ={})
    return load_model(str(folder), config, use_cuda=device == "cuda")
