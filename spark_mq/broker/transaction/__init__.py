"""Transactional messages: half messages on the send path (``half_messages``), the service that knows
which are live and resolves them (``service``), END_TRANSACTION (``end_transaction``), the committed
copies (``commit``) and the check-back of unresolved ones (``check_back``)."""
