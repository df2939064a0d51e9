"""``python -m sparkindex``, and the file spark-submit runs: the ``sparkindex`` command itself.

spark-submit takes a Python application only as a ``.py`` file (it has no ``-m``), so this file is
the application, and the arguments after it are the command's:

    spark-submit --master spark://host:7077 --archives env.tar.gz#environment \\
      "$(python -c 'import sparkindex.__main__ as m; print(m.__file__)')" reindex -c pipeline.yaml

Its exit code is the command's (0 done, 1 done with errors, 2 bad usage or config, 3 failed or
stopped); spark-submit in client mode exits with it. docs/deploy.md has the recipes.
"""

from __future__ import annotations

import os
import sys


def _drop_own_folder() -> None:
    """Run as a file (spark-submit, ``python .../sparkindex/__main__.py``), Python puts this file's
    folder first on ``sys.path``: then sparkindex's own modules (``config``, ``keys``, ``errors``,
    ``retry``...) would shadow top-level packages of those names. ``python -m`` does not."""
    here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != here]


def run() -> None:
    _drop_own_folder()
    if __spec__ is None:  # run as a file (spark-submit): usage says "sparkindex", not "__main__.py"
        sys.argv[0] = "sparkindex"
    from sparkindex.cli.app import main

    main()


if __name__ == "__main__":
    run()
