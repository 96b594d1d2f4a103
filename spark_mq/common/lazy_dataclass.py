"""Dataclasses made at their first instance rather than at import.

``dataclasses.dataclass`` compiles every method it writes (``__init__``, ``__repr__``, ``__eq__``
and, for a frozen class, ``__setattr__``, ``__delattr__`` and ``__hash__``) with one ``exec`` each:
~0.3 ms a class on CPython 3.11. A broker's start imports ~180 dataclasses, 114 of them the typed
headers and bodies of requests (``remoting/headers.py``, ``remoting/bodies.py``), most of which a
process never builds. A subclass of :class:`LazyDataclass` decorated with :func:`lazy_dataclass`
is handed to ``dataclass`` with the same options when its first instance is made (constructed,
unpickled or copied) or :func:`realize` is called (for ``dataclasses.fields`` and other questions
asked of the class itself). From then on it is the class ``dataclass`` makes, with its own
generated ``__init__``: making an instance costs what it always did (a ``__new__`` hook would
cost ~0.5 µs an instance for ever: CPython cannot restore ``object.__new__``'s fast slot).

Until then the class is a plain class: ``dataclasses.fields``/``is_dataclass`` do not know it (a lazy
subclass of a made dataclass, such as ``NamesrvConfig``, answers with its bases' fields only: ask
``realize(cls)``) and a field given by ``field(...)`` is a ``Field`` class attribute. A subclass must
be a lazy dataclass too (a plain ``@dataclass`` would miss the fields of a base not made yet); one
without a decorator is made with its bases.

Thread-safety: one thread makes a class (under a lock); another making a first instance of the
same class meanwhile waits for it, unless it finds the new ``__init__`` already in place while
``dataclass`` is still adding ``__repr__``/``__eq__``/``__hash__`` (a fraction of a millisecond, once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

T = TypeVar("T", bound=type)

_OPTIONS = "__lazy_dataclass__"  # a pending class's dataclass options, removed once it is made
_MAKING = threading.Lock()


class LazyDataclass:
    """Base of the lazy dataclasses: its ``__init__`` and ``__setstate__`` make the class of the
    instance and hand over to what ``dataclass`` made (only ever reached before that)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = realize(type(self))
        if cls.__init__ is LazyDataclass.__init__:  # not a lazy dataclass: no arguments taken
            super().__init__(*args, **kwargs)
        else:
            cls.__init__(self, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        """The fields, even none (``object``'s answer would be None and skip ``__setstate__``)."""
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        """An unpickled or copied instance: its class made before it is used."""
        realize(type(self))
        self.__dict__.update(state)


@overload
def lazy_dataclass(cls: T, /) -> T: ...


@overload
def lazy_dataclass(**options: Any) -> Callable[[T], T]: ...


def lazy_dataclass(cls: Any = None, /, **options: Any) -> Any:
    """``@dataclass(**options)`` on a :class:`LazyDataclass`, applied at its first instance."""
    if options.get("slots") or options.get("init") is False:
        raise TypeError("lazy_dataclass needs the generated __init__ and no slots (dataclass replaces slots classes)")

    def defer(klass: T) -> T:
        if not issubclass(klass, LazyDataclass) or "__init__" in klass.__dict__:
            raise TypeError(f"{klass.__name__}: a lazy dataclass subclasses LazyDataclass and defines no __init__")
        setattr(klass, _OPTIONS, options)
        return klass

    return defer if cls is None else defer(cls)


def realize(cls: T) -> T:
    """Make ``cls`` and every pending lazy dataclass it inherits from (bases first); returns ``cls``."""
    if not any(_OPTIONS in b.__dict__ for b in cls.__mro__):
        return cls
    with _MAKING:
        for klass in reversed(cls.__mro__):
            options = klass.__dict__.get(_OPTIONS)
            if options is not None:
                dataclass(**options)(klass)
                delattr(klass, _OPTIONS)
    return cls
