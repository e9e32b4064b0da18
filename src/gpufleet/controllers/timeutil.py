"""Seconds (the runtime's time) to and from the datetimes written into objects."""

from __future__ import annotations

from datetime import UTC, datetime


def to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_seconds(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()
