"""The web console of a cluster with ACL on, in a real headless chromium: it asks for an account before any
page, keeps the secret out of every page and cookie, shows a read-only account no button that changes the
cluster and refuses such an account's changes even when posted directly; an admin account changes it."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest
from integration.dashboard._browser import PAGE_WAIT_S, Browser, start_console
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait
from servers import AclCluster, unique, wait_until

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.dashboard.auth import LOGIN_FAILURES_MAX, SESSION_COOKIE


@pytest.fixture(scope="module")
def acl(tmp_path_factory):
    cluster = AclCluster(tmp_path_factory.mktemp("console_acl"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def admin(acl):
    access, secret = acl.admin
    with SyncAdmin(ClientConfig(acl.namesrv.addr, access_key=access, secret_key=secret)) as a:
        yield a


@pytest.fixture(scope="module")
def browser(driver, acl, tmp_path_factory):
    console = start_console(acl.namesrv.addr, tmp_path_factory.mktemp("console") / "console.log")
    yield Browser(driver, console.addr)
    console.stop_cleanly()


def log_in(browser: Browser, account: tuple[str, str]) -> None:
    browser.driver.delete_all_cookies()
    browser.open("/login")
    access, secret = account
    browser.submit("form.stack", {"access_key": access, "secret_key": secret})


def post_as_session(browser: Browser, path: str, fields: dict[str, str]) -> int:
    """POST ``fields`` to the console with the browser's session, as a crafted request (not through a page)."""
    cookie = browser.driver.get_cookie(SESSION_COOKIE)
    request = urllib.request.Request(browser.base + path, urllib.parse.urlencode(fields).encode(), method="POST",
                                     headers={"Cookie": f"{SESSION_COOKIE}={cookie['value']}", "Origin": browser.base})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_visitor_is_asked_to_log_in_and_a_wrong_secret_is_refused(browser, acl):
    browser.driver.delete_all_cookies()
    browser.open("/")
    assert "/login" in browser.driver.current_url
    browser.loaded("login")
    access, _ = acl.user
    browser.submit("form.stack", {"access_key": access, "secret_key": "not-the-secret"})
    assert "do not know this account" in browser.find("#error").text
    assert browser.driver.get_cookie(SESSION_COOKIE) is None


def test_a_read_only_account_sees_and_can_do_nothing_that_writes(browser, acl, admin):
    log_in(browser, acl.user)
    assert acl.user[1] not in browser.driver.page_source
    assert all(acl.user[1] not in c["value"] for c in browser.driver.get_cookies())
    assert "read-only" in browser.find("header .who").text
    browser.open("/")
    assert {r.get_attribute("data-addr") for r in browser.all("#brokers tbody tr")} == {acl.broker.addr}
    browser.open("/topics")
    assert not browser.all("#create-topic")
    browser.open("/topics/TBW102")
    assert not browser.all("#send, #delete, #update-topic")
    name = unique("refused")
    assert post_as_session(browser, "/topics", {"topic": name}) == 403
    assert post_as_session(browser, "/topics/TBW102/delete", {"confirm": "yes"}) == 403
    assert admin.route(name) is None and admin.route("TBW102") is not None


def test_an_admin_account_changes_the_cluster(browser, acl, admin):
    log_in(browser, acl.admin)
    assert "(admin)" in browser.find("header .who").text
    name = unique("made_by_admin")
    browser.open("/topics")
    browser.submit("#create-topic", {"topic": name})
    assert admin.route(name) is not None


def cluster_connections(console_pid: int, acl) -> int:
    """The console process's TCP connections to the cluster's NameServer and broker."""
    ports = {addr.rsplit(":", 1)[1] for addr in (acl.namesrv.addr, acl.broker.addr)}
    lines = subprocess.run(["ss", "-Htnp", "state", "established"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return sum(f"pid={console_pid}," in line and line.split()[3].rsplit(":", 1)[1] in ports for line in lines)


def test_logging_out_an_accounts_last_session_closes_its_connections(driver, acl, tmp_path_factory):
    console = start_console(acl.namesrv.addr, tmp_path_factory.mktemp("console_logout") / "console.log")
    try:
        browser = Browser(driver, console.addr)
        log_in(browser, acl.user)
        user_cookie = browser.driver.get_cookie(SESSION_COOKIE)["value"]
        log_in(browser, acl.admin)  # the sampler now signs with the admin account; the user's session stays
        browser.open("/")
        both = cluster_connections(console.proc.pid, acl)
        request = urllib.request.Request(console.addr.rstrip("/") + "/logout", b"", method="POST",
                                         headers={"Cookie": f"{SESSION_COOKIE}={user_cookie}"})
        urllib.request.urlopen(request).close()
        wait_until(lambda: cluster_connections(console.proc.pid, acl) < both, timeout=10,
                   what="the user's connections closed")
        browser.open("/")  # the admin's still work
        assert {r.get_attribute("data-addr") for r in browser.all("#brokers tbody tr")} == {acl.broker.addr}
    finally:
        console.stop_cleanly()


def test_the_consoles_own_account_signs_its_sampling_only(driver, acl, tmp_path_factory):
    """--access-key signs the console's sampling, not its visitors' requests: a visitor still logs in."""
    access, secret = acl.admin
    console = start_console(acl.namesrv.addr, tmp_path_factory.mktemp("console_key") / "console.log",
                            "--access-key", access, "--secret-key", secret)
    try:
        browser = Browser(driver, console.addr)
        browser.driver.delete_all_cookies()
        browser.open("/topics")
        assert "/login" in browser.driver.current_url
    finally:
        console.stop_cleanly()


def test_repeated_failed_log_ins_are_refused_for_a_minute(driver, acl, tmp_path_factory):
    console = start_console(acl.namesrv.addr, tmp_path_factory.mktemp("console_limit") / "console.log")
    try:
        browser = Browser(driver, console.addr)
        browser.driver.delete_all_cookies()
        access, secret = acl.admin
        for _ in range(LOGIN_FAILURES_MAX):
            browser.open("/login")
            browser.submit("form.stack", {"access_key": access, "secret_key": "guess"})
            assert "do not know this account" in browser.find("#error").text
        browser.open("/login")
        page = browser.find("html")
        browser.find("[name=access_key]").send_keys(access)
        browser.find("[name=secret_key]").send_keys(secret)  # even the right one, now
        browser.find("form.stack button").click()
        WebDriverWait(browser.driver, PAGE_WAIT_S).until(staleness_of(page))
        browser.settled()
        assert "Too many failed log-ins" in browser.find("#error").text
        errors = [e["message"] for e in browser.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert len(errors) == 1 and "429 (Too Many Requests)" in errors[0]  # the refusal's own status only
        assert browser.driver.get_cookie(SESSION_COOKIE) is None
        request = urllib.request.Request(console.addr.rstrip("/") + "/login", urllib.parse.urlencode(
            {"access_key": access, "secret_key": secret}).encode(), method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)
        assert refused.value.code == 429
    finally:
        console.stop_cleanly()
