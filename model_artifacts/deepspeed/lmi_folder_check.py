"""Refuse, at start-up and before anything loads, a model folder that this container's transformers cannot read, or
would read differently from the transformers that wrote it.

The LMI 0.27.0 image ships transformers 4.39.0; folders written by later releases name things it does not have:
- tokenizer_config.json `tokenizer_class`: transformers 5 saves fast tokenizers as "TokenizersBackend", which 4.39
  cannot resolve (AutoTokenizer: "Tokenizer class TokenizersBackend does not exist or is not currently imported");
- config.json `model_type`: an architecture newer than the reader (qwen3, gemma2, ...) is unknown to AutoConfig;
- config.json's rotary settings: transformers 5 writes `rope_parameters` (rope_theta, rope_type and its scaling
  inside), which 4.39 does not read: a Llama, Mistral or Qwen2 folder then loads without an error and runs with
  4.39's default rope_theta (10000 instead of, e.g., 500000): every answer is wrong. Likewise a `rope_scaling` that
  the reader's config class does not take (4.39's Qwen2 and Mistral: YaRN or linear scaling silently dropped);
- a value the reader's config class refuses (Llama 3.1's `rope_scaling` {"rope_type": "llama3", ...}: 4.39 accepts
  only {"type": "linear"|"dynamic", "factor"}).
Each problem names the file, the field, its value, the reader's version and the fix, all in one ConfigError.

folder_problems is the check itself, on the two small JSON files and a ReaderSupport (what one transformers release
reads). At start-up the support comes from the installed transformers (installed_support); elsewhere (e.g. when a
folder is staged, with no transformers 4.39 at hand) it can come from a record of that release
(ReaderSupport.to_dict / from_dict; `python lmi_folder_check.py` run in the image prints the record). Only the check
that the reader's config class accepts the values (config_build_problem) needs the reader's transformers itself.

check_staged_files refuses, at start-up and before any weight loads, a staged folder whose files are not the ones the
staging job checked against the hub: it reads the manifest stage_model.py writes inside the folder (STAGED_MANIFEST,
the same format as training/finetune/staged.py, which this container cannot import).
Stdlib only at import.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lmi_config import ConfigError

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# The config keys that state the rotary position embedding: a reader that ignores one runs another model.
ROTARY_KEYS = ("rope_parameters", "rope_scaling")
# transformers 5's config classes take rope_parameters and convert the 4.x keys into it (their **kwargs).
_CONVERTED_BY_ROPE_PARAMETERS = ("rope_theta", "rope_scaling")
_FAST_SUFFIX = "Fast"
# Written by training/stage_model.py inside every staged folder: {"files": {path: bytes}, "sha256": {path: hex}}.
STAGED_MANIFEST = ".staged-sha256.json"
# torch.save's formats and other pickles: DeepSpeed's .pt shards are read with plain torch.load, and weights_only is
# no boundary before torch 2.6 (CVE-2025-32434) while this image ships torch 2.1.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


@dataclass(frozen=True)
class ReaderSupport:
    """What one transformers release reads: its model types, its tokenizer class names, and per model type the
    config keys its config class takes (only those the check asks about need to be present)."""

    version: str
    model_types: frozenset = frozenset()
    tokenizer_classes: frozenset = frozenset()
    config_parameters: Mapping[str, frozenset] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "model_types": sorted(self.model_types),
            "tokenizer_classes": sorted(self.tokenizer_classes),
            "config_parameters": {key: sorted(value) for key, value in sorted(self.config_parameters.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReaderSupport:
        return cls(
            version=str(data["version"]),
            model_types=frozenset(data["model_types"]),
            tokenizer_classes=frozenset(data["tokenizer_classes"]),
            config_parameters={key: frozenset(value) for key, value in data["config_parameters"].items()},
        )


def check_model_folder(folder: str) -> None:
    """Raise ConfigError listing every reason the installed transformers cannot serve `folder` as it was written."""
    config, tokenizer_config = read_folder_files(folder)
    model_type = (config or {}).get("model_type")
    support = installed_support(model_types=[model_type] if isinstance(model_type, str) else [])
    problems = folder_problems(config, tokenizer_config, support, folder=folder)
    if not problems and config is not None:
        problem = config_build_problem(config, support, folder=folder)
        problems += [problem] if problem else []
    if problems:
        raise ConfigError(
            f"the model folder {folder} cannot be served by transformers {support.version} (this image's):\n- "
            + "\n- ".join(problems)
        )


def read_folder_files(folder: str) -> tuple[dict | None, dict | None]:
    """config.json and tokenizer_config.json of `folder` (None where absent); ConfigError if one is not JSON."""
    return _read_json(folder, CONFIG_FILE), _read_json(folder, TOKENIZER_CONFIG_FILE)


def folder_problems(
    config: Mapping[str, Any] | None,
    tokenizer_config: Mapping[str, Any] | None,
    support: ReaderSupport,
    *,
    folder: str = ".",
) -> list[str]:
    """Why `support`'s transformers cannot read the folder these files come from, or would read it differently."""
    problems = []
    if tokenizer_config is not None:
        problems += _tokenizer_class_problems(tokenizer_config, support, folder)
    if config is not None:
        problems += _model_type_problems(config, support, folder)
        problems += _rotary_problems(config, support, folder)
    return problems


def config_build_problem(config: Mapping[str, Any], support: ReaderSupport, *, folder: str = ".") -> str | None:
    """Build the config with the installed transformers (no weights): its config class validates some values
    (rope_scaling) only then. Needs the reader's transformers installed."""
    from transformers import AutoConfig

    settings = {key: value for key, value in config.items() if key != "model_type"}
    try:
        AutoConfig.for_model(config["model_type"], **settings)
    except (ValueError, TypeError, KeyError) as error:
        named = [key for key in config if key != "model_type" and re.search(rf"(?<!\w){key}(?!\w)", str(error))]
        where = f"{os.path.join(folder, CONFIG_FILE)}" + (f" {named[0]}={config[named[0]]!r}" if named else "")
        return (
            f"{where}: transformers {support.version} refuses this config ({error}); it was written for a later "
            f"release (transformers_version {config.get('transformers_version', 'not stated')!r}). Serve it with "
            "engine vllm, or with a config in the form transformers "
            f"{support.version} reads"
        )
    return None


def installed_support(model_types: list[str] | None = None) -> ReaderSupport:
    """The installed transformers' ReaderSupport: config parameters for `model_types` (every type if None)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    known = frozenset(CONFIG_MAPPING_NAMES)
    wanted = known if model_types is None else [name for name in model_types if name in known]
    return ReaderSupport(
        version=transformers.__version__,
        model_types=known,
        tokenizer_classes=frozenset(_tokenizer_class_names(TOKENIZER_MAPPING_NAMES)),
        config_parameters={name: _init_parameters(CONFIG_MAPPING[name]) for name in wanted},
    )


def _tokenizer_class_problems(tokenizer_config: Mapping[str, Any], support: ReaderSupport, folder: str) -> list[str]:
    # AutoTokenizer tries the class name + "Fast" first, then the name itself (tokenization_auto.py, 4.39 and 5.x).
    name = tokenizer_config.get("tokenizer_class")
    if not isinstance(name, str) or _readable_tokenizer_class(name, support):
        return []
    return [
        f"{os.path.join(folder, TOKENIZER_CONFIG_FILE)}: tokenizer_class={name!r} is not a tokenizer class of "
        f"transformers {support.version} (a later release saved it; transformers 5 names every fast tokenizer "
        f"'TokenizersBackend'). Save the tokenizer with transformers 4.x, or set tokenizer_class to "
        "a class it has (PreTrainedTokenizerFast reads tokenizer.json, where a fast tokenizer keeps everything)"
    ]


def _readable_tokenizer_class(name: str, support: ReaderSupport) -> bool:
    base = name[: -len(_FAST_SUFFIX)] if name.endswith(_FAST_SUFFIX) else name
    return bool({name, base, base + _FAST_SUFFIX} & support.tokenizer_classes)


def _model_type_problems(config: Mapping[str, Any], support: ReaderSupport, folder: str) -> list[str]:
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in support.model_types:
        return []
    return [
        f"{os.path.join(folder, CONFIG_FILE)}: model_type={model_type!r} is not an architecture transformers "
        f"{support.version} knows (the folder names transformers_version "
        f"{config.get('transformers_version', 'not stated')!r}). Serve it with engine vllm, which runs current "
        "architectures"
    ]


def _rotary_problems(config: Mapping[str, Any], support: ReaderSupport, folder: str) -> list[str]:
    model_type = config.get("model_type")
    taken = support.config_parameters.get(model_type)
    if taken is None:  # an unknown model_type is reported on its own
        return []
    read = set(taken) | (set(_CONVERTED_BY_ROPE_PARAMETERS) if "rope_parameters" in taken else set())
    rotary_read = ", ".join(sorted(key for key in read if "rope" in key or "rotary" in key)) or "no rotary setting"
    return [
        f"{os.path.join(folder, CONFIG_FILE)}: {key}={config[key]!r} is a setting transformers {support.version} "
        f"does not read for model_type={model_type!r} (it reads {rotary_read}): "
        "the model would load without an error and run with that release's default rotary embedding, so every "
        f"answer would be wrong. {_rotary_fix(key, config[key], rotary_read)}"
        for key in ROTARY_KEYS
        if config.get(key) is not None and key not in read
    ]


def _rotary_fix(key: str, value: Any, rotary_read: str) -> str:
    if key == "rope_parameters":
        theta = value.get("rope_theta") if isinstance(value, Mapping) else None
        example = f" (here rope_theta={theta!r}; a non-default rope_type goes to rope_scaling)" if theta else ""
        return (
            f"Write config.json in the 4.x form, with {rotary_read}{example}, as transformers 4.x saves it "
            "(rope_parameters is transformers 5's form), or serve it with engine vllm"
        )
    return "Serve it with engine vllm, or without the scaling (and a context within the trained length)"


def _tokenizer_class_names(mapping: Mapping[str, Any]) -> set[str]:
    # 4.x maps a model type to (slow, fast) names, 5.x to one name; PreTrainedTokenizerFast is resolved by name.
    names = {"PreTrainedTokenizerFast"}
    for value in mapping.values():
        names.update(name for name in (value if isinstance(value, (tuple, list)) else (value,)) if name)
    return names


def _init_parameters(config_class: type) -> frozenset:
    return frozenset(
        name
        for name, parameter in inspect.signature(config_class.__init__).parameters.items()
        if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL) and name != "self"
    )


def _read_json(folder: str, name: str) -> dict | None:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} is not readable JSON ({error}); transformers could not read it either") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds {type(data).__name__}, not a JSON object; transformers expects an object")
    return data


def check_staged_files(folder: str, *, rank: int = 0, world_size: int = 1) -> None:
    """Raise ConfigError naming each file of `folder` that is not what was staged: a pickle whose sha256 differs from
    STAGED_MANIFEST's or that it does not list, a listed file whose size differs. Only pickles are hashed (they run
    code when loaded; safetensors cannot), each rank hashing its share (files rank, rank + world_size, ...), so the
    start-up pays sha256 over 1/world_size of them. No manifest (weights not staged by the platform): no check."""
    path = os.path.join(folder, STAGED_MANIFEST)
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} is not readable JSON ({error}): the staged folder is damaged") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("files"), dict)
        or not isinstance(data.get("sha256"), dict)
    ):
        raise ConfigError(f"{path} is not a staging manifest (files, sha256): the staged folder is damaged")
    present = sorted(
        os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
        for root, _, names in os.walk(folder)
        for name in names
    )
    problems = []
    for name in present:
        size = data["files"].get(name)
        if name == STAGED_MANIFEST:
            continue
        if size is None:
            if name.lower().endswith(PICKLE_SUFFIXES):
                problems.append(f"{name} is a pickle that {STAGED_MANIFEST} does not list: it was not staged")
            continue
        actual = os.path.getsize(os.path.join(folder, name))
        if actual != size:
            problems.append(f"{name} has {actual} bytes, {size} when staged")
    pickles = [name for name in present if name.lower().endswith(PICKLE_SUFFIXES) and name in data["files"]]
    for name in pickles[rank::world_size]:
        expected = data["sha256"].get(name)
        if expected is None:
            problems.append(f"{name}: {STAGED_MANIFEST} records no sha256 for it")
        elif _sha256(os.path.join(folder, name)) != expected:
            problems.append(f"{name}: its sha256 is not the {expected} recorded when staged")
    if problems:
        raise ConfigError(
            f"the model folder {folder} is not what was staged ({STAGED_MANIFEST}): " + "; ".join(problems) + ". "
            "Refusing to load it: pickled weights run code when they are loaded. Stage the model again and find out "
            "who changed the models bucket"
        )


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(16 * 2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()


if __name__ == "__main__":  # the record of the installed transformers, for a check where it is not installed
    print(json.dumps(installed_support().to_dict(), indent=1))
