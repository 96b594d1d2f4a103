"""Scheduled delivery: delay levels (``delay_service``) and timer messages (``timer`` on the way in,
``timer_service`` on the way out), both parking messages away from their real topic
(``real_topic``) until they are due."""
