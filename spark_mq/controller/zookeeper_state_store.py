"""The controller's state and leader election on a ZooKeeper ensemble (client: kazoo).

Layout under ``root`` (default ``/spark_mq/controller``)::

    records/<key>       one broker set's record; its version is the znode's data version
    election/<id>-n_NN  one ephemeral sequential node per campaigning controller, its address as data

The leader is the owner of the lowest election node. A node is ephemeral, so ZooKeeper deletes it
when its owner's session ends (a dead or frozen process: after ``session_timeout_s``), and the next
node's owner, which watches it, takes over. Sequence numbers only grow, so a node that was once the
lowest stays the lowest for as long as it exists: "my node exists" is the whole leadership test.

Every write is one ZooKeeper transaction of ``check(my election node)`` plus the versioned
create/set of the record, so a deposed leader's late write (its session expired while it was stopped
or cut off, and another controller now leads) is refused by the ensemble itself, whatever the
deposed process still believes.

Leadership is given up locally as soon as the connection is SUSPENDED (the session may be expiring
on the servers unseen) and taken again on reconnection if the node survived; after the session is
LOST a new node is created and the controller campaigns again. All of this, and the ``on_elected``/
``on_lost`` callbacks, run on one thread of this store (``controller-election``), never on kazoo's
connection thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Callable
from urllib.parse import quote, unquote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError

from spark_mq.controller.state_store import NO_RECORD, StaleStateError, StateStoreError

log = logging.getLogger(__name__)

DEFAULT_ROOT = "/spark_mq/controller"
DEFAULT_SESSION_TIMEOUT_S = 6.0  # a dead leader is replaced after about this long
CONNECT_TIMEOUT_S = 15.0
RECONNECT_MAX_DELAY_S = 1.0
_NODE_PREFIX = "-n_"  # <campaign id>-n_<sequence>, as kazoo's own election recipe names them
_STOP = object()  # tells the election thread to end


def _sequence(node: str) -> int:
    return int(node.rpartition(_NODE_PREFIX)[2])


def _encode_key(key: str) -> str:
    """A record key as one znode name: no '/', and never '.' or '..' (which ZooKeeper refuses)."""
    if not key:
        raise StateStoreError("a controller record needs a non-empty key")
    name = quote(key, safe="")
    return name.replace(".", "%2E") if name in (".", "..") else name


class ZooKeeperStateStore:
    """A :class:`~spark_mq.controller.state_store.ControllerStateStore` on ZooKeeper.

    ``hosts`` is kazoo's connection string (``host:port,host:port,...``); the session moves to
    another member when the one it is connected to dies.
    """

    def __init__(self, hosts: str, root: str = DEFAULT_ROOT, session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self._root = root.rstrip("/")
        self._records = f"{self._root}/records"
        self._election = f"{self._root}/election"
        # reconnect forever, at least once a second (kazoo's default backs off to an hour between tries)
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_s,
                                   connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": RECONNECT_MAX_DELAY_S})
        try:
            self._client.start(timeout=connect_timeout_s)
        except KazooTimeoutError as e:
            self._stop_client()
            raise StateStoreError(f"cannot connect to ZooKeeper at {hosts} within {connect_timeout_s:g}s") from e
        try:
            self._client.ensure_path(self._records)
            self._client.ensure_path(self._election)
        except KazooException as e:
            self._stop_client()
            raise StateStoreError(f"cannot create {self._root} on ZooKeeper at {hosts}: {e!r}") from e
        self._campaign_id = uuid.uuid4().hex
        self._address: str | None = None
        self._on_elected: Callable[[], None] | None = None
        self._on_lost: Callable[[], None] | None = None
        self._node: str | None = None  # my election node's name, once created
        self._leader_node: str | None = None  # path of my node while it is the lowest, else None
        self._leading = False  # what the callbacks were last told (the election thread's view)
        self._events: queue.Queue[object] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._client.add_listener(self._on_state)

    # --- records ----------------------------------------------------------------------------

    def load_all(self) -> dict[str, tuple[bytes, int]]:
        try:
            # the member this client reads from may lag the ensemble's leader: catch it up first,
            # so a new leader reads every write its predecessor had acknowledged
            self._client.sync(self._records)
            out = {}
            for name in self._client.get_children(self._records):
                try:
                    value, stat = self._client.get(f"{self._records}/{name}")
                except NoNodeError:
                    continue  # records are never deleted by the controller; tolerate an operator's
                out[unquote(name)] = (value, stat.version)
            return out
        except KazooException as e:
            raise StateStoreError(f"cannot read the controller records from ZooKeeper: {e!r}") from e

    def compare_and_set(self, key: str, value: bytes, expected_version: int) -> int:
        fence = self._leader_node
        if fence is None:
            raise StaleStateError(f"{key}: this controller does not lead")
        path = f"{self._records}/{_encode_key(key)}"
        txn = self._client.transaction()
        txn.check(fence, 0)  # my election node still exists: my session, hence my leadership, is alive
        if expected_version == NO_RECORD:
            txn.create(path, value)
        else:
            txn.set_data(path, value, version=expected_version)
        try:
            fenced, written = txn.commit()
        except SessionExpiredError as e:
            raise StaleStateError(f"{key}: this controller was deposed (its ZooKeeper session expired)") from e
        except KazooException as e:
            # a lost connection leaves the outcome unknown: the caller reloads (a retry with the
            # same expected version fails if the first attempt did land)
            raise StateStoreError(f"{key}: write to ZooKeeper failed, outcome unknown: {e!r}") from e
        if isinstance(fenced, ZookeeperError) and not isinstance(fenced, RolledBackError):
            raise StaleStateError(f"{key}: this controller was deposed (its election node {fence} is gone)")
        if isinstance(written, (BadVersionError, NoNodeError, NodeExistsError)):
            raise StaleStateError(f"{key}: the record changed since version {expected_version}")
        if isinstance(written, ZookeeperError):
            raise StateStoreError(f"{key}: ZooKeeper refused the write: {written!r}")
        return 0 if expected_version == NO_RECORD else written.version

    # --- election ---------------------------------------------------------------------------

    def campaign(self, address: str, on_elected: Callable[[], None], on_lost: Callable[[], None]) -> None:
        if self._thread is not None:
            raise StateStoreError("this store already campaigns")
        self._address, self._on_elected, self._on_lost = address, on_elected, on_lost
        self._thread = threading.Thread(target=self._run, name="controller-election", daemon=True)
        self._thread.start()
        self._events.put(KazooState.CONNECTED)

    def leader_address(self) -> str | None:
        if not self._client.connected:
            # kazoo would queue the read until it reconnects: for the whole of a partition from the quorum,
            # every GET_METADATA and CONTROLLER_NOT_LEADER answer of this controller would wait on it
            raise StateStoreError("not connected to ZooKeeper: the leader is unknown from here")
        try:
            nodes = sorted(self._client.get_children(self._election), key=_sequence)
            for node in nodes:  # the lowest, unless it vanished since the listing
                try:
                    return self._client.get(f"{self._election}/{node}")[0].decode()
                except NoNodeError:
                    continue
            return None
        except KazooException as e:
            raise StateStoreError(f"cannot read the controller leader from ZooKeeper: {e!r}") from e

    def close(self) -> None:
        if self._thread is not None:
            self._events.put(_STOP)
            if threading.current_thread() is not self._thread:  # not from inside a callback
                self._thread.join()
        self._stop_client()

    def _stop_client(self) -> None:
        # stop() ends the session, so ZooKeeper deletes this controller's election node at once
        self._client.stop()
        self._client.close()

    def _on_state(self, state: KazooState) -> None:
        """kazoo's connection thread: never block it, hand the change to the election thread."""
        if state == KazooState.SUSPENDED:
            self._leader_node = None  # stop writing at once; the thread calls on_lost
        self._events.put(state)

    def _run(self) -> None:
        while (event := self._events.get()) is not _STOP:
            if event == KazooState.SUSPENDED:
                self._set_leading(None)
                continue
            if event == KazooState.LOST:
                self._set_leading(None)
                self._node = None  # the session and its ephemeral node are gone
            if self._client.state != KazooState.CONNECTED:
                continue  # campaign again on the CONNECTED event
            try:
                self._settle()
            except KazooException as e:
                log.warning("controller election: ZooKeeper call failed (%r); retrying on reconnection", e)
                self._set_leading(None)
        self._set_leading(None, notify=False)

    def _settle(self) -> None:
        """Make sure my node exists; lead if it is the lowest, else watch the node just below it."""
        while True:
            if self._node is None:
                self._node = self._find_my_node() or self._client.create(
                    f"{self._election}/{self._campaign_id}{_NODE_PREFIX}", self._address.encode(),
                    ephemeral=True, sequence=True).rpartition("/")[2]
            nodes = sorted(self._client.get_children(self._election), key=_sequence)
            if self._node not in nodes:  # deleted under us (session expiry in flight)
                self._node = None
                continue
            mine = nodes.index(self._node)
            if mine == 0:
                self._set_leading(f"{self._election}/{self._node}")
                return
            self._set_leading(None)
            below = f"{self._election}/{nodes[mine - 1]}"
            if self._client.exists(below, watch=lambda _event: self._events.put(KazooState.CONNECTED)):
                return  # woken when it goes
            # it went between the listing and the watch: look again

    def _find_my_node(self) -> str | None:
        """A node this campaign created whose answer was lost with the connection."""
        mine = [n for n in self._client.get_children(self._election) if n.startswith(self._campaign_id)]
        return mine[0] if mine else None

    def _set_leading(self, node: str | None, notify: bool = True) -> None:
        was = self._leading
        self._leader_node = node
        self._leading = node is not None
        if not notify or was == self._leading:
            return
        if self._leading:
            log.info("controller %s leads (election node %s)", self._address, node)
            callback = self._on_elected
        else:
            log.warning("controller %s no longer leads", self._address)
            callback = self._on_lost
        try:
            callback()
        except Exception:
            log.exception("controller leadership callback failed")
