"""A seeded schedule of network faults for ``faults.Faults``: which fault, between which hosts, when, and the
heal after each, all drawn from one ``random.Random(seed)``, so a failing run that prints its schedule (with
the seed) is replayed by running with that seed again (``SEED_ENV``).

A fault kind names groups of hosts (``hosts_by_group``, e.g. controller, master, slaves, clients):

- ``"A|B"``: partition group A from group B; ``"A|B/2"``: from a seeded half of B's hosts (at least one);
- ``"A>B"``: one way: A's packets to B are dropped, B's to A pass;
- ``"latency:A"`` / ``"loss:A"``: every host of A gets a seeded delay / loss from the schedule's range.

Each fault is held for a seeded time in ``hold_s``, then healed, then the next follows after ``gap_s``.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from faults import Faults

SEED_ENV = "SPARK_MQ_FAULT_SEED"  # replay: run with the seed a failing run printed
DEFAULT_KINDS = ("controller|master", "master|slaves", "master|clients/2", "master>slaves", "slaves>master",
                 "latency:master", "loss:master")
_PARTITION = re.compile(r"^(\w+)\|(\w+)(/2)?$")
_ONE_WAY = re.compile(r"^(\w+)>(\w+)$")
_ON_HOSTS = re.compile(r"^(latency|loss):(\w+)$")


def seed_from_env(default: int | None = None) -> int:
    """``SEED_ENV``'s seed when set (a replay), else ``default`` (a suite run that must repeat itself), else a
    fresh one (printed by whoever fails)."""
    if os.environ.get(SEED_ENV):
        return int(os.environ[SEED_ENV])
    return default if default is not None else random.SystemRandom().randrange(1 << 32)


@dataclass(frozen=True)
class Step:
    """At ``at_s`` (seconds from the schedule's start): ``action`` (partition, one_way, latency, loss, heal) on
    ``hosts`` (and ``others``, the far side of a cut), with ``amount`` ms or percent."""

    at_s: float
    action: str
    hosts: tuple[str, ...] = ()
    others: tuple[str, ...] = ()
    amount: int = 0

    def apply(self, faults: Faults) -> None:
        if self.action == "partition":
            faults.partition(list(self.hosts), list(self.others))
        elif self.action == "one_way":
            faults.one_way(list(self.hosts), list(self.others))
        elif self.action == "latency":
            faults.latency(list(self.hosts), self.amount)
        elif self.action == "loss":
            faults.loss(list(self.hosts), self.amount)
        else:
            faults.heal()

    def __str__(self) -> str:
        what = {"partition": f"partition {','.join(self.hosts)} | {','.join(self.others)}",
                "one_way": f"one-way {','.join(self.hosts)} -> {','.join(self.others)} dropped",
                "latency": f"latency +{self.amount} ms on {','.join(self.hosts)}",
                "loss": f"loss {self.amount}% on {','.join(self.hosts)}"}.get(self.action, "heal")
        return f"{self.at_s:7.2f}s  {what}"


class Schedule:
    """``rounds`` faults (default: each of ``kinds`` once, in a seeded order), each followed by a heal."""

    def __init__(self, seed: int, kinds: tuple[str, ...] | list[str], hosts_by_group: dict[str, list[str]], *,
                 rounds: int | None = None, hold_s: tuple[float, float] = (1.0, 3.0),
                 gap_s: tuple[float, float] = (0.5, 1.5), latency_ms: tuple[int, int] = (50, 200),
                 loss_percent: tuple[int, int] = (10, 40)) -> None:
        self.seed = seed
        self.groups = hosts_by_group
        for kind in kinds:
            self._groups_of(kind)  # an unknown kind or group fails here, before anything runs
        rng = random.Random(seed)
        if rounds is None:
            order = rng.sample(list(kinds), len(kinds))
        else:
            order = [rng.choice(list(kinds)) for _ in range(rounds)]
        self.steps: list[Step] = []
        at = 0.0
        for kind in order:
            self.steps.append(self._fault(kind, round(at, 2), rng, latency_ms, loss_percent))
            at += rng.uniform(*hold_s)
            self.steps.append(Step(round(at, 2), "heal"))
            at += rng.uniform(*gap_s)

    def _groups_of(self, kind: str) -> list[str]:
        match = _PARTITION.match(kind) or _ONE_WAY.match(kind)
        names = [match.group(1), match.group(2)] if match else []
        if (on := _ON_HOSTS.match(kind)) is not None:
            names = [on.group(2)]
        if not names:
            raise ValueError(f"fault kind {kind!r}: write A|B, A|B/2, A>B, latency:A or loss:A")
        unknown = [n for n in names if not self.groups.get(n)]
        if unknown:
            raise ValueError(f"fault kind {kind!r} names groups {unknown} with no hosts: "
                             f"the groups are {sorted(self.groups)}")
        return names

    def _fault(self, kind: str, at: float, rng: random.Random, latency_ms: tuple[int, int],
               loss_percent: tuple[int, int]) -> Step:
        names = self._groups_of(kind)
        hosts = tuple(self.groups[names[0]])
        if (on := _ON_HOSTS.match(kind)) is not None:
            amount = rng.randint(*(latency_ms if on.group(1) == "latency" else loss_percent))
            return Step(at, on.group(1), hosts, amount=amount)
        others = self.groups[names[1]]
        if (partition := _PARTITION.match(kind)) is not None:
            if partition.group(3):
                others = sorted(rng.sample(others, max(1, len(others) // 2)))
            return Step(at, "partition", hosts, tuple(others))
        return Step(at, "one_way", hosts, tuple(others))

    def __str__(self) -> str:
        return "\n".join([f"fault schedule, seed {self.seed} (replay: {SEED_ENV}={self.seed}):",
                          *(str(s) for s in self.steps)])

    def run(self, faults: Faults, on_step: Callable[[Step], None] | None = None) -> None:
        """Apply each step at its time (``on_step`` is called after each: a test's checks or kills); heals
        whatever is in force should a step or ``on_step`` raise."""
        start = time.monotonic()
        try:
            for step in self.steps:
                time.sleep(max(0.0, start + step.at_s - time.monotonic()))
                step.apply(faults)
                if on_step is not None:
                    on_step(step)
        finally:
            faults.heal()
