"""Pop consumption (RocketMQ 5): the broker hands out messages, consumers acknowledge them one by one,
and what is not acknowledged within its invisible time comes back (see docs/architecture.md,
"Pop consumption")."""
