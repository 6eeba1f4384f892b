"""The pipeline's data-preparation step (a SageMaker Processing job): raw text -> the model's tokens -> packed
fixed-length blocks -> JSON lines in a train folder and a validation folder, as the GPT-J reference notebook does.

Input files (in --input_dir, and optionally --validation_input_dir):
  *.jsonl / *.json   one JSON object per line (or one JSON array) with `text`, or sst2-style `sentence` (+ `label`,
                     which is not used: the model learns the text)
  *.csv / *.tsv      a header row with a `text` or `sentence` column
  *.txt              one document per non-empty line
Each document's tokens are followed by the tokenizer's EOS token (so documents stay apart in the packed stream);
the stream is cut into blocks of --block_size tokens and the remainder dropped (the reference's `group_texts`).
Without a validation input, a seeded --validation_fraction of the documents becomes the validation split.

  python prepare_data.py                                  # SageMaker Processing: /opt/ml/processing/... defaults
  python prepare_data.py --input_dir raw/ --tokenizer_dir model/ --train_output_dir data/train \
      --validation_output_dir data/validation --block_size 1024

Run it with this folder as the processing job's source dir (it imports `finetune`).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# The processing job runs this file in its source dir, where `finetune` is a top-level package; `llmp upload-data`
# imports it as training.prepare_data to check each file with read_documents before uploading it (without torch:
# write_blocks is imported where it is used).
if __package__:
    from training.finetune.compatibility import check_readable
    from training.finetune.errors import ConfigurationError
    from training.finetune.hyperparameters import parse_float, parse_int, parse_optional_int
else:
    from finetune.compatibility import check_readable
    from finetune.errors import ConfigurationError
    from finetune.hyperparameters import parse_float, parse_int, parse_optional_int

TEXT_COLUMNS = ("text", "sentence")
RAW_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".txt")
DEFAULT_MAX_BLOCK_SIZE = 1024  # the reference caps GPT-J's 2048-token context at 1024 for packing


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigurationError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _RaisingParser(prog="prepare_data.py", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--input_dir", default="/opt/ml/processing/input/raw", help="raw data files")
    parser.add_argument(
        "--validation_input_dir",
        default="/opt/ml/processing/input/validation",
        help="raw validation files; used when the folder exists and has files, else --validation_fraction applies",
    )
    parser.add_argument("--tokenizer_dir", default="/opt/ml/processing/input/model", help="the model's tokenizer")
    parser.add_argument("--train_output_dir", default="/opt/ml/processing/output/train")
    parser.add_argument("--validation_output_dir", default="/opt/ml/processing/output/validation")
    parser.add_argument(
        "--block_size",
        type=parse_optional_int,
        default=None,
        help=f"tokens per block (default: the tokenizer's model_max_length, at most {DEFAULT_MAX_BLOCK_SIZE})",
    )
    parser.add_argument(
        "--validation_fraction", type=parse_float, default=0.05, help="split used without a validation input"
    )
    parser.add_argument("--seed", type=parse_int, default=12345, help="seed of the validation split")
    return parser


def raw_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if path.is_file() and path.suffix in RAW_SUFFIXES)


def _text_of(row: Any, where: str) -> str:
    if isinstance(row, dict):
        for column in TEXT_COLUMNS:
            if isinstance(row.get(column), str):
                return row[column]
    raise ConfigurationError(f"{where}: expected an object with a {' or '.join(TEXT_COLUMNS)} string, got {row!r:.80}")


def read_documents(path: Path) -> Iterator[str]:
    if path.suffix == ".txt":
        with path.open(encoding="utf-8") as handle:
            yield from (line.strip() for line in handle if line.strip())
    elif path.suffix in (".csv", ".tsv"):
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ",")
            for number, row in enumerate(reader, start=2):
                yield _text_of(row, f"{path}:{number}")
    else:
        text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            for index, row in enumerate(json.loads(text)):
                yield _text_of(row, f"{path}[{index}]")
            return
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise ConfigurationError(f"{path}:{number} is not a JSON object") from None
                yield _text_of(row, f"{path}:{number}")


def load_documents(directory: Path, what: str) -> list[str]:
    if not directory.is_dir():
        raise ConfigurationError(f"{what} folder {directory} does not exist")
    files = raw_files(directory)
    if not files:
        raise ConfigurationError(f"{what} folder {directory} has no {', '.join(RAW_SUFFIXES)} files")
    documents = [document for path in files for document in read_documents(path) if document.strip()]
    if not documents:
        raise ConfigurationError(f"{what} folder {directory} holds no text")
    return documents


def resolve_block_size(tokenizer: Any, requested: int | None) -> int:
    if requested is not None:
        if requested < 2:
            raise ConfigurationError(f"--block_size must be at least 2, got {requested}")
        return requested
    return min(int(tokenizer.model_max_length), DEFAULT_MAX_BLOCK_SIZE)


def pack(tokenizer: Any, documents: Sequence[str], block_size: int) -> list[list[int]]:
    """Tokenize, append EOS to each document, concatenate, cut into full blocks."""
    stream: list[int] = []
    eos = tokenizer.eos_token_id
    for start in range(0, len(documents), 1000):
        for ids in tokenizer(list(documents[start : start + 1000]))["input_ids"]:
            stream.extend(ids)
            if eos is not None and (not ids or ids[-1] != eos):
                stream.append(eos)
    usable = len(stream) - len(stream) % block_size
    return [stream[index : index + block_size] for index in range(0, usable, block_size)]


def split_documents(documents: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    if not 0 < fraction < 1:
        raise ConfigurationError(f"--validation_fraction must be between 0 and 1, got {fraction}")
    shuffled = list(documents)
    random.Random(seed).shuffle(shuffled)
    count = max(1, int(len(shuffled) * fraction))
    return shuffled[count:], shuffled[:count]


def prepare(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    if __package__:
        from training.finetune.data import write_blocks
    else:
        from finetune.data import write_blocks

    check_readable(Path(args.tokenizer_dir), "--tokenizer_dir")
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_dir)
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"no tokenizer in --tokenizer_dir {args.tokenizer_dir}: {error}") from None
    block_size = resolve_block_size(tokenizer, args.block_size)
    documents = load_documents(Path(args.input_dir), "--input_dir")
    validation_input = Path(args.validation_input_dir)
    if validation_input.is_dir() and raw_files(validation_input):
        train_documents, validation_documents = documents, load_documents(validation_input, "--validation_input_dir")
    else:
        train_documents, validation_documents = split_documents(documents, args.validation_fraction, args.seed)
    splits = {
        "train": (train_documents, args.train_output_dir),
        "validation": (validation_documents, args.validation_output_dir),
    }
    summary = {"block_size": block_size}
    for name, (texts, output_dir) in splits.items():
        blocks = pack(tokenizer, texts, block_size)
        if not blocks:
            raise ConfigurationError(
                f"the {name} split ({len(texts)} documents) has fewer tokens than one block of "
                f"{block_size}; lower --block_size or add data"
                + (" (or raise --validation_fraction)" if name == "validation" else "")
            )
        write_blocks(Path(output_dir) / f"{name}.jsonl", blocks)
        summary[f"{name}_documents"] = len(texts)
        summary[f"{name}_blocks"] = len(blocks)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    try:
        summary = prepare(build_parser().parse_args(sys.argv[1:] if argv is None else argv))
    except ConfigurationError as error:
        print(f"prepare_data.py: error: {error}", file=sys.stderr, flush=True)
        return 2
    print("prepared: " + " ".join(f"{key}={value}" for key, value in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
