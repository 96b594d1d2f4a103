"""The commitlog message unit (RocketMQ 4.x's byte layout), one module per job.

* :mod:`~spark_mq.common.unit.layout`: the layout, declared once, and where each unit's parts lie;
* :mod:`~spark_mq.common.unit.encode`: messages to units;
* :mod:`~spark_mq.common.unit.native`: our C library for the append path (units, dispatch info), when built;
* :mod:`~spark_mq.common.unit.chain`: finding the units of a buffer (the TOTALSIZE chain);
* :mod:`~spark_mq.common.unit.check`: whether units are whole and intact (lengths, header, CRC);
* :mod:`~spark_mq.common.unit.decode`: a unit to one :class:`StoredMessage` (the per-message API);
* :mod:`~spark_mq.common.unit.batch`: many units as numpy columns (:class:`StoredBatch`).
"""
