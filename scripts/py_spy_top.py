"""The top frames of a py-spy profile, as docs/benchmarks.md's tables give them.

Reads py-spy's raw (collapsed) output, every process's stacks together, and prints the share of
samples of the ten frames with the most own time, then the inclusive share of each function named
on the command line (its own time and everything it called).

    py-spy record --subprocesses --rate 100 --format raw -o raw.txt -- sparkindex reindex -c pipeline.yaml
    python3 scripts/py_spy_top.py raw.txt to_tantivy_json dumps_document content_hash
"""

from __future__ import annotations

import collections
import re
import sys

FRAME = re.compile(r"(?P<function>.*?) \((?P<path>.*?):\d+\)$")


def frame_name(frame: str) -> str:
    """``function (package/module.py)``: the line number dropped, the path from its package on."""
    m = FRAME.match(frame)
    if not m:
        return frame
    path = re.sub(r".*/(site-packages|src)/", "", m["path"])
    return f"{m['function']} ({path})"


def main(path: str, functions: list[str]) -> None:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path, encoding="utf-8") as raw:
        for line in raw:
            stack, _, count = line.rstrip().rpartition(" ")
            frames = [f for f in stack.split(";") if not f.startswith("process ")]
            if not frames:
                continue
            n = int(count)
            total += n
            names = [frame_name(f) for f in frames]
            own[names[-1]] += n
            for name in set(names):
                inclusive[name] += n
    print(f"{total} samples; top 10 frames by own time:")
    for name, n in own.most_common(10):
        print(f"  {100 * n / total:5.1f} %  {name}")
    for function in functions:
        hits = sorted((n, name) for name, n in inclusive.items() if name.startswith(f"{function} ("))
        if hits:
            n, name = hits[-1]
            print(f"  inclusive {100 * n / total:5.1f} %  {name}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
