"""The handler's answer, as djl_python.outputs.Output of DJL Serving 0.27.0: code, message, properties (headers) and
content, or instead of content a stream (add_stream_content: an iterator whose items, passed through an output
formatter, are sent one chunk each; local/djl_streaming.stream_chunks does what Output.send does with them).
0.27.0's Output has no get_property/get_properties (later releases added them), so neither has this one."""

from __future__ import annotations

import json
import logging
from typing import Any

from .pair_list import PairList


def _default_stream_output_formatter(token_texts: Any) -> bytearray:
    return bytearray((json.dumps({"outputs": token_texts}) + "\n").encode("utf-8"))


class Output:
    def __init__(self, code: int = 200, message: str = "OK") -> None:
        self.code = code
        self.message = message
        self.properties: dict = {}
        self.content = PairList()
        self.stream_content = None
        self.stream_output_formatter = None

    def set_code(self, code: int) -> Output:
        self.code = code
        return self

    def set_message(self, message: str) -> Output:
        self.message = message
        return self

    def error(self, error: str, code: int = 424, message: str = "prediction failure") -> Output:
        self.code = code
        self.message = message
        body = {"code": self.code, "message": self.message, "error": error}
        self.add_property("content-type", "application/json")
        self.add_as_json(body)
        return self

    def add_property(self, key: str, val: str) -> Output:
        self.properties[key] = val
        return self

    def add(self, value: Any, key: str | None = None, batch_index: int | None = None) -> Output:
        if key is not None and type(key) is not str:
            logging.warning(f"Output key should be str type, got {type(key)}")
            key = str(key)
        if batch_index is not None:
            # The key DJL's PyPredictor splits a batch answer by: batch_(\d+)\.(.*) (no zero padding here).
            key = f"batch_{batch_index}.{'' if key is None else key}"
        # Exact type checks, as in 0.27.0: a str or bytes subclass is JSON-encoded.
        if type(value) is str:
            self.content.add(key=key, value=value.encode("utf-8"))
        elif type(value) is bytearray:
            self.content.add(key=key, value=value)
        elif type(value) is bytes:
            self.content.add(key=key, value=bytearray(value))
        else:
            self.content.add(key=key, value=self._encode_json(value))
        return self

    def add_as_json(self, val: Any, key: str | None = None, batch_index: int | None = None) -> Output:
        return self.add(self._encode_json(val), key=key, batch_index=batch_index)

    def add_stream_content(
        self, stream_content: Any, output_formatter: Any = _default_stream_output_formatter
    ) -> Output:
        """Answer with `stream_content` (an iterator) instead of content; each item goes through `output_formatter`
        (None: sent as it is) and becomes one chunk. As in 0.27.0, the default wraps each item as {"outputs": item}
        plus a newline."""
        self.stream_content = stream_content
        self.stream_output_formatter = output_formatter
        return self

    @staticmethod
    def _encode_json(val: Any) -> bytearray:
        # allow_nan=False: a NaN/inf anywhere in the answer raises ValueError instead of writing invalid JSON.
        return bytearray(
            json.dumps(val, ensure_ascii=False, allow_nan=False, indent=2, separators=(",", ":")).encode("utf-8")
        )
