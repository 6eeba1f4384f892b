"""Ordered key/value pairs, as djl_python.pair_list.PairList (keys may repeat or be None)."""

from __future__ import annotations

from typing import Any


class PairList:
    def __init__(self, keys: list | None = None, values: list | None = None) -> None:
        if keys is not None or values is not None:
            keys, values = list(keys or []), list(values or [])
            if len(keys) != len(values):
                raise ValueError("key value size mismatch.")
        self.keys: list = keys or []
        self.values: list = values or []

    def add(self, key: str | None = None, value: Any = None) -> None:
        # As in djl_python: a falsy value (None, b"") is not added, so an empty body makes an empty Input.
        if value:
            self.keys.append(key)
            self.values.append(value)

    def size(self) -> int:
        return len(self.keys)

    def is_empty(self) -> bool:
        return self.size() == 0

    def get(self, key: str) -> Any:
        if key not in self.keys:
            return None
        return self.values[self.keys.index(key)]

    def key_at(self, index: int) -> str | None:
        return self.keys[index]

    def value_at(self, index: int) -> Any:
        return self.values[index]

    def get_keys(self) -> list:
        return self.keys

    def get_values(self) -> list:
        return self.values
