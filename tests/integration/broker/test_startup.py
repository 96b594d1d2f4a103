"""A broker's start: clients find it through the NameServer as soon as it says it serves (it
registers during start, not on the 30 s timer), after a clean stop with a backlog too, and the
metrics endpoint is up by then. A clean stop is followed by a normal recovery, not the abnormal
one that re-reads the commitlog; how long a restart takes is measured by ``benchmarks/peers.py``
(its restart row), not asserted here."""

from __future__ import annotations

import urllib.request

from servers import Broker, unique

from ._support import pull_header, send_header


def test_restart_is_registered_by_the_ready_line_and_serves_the_backlog(namesrv, tmp_path, make_api):
    b = Broker(namesrv, tmp_path / "b", broker_name=unique("broker_start"), metrics=True, verbose=False)
    try:
        api = make_api()
        topic = unique("Startup")
        api.create_topic(b.addr, topic, 2, 2)
        for i in range(40):
            api.send_message(b.addr, send_header(topic, i % 2), f"m{i}".encode())
        b.stop()
        assert api.get_route_info(namesrv, topic) is None  # a clean stop unregisters

        b.start_again()  # returns once the ready line is printed
        route = api.get_route_info(namesrv, topic)  # no waiting: registered before the ready line
        assert route is not None
        assert [(d.broker_name, d.broker_addrs) for d in route.broker_datas] == [(b.name, {0: b.addr})]
        pulled = api.pull_message(b.addr, pull_header("g", topic, 0, 0))
        assert [m.body for m in pulled.messages()][:2] == [b"m0", b"m2"]
        with urllib.request.urlopen(b.metrics_url, timeout=5) as resp:
            assert b"spark_mq_messages_out_total" in resp.read()
        # both starts recovered normally ("normal recovery" alone would also match "abnormal recovery")
        log = b.log()
        assert log.count("(normal recovery") == 2 and "(abnormal recovery" not in log, log[-3000:]
    finally:
        b.stop_if_running()
