"""``lazy_dataclass``: ``dataclasses.dataclass`` applied on a class's first use, not at import.

Building a dataclass compiles its generated methods (``__init__``, ``__repr__``, ``__eq__``...):
about half a millisecond a class. The protocol modules define some 70 header and body classes
while a process uses a handful, and every broker start built them all (~40 ms of a restart).
Here a class is built when its first instance is made, however it is made (a call, unpickling,
copying: all go through ``__new__``), or when its fields are first read (``dataclasses.fields``,
``is_dataclass``), its signature or its docstring; after that it is what
``dataclass(**params)`` makes of it, plus a ``__new__`` that checks one dict entry (it adds
~0.8 µs to making an instance: one Python call).

A class with a ``__new__`` of its own or of a base, no fields of its own, or ``slots`` (a new
class) is built at once.

Thread-safety: building is serialised by one lock, and a class counts as built only once all
of it is: a thread making an instance (or reading the fields) while another builds the class
waits for the build.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_LOCK = threading.RLock()
_BUILT = "_lazy_dataclass_built"  # set in a class's own dict once it and its bases are built


class _Pending:
    """A class waiting to be built, with the ``dataclass`` parameters to build it with."""

    def __init__(self, cls: type, params: dict[str, Any]) -> None:
        self.cls = cls
        self.params = params
        self.builder: int | None = None  # the thread building it


class BuildOnAccess:
    """Stands for ``__dataclass_fields__`` (or ``__signature__``, ``__doc__``) until the class
    is built: reading it builds."""

    def __init__(self, pending: _Pending, attr: str) -> None:
        self.pending = pending
        self.attr = attr

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if self.pending.builder == threading.get_ident():  # dataclass itself, building the class
            raise AttributeError(self.attr)
        build(self.pending.cls)
        return self.pending.cls.__dict__[self.attr]


def _build_then_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``__new__`` of a lazy dataclass (and its subclasses): build the class before its first
    instance. The arguments are ``__init__``'s."""
    if _BUILT not in cls.__dict__:
        build(cls)
    return object.__new__(cls)


def is_built(cls: type) -> bool:
    return not isinstance(cls.__dict__.get("__dataclass_fields__"), BuildOnAccess)


def build(cls: type) -> None:
    """Apply the dataclass machinery to ``cls`` and its lazy bases, if not done yet."""
    if _BUILT in cls.__dict__:
        return
    with _LOCK:
        for c in reversed(cls.__mro__):
            pending = c.__dict__.get("__dataclass_fields__")
            if isinstance(pending, BuildOnAccess):
                own_doc = c.__dict__.get("__doc__")
                if isinstance(own_doc, BuildOnAccess):  # dataclass reads it: a plain None meanwhile
                    own_doc = c.__doc__ = None
                # dataclass replaces the placeholder with the fields in one step: another thread
                # reading them meanwhile gets the placeholder (and waits here) or the fields
                pending.pending.builder = threading.get_ident()
                dataclass(**pending.pending.params)(c)
                # the signature (and the docstring dataclass derives from it) is __init__'s, not
                # that of the generic __new__ above
                init = inspect.signature(c.__init__)
                c.__signature__ = init.replace(parameters=list(init.parameters.values())[1:])  # type: ignore[attr-defined]
                if not own_doc:
                    c.__doc__ = c.__name__ + str(c.__signature__).replace(" -> None", "")  # type: ignore[attr-defined]
        setattr(cls, _BUILT, True)


def lazy_dataclass(cls: T | None = None, /, **params: Any) -> Any:
    """``@lazy_dataclass`` or ``@lazy_dataclass(frozen=True, ...)``, as ``@dataclass``."""

    def wrap(c: T) -> T:
        own = c.__dict__
        other_new = any(k.__dict__.get("__new__", _build_then_new) is not _build_then_new for k in c.__mro__[:-1])
        if other_new or not own.get("__annotations__") or params.get("slots"):
            return dataclass(**params)(c)
        c.__new__ = _build_then_new  # type: ignore[assignment]
        pending = _Pending(c, params)
        c.__dataclass_fields__ = BuildOnAccess(pending, "__dataclass_fields__")  # type: ignore[attr-defined]
        c.__signature__ = BuildOnAccess(pending, "__signature__")  # type: ignore[attr-defined]
        if not own.get("__doc__"):  # dataclass writes one from the signature
            c.__doc__ = BuildOnAccess(pending, "__doc__")  # type: ignore[assignment]
        return c

    return wrap if cls is None else wrap(cls)
