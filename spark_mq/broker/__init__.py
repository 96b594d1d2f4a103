"""The broker: RocketMQ request processors (``processors/``) over a ``MessageStore``, with its features
in their own subpackages (``transaction/``, ``scheduled/`` delay levels and timers, ``replication/``
roles) and the tables it keeps (topics, groups, consumer offsets, tiered offsets) beside the process
wiring (``controller``)."""
