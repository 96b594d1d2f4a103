#!/usr/bin/env python3
"""Network faults between network namespaces of your own, for an operator (run as root): the same injector
the tests use (``tests/faults.py``, ``tests/fault_schedule.py``), not a copy.

Name groups of hosts with ``--group NAME=MEMBER,...``: a member is a namespace (its rules go on its own
link, the device of its first global IPv4 address) or an IPv4 address (a machine reached there that gets
no rules: the root namespace's address on your bridge, say). Faults are written as in a schedule: ``A|B``
(partition), ``A|B/2`` (from half of B), ``A>B`` (one way: A's packets to B dropped), ``latency:A``,
``loss:A``.

    # cut namespace ctl1 off from ns1 and ns2 for 30 s (or until Ctrl-C), then heal
    scripts/netfaults.py --group ctl=ctl1 --group rest=ns1,ns2 hold 'ctl|rest' --for 30
    # print, then run, a seeded schedule (the same seed prints and runs the same steps)
    scripts/netfaults.py --group controller=ctl1 --group master=b1 --group slaves=b2,b3 schedule --seed 42
    # remove what a killed run left behind in these namespaces
    scripts/netfaults.py heal ctl1 b1 b2 b3

Needs ``nft`` and ``iptables`` (``scripts/install_netfaults.sh``). Everything a run adds it removes when it
ends, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fault_schedule import DEFAULT_KINDS, Schedule  # (tests/ on the path first)
from faults import Faults, Machine, clear, why_no_faults


def machine(member: str) -> Machine:
    """A namespace's machine (its first global IPv4 address and that address's device), or an address's."""
    try:
        return Machine("", str(ipaddress.IPv4Address(member)))
    except ValueError:
        pass
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    namespaces = [line.split()[0] for line in listed.splitlines() if line.strip()]
    if member not in namespaces:
        raise SystemExit(f"netfaults: no network namespace {member!r} (there are: {', '.join(namespaces) or 'none'}); "
                         "name an existing namespace or give an IPv4 address")
    addrs = subprocess.run(["ip", "-n", member, "-4", "-o", "addr", "show", "scope", "global"], capture_output=True,
                           text=True, check=False).stdout.split()
    if "inet" not in addrs:
        raise SystemExit(f"netfaults: namespace {member!r} has no global IPv4 address to tell its packets by: "
                         f"give it one (ip -n {member} addr add ADDR/24 dev DEV)")
    at = addrs.index("inet")
    return Machine(member, addrs[at + 1].split("/")[0], addrs[at - 1])


def groups_of(specs: list[str]) -> tuple[dict[str, list[str]], dict[str, Machine]]:
    groups: dict[str, list[str]] = {}
    machines: dict[str, Machine] = {}
    for spec in specs:
        name, sep, members = spec.partition("=")
        if not sep or not name or not members:
            raise SystemExit(f"netfaults: --group {spec!r}: write NAME=MEMBER[,MEMBER...]")
        groups[name] = members.split(",")
        for member in groups[name]:
            machines.setdefault(member, machine(member))
    return groups, machines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--group", action="append", default=[], metavar="NAME=MEMBER,...",
                        help="a group of hosts: namespaces or IPv4 addresses (repeat for each group)")
    parser.add_argument("--latency-ms", type=int, nargs=2, default=(50, 200), metavar=("MIN", "MAX"),
                        help="the range a latency fault's delay is drawn from (default 50 200)")
    parser.add_argument("--loss-percent", type=int, nargs=2, default=(10, 40), metavar=("MIN", "MAX"),
                        help="the range a loss fault's share is drawn from (default 10 40)")
    sub = parser.add_subparsers(dest="command", required=True)
    hold = sub.add_parser("hold", help="apply faults, hold them, heal")
    hold.add_argument("faults", nargs="+", help="A|B, A|B/2, A>B, latency:A or loss:A (group names)")
    hold.add_argument("--for", dest="for_s", type=float, default=None, help="seconds (default: until Ctrl-C)")
    hold.add_argument("--seed", type=int, default=0, help="for A|B/2's half and the drawn amounts")
    schedule = sub.add_parser("schedule", help="print and run a seeded schedule of faults and heals")
    schedule.add_argument("--seed", type=int, required=True, help="the same seed gives the same steps")
    schedule.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS), help="default: %(default)s")
    schedule.add_argument("--rounds", type=int, default=None, help="faults (default: each kind once)")
    schedule.add_argument("--dry-run", action="store_true", help="print the steps only")
    heal = sub.add_parser("heal", help="remove what a killed run left in these namespaces")
    heal.add_argument("namespaces", nargs="+")
    args = parser.parse_args(argv)

    if (reason := why_no_faults()) is not None:
        raise SystemExit(f"netfaults: {reason}")
    if args.command == "heal":
        for ns in args.namespaces:
            m = machine(ns)
            print(f"{ns}: removed {', '.join(clear(m)) or 'nothing (no fault there)'}")
        return 0
    if not args.group:
        parser.error("name the hosts with --group NAME=MEMBER,... (at least one group)")
    groups, machines = groups_of(args.group)
    ranges = {"latency_ms": tuple(args.latency_ms), "loss_percent": tuple(args.loss_percent)}
    try:
        if args.command == "schedule":
            plan = Schedule(args.seed, args.kinds, groups, rounds=args.rounds, **ranges)
        else:
            plan = Schedule(args.seed, args.faults, groups, **ranges)
    except ValueError as e:
        raise SystemExit(f"netfaults: {e}") from None
    faults = Faults(machines)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # heal on kill as on Ctrl-C
    if args.command == "schedule":
        print(plan, flush=True)
        if not args.dry_run:
            plan.run(faults, on_step=lambda step: print(f"applied: {step}", flush=True))
        return 0
    try:
        for step in plan.steps:
            if step.action != "heal":
                step.apply(faults)
        print("in force:\n  " + "\n  ".join(faults.describe()), flush=True)
        if args.for_s is None:
            while True:
                time.sleep(3600)
        time.sleep(args.for_s)
    except KeyboardInterrupt:
        pass
    finally:
        faults.heal()
        print("healed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
