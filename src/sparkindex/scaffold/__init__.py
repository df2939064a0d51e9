"""``sparkindex init``: a pipeline file written from a database's schema (issue 18).

``connect`` opens the database (a wrong URL fails in one line), ``reflect`` turns the schema
into facts, ``relations`` infers indexes and their relations from them, ``columns`` chooses the
fields, ``capture`` proposes change capture from what the server supports, ``render`` and
``yaml_text`` write the commented file, ``urls`` keeps secrets out of it, and ``pipeline`` puts
them together and checks that the result loads and resolves as ``reindex`` will see it.
"""

from sparkindex.scaffold.pipeline import InitOptions, InitResult, scaffold

__all__ = ["InitOptions", "InitResult", "scaffold"]
