"""Ordered key/value pairs, as djl_python.pair_list.PairList of DJL Serving 0.27.0 (keys may repeat or be None)."""

from __future__ import annotations

from typing import Any


class PairList:
    def __init__(self, keys: list | None = None, values: list | None = None) -> None:
        # As in 0.27.0: the lists are used only when both are non-empty (then their sizes must match); anything else
        # makes an empty PairList. (0.27.0's pair_list=/pair_map= arguments crash there, so they are left out.)
        if keys and values:
            if len(keys) != len(values):
                raise ValueError("key value size mismatch.")
            self.keys: list = keys
            self.values: list = values
        else:
            self.keys = []
            self.values = []

    def add(self, key: str | None = None, value: Any = None, index: int | None = None, pair: tuple | None = None):
        # Only None is ignored: an empty body (b"" / bytearray()) is a value, so an HTTP request with no body makes
        # an Input whose content is not empty (DJL's RequestParser always adds "data").
        if index is not None and value is not None:
            self.keys.insert(index, key)
            self.values.insert(index, value)
        elif pair:
            self.keys.append(pair[0])
            self.values.append(pair[1])
        elif value is not None:
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
