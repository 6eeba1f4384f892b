"""One request (or one DJL dynamic batch of requests) as the handler sees it, as djl_python.inputs.Input of DJL Serving
0.27.0: properties (strings) plus content (PairList)."""

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
        # DJL's PyPredictor sets batch_size only when it sends two or more requests at once; a batch of one is sent
        # as the plain request.
        return "batch_size" in self.properties

    def get_batch_size(self) -> int:
        return int(self.properties.get("batch_size", "1"))

    def get_batches(self) -> list[Input]:
        """The requests of a batch, as 0.27.0 splits them: `batch_NNN.<key>` properties and content keys (NNN: three
        digits, the request's index) go to request NNN without the prefix; every other property (model_dir,
        device_id, tensor_parallel_degree, added by the engine) stays on the batch. Not a batch: [self]."""
        if not self.is_batch():
            return [self]
        batch = [Input() for _ in range(self.get_batch_size())]
        for key, value in self.properties.items():
            if key.startswith("batch_") and key != "batch_size":
                batch[int(key[6:9])].properties[key[10:]] = value
        for position in range(self.content.size()):
            key = self.content.key_at(position)
            batch[int(key[6:9])].content.add(key[10:], self.content.value_at(position))
        return batch

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
