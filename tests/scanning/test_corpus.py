"""The scanner's corpora and their generator (tests/scanning/generate.py): the
values are well formed, the generator is deterministic, the committed files are
what it makes, and the ordinary corpus has nothing in it to find.

These test the corpora, not the scanner."""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from functools import cache
from typing import Any

from tests.scanning import generate as g
from tests.scanning.generate import KINDS, Planter, iban_ok, luhn_ok

N = 200  # draws per value test


@cache
def _lines(name: str) -> tuple[dict[str, Any], ...]:
    text = (g.CORPUS_DIR / name).read_text(encoding="utf-8")
    return tuple(json.loads(line) for line in text.splitlines())


def _planted() -> tuple[dict[str, Any], ...]:
    return _lines("planted.jsonl")


def _ordinary() -> tuple[dict[str, Any], ...]:
    return _lines("ordinary.jsonl")


def _strings(output: object, key: str | None = None) -> list[tuple[str | None, str]]:
    """(key, string) for every string in an output; the key is None for a whole
    text or an item of a list."""
    if isinstance(output, str):
        return [(key, output)]
    if isinstance(output, dict):
        return [pair for k, v in output.items() for pair in _strings(v, k)]
    if isinstance(output, list):
        return [pair for v in output for pair in _strings(v, None)]
    return []


# -- the reference checks --


def test_luhn_ok_on_known_numbers() -> None:
    assert luhn_ok("4111111111111111")
    assert luhn_ok("4111 1111 1111 1111")
    assert luhn_ok("4111-1111-1111-1111")
    assert luhn_ok("378282246310005")
    assert luhn_ok("5555555555554444")
    assert not luhn_ok("4111111111111112")
    assert not luhn_ok("378282246310006")
    assert not luhn_ok("")
    assert not luhn_ok("4111x111111111111")


def test_iban_ok_on_known_ibans() -> None:
    assert iban_ok("DE89 3704 0044 0532 0130 00")
    assert iban_ok("DE89370400440532013000")
    assert iban_ok("GB82 WEST 1234 5698 7654 32")
    assert iban_ok("FR14 2004 1010 0505 0001 3M02 606")
    assert iban_ok("NL91 ABNA 0417 1643 00")
    assert not iban_ok("DE88 3704 0044 0532 0130 00")
    assert not iban_ok("GB82 WEST 1234 5698 7654 33")
    assert not iban_ok("DE89 3704 0044 0532 0130 0")  # a digit short for DE
    assert not iban_ok("de89370400440532013000")


def test_candidate_finders_see_what_a_scanner_would() -> None:
    text = "paid with 4111 1111 1111 1111, order 12345, ref 4111-1111-1111-1111 ok"
    assert list(g.card_candidates(text)) == ["4111111111111111", "4111111111111111"]
    assert g.luhn_hits(text) == {"4111111111111111"}
    assert g.iban_hits({"note": "IBAN: DE89 3704 0044 0532 0130 00 please"}) == {
        "DE89370400440532013000"
    }
    assert g.iban_hits("to GB82WEST12345698765432.") == {"GB82WEST12345698765432"}
    assert g.email_hits(["cc jane.doe@example.org"]) == {"jane.doe@example.org"}


# -- the generator --


def _draw(planter: Planter) -> list[object]:
    return [
        planter.aws_access_key_id(),
        planter.aws_secret_access_key(),
        planter.github_token(),
        planter.gitlab_token(),
        planter.slack_token(),
        planter.stripe_key(),
        planter.google_api_key(),
        planter.openai_key(),
        planter.anthropic_key(),
        planter.private_key_pem(),
        planter.jwt(),
        planter.generic_secret(),
        planter.email(),
        planter.card(),
        planter.bad_card(),
        planter.iban(),
        planter.bad_iban(),
        planter.phone(),
        planter.document(3),
        planter.decoy_document(2),
    ]


def test_same_seed_same_values() -> None:
    assert _draw(Planter(seed=7)) == _draw(Planter(seed=7))
    assert _draw(Planter(seed=7)) != _draw(Planter(seed=8))


def test_committed_corpora_are_what_the_generator_makes() -> None:
    """Regenerating (python -m tests.scanning.generate) gives byte-identical files."""
    assert (g.CORPUS_DIR / "planted.jsonl").read_bytes() == g.planted_jsonl().encode()
    assert (g.CORPUS_DIR / "ordinary.jsonl").read_bytes() == g.ordinary_jsonl().encode()


_CARD_FORMS = re.compile(
    r"(?P<d16>[0-9]{16})|[0-9]{4}(?P<s>[ -])[0-9]{4}(?P=s)[0-9]{4}(?P=s)[0-9]{4}"
    r"|(?P<d15>[0-9]{15})|[0-9]{4}(?P<a>[ -])[0-9]{6}(?P=a)[0-9]{5}"
)


def _card_shape_ok(value: str) -> bool:
    digits = g.compact_card(value)
    if not _CARD_FORMS.fullmatch(value):
        return False
    if len(digits) == 15:
        return digits[:2] in {"34", "37"}
    return digits[0] == "4" or 51 <= int(digits[:2]) <= 55 or 2221 <= int(digits[:4]) <= 2720


def test_cards_pass_luhn_and_bad_cards_fail() -> None:
    planter = Planter(seed=1)
    for _ in range(N):
        card, bad = planter.card(), planter.bad_card()
        assert luhn_ok(card), card
        assert not luhn_ok(bad), bad
        assert _card_shape_ok(card), card
        assert _card_shape_ok(bad), bad


def test_ibans_pass_mod97_and_bad_ibans_fail() -> None:
    planter = Planter(seed=2)
    grouped = re.compile(r"(?:[A-Z0-9]{4} )+[A-Z0-9]{1,4}")
    for _ in range(N):
        iban, bad = planter.iban(), planter.bad_iban()
        assert iban_ok(iban), iban
        assert not iban_ok(bad), bad
        for value in (iban, bad):
            compact = value.replace(" ", "")
            assert compact[:2] in {"DE", "GB", "FR", "NL", "ES", "IT"}, value
            assert len(compact) == g.IBAN_LENGTHS[compact[:2]], value
            assert value == compact or grouped.fullmatch(value), value
        assert g.mod97(bad.replace(" ", "")) != 1


_SECRET_SHAPES: dict[str, re.Pattern[str]] = {
    "aws_access_key_id": re.compile(r"AKIA[A-Z2-7]{16}"),
    "aws_secret_access_key": re.compile(r"[A-Za-z0-9+/]{40}"),
    "github_token": re.compile(r"ghp_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}"),
    "gitlab_token": re.compile(r"glpat-[0-9A-Za-z_-]{20}"),
    "slack_token": re.compile(r"xoxb-[1-9][0-9]{9,12}-[1-9][0-9]{9,12}-[A-Za-z0-9]{24}"),
    "stripe_key": re.compile(r"sk_live_[A-Za-z0-9]{24,99}"),
    "google_api_key": re.compile(r"AIza[0-9A-Za-z_-]{35}"),
    "openai_key": re.compile(
        r"sk-proj-[A-Za-z0-9_-]{74}T3BlbkFJ[A-Za-z0-9_-]{74}|sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}"
    ),
    "anthropic_key": re.compile(r"sk-ant-api03-[A-Za-z0-9_-]{93}AA"),
    "generic_secret": re.compile(r"[A-Za-z0-9][A-Za-z0-9_+/=-]{19,39}"),
    "email": re.compile(r"[a-z0-9._+]+@(?:[a-z]+\.)?example\.(?:com|org|net)"),
    "phone": re.compile(
        r"\+1[0-9]{10}|\+44 20 [378][0-9]{3} [0-9]{4}|\+44 7700 900[0-9]{3}|\+4420[378][0-9]{7}"
        r"|\+49 [0-9]{2,3} [1-9][0-9]{4,6}|\+33 [1-7](?: [0-9]{2}){4}|\([0-9]{3}\) [0-9]{3}-[0-9]{4}"
        r"|[0-9]{3}-[0-9]{3}-[0-9]{4}"
    ),
}


def test_values_have_their_shapes() -> None:
    planter = Planter(seed=3)
    for name, shape in _SECRET_SHAPES.items():
        make = getattr(planter, name)
        for _ in range(N // 4):
            value = make()
            assert shape.fullmatch(value), (name, value)


def test_generic_secrets_are_high_entropy_mixes() -> None:
    planter = Planter(seed=4)
    for _ in range(N):
        value = planter.generic_secret()
        assert any(c.isupper() for c in value) and any(c.islower() for c in value), value
        assert any(c.isdigit() for c in value) and any(c in "_-+/=" for c in value), value
        assert not g.KNOWN_PREFIX_RE.search(value), value


def test_jwts_decode() -> None:
    planter = Planter(seed=5)
    for _ in range(N // 4):
        header, payload, signature = planter.jwt().split(".")
        assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "HS256", "typ": "JWT"}
        claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
        assert set(claims) == {"sub", "iat", "exp"} and claims["exp"] > claims["iat"]
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", signature), signature


def test_private_keys_are_pem_blocks() -> None:
    planter = Planter(seed=6)
    labels = {"RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY"}
    for _ in range(N // 4):
        lines = planter.private_key_pem().split("\n")
        begin = re.fullmatch(r"-----BEGIN (.+)-----", lines[0])
        assert begin is not None and begin.group(1) in labels
        assert lines[-1] == f"-----END {begin.group(1)}-----"
        body = lines[1:-1]
        assert 10 <= len(body) <= 25
        assert all(len(line) == 64 for line in body)
        base64.b64decode("".join(body), validate=True)


# -- planted.jsonl --


def test_planted_corpus_layout() -> None:
    records = _planted()
    assert len(records) == g.PLANTED_DOCUMENTS + g.DECOY_DOCUMENTS == 340
    assert [r["id"] for r in records] == [f"p{i:03d}" for i in range(1, 341)]
    for record in records[: g.PLANTED_DOCUMENTS]:
        assert set(record) == {"id", "output", "planted"}
        assert 1 <= len(record["planted"]) <= 4
        assert all(kind in KINDS for kind, _ in record["planted"])
        assert isinstance(record["output"], str | dict | list)
    for record in records[g.PLANTED_DOCUMENTS :]:
        assert set(record) == {"id", "output", "planted", "decoys"}
        assert record["planted"] == [] and record["decoys"]
        assert all(kind in {"card", "iban"} for kind, _ in record["decoys"])


def test_each_kind_planted_at_least_15_times() -> None:
    counts = Counter(kind for record in _planted() for kind, _ in record["planted"])
    assert set(counts) == set(KINDS)
    assert min(counts.values()) >= 15, counts


def test_planted_documents_hold_exactly_what_they_say() -> None:
    """Each planted value is in its output, and no card, IBAN or e-mail address is there that
    was not planted; a decoy document holds its decoys and nothing a scanner should flag."""
    for record in _planted():
        pairs = [(k, v) for k, v in record["planted"]]
        assert not g.planted_problems(record["output"], pairs), record["id"]
        if "decoys" in record:
            decoys = [(k, v) for k, v in record["decoys"]]
            assert not g.decoy_problems(record["output"], decoys), record["id"]
        for kind, value in pairs:
            if kind == "card":
                assert luhn_ok(value)
            if kind == "iban":
                assert iban_ok(value)


_AWS_SECRET_CONTEXT = re.compile(r"(?i)(?:aws_secret_access_key|SecretAccessKey)(?:: ?|=| = )$")


def test_keyword_secrets_follow_a_keyword() -> None:
    """A generic secret (and an AWS secret access key) is the value under a secret-looking
    JSON key, or follows a secret word (password/secret/token/...) and `:`, `=` or ` is `."""
    seen = 0
    for record in _planted():
        for kind, value in record["planted"]:
            if kind == "generic_secret":
                context = g.SECRET_CONTEXT_RE
            elif kind == "aws" and not value.startswith("AKIA"):
                context = _AWS_SECRET_CONTEXT
            else:
                continue
            for key, text in _strings(record["output"]):
                if text == value:
                    assert key is not None and g.SECRET_KEY_RE.search(key), (record["id"], key)
                    seen += 1
                    continue
                for match in re.finditer(re.escape(value), text):
                    assert context.search(text[: match.start()]), (record["id"], text)
                    seen += 1
    assert seen >= 45


# -- ordinary.jsonl --


def test_ordinary_corpus_layout() -> None:
    records = _ordinary()
    assert len(records) >= 300
    assert [r["id"] for r in records] == [f"o{i:03d}" for i in range(1, len(records) + 1)]
    assert all(set(r) == {"id", "kind", "output"} for r in records)
    assert len({r["kind"] for r in records}) >= 30


def test_ordinary_corpus_has_no_card_number() -> None:
    for record in _ordinary():
        assert not g.luhn_hits(record["output"]), record["id"]


def test_ordinary_corpus_has_no_iban() -> None:
    for record in _ordinary():
        assert not g.iban_hits(record["output"]), record["id"]


def test_ordinary_corpus_has_no_email() -> None:
    for record in _ordinary():
        for text in g.texts_of(record["output"]):
            assert not g.AT_IN_WORD_RE.search(text), (record["id"], text)


def test_ordinary_corpus_is_clean_by_every_check() -> None:
    """No phone-number shape, secret prefix, secret word followed by a value, or secret-looking
    JSON key either."""
    for record in _ordinary():
        assert not g.ordinary_problems(record["output"]), record["id"]


def test_ordinary_corpus_holds_the_traps() -> None:
    """What makes it a false-positive yardstick: long digit runs that fail Luhn, hex digests,
    UUIDs, base64, and the words key, token and secret in prose."""
    texts = [t for record in _ordinary() for t in g.texts_of(record["output"])]
    runs = [c for t in texts for c in g.card_candidates(t)]
    assert len(runs) >= 100
    joined = "\n".join(texts)
    assert len(re.findall(r"\b[0-9a-f]{64}\b", joined)) >= 50
    assert (
        len(
            re.findall(
                r"\b[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\b", joined
            )
        )
        >= 50
    )
    for word in ("key", "token", "secret"):
        assert re.search(rf"\b{word}\b", joined, re.IGNORECASE), word
