"""The broker: RocketMQ request processors over a ``MessageStore``, long polling, the consumer
and producer registry, consumer offsets, topic config, registration with NameServers."""
