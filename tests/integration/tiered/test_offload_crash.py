"""The offload job SIGKILLed in its two crash windows — after a table commit and before the broker
records the watermark, and between two queues — then run again: the archive holds every produced
message exactly once, and the broker's watermarks catch up with the table."""

from __future__ import annotations

import pytest

from spark_mq.tiered.archive import FORMATS, open_archive

from ._support import (
    QUEUES,
    broker_rows,
    check_produced,
    create_topic,
    kill_job_at,
    produce,
    pyarrow_rows,
    run_job,
    watermarks,
)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("window", ["committed", "queue_done"])
def test_rerun_after_sigkill_archives_each_message_once(tiered_cluster, api, tmp_path, fmt, window):
    c = tiered_cluster
    topic = create_topic(api, c.namesrv, c.addr, f"offload_crash_{window}_{fmt}")
    sent = produce(c.namesrv, topic, 120)
    args = ("--namesrv", c.namesrv, "--topic", topic, "--root", str(tmp_path), "--format", fmt, "--all")

    printed = kill_job_at(window, *args)
    archive = open_archive(str(tmp_path), topic, fmt)
    first = api.query_tiered_offset(c.addr, topic, 0)
    assert archive.archived_end(c.broker.name, 0) == first.max_offset  # queue 0 is in the table...
    if window == "committed":  # ...but the broker was not told
        assert "[offload] watermark" not in printed
        assert watermarks(api, c.addr, topic) == dict.fromkeys(range(QUEUES), 0)
    else:  # ...and recorded; queue 1 not started
        assert f"[offload] watermark {topic}@{c.broker.name}:0 = {first.max_offset}" in printed
        assert watermarks(api, c.addr, topic)[0] == first.max_offset
        assert archive.archived_end(c.broker.name, 1) is None

    again = run_job(*args)
    if window == "committed":  # the re-run only catches the watermark up for queue 0
        assert f"[offload] watermark {topic}@{c.broker.name}:0 = {first.max_offset}" in again.stdout
        assert f"committed {topic}@{c.broker.name}:0 " not in again.stdout
    expected = broker_rows(c.addr, c.broker.name, topic)
    check_produced(expected, sent)
    assert pyarrow_rows(tmp_path, topic).equals(expected)
    assert watermarks(api, c.addr, topic) == {q: api.get_max_offset(c.addr, topic, q) for q in range(QUEUES)}
