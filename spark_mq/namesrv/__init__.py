"""The NameServer: RocketMQ's route registry (brokers, topics, heartbeats, eviction) and its server."""
