"""``python -m chaos [--seed S] [--trials N [--from-trial F] | --only-trial I]``: the campaign.

Prints one JSON line per trial, then a summary line; a failing trial prints the command that
replays it. Exits 0 when every trial is clean, 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from chaos.campaign import OUTCOMES, Campaign, tally_faults
from chaos.plan import plan_trial
from chaos.trial import TrialRun


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "1")))
    parser.add_argument("--trials", type=int, default=int(os.environ.get("CHAOS_TRIALS", "30")))
    parser.add_argument("--only-trial", type=int, default=None, help="replay this one trial of the campaign")
    parser.add_argument(
        "--from-trial", type=int, default=0, help="start at this trial (a campaign continued where another stopped)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where trials keep logs (default: a temp dir)")
    parser.add_argument("--plan", action="store_true", help="print the plans, run nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    trials = [args.only_trial] if args.only_trial is not None else list(range(args.from_trial, args.trials))
    if args.plan:
        for i in trials:
            print(orjson.dumps(plan_trial(args.seed, i), default=str).decode())
        return 0
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the campaign's servers, tmpfs mounts
    # and trial processes are cleaned up instead of outliving it
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sparkindex-chaos-"))
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    with Campaign(workdir) as campaign:
        for i in trials:
            plan = plan_trial(args.seed, i)
            result = TrialRun(plan, campaign).execute()
            results.append(result)
            print(orjson.dumps(result).decode(), flush=True)
            if not result["ok"]:
                print(f"replay: {result['replay']}  (logs: {workdir / f'trial-{i:03d}'})", file=sys.stderr, flush=True)
    clean = sum(1 for r in results if r["ok"])
    by_kind = tally_faults(results)
    summary = {
        "bench": "chaos",
        "seed": args.seed,
        "trials": len(trials),
        "clean": clean,
        # faults_injected, faults_missed, faults_errored: each fault is counted in exactly one
        **{f"faults_{outcome}": sum(c[outcome] for c in by_kind.values()) for outcome in OUTCOMES},
        #: per kind: {"injected", "missed", "errored"}
        "faults_by_kind": by_kind,
        "combinations": sorted({f"{r['source']}/{r['target']}/{r['master']}" for r in results}),
        "seconds": round(time.monotonic() - started, 1),
        "workdir": str(workdir),
    }
    print(orjson.dumps(summary).decode(), flush=True)
    return 0 if clean == len(trials) else 1


if __name__ == "__main__":
    sys.exit(main())
