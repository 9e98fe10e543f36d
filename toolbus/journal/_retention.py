"""How much of the journal is kept: `Retention(days=..., rows=...)`.

Finished records (those with an outcome, and those acknowledged) older than
`days`, or beyond the newest `rows` records, are pruned by the journal's writer
thread when it opens and then now and then, never on a call's path. Records in
doubt, and calls still running, are never pruned: they stay until they are
acknowledged (or get their outcome).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._options import positive_int, positive_number

__all__ = ["Retention"]


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep finished records for at most `days` days and at most `rows` records.

    Either may be None (no limit of that kind), not both: the journal must not
    grow without bound. `days` is a number > 0 (fractions allowed), `rows` an
    integer >= 1. Checked when made, with errors naming the option.
    """

    days: float | None = 30.0
    rows: int | None = 100_000

    def __post_init__(self) -> None:
        owner = "Retention"
        if self.days is not None:
            object.__setattr__(self, "days", positive_number(self.days, "days", owner))
        if self.rows is not None:
            object.__setattr__(self, "rows", positive_int(self.rows, "rows", owner))
        if self.days is None and self.rows is None:
            raise ValueError(
                "Retention: days and rows are both None, so the journal would grow without "
                "limit; set at least one"
            )

    @property
    def seconds(self) -> float | None:
        return None if self.days is None else self.days * 86400.0

    @classmethod
    def coerce(cls, value: Any, option: str = "retention", owner: str = "") -> Retention:
        """`value` as a Retention: a Retention, a mapping with the keys `days`
        and/or `rows` (a key left out keeps its default), or None (the defaults).

        Raises TypeError / ValueError naming `owner` and `option`."""
        where = f"{owner}: {option}" if owner else option
        if value is None:
            return cls()
        if isinstance(value, Retention):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"{where} must be a toolbus.journal.Retention or a mapping like "
                f'{{"days": 30, "rows": 100000}}, got {type(value).__name__} {value!r}'
            )
        unknown = sorted(str(k) for k in value if k not in ("days", "rows"))
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                "the keys are 'days' and 'rows'"
            )
        try:
            return cls(**{str(k): v for k, v in value.items()})
        except (TypeError, ValueError) as e:
            message = str(e).removeprefix("Retention: ").removeprefix("Retention")
            raise type(e)(f"{where}: {message}") from None
