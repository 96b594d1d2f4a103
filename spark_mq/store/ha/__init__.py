"""Master/slave replication of the commitlog (RocketMQ 4.x's HA): its own raw TCP protocol, not remoting."""
