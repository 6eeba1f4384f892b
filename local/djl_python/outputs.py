"""The handler's answer, as djl_python.outputs.Output: code, message, properties (headers) and content."""

from __future__ import annotations

import json
import logging
from typing import Any

from .pair_list import PairList


class Output:
    def __init__(self, code: int = 200, message: str = "OK") -> None:
        self.code = code
        self.message = message
        self.properties: dict = {}
        self.content = PairList()

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

    def get_properties(self) -> dict:
        return self.properties

    def get_property(self, key: str) -> Any:
        return self.properties.get(key)

    def add(self, value: Any, key: str | None = None) -> Output:
        if key is not None and not isinstance(key, str):
            logging.warning(f"Output key should be str type, got {type(key)}")
            key = str(key)
        if isinstance(value, str):
            self.content.add(key=key, value=value.encode("utf-8"))
        elif isinstance(value, bytearray):
            self.content.add(key=key, value=value)
        elif isinstance(value, bytes):
            self.content.add(key=key, value=bytearray(value))
        else:
            self.add_as_json(value, key=key)
        return self

    def add_as_json(self, val: Any, key: str | None = None) -> Output:
        json_value = json.dumps(val, ensure_ascii=False, allow_nan=False, indent=2, separators=(",", ":")).encode(
            "utf-8"
        )
        self.content.add(key=key, value=json_value)
        return self
