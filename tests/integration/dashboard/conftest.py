"""The ``driver`` fixture: one headless chromium per module (tests/integration/dashboard/_browser.py)."""

from __future__ import annotations

import pytest
from integration.dashboard._browser import open_driver


@pytest.fixture(scope="module")
def driver():
    chrome = open_driver()
    yield chrome
    chrome.quit()
