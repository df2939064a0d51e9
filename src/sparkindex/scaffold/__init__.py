"""``sparkindex init``: a pipeline file written from a database's schema.

The schema is reflected once into plain facts, so inference needs no database (tests write the facts by hand).
Every choice is written as a comment beside what it chose. The text is loaded and resolved exactly as ``reindex``
would before it is written: a pipeline ``init`` writes but a run would refuse is caught here.

* ``connect``: opens the database. A wrong URL or a missing SQLite file fails at once, in one line, without the
  password.
* ``reflect``: the schema as a graph of facts (tables, usable keys, foreign keys, sizes), read through ``Source``
  as ``reindex`` sees it.
* ``relations``: roots and relations inferred from the graph. Depth and cycle cuts are kept as ``Cut`` and shown
  as comments.
* ``columns``: which columns become fields, and why some do not (binary data, unmapped types, reserved names).
* ``capture``: change capture proposed by running the sync's own ``check()`` on the draft. Only a proposal that
  passes is written active; otherwise polling, or a comment saying why not.
* ``urls``: URLs without secrets (a password becomes ``${VARIABLE}``), SQLite paths relative to the pipeline.
* ``row_filter``: ``--where``, given to the one index it filters once the database accepts it.
* ``render``: the drafts as a commented pipeline tree.
* ``yaml_text``: a small block-style YAML writer with comments, byte for byte the same for the same input.
* ``pipeline``: from URL to text: reflect, infer, propose capture, render, and prove the result loads and resolves.
"""

from sparkindex.scaffold.pipeline import InitOptions, InitResult, scaffold

__all__ = ["InitOptions", "InitResult", "scaffold"]
