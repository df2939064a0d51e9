"""``sparkindex``: init, check, explain, demo, reindex, sync, status, stop, verify, search, dlq, gc, serve.

Exit codes, the same for every command: 0 done, 1 done with errors or drift, 2 bad usage or config,
3 failed/stopped.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.markup import escape

from sparkindex import api
from sparkindex.cli.bars import RichBars
from sparkindex.cli.options import ConfigOpt, IndexOpt, JsonOpt, StateDirOpt
from sparkindex.cli.render import emit_json, err, out, print_error
from sparkindex.cli.serve import serve
from sparkindex.config.model import Pipeline

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Distributed, fault-tolerant search indexing on Spark."
)
dlq_app = typer.Typer(no_args_is_help=True, help="Dead letters: documents that failed permanently.")
app.add_typer(dlq_app, name="dlq")


def tune_process() -> None:
    """The CLI's process builds documents in the driver too (the reindex's head start while Spark
    starts) and writes Tantivy stages: it tunes itself for that, explicitly. A library call never
    does (sparkindex/worker/collector.py, sparkindex/allocator.py)."""
    from sparkindex.allocator import tune_allocator
    from sparkindex.worker.collector import tune_collector

    tune_collector()
    tune_allocator()


def run_reindex(pipeline: Pipeline, index: list[str] | None, new: bool, as_json: bool, adopt: bool = False) -> int:
    tune_process()
    s = api.reindex(pipeline, index, new=new, adopt=adopt, progress=RichBars())  # preflight first: exit 2 on a FAIL
    colour = {0: "green", 1: "yellow"}.get(s.outcome.exit_code, "red")
    err.print(
        f"[bold {colour}]{s.status}[/] {escape(s.alias)} -> {escape(s.index)}: {s.indexed:,} indexed of "
        f"{s.source_rows:,} source rows, {s.failed:,} failed, {s.seconds:.1f} s"
    )
    if as_json:
        emit_json(s.to_dict())
    return s.outcome.exit_code


@app.command()
def reindex(
    config: ConfigOpt,
    state_dir: StateDirOpt = None,
    index: IndexOpt = None,
    new: Annotated[bool, typer.Option("--new", help="abandon an unfinished job and start afresh")] = False,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt",
            help="an index that bears an alias's name (one sparkindex did not make) is deleted at the swap, "
            "in the same request that points the alias at the new version",
        ),
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Rebuild indexes into new versions on Spark, then swap the aliases (resumes unfinished jobs)."""
    raise typer.Exit(run_reindex(api.load(config, state_dir), index, new, json, adopt))


@app.command()
def demo(
    rows: Annotated[int, typer.Option(help="products to generate")] = 200_000,
    directory: Annotated[Path, typer.Option("--dir", help="where the demo lives")] = Path("demo"),
    query: Annotated[str, typer.Option(help="the sample search")] = "wireless speaker",
) -> None:
    """Generate the sample shop, reindex it on Spark, search it, print the JSON summary."""
    from sparkindex.demo.shop import generate_shop, write_demo_pipeline

    directory.mkdir(parents=True, exist_ok=True)
    err.print(f"· generating the sample shop ({rows:,} products) in {directory}/shop.db")
    counts = generate_shop(directory / "shop.db", rows)
    err.print("· " + ", ".join(f"{k}: {v:,}" for k, v in counts.items()))
    path = write_demo_pipeline(directory, partition_size=max(500, min(5000, rows // 16 or 1)))
    pipeline = api.load(path)
    built = api.reindex(pipeline, new=True, progress=RichBars(), preflight=False)  # a pipeline just written
    err.print(f"· sample search on alias 'products': {query!r}")
    for hit in api.search(pipeline, "products", query, limit=5).hits:
        src = hit.source
        cat = (src.get("category") or {}).get("name")
        line = f"  {hit.score:6.2f}  #{hit.id}  {src.get('name')}  [{cat}]  {len(src.get('reviews', []))} reviews"
        err.print(line, markup=False, highlight=False)
    emit_json(built.to_dict())
    raise typer.Exit(built.outcome.exit_code)


@app.command()
def status(config: ConfigOpt, index: IndexOpt = None, json: JsonOpt = False, state_dir: StateDirOpt = None) -> None:
    """The latest job for the aliases: state, counts per entity, partition states, last verify."""
    from sparkindex.cli.status_cmd import print_status

    result = api.status(api.load(config, state_dir), index)
    if json:
        emit_json(result.report)
    else:
        print_status(result.report)


@app.command()
def stop(config: ConfigOpt, index: IndexOpt = None, state_dir: StateDirOpt = None) -> None:
    """Ask the running sync, or else the running job, to stop gracefully; a later `reindex` resumes the job."""
    stopped = api.stop(api.load(config, state_dir), index)
    if stopped.kind == "sync":
        err.print(f"sync {escape(stopped.id)}: stopping")
    else:
        err.print(f"job {stopped.id}: {stopped.status}")


@app.command()
def verify(
    config: ConfigOpt,
    state_dir: StateDirOpt = None,
    index: IndexOpt = None,
    json: JsonOpt = False,
    repair: Annotated[bool, typer.Option("--repair", help="fix the drift found, then verify again")] = False,
) -> None:
    """Compare source and index on Spark by id and content hash: missing, extra, stale, duplicates."""
    from sparkindex.cli.verify_cmd import print_report

    call = api.repair if repair else api.verify
    result = call(api.load(config, state_dir), index, progress=RichBars())
    print_report(result.report)
    if json:
        emit_json(result.report)
    raise typer.Exit(result.outcome.exit_code)


@app.command()
def search(
    config: ConfigOpt,
    query: Annotated[str, typer.Argument(help="query string")],
    index: Annotated[str, typer.Option("--index", "-i", help="alias or index")],
    limit: int = 10,
    state_dir: StateDirOpt = None,
    json: JsonOpt = False,
) -> None:
    """Search an alias."""
    result = api.search(api.load(config, state_dir), index, query, limit)
    if json:
        emit_json(result.to_dict())
        return
    for h in result.hits:
        out.print(f"{h.score:7.3f}  {h.id}  {orjson.dumps(h.source).decode()[:160]}")


@dlq_app.command("list")
def dlq_list(
    config: ConfigOpt,
    state_dir: StateDirOpt = None,
    index: IndexOpt = None,
    json: JsonOpt = False,
    limit: int = 100,
    error_class: Annotated[str | None, typer.Option("--error-class", help="only this error class")] = None,
) -> None:
    """Dead-lettered documents with their error and attempts."""
    from sparkindex.cli.dlq_cmd import print_letters

    result = api.dead_letters(api.load(config, state_dir), index, error_class=error_class, limit=limit)
    if json:
        emit_json(result.to_dict())
    else:
        print_letters(result, error_class)


@dlq_app.command("redrive")
def dlq_redrive(
    config: ConfigOpt,
    state_dir: StateDirOpt = None,
    alias: Annotated[list[str] | None, typer.Option("--alias", "--index", "-i", help="alias (repeatable)")] = None,
    error_class: Annotated[str | None, typer.Option("--error-class", help="only this error class")] = None,
    json: JsonOpt = False,
) -> None:
    """Rebuild dead-lettered documents from the source by key and retry them."""
    from sparkindex.cli.dlq_cmd import print_redrive

    result = api.redrive(api.load(config, state_dir), alias, error_class=error_class, progress=RichBars())
    print_redrive(result)
    if json:
        emit_json(result.to_dict())
    raise typer.Exit(result.outcome.exit_code)


@app.command()
def gc(
    config: ConfigOpt,
    state_dir: StateDirOpt = None,
    older_than: Annotated[str, typer.Option("--older-than", help="age of what may go: 30d, 12h, 90m")] = "30d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="report what would go, delete nothing")] = False,
    json: JsonOpt = False,
) -> None:
    """Delete finished jobs, resolved dead letters and index versions beyond keep_versions."""
    from sparkindex.cli.gc_cmd import older_than_seconds, print_gc

    result = api.gc(api.load(config, state_dir), older_than=older_than_seconds(older_than), dry_run=dry_run)
    print_gc(result)
    if json:
        emit_json(result.to_dict())


app.command()(serve)  # the progress server; its own module (cli/serve.py)


from sparkindex.cli.sync import sync as _sync  # noqa: E402 - the sync command lives in its own module

app.command(name="sync")(_sync)

# The first hour with one's own database: each command in its own module.
from sparkindex.cli.check_cmd import check as _check  # noqa: E402
from sparkindex.cli.explain_cmd import explain as _explain  # noqa: E402
from sparkindex.cli.init_cmd import init as _init  # noqa: E402

app.command(name="init")(_init)
app.command(name="check")(_check)
app.command(name="explain")(_explain)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # a job waiting for its read replica says so, with the positions: an operator sees why it pauses
    logging.getLogger("sparkindex.sources.replica").setLevel(logging.INFO)
    try:
        # Without standalone mode, typer returns the code of a typer.Exit instead of raising it.
        code = app(standalone_mode=False)
    except api.SparkIndexError as exc:
        print_error(str(exc))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.BadParameter, typer.Abort) as exc:
        print_error(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        print_error("interrupted; rerun the same command to resume")
        sys.exit(3)
    except typer.TyperException as exc:  # usage errors: unknown option, missing argument
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print_error(str(exc))
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
