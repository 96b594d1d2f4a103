"""``spark-mq dev --replicas 2 --controller --dashboard``: one process serves the dev cluster and its console;
the console's controller page shows the set's master, epochs, SyncStateSet and history of elections as the
admin API gives them,
in a real headless chromium, and the overview lists both replicas with their roles."""

from __future__ import annotations

import urllib.request

from integration.dashboard._browser import Browser
from servers import ServerProcess, free_port, wait_until

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.sync_api import SyncMQClientAPI

TIMEOUT_S = 60
SET = "broker-a"


def serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url) as response:
            return response.status == 200
    except OSError:  # not listening yet
        return False


def test_dev_serves_a_console_with_the_controllers_view(driver, tmp_path):
    namesrv, port = f"127.0.0.1:{free_port()}", free_port()
    dev = ServerProcess(["dev", "--replicas", "2", "--controller", "--namesrv-port", namesrv.rpartition(":")[2],
                         "--port", "0", "--metrics-port", "0", "--store", str(tmp_path / "store"), "--dashboard",
                         "--dashboard-port", str(port)], tmp_path / "dev.log", "spark-mq dev: ", verbose=False)
    base = f"http://127.0.0.1:{port}"
    try:
        with SyncAdmin(ClientConfig(namesrv)) as admin:
            view = wait_until(lambda: (v := admin.controller_view([namesrv])).broker_sets.get(SET) is not None
                              and len(v.broker_sets[SET].in_sync_replicas) == 2 and v, TIMEOUT_S,
                              "both replicas in the SyncStateSet")
            wait_until(lambda: serving(base), TIMEOUT_S, "the console")
            browser = Browser(driver, base)
            browser.open("/controller", "controller")
            info = view.broker_sets[SET]
            cells = [td.text for td in browser.all("#sync-state tbody tr td")]
            assert cells[:4] == [SET, f"{info.master_address} (replica {info.master_broker_id})",
                                 str(info.master_epoch), str(info.sync_state_set_epoch)]
            assert all(f"{r.broker_id}: {r.broker_address}" in cells[4] for r in info.in_sync_replicas)
            assert namesrv in browser.find("#controllers").text and "leader" in browser.find("#controllers").text
            with SyncMQClientAPI() as api:  # the master's epoch file: its terms so far
                epochs = api.get_epoch_history(info.master_address).epochs
            terms = [t.text for t in browser.all(f"#elections tr[data-broker='{SET}'] .term")]
            assert terms == [f"{e} from {s:,}" for e, s in epochs] and terms
            browser.open("/")
            assert sorted(td.text for td in browser.all("#brokers td.role")) == sorted(b.role for b in admin.brokers())
    finally:
        dev.stop_cleanly()
