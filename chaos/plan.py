"""What a seed decides: each trial's source, target, Spark master, and faults with their moments.

A campaign of N trials from seed S is deterministic: trial i's plan depends on (S, i) alone, so
``python -m chaos --seed S --only-trial i`` replays it. Trials come in rounds: each round's
trials together inject every fault kind once (on the source, target and master the kind needs),
and the seed adds up to two more faults per trial at random. So a campaign of 3 rounds injects
each kind at least 3 times, whatever the seed, and the seed still chooses the combinations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

Source = Literal["postgres", "mariadb"]
TargetKind = Literal["tantivy", "opensearch"]
Master = Literal["local", "cluster"]


@dataclass(frozen=True)
class FaultKind:
    name: str
    what: str
    source: Source | None = None  # the kind needs this source
    target: TargetKind | None = None  # ... this target
    master: Master | None = None  # ... this Spark master

    def fits(self, source: Source, target: TargetKind, master: Master) -> bool:
        return self.source in (None, source) and self.target in (None, target) and self.master in (None, master)


KINDS: tuple[FaultKind, ...] = (
    FaultKind("kill_driver", "SIGKILL of the reindex driver and its process group (JVM, workers)"),
    FaultKind("kill_executor", "SIGKILL of a Spark executor JVM", master="cluster"),
    FaultKind("kill_python_worker", "SIGKILL of a Python worker running a task"),
    FaultKind("kill_sync", "SIGKILL of the sync process and its group"),
    FaultKind("stop_driver", "SIGSTOP of the reindex driver past its lease; another driver takes over; SIGCONT"),
    FaultKind("restart_postgres", "immediate restart of PostgreSQL (the store, and the source when it is)"),
    FaultKind("restart_mariadb", "immediate restart of MariaDB (the source)", source="mariadb"),
    FaultKind("cut_store", "network cut (black hole) between every process and the store"),
    FaultKind("cut_target", "network cut (black hole) between every process and the target", target="opensearch"),
    FaultKind("target_errors", "target answers 429s, 503s and drops connections", target="opensearch"),
    FaultKind("drop_slot", "a replication slot dropped by hand", source="postgres"),
    FaultKind("purge_binlogs", "binlogs purged past every reader", source="mariadb"),
    FaultKind("fill_disk", "the disk under the Tantivy index filled, then freed", target="tantivy"),
    FaultKind("clock_jump", "the wall clock of the sync or reindex process jumped by a lease or more"),
)
BY_NAME = {k.name: k for k in KINDS}
#: the combinations a round draws three of; any three fit every kind
COMBOS: tuple[tuple[Source, TargetKind, Master], ...] = (
    ("postgres", "tantivy", "cluster"),
    ("mariadb", "opensearch", "local"),
    ("postgres", "opensearch", "local"),
    ("mariadb", "tantivy", "cluster"),
)
WINDOW_S = (2.0, 30.0)  # faults land this long after the rebuild starts


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float
    #: the kind's own choices (how long a cut lasts, which way a clock jumps), drawn from the seed
    params: dict[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialPlan:
    campaign_seed: int
    trial: int
    seed: int
    source: Source
    target: TargetKind
    master: Master
    products: int
    faults: tuple[Fault, ...]
    #: the process started under a fake clock ("sync" or "reindex"), when a clock_jump is planned
    clock_victim: str | None

    def replay(self) -> str:
        return f"python -m chaos --seed {self.campaign_seed} --only-trial {self.trial}"


def trial_seed(campaign_seed: int, trial: int) -> int:
    return random.Random(f"chaos:{campaign_seed}:{trial}").getrandbits(48)


def _rounds(campaign_seed: int, round_no: int) -> list[tuple[tuple[Source, TargetKind, Master], list[str]]]:
    """One round: the combos in a seeded order, each kind given to a combo that fits it (the
    least loaded first), so that the round's trials inject every kind once."""
    rng = random.Random(f"round:{campaign_seed}:{round_no}")
    combos = rng.sample(COMBOS, 3)  # any three of the four fit every kind
    kinds = list(KINDS)
    rng.shuffle(kinds)
    load: list[list[str]] = [[] for _ in combos]
    for kind in kinds:
        fitting = [i for i, c in enumerate(combos) if kind.fits(*c)]
        best = min(fitting, key=lambda i: (len(load[i]), i))
        load[best].append(kind.name)
    return [(combos[i], load[i]) for i in range(len(combos)) if load[i]]


def plan_trial(campaign_seed: int, trial: int) -> TrialPlan:
    per_round = len(_rounds(campaign_seed, 0))
    round_no, slot = divmod(trial, per_round)
    rounds = _rounds(campaign_seed, round_no)
    (source, target, master), forced = rounds[slot % len(rounds)]
    seed = trial_seed(campaign_seed, trial)
    rng = random.Random(seed)
    extra = [k.name for k in KINDS if k.fits(source, target, master) and k.name not in forced]
    names = forced + rng.sample(extra, rng.randint(0, min(2, len(extra))))
    faults = tuple(sorted((_fault(rng, name) for name in names), key=lambda f: f.at_s))
    clock_victim = rng.choice(["sync", "reindex"]) if "clock_jump" in names else None
    return TrialPlan(
        campaign_seed, trial, seed, source, target, master, rng.choice([1500, 2500, 4000]), faults, clock_victim
    )


def _fault(rng: random.Random, name: str) -> Fault:
    at = round(rng.uniform(*WINDOW_S), 1)
    params: dict[str, float | str] = {}
    if name in ("cut_store", "cut_target"):
        params["seconds"] = round(rng.uniform(4.0, 25.0), 1)  # below and beyond the claim timeout
    elif name == "fill_disk":
        params["seconds"] = round(rng.uniform(4.0, 15.0), 1)
    elif name == "clock_jump":
        params["seconds"] = rng.choice([-90.0, -40.0, 40.0, 90.0])
    elif name == "target_errors":
        params.update(status429=rng.randint(1, 8), status503=rng.randint(1, 4), drops=rng.randint(1, 4))
    elif name == "kill_python_worker":
        params["victim"] = rng.choice(["first", "last"])
    return Fault(name, at, params)
