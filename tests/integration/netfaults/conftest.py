"""The ``network`` fixture of ``tests/netns.py`` for the fault injector's tests."""

from netns import network  # noqa: F401  (the fixture)
