"""The checks a pattern's match must pass to count: checksums and entropy.

A run of digits is a card number only if its Luhn digit is right, and an
IBAN-shaped text an IBAN only if its mod-97 check holds; a random-looking
string is a secret only if it is random enough. Pure functions of a string.
"""

from __future__ import annotations

import math
from collections import Counter

__all__ = ["iban_ok", "luhn_ok", "shannon_entropy"]

# Each country's IBAN length (ISO 13616 registry): a text of another length
# for its country is no IBAN, whatever its check digits say.
_IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def luhn_ok(text: str) -> bool:
    """True if the digits of `text` (separators ignored) are 13 to 19 long and
    pass the Luhn check, as every payment card number does."""
    digits = [ord(c) - 48 for c in text if "0" <= c <= "9"]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, digit in enumerate(reversed(digits)):
        doubled = digit * 2 if i % 2 else digit
        total += doubled - 9 if doubled > 9 else doubled
    return total % 10 == 0


def iban_ok(text: str) -> bool:
    """True if `text` (spaces ignored, any case) is an IBAN: a known country,
    that country's length, and check digits that make it 1 mod 97."""
    iban = "".join(text.split()).upper()
    if _IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban[2:4].isdigit():
        return False
    if not iban.isascii() or not iban.isalnum():
        return False
    # Letters count as 10..35, the first four characters go to the end.
    number = "".join(str(int(c, 36)) for c in iban[4:] + iban[:4])
    return int(number) % 97 == 1


def shannon_entropy(text: str) -> float:
    """Bits per character of `text`, from its own character frequencies."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in Counter(text).values())
