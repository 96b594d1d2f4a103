#!/usr/bin/env python3
"""A throwaway CA and certificates for tests and ``spark-mq dev --tls``: see ``spark_mq/commands/certs.py``
(``--help``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_mq.commands.certs import main  # the repository's package, from its root

if __name__ == "__main__":
    sys.exit(main())
