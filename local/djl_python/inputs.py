"""One request as the handler sees it, as djl_python.inputs.Input: properties (strings) plus content (PairList)."""

from __future__ import annotations

import json
from typing import Any

from .pair_list import PairList


class Input:
    def __init__(self) -> None:
        self.function_name: str | None = None
        self.properties: dict = {}
        self.content = PairList()

    def is_batch(self) -> bool:
        return "batch_size" in self.properties

    def get_batch_size(self) -> int:
        return int(self.properties.get("batch_size", "1"))

    def get_function_name(self) -> str | None:
        return self.function_name

    def get_properties(self) -> dict:
        return self.properties

    def get_content(self) -> PairList:
        return self.content

    def get_property(self, key: str) -> Any:
        """Case-insensitive, like the real one (HTTP headers arrive as properties)."""
        return next((value for name, value in self.properties.items() if name.lower() == key.lower()), None)

    def contains_key(self, key: str) -> bool:
        return self.content.get(key) is not None

    def get_data(self, key: str | None = None) -> Any:
        content_type = self.get_property("content-type")
        if content_type is not None and content_type.startswith("application/json"):
            return self.get_as_json(key)
        if content_type is not None and content_type.startswith("text/"):
            return self.get_as_string(key)
        if self.content.is_empty():
            return None
        return self.get_as_bytes(key=key)

    def get_as_bytes(self, key: str | None = None) -> Any:
        if self.content.is_empty():
            return None
        if key:
            value = self.content.get(key)
            if value is None:
                raise KeyError(f"requested data for key:{key} is not found!")
            return value
        value = self.content.get("data")
        return self.content.value_at(0) if value is None else value

    def get_as_string(self, key: str | None = None) -> str:
        return self.get_as_bytes(key=key).decode("utf-8")

    def get_as_json(self, key: str | None = None) -> Any:
        return json.loads(self.get_as_bytes(key=key).decode("utf-8"))

    def is_empty(self) -> bool:
        return self.content.is_empty()
