"""Transactional messages: half messages, END_TRANSACTION and the check-back of unresolved ones."""
