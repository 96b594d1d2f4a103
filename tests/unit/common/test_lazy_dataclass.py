"""Lazy dataclasses behave as the dataclass they stand for once used, and are not made before."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import subprocess
import sys
import threading
from dataclasses import field

import pytest

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass, realize
from spark_mq.remoting import bodies, headers


def _pair() -> tuple[type, type]:
    @lazy_dataclass(frozen=True, kw_only=True)
    class Base(LazyDataclass):
        name: str
        tags: tuple[str, ...] = field(default_factory=tuple)

    @lazy_dataclass(frozen=True, kw_only=True)
    class Child(Base):
        count: int = 0

    return Base, Child


def test_made_at_the_first_instance_with_the_bases_first():
    base, child = _pair()
    assert not dataclasses.is_dataclass(base) and not dataclasses.is_dataclass(child)
    c = child(name="a", count=2)
    assert dataclasses.is_dataclass(base) and dataclasses.is_dataclass(child)
    assert [f.name for f in dataclasses.fields(child)] == ["name", "tags", "count"]
    assert c == child(name="a", count=2) and hash(c) == hash(child(name="a", count=2))
    assert repr(c).endswith("Child(name='a', tags=(), count=2)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword"):
        child(name="a", colour="red")
    with pytest.raises(TypeError, match="missing"):
        base()
    # the generated __init__ is the class's own: no hook left on the path of later instances
    assert child.__init__ is not LazyDataclass.__init__ and "__init__" in vars(child)


def test_realize_answers_questions_asked_of_the_class():
    base, _ = _pair()
    assert [f.name for f in dataclasses.fields(realize(base))] == ["name", "tags"]
    assert str(inspect.signature(base)) == "(*, name: 'str', tags: 'tuple[str, ...]' = <factory>) -> None"


def test_copies_and_pickles_are_equal_and_hash_alike():
    h = headers.PullMessageRequestHeader(consumer_group="g", topic="t", queue_id=1, queue_offset=5,
                                         max_msg_nums=32, sys_flag=0, commit_offset=0, suspend_timeout_millis=0,
                                         sub_version=0)
    assert copy.copy(h) == h and copy.deepcopy(h) == h and pickle.loads(pickle.dumps(h)) == h
    # unpickled first in a fresh process, where nothing made the class yet
    code = ("import pickle, sys; h = pickle.loads(sys.stdin.buffer.read()); "
            "print(h == pickle.loads(pickle.dumps(h)), hash(h) == hash(pickle.loads(pickle.dumps(h))), sep='\\n'); "
            "print(repr(h))")
    for sent in (h, headers.UpdateConsumerOffsetResponseHeader()):  # the second has no fields at all
        out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(sent), capture_output=True, check=True)
        assert out.stdout.decode().splitlines() == ["True", "True", repr(sent)]


def test_first_instances_made_in_many_threads_at_once():
    base, child = _pair()
    barrier = threading.Barrier(8)
    made, errors = [], []

    def make(i: int) -> None:
        barrier.wait()
        try:
            made.append(child(name=str(i)) if i % 2 else base(name=str(i)))
        except Exception as e:  # the test reports any failure
            errors.append(e)

    threads = [threading.Thread(target=make, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(made) == 8


def test_every_header_and_body_can_be_made():
    bases = (LazyDataclass, headers.Header, bodies.Body)
    lazy = [c for m in (headers, bodies) for c in vars(m).values()
            if isinstance(c, type) and issubclass(c, LazyDataclass) and c not in bases]
    assert len(lazy) >= 100
    for cls in lazy:
        assert dataclasses.is_dataclass(realize(cls)), cls.__name__


def test_misuse_is_refused():
    with pytest.raises(TypeError, match="LazyDataclass"):
        lazy_dataclass(type("Plain", (), {}))
    with pytest.raises(TypeError, match="slots"):
        lazy_dataclass(slots=True)
