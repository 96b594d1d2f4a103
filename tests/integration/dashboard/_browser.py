"""The web console's test rig (the ``driver`` fixture is conftest's): ``spark-mq dashboard`` as a real
process over the module's cluster, and a headless Debian chromium (selenium and chromedriver;
scripts/install_browser.sh installs them) that fails a test on any error in the browser's console.

With ``SPARK_MQ_SCREENSHOTS=1`` the tests save each page they show as docs/screenshots/<page>.png (what the
README shows); without it they save nothing, so a test run leaves the tree clean.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from servers import ServerProcess

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install -e .[dev]")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
DASHBOARD_READY = "spark-mq dashboard: console on"
SCREENSHOTS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"
SAMPLE_INTERVAL_S = 0.5  # the console samples often, so a test sees its charts and lags within seconds
PAGE_WAIT_S = 10.0


def start_console(namesrv: str, log: Path, *extra: str) -> ServerProcess:
    """``spark-mq dashboard`` on a free port of 127.0.0.1; ``addr`` is its URL."""
    return ServerProcess(["dashboard", "--namesrv", namesrv, "--port", "0", "--sample-interval",
                          str(SAMPLE_INTERVAL_S), *extra], log, DASHBOARD_READY)


class Browser:
    """A chromium page on the console at ``base``: ``open`` loads a path and checks its console."""

    def __init__(self, driver, base: str) -> None:
        self.driver = driver
        self.base = base.rstrip("/")

    def open(self, path: str, shot: str | None = None):
        self.driver.get(self.base + path)
        return self.loaded(shot)

    def settled(self) -> None:
        """Wait until the page now shown has finished loading. A click's answer page replaces the old one
        before it is parsed: an element found in it too early can be dropped by chromium's inspector
        ("Node with given id does not belong to the document") when it is read."""
        WebDriverWait(self.driver, PAGE_WAIT_S).until(
            lambda d: d.execute_script("return document.readyState") == "complete")

    def loaded(self, shot: str | None = None):
        """The page now shown, after it finished loading and the browser logged no error loading it."""
        self.settled()
        errors = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, f"{self.driver.current_url}: errors in the browser's console: {errors}"
        if shot and os.environ.get("SPARK_MQ_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            self.driver.save_screenshot(str(SCREENSHOTS / f"{shot}.png"))
        return self.driver

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def submit(self, form_css: str, fields: dict[str, str] | None = None, *, confirm: bool | None = None):
        """Fill ``fields`` of the form and press its button; ``confirm`` answers its confirmation dialog."""
        form = self.find(form_css)
        for name, value in (fields or {}).items():
            field = form.find_element(By.CSS_SELECTOR, f"[name={name}]")
            if field.tag_name == "select":
                Select(field).select_by_visible_text(value)
            else:
                field.clear()
                field.send_keys(value)
        page = self.find("html")
        form.find_element(By.CSS_SELECTOR, "button").click()
        if confirm is not None:
            alert = WebDriverWait(self.driver, PAGE_WAIT_S).until(lambda d: d.switch_to.alert)
            alert.accept() if confirm else alert.dismiss()
        if confirm is not False:  # the answer page replaced this one (a dismissed dialog posts nothing)
            WebDriverWait(self.driver, PAGE_WAIT_S).until(staleness_of(page))
        return self.loaded()


def open_driver():
    """A headless chromium with its console log kept; skips, saying why, where it cannot run."""
    if not (os.path.exists(CHROMIUM) and shutil.which("chromedriver")):
        pytest.skip("Debian's chromium and chromium-driver are not installed: run scripts/install_browser.sh")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    chrome.set_page_load_timeout(PAGE_WAIT_S * 3)
    return chrome
