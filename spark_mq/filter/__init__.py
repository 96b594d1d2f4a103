"""SQL92 message filters (RocketMQ's ``filter`` module): the grammar, and its evaluation over many
messages at once."""
