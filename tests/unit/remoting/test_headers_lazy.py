"""Header and body classes get their dataclass machinery on first use (``lazy_dataclass``):
every way in builds them, and they then behave as the eager dataclasses they were."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest

from spark_mq.common.lazy_dataclass import is_built, lazy_dataclass
from spark_mq.remoting import headers as h


def test_importing_builds_no_header():
    code = ("import spark_mq.remoting.headers as h\n"
            "from spark_mq.common.lazy_dataclass import is_built\n"
            "classes = [c for c in vars(h).values() if isinstance(c, type) and issubclass(c, h.Header)]\n"
            "fielded = [c for c in classes if c is not h.Header and c.__dict__.get('__annotations__')]\n"
            "print([c.__name__ for c in fielded if is_built(c)])\n")  # a header without fields is built at once
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def pull_fields() -> dict[str, object]:
    return dict(consumer_group="g", topic="t", queue_id=1, queue_offset=2, max_msg_nums=3, sys_flag=0,
                commit_offset=0, suspend_timeout_millis=0, sub_version=0)


def test_built_header_is_a_frozen_keyword_only_dataclass():
    a = h.PullMessageRequestHeader(**pull_fields())
    b = h.PullMessageRequestHeader(**pull_fields())
    assert a == b and hash(a) == hash(b) and a is not b
    assert repr(a).startswith("PullMessageRequestHeader(consumer_group='g'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.topic = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        h.PullMessageRequestHeader("g", "t")  # type: ignore[misc]
    assert dataclasses.replace(a, topic="u").topic == "u"
    assert is_built(h.PullMessageRequestHeader)


@pytest.mark.parametrize("way", ["fields", "is_dataclass", "from_ext_fields", "instance"])
def test_every_way_in_builds_the_class(way):
    code = ("import dataclasses\n"
            "import spark_mq.remoting.headers as h\n"
            "c = h.SendMessageRequestHeaderV2\n"
            f"way = {way!r}\n"
            "ext = {'a': 'g', 'b': 't', 'c': 'd', 'd': '4', 'e': '1', 'f': '0', 'g': '7', 'h': '0'}\n"
            "if way == 'fields': print(len(dataclasses.fields(c)))\n"
            "elif way == 'is_dataclass': print(dataclasses.is_dataclass(c))\n"
            "elif way == 'from_ext_fields': print(c.from_ext_fields(ext).born_timestamp)\n"
            "else: print(c(producer_group='g', topic='t', default_topic='d', default_topic_queue_nums=4,"
            " queue_id=1, sys_flag=0, born_timestamp=7, flag=0).born_timestamp)\n"
            "print(c.__dataclass_params__.frozen, [f.name for f in dataclasses.fields(c)][:2])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == {"fields": "14", "is_dataclass": "True", "from_ext_fields": "7", "instance": "7"}[way]
    assert out[1] == "True ['producer_group', 'topic']"


def test_concurrent_first_use_builds_once():
    code = ("import threading\n"
            "import spark_mq.remoting.headers as h\n"
            "go, errors, made = threading.Barrier(8), [], []\n"
            "def first():\n"
            "    go.wait()\n"
            "    try:\n"
            "        made.append(h.GetMaxOffsetRequestHeader(topic='t', queue_id=1))\n"
            "    except Exception as e:\n"
            "        errors.append(repr(e))\n"
            "ts = [threading.Thread(target=first) for _ in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(errors, len(set(made)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] 1"


def test_bodies_are_built_on_first_use_too():
    code = ("from spark_mq.common.lazy_dataclass import is_built\n"
            "from spark_mq.remoting.bodies import LockBatchRequestBody, MessageQueue, UnlockBatchRequestBody\n"
            "print(is_built(LockBatchRequestBody), is_built(MessageQueue))\n"
            "mq = MessageQueue('t', 'b', 1)\n"
            "print(mq < MessageQueue('t', 'b', 2), {mq: 1}[MessageQueue('t', 'b', 1)])\n"
            "body = UnlockBatchRequestBody(consumer_group='g', client_id='c', mq_set=[mq])\n"
            "print(is_built(LockBatchRequestBody), body == UnlockBatchRequestBody.from_json(body.to_json()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:3] == ["False False", "True 1", "True True"]


def test_lazy_dataclass_is_the_dataclass_it_stands_for():
    @lazy_dataclass
    class A:
        x: int
        y: list = dataclasses.field(default_factory=list)

    class B(A):
        pass

    @lazy_dataclass(frozen=True, order=True)
    class C:
        k: int

    @lazy_dataclass
    class D:
        v: int = 0

        def __init__(self, v: int) -> None:  # its own __init__ is kept
            self.v = v * 2

    @lazy_dataclass
    class E:
        w: int

        def __new__(cls, *args: object, **kwargs: object) -> E:  # its own __new__: built at once
            return super().__new__(cls)

    assert not is_built(A) and not is_built(C) and not is_built(D) and is_built(E)
    b = B(1)
    assert is_built(A) and b == B(1) and b.y == [] and repr(b).endswith("B(x=1, y=[])") and b.__hash__ is None
    assert not is_built(C) and [f.name for f in dataclasses.fields(C)] == ["k"] and is_built(C)
    assert C(1) < C(2) and hash(C(3)) == hash(C(3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        C(1).k = 2  # type: ignore[misc]
    assert D(2).v == 4 and D(2) == D(2) and E(5).w == 5
    assert str(inspect.signature(C)) == "(k: 'int') -> None" and C.__doc__ == "C(k: 'int')"


def test_threads_using_a_class_while_it_is_built_wait_for_the_build():
    code = ("import dataclasses, threading\n"
            "import spark_mq.remoting.headers as h\n"
            "go, errors, seen = threading.Barrier(8), [], []\n"
            "def use(i):\n"
            "    go.wait()\n"
            "    try:\n"
            "        if i % 2:\n"
            "            seen.append(len(dataclasses.fields(h.SearchOffsetRequestHeader)))\n"
            "        else:\n"
            "            make = lambda: h.SearchOffsetRequestHeader(topic='t', queue_id=1, timestamp=5)\n"
            "            seen.append(hash(make()) == hash(make()))\n"
            "    except Exception as e:\n"
            "        errors.append(repr(e))\n"
            "ts = [threading.Thread(target=use, args=(i,)) for i in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(errors, sorted(map(str, seen)))\n")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip() == "[] ['3', '3', '3', '3', 'True', 'True', 'True', 'True']"


def test_unpickling_in_a_fresh_process_builds_the_classes():
    import pickle

    from spark_mq.remoting.bodies import DataVersion, MessageQueue, TopicConfig, TopicConfigSerializeWrapper

    wrapper = TopicConfigSerializeWrapper({"t": TopicConfig("t", 2, 2)}, DataVersion(1, 2))
    data = pickle.dumps(({MessageQueue("t", "b", 1): 5}, wrapper, h.PullMessageRequestHeader(**pull_fields())))
    code = ("import pickle, sys\n"
            "from spark_mq.common.lazy_dataclass import is_built\n"
            "from spark_mq.remoting.bodies import MessageQueue\n"
            "from spark_mq.remoting.headers import PullMessageRequestHeader as P\n"
            "before = is_built(MessageQueue), is_built(P)\n"
            "d, w, h = pickle.loads(sys.stdin.buffer.read())\n"  # no __init__ runs: __setstate__ builds
            "print(before, is_built(MessageQueue), is_built(P), d[MessageQueue('t', 'b', 1)],\n"
            "      w.topic_config_table['t'].read_queue_nums, h == pickle.loads(pickle.dumps(h)))\n")
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True).stdout
    assert out.decode().strip() == "(False, False) True True 5 2 True"
