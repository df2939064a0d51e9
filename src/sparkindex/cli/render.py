"""Terminal output: messages and errors on stderr, results on stdout (the bars: :mod:`.bars`)."""

from __future__ import annotations

import sys
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape

from sparkindex.config.secrets import redact_url

# soft_wrap: a piped stderr (logs, CI) must get each message on one line, never re-wrapped at 80
# columns, where a space in a quoted user value would read as a newline.
err = Console(stderr=True, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    # Messages quote user input (patterns like ``^[a-z0-9]*$``, bracketed names): never markup.
    err.print(f"[bold red]error:[/] {escape(redact_url(message))}", highlight=False, markup=True)


def emit_json(obj: Any) -> None:
    """The ``--json`` object, as stdout's last line."""
    sys.stdout.write(orjson.dumps(obj).decode() + "\n")
    sys.stdout.flush()
