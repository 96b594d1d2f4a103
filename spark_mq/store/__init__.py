"""The message store: RocketMQ 4.x's on-disk formats, with ``MessageStore`` as the facade."""
