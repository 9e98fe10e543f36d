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

__all__ = ["MAX_DAYS", "MAX_ROWS", "Retention"]

# Upper bounds, so that a value the journal's arithmetic and SQLite's integers
# cannot hold is refused when made, never a writer that dies later.
MAX_DAYS = 1_000_000  # about 2700 years
MAX_ROWS = 10**12


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep finished records for at most `days` days and at most `rows` records.

    Either may be None (no limit of that kind), not both: the journal must not
    grow without bound. `days` is a number > 0 (fractions allowed) and at most
    1 000 000, `rows` an integer from 1 to 10**12. Checked when made, with
    errors naming the option.
    """

    days: float | None = 30.0
    rows: int | None = 100_000

    def __post_init__(self) -> None:
        owner = "Retention"
        if self.days is not None:
            days = positive_number(self.days, "days", owner)
            if days > MAX_DAYS:
                raise ValueError(
                    f"{owner}: days must be at most {MAX_DAYS} (None for no age limit), "
                    f"got {self.days!r}"
                )
            object.__setattr__(self, "days", days)
        if self.rows is not None:
            rows = positive_int(self.rows, "rows", owner)
            if rows > MAX_ROWS:
                raise ValueError(
                    f"{owner}: rows must be at most {MAX_ROWS} (None for no row limit), "
                    f"got {self.rows!r}"
                )
            object.__setattr__(self, "rows", rows)
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
