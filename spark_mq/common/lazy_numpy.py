"""numpy imported at its first use rather than at import.

numpy's import is a third of the instructions a broker runs from its start to its first served pull
(~246 M of ~739 M): the modules a broker imports before it serves take ``np`` from here instead of
``import numpy as np``. Until numpy is needed, ``np`` is a stand-in whose first attribute lookup imports
numpy and puts the real module in place of the stand-in in every module of ours that holds it, so a hot
path looks up a plain global from then on (no attribute hop per call). A module importing ``np`` once
numpy is loaded gets numpy itself.

A module that takes ``np`` from here makes no numpy object at import: such objects (dtypes, tables) are
made by a cached getter on first use.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

_PACKAGE = "spark_mq"


class _NumpyOnFirstUse:
    """Stands for numpy until an attribute is looked up: then imports it and rebinds the holders."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import numpy  # lazy import: this module's purpose (numpy is a third of a broker's restart)

        _rebind(numpy)
        return getattr(numpy, name)

    def __repr__(self) -> str:
        return "<numpy, imported on first use>"


_STAND_IN = _NumpyOnFirstUse()


def _rebind(numpy: ModuleType) -> None:
    """Every ``np`` of our modules that is still the stand-in becomes numpy."""
    for name, module in list(sys.modules.items()):
        if name.startswith(_PACKAGE) and getattr(module, "np", None) is _STAND_IN:
            module.np = numpy


def __getattr__(name: str) -> Any:
    """``from spark_mq.common.lazy_numpy import np``: numpy once loaded, else the stand-in."""
    if name != "np":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return sys.modules.get("numpy") or _STAND_IN
