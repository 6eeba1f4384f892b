"""The one error type for problems found before (or instead of) training: bad flags, layouts, channels, data."""

from __future__ import annotations


class ConfigurationError(ValueError):
    """Something the user must change: the message names the setting, the value, and what would be accepted."""
