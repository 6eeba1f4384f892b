"""The parameters of an invocation body, declared once: LMI 0.27.0's text-generation schema with DeepSpeed's
`typical_p` and `truncate` (djl-serving v0.27.0, serving/docs/lmi/user_guides/lmi_input_output_schema.md).

Modelled on vLLM's entrypoints/openai/protocol.py: one declarative row per field (type, range, default, doc) that
the code reads. lmi_requests.py parses by these rows, generators/request_tables.py renders the docs' tables from
them, and `llmp invoke` takes its options' help and bounds from them. A simple numeric or boolean parameter is one
row here (and its field in lmi_requests.GenerationParameters, which the generation code reads).

Stdlib only, Python 3.9: it runs inside the LMI container, and the CLI loads it by its path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

BAD_REQUEST = 400
PAYLOAD_TOO_LARGE = 413
UNPROCESSABLE = 422

ENGINES = ("deepspeed", "vllm")
TOP_LEVEL_FIELDS = ("inputs", "parameters", "stream")

# LMI's documented default for max_new_tokens, capped by option.max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 30
MAX_STOP_SEQUENCES = 16
# vLLM raises temperatures below 0.01 to 0.01 (vllm/sampling_params.py, _MAX_TEMP): logits divided by less overflow
# half precision into inf, and softmax turns inf into NaN. Done here too, so both engines sample alike.
MIN_TEMPERATURE = 0.01
# A repetition penalty multiplies or divides logits: outside [0.01, 100] it overflows fp16 logits the same way. On a
# GPU, sampling from a NaN distribution is a device-side assert that leaves the worker's CUDA context unusable.
MIN_REPETITION_PENALTY = 0.01
MAX_REPETITION_PENALTY = 100.0
# 64-bit signed: what torch.manual_seed and vLLM's seed take.
SEED_LIMIT = 2**63

GENERATION_CONFIG = "the model's `generation_config`"
STOP_CAP = f"{MAX_STOP_SEQUENCES} strings, `stop` and `stop_sequences` together"


@dataclass(frozen=True)
class Parameter:
    """One field of `parameters`. A value of the wrong JSON type is a 400; outside the range, `out_of_range_status`;
    above the endpoint's `cap`, `over_cap_status`."""

    name: str
    kind: str  # "integer", "number", "boolean" or "strings" (a string or a list of strings)
    doc: str
    default: Any = None  # None: the handler passes nothing, so the model's generation_config decides
    default_doc: str = ""  # the default in words, where the value alone does not say it
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    range_hint: str = ""  # what a value means, shown beside the range
    cap: str = ""  # a limit the endpoint's settings put above the range
    sampling: bool = False  # a sampling knob: giving one turns do_sample on, as in TGI and LMI >= 0.32
    engines: tuple[str, ...] = ENGINES
    vllm_note: str = ""  # how LMI's vLLM handler differs
    example: Any = None  # a valid value for the docs' example request
    out_of_range_status: int = UNPROCESSABLE
    over_cap_status: int = PAYLOAD_TOO_LARGE

    @property
    def json_type(self) -> str:
        return {"strings": "string or list of strings"}.get(self.kind, self.kind)

    def accepts(self, value: float) -> bool:
        """Whether a value of the right type is inside the range (NaN and infinities never are)."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above_minimum = self.minimum is None or (
            value > self.minimum if self.exclusive_minimum else value >= self.minimum
        )
        below_maximum = self.maximum is None or (
            value < self.maximum if self.exclusive_maximum else value <= self.maximum
        )
        return above_minimum and below_maximum

    def bounds(self) -> str:
        """The range in words, for people: "above 0", "at least 1", "in (0, 1]"; "" when any value goes."""
        if self.kind == "strings":
            return "non-empty"
        low, high = _bound(self.minimum), _bound(self.maximum)
        if self.minimum is not None and self.maximum is not None:
            opening, closing = "(" if self.exclusive_minimum else "[", ")" if self.exclusive_maximum else "]"
            return f"in {opening}{low}, {high}{closing}"
        if self.minimum is not None:
            return f"above {low}" if self.exclusive_minimum else f"at least {low}"
        if self.maximum is not None:
            return f"below {high}" if self.exclusive_maximum else f"at most {high}"
        return ""

    def expected(self) -> str:
        """The range as the handler's 422 message words it (the wording clients have seen since the first release):
        "a number > 0", "a number in (0, 1]", ">= 1", "0 <= seed < 2**63"."""
        hint = f" ({self.range_hint})" if self.range_hint else ""
        if self.kind == "number":
            symbolic = self.bounds().replace("above ", "> ").replace("at least ", ">= ")
            return f"a number {symbolic}{hint}"
        below = "<" if self.exclusive_minimum else "<="
        if self.maximum is None:
            return f"{'>' if self.exclusive_minimum else '>='} {_bound(self.minimum)}{hint}"
        above = "<" if self.exclusive_maximum else "<="
        return f"{_bound(self.minimum)} {below} {self.name} {above} {_bound(self.maximum)}{hint}"


def _bound(value: float | None) -> str:
    if isinstance(value, int) and value > 2**20 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"  # a power of two as people write it, not 9223372036854775808
    return "" if value is None else f"{value:g}"


# In this order in the handler's messages, its checks and the docs' tables.
PARAMETERS = (
    Parameter(
        "max_new_tokens",
        "integer",
        "most tokens to generate for each prompt",
        default=DEFAULT_MAX_NEW_TOKENS,
        default_doc=f"{DEFAULT_MAX_NEW_TOKENS}, or `option.max_new_tokens` if lower",
        minimum=1,
        cap="`option.max_new_tokens`",
        vllm_note="no cap, but the prompt plus this must fit `option.max_model_len` (else 400)",
        example=64,
    ),
    Parameter(
        "temperature",
        "number",
        f"divides the logits; below {MIN_TEMPERATURE:g} it is raised to {MIN_TEMPERATURE:g}, as vLLM does "
        "(smaller values overflow fp16 logits into NaN)",
        default_doc=GENERATION_CONFIG,
        minimum=0,
        exclusive_minimum=True,
        sampling=True,
        vllm_note=f"raised to {MIN_TEMPERATURE:g} too, but below 1e-5 it decodes greedily (`_SAMPLING_EPS`)",
        example=0.7,
    ),
    Parameter(
        "top_p",
        "number",
        "sample from the most likely tokens whose probabilities add up to this",
        default_doc=GENERATION_CONFIG,
        minimum=0,
        maximum=1,
        exclusive_minimum=True,
        sampling=True,
        example=0.9,
    ),
    Parameter(
        "top_k",
        "integer",
        "sample from this many most likely tokens",
        default_doc=f"{GENERATION_CONFIG} (transformers: 50)",
        minimum=0,
        sampling=True,
        example=50,
    ),
    Parameter(
        "typical_p",
        "number",
        "transformers' typical decoding",
        default_doc=f"{GENERATION_CONFIG} (1.0: off)",
        minimum=0,
        maximum=1,
        exclusive_minimum=True,
        sampling=True,
        engines=("deepspeed",),
        vllm_note="ignored: not a vLLM parameter (vLLM logs it)",
        example=0.95,
    ),
    Parameter(
        "do_sample",
        "boolean",
        "sample, or decode greedily (`false`)",
        default_doc="true if a sampling parameter is given, else false (greedy)",
        vllm_note="without it vLLM's own defaults apply (it samples); `false` becomes temperature 0",
        example=True,
    ),
    Parameter(
        "repetition_penalty",
        "number",
        "penalizes tokens already in the text; outside the range it overflows fp16 logits",
        default_doc=f"{GENERATION_CONFIG} (1.0)",
        minimum=MIN_REPETITION_PENALTY,
        maximum=MAX_REPETITION_PENALTY,
        range_hint="1 = no penalty",
        example=1.1,
    ),
    Parameter(
        "stop",
        "strings",
        "generation ends when every prompt hit one of these strings; the text is cut before it",
        default_doc="none",
        cap=STOP_CAP,
        vllm_note="the name both engines take",
        example=["\n\n"],
    ),
    Parameter(
        "stop_sequences",
        "strings",
        "LMI's name for `stop`; both may be given: the strings are merged",
        default_doc="none",
        cap=STOP_CAP,
        engines=("deepspeed",),
        vllm_note="ignored: not a vLLM parameter; send `stop`",
    ),
    Parameter(
        "seed",
        "integer",
        "same seed + same request = same output",
        default_doc="none (the process's random state)",
        minimum=0,
        maximum=SEED_LIMIT,
        exclusive_maximum=True,
        example=42,
    ),
    Parameter(
        "truncate",
        "integer",
        "keep only each prompt's last `truncate` tokens (TGI's and LMI's meaning), before the length limits apply",
        default_doc="none",
        minimum=1,
        vllm_note="becomes vLLM's `truncate_prompt_tokens` (also the last tokens)",
        example=512,
    ),
    Parameter(
        "return_full_text",
        "boolean",
        "prepend the prompt to `generated_text`",
        default=False,
        example=False,
    ),
    Parameter(
        "details",
        "boolean",
        "add `details` to each answer",
        default=False,
        vllm_note="its `details` has other fields (model_artifacts/README.md, vLLM engine)",
        example=True,
    ),
)

PARAMETER_NAMES = tuple(row.name for row in PARAMETERS)
SAMPLING_PARAMETERS = tuple(row.name for row in PARAMETERS if row.sampling)
ROWS = {row.name: row for row in PARAMETERS}


def example_request() -> dict:
    """A request that sets every parameter with an example value (the docs show it; the tests send it)."""
    parameters = {row.name: row.example for row in PARAMETERS if row.example is not None}
    return {"inputs": "a prompt", "parameters": parameters, "stream": False}
