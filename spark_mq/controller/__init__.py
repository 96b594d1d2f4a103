"""RocketMQ 5's replication controller: elects each broker set's master from its SyncStateSet and keeps
epochs, with its own state on an external consensus store (see state_store.py)."""
