"""Master/slave replication of the commitlog (RocketMQ 4.x's HA): its own raw TCP protocol, not remoting;
in controller mode, the broker side's SyncStateSet and the confirmed offset (``sync_state_set``)."""
