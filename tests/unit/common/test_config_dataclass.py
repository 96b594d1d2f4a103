"""A config dataclass answers as ``@dataclass(frozen=True)`` on the same class does, without
compiling its own ``__init__``, ``__repr__``, ``__eq__`` and ``__hash__``."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from spark_mq.broker.scheduled.timer import TimerLimits
from spark_mq.broker.transaction.service import TransactionConfig
from spark_mq.common import config_dataclass as module
from spark_mq.common.config import BrokerConfig, SecurityConfig, ServerChannelConfig
from spark_mq.common.config_dataclass import config_dataclass
from spark_mq.store.recovery import RecoveryReport


def _pair() -> tuple[type, type]:
    """The same class body made by ``config_dataclass`` and by ``dataclass(frozen=True)``."""

    def body(decorate):
        @decorate
        class Base:
            name: str = "a"
            port: int = 0

        @decorate
        class Conf(Base):
            tags: dict[str, str] = field(default_factory=dict, compare=False)  # as BrokerConfig.extra
            secret: str = field(default="", repr=False)
            note: str = field(default="", compare=False)
            weight: float = field(default=1.0, hash=False)
            checked: int = field(default=0, init=False)

            def __post_init__(self) -> None:
                if self.port < 0:
                    raise ValueError("port")
                object.__setattr__(self, "checked", self.port + 1)

        return Conf

    return body(config_dataclass), body(dataclass(frozen=True))


@pytest.mark.parametrize("args, kwargs", [((), {}), (("b", 5), {}), (("b",), {"port": 7, "tags": {"k": "v"}}),
                                          ((), {"secret": "s", "note": "n", "weight": 2.5})])
def test_instances_answer_as_the_generated_methods_do(args, kwargs):
    ours, plain = _pair()
    a, b = ours(*args, **kwargs), plain(*args, **kwargs)
    assert repr(a).replace("_pair.<locals>.body.<locals>.", "") == repr(b).replace("_pair.<locals>.body.<locals>.", "")
    assert hash(a) == hash(b)
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert a == ours(*args, **kwargs) and a != dataclasses.replace(a, port=99)
    assert a == dataclasses.replace(a, note="other")  # compare=False
    assert hash(a) == hash(dataclasses.replace(a, weight=9.0))  # hash=False
    assert a.__eq__(b) is NotImplemented  # another class, as a dataclass answers
    assert copy.copy(a) == a and copy.deepcopy(a) == a
    assert ours().tags is not ours().tags  # a factory per instance
    assert ours.__match_args__ == plain.__match_args__
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(plain)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.port = 1  # type: ignore[misc]


def test_wrong_arguments_raise_type_error_and_post_init_runs():
    ours, _ = _pair()
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        ours(colour="red")
    with pytest.raises(TypeError, match="multiple values for argument 'name'"):
        ours("b", name="c")
    with pytest.raises(TypeError, match="positional arguments"):
        ours("a", 1, {}, "", "", 1.0, 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'checked'"):  # init=False
        ours(checked=3)
    with pytest.raises(ValueError, match="port"):
        ours(port=-1)
    assert ours(port=4).checked == 5


def test_a_required_field_must_be_given():
    @config_dataclass
    class Required:
        name: str

    with pytest.raises(TypeError, match="missing required argument: 'name'"):
        Required()
    assert Required("x").name == "x"


def test_the_config_classes_compile_none_of_the_four_methods():
    config = BrokerConfig(listen_port=5, extra={"k": "v"})
    assert pickle.loads(pickle.dumps(config)) == config and dataclasses.replace(config, listen_port=6) != config
    # compiling them was ~38 M instructions of every broker's start (the module's docstring)
    # and the few others made once per broker before it serves (its timer and transaction keys, the recovery report)
    for cls in (SecurityConfig, ServerChannelConfig, BrokerConfig, TimerLimits, TransactionConfig, RecoveryReport):
        for name in ("__init__", "__repr__", "__eq__", "__hash__"):
            assert getattr(cls, name).__module__ == module.__name__, (cls.__name__, name)


def test_an_init_false_field_with_a_factory_is_refused():
    with pytest.raises(TypeError, match="no init=False field with a default_factory"):
        @config_dataclass
        class Unsupported:
            seen: list[int] = field(default_factory=list, init=False)
