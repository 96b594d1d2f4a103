"""The broker's replication roles: controller-mode registration and heartbeats (``replicas_manager``),
role changes (``role_change``), the master's SyncStateSet keeping (``sync_state_keeper``; the set
itself is ``store/ha/sync_state_set``), a slave's copy of its master's metadata
(``slave_synchronize``) and what a slave asks its master (``master_commitlog``). The byte stream
itself is the store's (``spark_mq/store/ha``)."""
