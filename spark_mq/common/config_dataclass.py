"""Frozen dataclasses of many fields whose ``__init__``, ``__repr__``, ``__eq__`` and ``__hash__`` are
written once, here, rather than compiled for each class.

``dataclasses.dataclass`` writes those four methods as source text naming every field and compiles
each with ``exec``: for the config classes (``BrokerConfig``'s 92 fields with its bases) that was ~38 M
instructions, ~9 ms of every broker's start (5 % of it to its first served pull), for classes made a few
times per process. A class decorated with :func:`config_dataclass` is ``@dataclass(frozen=True)`` in
everything else (``dataclasses.fields``, ``replace``, ``is_dataclass``, frozen attributes, field options,
``__post_init__``, ``__match_args__``; no ``InitVar``) and its four methods answer as the generated ones
do: positional or keyword arguments in field order with their defaults (``default_factory`` called per
instance), ``repr`` of the fields with ``repr=True``, equality of the fields with ``compare=True`` for
instances of the same class, and the hash of the fields with ``hash=True`` (or ``compare=True`` when
``hash`` is None). Each call walks the fields: a few µs,
fine for the configuration objects this is for (and a few other classes made once per process: the timer and
transaction keys, a store's recovery report), not for a class made per message.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_INIT = "__config_dataclass_init__"  # per class: (name, default, default_factory) of each init field, in order
_REPR = "__config_dataclass_repr__"
_COMPARE = "__config_dataclass_compare__"
_HASH = "__config_dataclass_hash__"


def config_dataclass(cls: T) -> T:
    """``@dataclass(frozen=True)`` on ``cls``, with the four methods above shared rather than compiled."""
    for name in ("__init__", "__repr__", "__eq__", "__hash__"):
        if name in cls.__dict__:
            raise TypeError(f"{cls.__name__}: a config dataclass defines no {name} of its own")
    dataclasses.dataclass(frozen=True, init=False, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    for f in fields:
        if not f.init and f.default_factory is not dataclasses.MISSING:  # the shared __init__ never calls it
            raise TypeError(f"{cls.__name__}.{f.name}: a config dataclass has no init=False field with a "
                            "default_factory")
    setattr(cls, _INIT, tuple((f.name, f.default, f.default_factory) for f in fields if f.init))
    setattr(cls, _REPR, tuple(f.name for f in fields if f.repr))
    setattr(cls, _COMPARE, tuple(f.name for f in fields if f.compare))
    setattr(cls, _HASH, tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    cls.__init__ = _init  # type: ignore[misc]
    cls.__repr__ = _repr  # type: ignore[method-assign]
    cls.__eq__ = _eq  # type: ignore[method-assign]
    cls.__hash__ = _hash  # type: ignore[method-assign]
    return cls


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    spec = getattr(type(self), _INIT)
    if len(args) > len(spec):
        raise TypeError(f"{type(self).__qualname__}() takes {len(spec)} positional arguments but {len(args)} "
                        "were given")
    values = {name: value for (name, _, _), value in zip(spec, args, strict=False)}  # args checked above
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"{type(self).__qualname__}() got multiple values for argument {name!r}")
        values[name] = value
    unknown = values.keys() - {name for name, _, _ in spec}
    if unknown:
        raise TypeError(f"{type(self).__qualname__}() got an unexpected keyword argument {min(unknown)!r}")
    for name, default, factory in spec[len(args):]:
        if name in values:
            continue
        if default is not dataclasses.MISSING:
            values[name] = default
        elif factory is not dataclasses.MISSING:
            values[name] = factory()
        else:
            raise TypeError(f"{type(self).__qualname__}() missing required argument: {name!r}")
    self.__dict__.update(values)  # frozen: ``object.__setattr__`` per field is what the generated one does
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _repr(self: Any) -> str:
    return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in getattr(type(self), _REPR))})"


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = getattr(type(self), _COMPARE)  # tuples, as the generated method compares (identity first)
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in getattr(type(self), _HASH)))
