"""BrokerSyncStateSet: the controller's newest epoch wins, a proposal is waited for until settled,
the confirmed offset follows what enough members acknowledged and never decreases."""

from __future__ import annotations

from spark_mq.store.ha.sync_state_set import BrokerSyncStateSet


class Replicas:
    """Acknowledgements and released puts, as the HA service gives and takes them."""

    def __init__(self) -> None:
        self.acks: dict[int, int] = {}
        self.released: list[int] = []
        self.confirmed_told = 0

    def attach(self, sss: BrokerSyncStateSet, end: int) -> None:
        sss.attach(lambda: end, lambda: self.acks.items(), self.released.append, self._told)

    def _told(self) -> None:
        self.confirmed_told += 1


def test_the_newest_epoch_wins_and_settles_a_proposal():
    sss = BrokerSyncStateSet(1, all_ack=False, min_in_sync_replicas=2)
    assert sss.members == {1} and sss.epoch == 0
    sss.propose(frozenset({1, 2}))
    assert sss.waited_for() == {1, 2}
    assert sss.learn(frozenset({1, 2}), 3) and (sss.members, sss.epoch, sss.proposed) == ({1, 2}, 3, frozenset())
    assert not sss.learn(frozenset({1}), 2)  # a late answer
    assert not sss.learn(frozenset({1, 2}), 3)  # known already
    sss.propose(frozenset({1, 2, 3}))
    sss.withdraw()
    assert sss.waited_for() == {1, 2}


def test_the_confirmed_offset_is_what_enough_members_have_and_never_decreases():
    sss = BrokerSyncStateSet(1, all_ack=True, min_in_sync_replicas=1)
    replicas = Replicas()
    replicas.attach(sss, end=100)
    assert sss.confirmed_offset() == 100  # the master alone: the end when it took over
    sss.settle(frozenset({1, 2, 3}))
    replicas.acks.update({2: 150, 3: 120})
    sss.update()
    assert replicas.released[-1] == 120 and sss.confirmed_offset() == 120 and replicas.confirmed_told == 1
    del replicas.acks[3]  # its connection closed: not enough members acknowledged
    assert sss.confirmed_offset() == 120 and replicas.released[-1] == -1
