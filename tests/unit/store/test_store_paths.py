"""store_path: every store path is built inside the root, and a name that would leave it (or is no
plain file name) raises StorePathError before anything is touched; MessageStore.delete_topic of
such a name deletes nothing outside the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_mq.common.errors import StorePathError
from spark_mq.common.message import Message
from spark_mq.store.store_paths import CONSUME_QUEUE_DIR, store_path

BAD_PARTS = ["", ".", "..", "../x", "a/../../x", "/etc", "/", "a/b", "a\\b", "..\\..\\x", "a\x00b"]


@pytest.mark.parametrize("part", BAD_PARTS)
def test_a_part_that_is_no_plain_file_name_is_refused(tmp_path, part):
    with pytest.raises(StorePathError):
        store_path(tmp_path / "store", CONSUME_QUEUE_DIR, part)
    with pytest.raises(StorePathError):
        store_path(tmp_path / "store", part)


@pytest.mark.parametrize("root", ["store", "./data/store", "/var/lib/store", "a/../store"])
def test_plain_names_join_under_the_root(root):
    path = store_path(Path(root), CONSUME_QUEUE_DIR, "%RETRY%g", "0")
    assert path == Path(root, CONSUME_QUEUE_DIR, "%RETRY%g", "0")
    assert store_path(Path(root)) == Path(root)
    # names that merely contain dots are plain names
    assert store_path(Path(root), "...", "a..b").name == "a..b"


def test_delete_topic_of_a_traversal_name_touches_nothing(make_store, tmp_path):
    root = tmp_path / "store"
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "precious").write_text("x")
    store = make_store(root)
    store.put_message(Message("%RETRY%g", b"m"), 0)  # consumequeue/%RETRY%g exists
    for topic in ("%RETRY%g/../../../sentinel", "../../sentinel", str(sentinel)):
        with pytest.raises(StorePathError):
            store.delete_topic(topic)
    assert (sentinel / "precious").read_text() == "x"
    assert store.get_max_offset("%RETRY%g", 0) == 1
