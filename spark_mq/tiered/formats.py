"""The archive's table formats: names only, no pyarrow, so the command line can offer them without
loading the Arrow stack (a broker's start-up parses the same argument tree)."""

from __future__ import annotations

from typing import Literal

FORMAT_DELTA = "delta"
FORMAT_PARQUET = "parquet"
FORMATS = (FORMAT_DELTA, FORMAT_PARQUET)
DEFAULT_FORMAT = FORMAT_DELTA
Format = Literal["delta", "parquet"]
