"""Stream one prompt's answer token by token, as LMI 0.27.0's `jsonlines` output formatter writes it
(djl_python/rolling_batch/rolling_batch.py at v0.27.0, _jsonlines_output_formatter), one JSON object per line:

    {"token": {"id": [464], "text": " Paris"}}
    {"token": {"id": [13], "text": "."}, "generated_text": " Paris.",
     "details": {"finish_reason": "length", "generated_tokens": 2, "inputs": "...", "prompt_tokens": 5}}

The last line also carries `generated_text`, and `details` when the request asked for them. The token texts,
concatenated, are exactly the `generated_text` of the same request without `stream` (and, with return_full_text,
that text without the prompt): text that a later token could still change is held back until it cannot, namely
the tail of an incomplete UTF-8 character, the start of a stop string, and the last few characters, which the
tokenizer's clean-up of spaces before punctuation (" ." -> ".", " n't" -> "n't") may still rewrite. So a token's
`text` is the text that became final with it, and may be "" (LMI's own formatter leaves out an empty text; this one
always writes it). There is no `log_prob` per streamed token (the scores are known only after generation).

model.generate runs in a thread and hands each new token to a streamer; DJL's Python engine drains the iterator
(Output.send in djl_python/outputs.py at v0.27.0) before it reads the next request, so one stream at a time runs per
worker. A generation that fails mid-stream ends the stream with a JSON error line {"code", "message", "error"}: the
HTTP status, 200, was sent with the first line.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

from lmi_generation import PreparedRequest, TextGenerator, first_stop
from transformers.generation.streamers import BaseStreamer

log = logging.getLogger("lmi_handler")

CONTENT_TYPE = "application/jsonlines"
# The longest pattern of transformers' clean_up_tokenization (" n't", " 've", " 're") minus one: characters this
# close to the end of the text can still change when the next token arrives.
_UNSETTLED_CHARACTERS = 3
_INCOMPLETE_CHARACTER = "\ufffd"  # what decode() gives for the first bytes of a character split across tokens
_DONE = object()


class _QueueStreamer(BaseStreamer):
    """model.generate's streamer: the prompt first (skipped), then each step's new token, then end()."""

    def __init__(self, tokens: queue.Queue) -> None:
        self.tokens = tokens
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.tokens.put(int(token))

    def end(self) -> None:
        pass  # the thread's own _DONE marks the end, after model.generate has returned or raised


def token_stream(
    generator: TextGenerator, prepared: PreparedRequest, *, seed: int | None, lock: threading.Lock
) -> Iterator[str]:
    """The lines of one streamed answer (each ending in a newline); generation starts at the first next()."""
    request = prepared.request
    (prompt,), (prompt_ids,) = request.prompts, prepared.token_ids
    stops = request.parameters.stop
    events: queue.Queue = queue.Queue()
    thread = threading.Thread(
        target=_generate, args=(generator, prepared, seed, lock, events), name="lmi-stream", daemon=True
    )
    thread.start()
    tokens: list[int] = []
    emitted = ""
    held: dict | None = None  # the newest token's line, written once it is known whether it is the last one
    try:
        while True:
            event = events.get()
            if event is _DONE:
                break
            if isinstance(event, BaseException):
                log.error("streamed generation failed", exc_info=event)
                if held is not None:
                    yield _line(held)
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                error = f"generation failed: {type(event).__name__}: {event}"
                yield _line({"code": int(status), "message": status.phrase, "error": error})
                return
            tokens.append(event)
            settled = _settled(generator.decode(tokens), stops)
            text = settled[len(emitted) :] if settled.startswith(emitted) else ""
            emitted += text
            if held is not None:
                yield _line(held)
            held = {"token": {"id": [event], "text": text}}
        result = generator.result(prompt, len(prompt_ids), tokens, None, request)
        full_text = request.parameters.return_full_text
        yield _line(_last_line(held, result, emitted, prompt if full_text else "", generated_tokens=len(tokens)))
    finally:
        thread.join()


def _generate(
    generator: TextGenerator, prepared: PreparedRequest, seed: int | None, lock: threading.Lock, events: queue.Queue
) -> None:
    import torch

    try:
        _, kwargs = generator.generate_arguments([prepared])
        with lock:
            if seed is not None:
                torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
            generator.model.generate(streamer=_QueueStreamer(events), **kwargs)
    except BaseException as error:  # the stream must end with an error line, never hang
        events.put(error)
    events.put(_DONE)


def _settled(text: str, stops: tuple[str, ...]) -> str:
    """The part of the decoded text so far that no later token can change."""
    cut = first_stop(text, stops)
    if cut is not None:
        return text[:cut]  # generation stops here; the answer ends before the stop string
    text = text.rstrip(_INCOMPLETE_CHARACTER)
    keep = len(text) - _UNSETTLED_CHARACTERS
    for stop in stops:  # a stop string may be starting at the end
        for length in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:length]):
                keep = min(keep, len(text) - length)
                break
    return text[: max(keep, 0)]


def _last_line(held: dict | None, result: dict, emitted: str, prompt: str, *, generated_tokens: int) -> dict:
    """The held token's line, with the rest of the text, `generated_text` and, if asked for, `details`."""
    final = result["generated_text"][len(prompt) :]
    if not final.startswith(emitted):  # a tokenizer whose decode is not prefix-stable: say so, the total still holds
        # Lengths and counts only, never text: the endpoint's log group keeps what the handler logs, and an answer
        # (or the prompt it repeats) is the user's data.
        log.warning(
            "streamed text is not a prefix of the answer: %d characters streamed, %d in the answer, the first %d "
            "alike, after %d tokens",
            len(emitted),
            len(final),
            _common_prefix(emitted, final),
            generated_tokens,
        )
    line = held or {"token": {"id": [], "text": ""}}
    line["token"]["text"] += final[len(emitted) :] if final.startswith(emitted) else ""
    line["generated_text"] = result["generated_text"]
    if "details" in result:
        details = result["details"]
        line["details"] = {
            key: details[key] for key in ("finish_reason", "generated_tokens", "inputs", "prompt_tokens")
        }
    return line


def _common_prefix(a: str, b: str) -> int:
    """How many characters `a` and `b` share from the start."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return min(len(a), len(b))


def _line(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False, allow_nan=False) + "\n"
