"""The ``network`` fixture of ``tests/netns.py`` (hosts as network namespaces) for the tests on machines."""

from netns import network  # noqa: F401  (the fixture)
