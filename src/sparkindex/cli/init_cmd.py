"""``sparkindex init``: write a pipeline for an existing database from its schema.

The file goes to ``-o`` (``-`` for standard output); what was chosen, and what to run next, goes
to standard error, so that ``init -o - > p.yaml`` captures the pipeline alone. An existing file
is never overwritten without ``--force``: it may hold a user's edits.

The pipeline's text is :func:`sparkindex.api.init`'s (which writes nothing); where it goes, and
whether an existing file may be replaced, is this command's: a file is the command line's
business, a library call returns text.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sparkindex import api
from sparkindex.cli.render import err
from sparkindex.files import write_atomically


def init(
    source: Annotated[
        str,
        typer.Option("--source", "-s", help="database URL: sqlite:///file.db, postgresql://…, mysql://…"),
    ],
    table: Annotated[
        list[str] | None,
        typer.Option(
            "--table",
            "-t",
            help="root table of an index (repeatable); default: every table no other table references "
            "through a NOT NULL foreign key, largest first",
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option("--target", help="search target URL; default: an embedded Tantivy index beside the file"),
    ] = None,
    depth: Annotated[
        int, typer.Option("--depth", min=0, max=12, help="how far chains of many-to-one relations are followed")
    ] = 3,
    output: Annotated[Path, typer.Option("--output", "-o", help="the pipeline file to write; - for stdout")] = Path(
        "pipeline.yaml"
    ),
    force: Annotated[bool, typer.Option("--force", help="overwrite the file if it exists")] = False,
    where: Annotated[
        str | None,
        typer.Option(
            "--where",
            help='row filter, SQL in the source\'s dialect ("deleted_at IS NULL"), for the index of --table '
            "(or the only one init chooses); tried on the database first",
        ),
    ] = None,
) -> None:
    """Reflect a database's schema and write a pipeline that `reindex` runs as it is."""
    to_stdout = str(output) == "-"
    if not to_stdout and output.is_dir():
        raise api.UsageError(f"-o {output}: is a folder; name the pipeline file to write (e.g. {output}/pipeline.yaml)")
    if not to_stdout and output.exists() and not force:
        raise api.UsageError(f"-o {output}: the file exists; choose another name or pass --force to overwrite it")
    result = api.init(source, table, target=target, depth=depth, output=Path("-") if to_stdout else output, where=where)
    if to_stdout:
        sys.stdout.write(result.text)
        sys.stdout.flush()
    else:
        _write(output, result.text)
    shown = "standard output" if to_stdout else str(output)
    err.print(f"wrote {shown}: {len(result.aliases)} index(es): {', '.join(result.aliases)}", markup=False)
    if where is not None:
        err.print(f"  rows filtered by: {where.strip()}", markup=False)
    for name, reason in result.left_out.items():
        err.print(f"  not indexed: {name}: {reason}", markup=False)
    if result.unreached:
        err.print(f"  in no document: {', '.join(result.unreached)}", markup=False)
    err.print(f"  change capture: {_capture(result.capture)}", markup=False)
    if result.variables:
        err.print(f"  set {', '.join('$' + v for v in result.variables)} before running (passwords)", markup=False)
    if not to_stdout:
        err.print(
            f"next: sparkindex check -c {output} && sparkindex reindex -c {output} && sparkindex verify -c {output}",
            markup=False,
        )


def _capture(mode: str) -> str:
    return {
        "log": "the server's log (sync section written)",
        "polling": "polling change columns (sync section and changes written)",
    }.get(mode, "none (see the comment at the end of the file)")


def _write(path: Path, text: str) -> None:
    """Replace *path* atomically: an interrupted init leaves the old file or none, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text.encode("utf-8"))
