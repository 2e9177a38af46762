"""One exception root for everything Ferry raises on purpose."""

from __future__ import annotations


class FerryError(Exception):
    """Root of Ferry's own errors. The message says what happened and what to change."""


class ConfigError(FerryError):
    """A setting is missing or invalid; ``setting`` names what to change."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


class ValidationError(FerryError):
    """A document (subscription, request body) is invalid; ``field`` is its dotted path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class OffsetRecordError(FerryError):
    """An offsets-topic record does not decode per docs/contract.md §5."""


class EndpointRefused(FerryError):
    """A push endpoint targets an address Ferry must not reach (SSRF guard)."""
