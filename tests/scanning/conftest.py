"""The scanner each test of this folder runs with: once per engine."""

from __future__ import annotations

import pytest

from toolbus.scanning import ContentScanner, hyperscan_available

ENGINES = ["re", pytest.param("hyperscan", marks=pytest.mark.skipif(
    not hyperscan_available(), reason="the scan extra is not installed"))]  # fmt: skip


@pytest.fixture(scope="module", params=ENGINES)
def scanner(request: pytest.FixtureRequest) -> ContentScanner:
    """The default rules, with the pure-`re` engine and with hyperscan."""
    return ContentScanner(engine=request.param)
