"""Stage timestamps of the latency workload, for ``benchmarks/latency_stages.py`` (which puts this
directory first on PYTHONPATH, so every process of the run imports it at start-up).

Active only when ``SPARK_MQ_LATENCY_TRACE`` names a directory. Each process wraps a few spark_mq
functions as their modules are imported (no spark_mq code knows about it) and appends
``(stage, monotonic ns, ...)`` rows to a list it pickles into that directory at exit.
``time.monotonic_ns`` is the clock of the workload's own send stamps (one clock for every process
of the machine). A message is followed by its sequence number (the body's bytes 8-16: the stamp
``>qq`` send ns, seq): what the producer writes, what the broker reads and stores, what the
consumer reads and polls."""

from __future__ import annotations

import os

if os.environ.get("SPARK_MQ_LATENCY_TRACE"):
    import atexit
    import gc
    import importlib.abc
    import pickle
    import struct
    import sys
    import time

    _now = time.monotonic_ns
    _Q = struct.Struct(">q")
    ROWS: list[tuple] = []
    _SEND_CODES = (10, 310)  # SEND_MESSAGE, SEND_MESSAGE_V2: the body is the message's
    _BATCH_CODE = 320  # SEND_BATCH_MESSAGE: the first message's body starts 20 bytes in
    _PULL_CODE = 11
    _UNIT_BODY = 88  # where a stored unit's body starts (IPv4 hosts): the pull answer's first message
    _current = [0]  # the sequence number of the send the broker is serving (one at a time on its loop)

    def _stamp_at(code: int, body: bytes) -> int | None:
        """Where the first message's stamp is in a send's body; None for any other request."""
        if code in _SEND_CODES and len(body) >= 16:
            return 0
        if code == _BATCH_CODE and len(body) >= 36:
            return 20
        return None

    def _seq(code: int, body: bytes) -> int | None:
        at = _stamp_at(code, body)
        return None if at is None else _Q.unpack_from(body, at + 8)[0]

    def _dump() -> None:
        path = os.path.join(os.environ["SPARK_MQ_LATENCY_TRACE"], f"trace-{os.getpid()}.pkl")
        with open(path, "wb") as f:
            pickle.dump(ROWS, f)

    def _connection(mod) -> None:
        from spark_mq.remoting.command import RESPONSE_FLAG

        intake, conn = mod._Intake, mod.Connection
        received, read, dispatch, write = intake.data_received, intake.read, conn._dispatch, conn._write

        def data_received(self, data):
            self.trace_rx = _now()
            received(self, data)

        async def traced_read(self):
            data = await read(self)
            self.trace_read = _now()
            return data

        def traced_dispatch(self, cmd):
            t, rx, rd = _now(), getattr(self._intake, "trace_rx", 0), getattr(self._intake, "trace_read", 0)
            if cmd.flag & RESPONSE_FLAG:
                if len(cmd.body) >= _UNIT_BODY + 16:
                    ROWS.append(("pull_answer_in", _Q.unpack_from(cmd.body, _UNIT_BODY + 8)[0], rx, rd, t))
            elif (seq := _seq(cmd.code, cmd.body)) is not None:
                _current[0] = seq
                ROWS.append(("send_in", seq, rx, rd, t))
            elif cmd.code == _PULL_CODE:
                ROWS.append(("pull_in", 0, rx, rd, t))
            dispatch(self, cmd)

        def traced_write(self, cmd):
            t = _now()  # before the write: on loopback the peer may read the frame before write() returns
            write(self, cmd)
            if cmd.flag & RESPONSE_FLAG:
                if len(cmd.body) >= _UNIT_BODY + 16:
                    ROWS.append(("pull_answer_out", _Q.unpack_from(cmd.body, _UNIT_BODY + 8)[0], t))
            elif (at := _stamp_at(cmd.code, cmd.body)) is not None:
                ROWS.append(("send_out", _Q.unpack_from(cmd.body, at + 8)[0], t, _Q.unpack_from(cmd.body, at)[0]))
            elif cmd.code == _PULL_CODE:
                ROWS.append(("pull_out", 0, t))

        # a chunk taken in data_received while the reader task waits: a client's responses, a server's requests
        take, take_requests = conn._take, getattr(conn, "_take_requests", None)

        def traced_take(self, data):
            self._intake.trace_read = _now()
            take(self, data)

        def traced_take_requests(self, data):
            self._intake.trace_read = _now()
            take_requests(self, data)

        intake.data_received, intake.read = data_received, traced_read
        conn._take = traced_take
        if take_requests is not None:
            conn._take_requests = traced_take_requests
        conn._dispatch, conn._write = traced_dispatch, traced_write

    def _long_polling(mod) -> None:
        hold = mod.PullHoldService
        notify, wait_any = hold.notify, hold.wait_any

        def traced_notify(self, topic, queue_id, max_offset, put=None):
            row = ["stored", _current[0], _now(), 0]  # listed first: a pull answered inside notify comes after it
            ROWS.append(row)
            row[3] = woken = notify(self, topic, queue_id, max_offset, put)
            return woken

        answered = getattr(mod, "_answered", None)  # a held pull answered inside notify: woken then

        def traced_answered(answer, why):
            ROWS.append(("woken", 0, _now()))
            return answered(answer, why)

        async def traced_wait_any(self, positions, timeout_s, *answer):
            ROWS.append(("held", 0, _now()))
            woken = await wait_any(self, positions, timeout_s, *answer)
            ROWS.append(("woken", 0, _now()))
            return woken

        hold.notify, hold.wait_any = traced_notify, traced_wait_any
        if answered is not None:
            mod._answered = traced_answered

    def _send(mod) -> None:
        processor = mod.SendProcessor
        send = processor.send

        async def traced_send(self, cmd, conn):
            ROWS.append(("handler", _current[0], _now()))
            return await send(self, cmd, conn)

        processor.send = traced_send

    def _lite_pull(mod) -> None:
        pull_queue, poll = mod.pull_queue, mod.LitePullConsumer.poll
        offer = getattr(mod.LitePullConsumer, "_offer", None)  # the answer handed over as it is read

        def traced_offer(self, state, version, result):
            if result.messages:
                ROWS.append(("decoded", _Q.unpack_from(result.messages[0].body, 8)[0], _now()))
            offer(self, state, version, result)

        async def traced_pull_queue(*args, **kwargs):
            result = await pull_queue(*args, **kwargs)
            if result.messages and offer is None:
                ROWS.append(("decoded", _Q.unpack_from(result.messages[0].body, 8)[0], _now()))
            return result

        if offer is not None:
            mod.LitePullConsumer._offer = traced_offer

        async def traced_poll(self, timeout=None):
            messages = await poll(self, timeout)
            if messages:
                ROWS.append(("polled", _Q.unpack_from(messages[0].body, 8)[0], _now()))
            return messages

        mod.pull_queue, mod.LitePullConsumer.poll = traced_pull_queue, traced_poll

    def _dispatch(mod) -> None:
        """A dispatch pass's start and end: a send arriving meanwhile waits for it (the p99's suspects)."""
        dispatcher = mod.Dispatcher
        for name in ("catch_up", "catch_up_queues"):
            passed = getattr(dispatcher, name)

            def traced(self, *args, _passed=passed, _name=name):
                t = _now()
                try:
                    return _passed(self, *args)
                finally:
                    ROWS.append(("busy", 0, _name, t, _now()))

            setattr(dispatcher, name, traced)

    _gc_start = [0]

    def _gc(phase, info):
        if phase == "start":
            _gc_start[0] = _now()
        else:
            ROWS.append(("busy", 0, f"gc{info['generation']}", _gc_start[0], _now()))

    gc.callbacks.append(_gc)

    _HOOKS = {"spark_mq.remoting.connection": _connection,
              "spark_mq.store.dispatch": _dispatch,
              "spark_mq.broker.processors.long_polling": _long_polling,
              "spark_mq.broker.processors.send": _send,
              "spark_mq.client.lite_pull_consumer": _lite_pull}

    class _AfterImport(importlib.abc.MetaPathFinder):
        """Runs a module's hook once the module is executed."""

        def find_spec(self, name, path, target=None):
            hook = _HOOKS.pop(name, None)
            if hook is None:
                return None
            for finder in sys.meta_path:
                if finder is not self and (spec := finder.find_spec(name, path, target)) is not None:
                    break
            else:
                return None
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                hook(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _AfterImport())
    atexit.register(_dump)
