"""What ``sparkindex init`` infers from a schema: roots, relations, keys, cuts. No Spark here.

The rich schema (TPC-H beside a library and a staff) is reflected from SQLite; the graph tests
build schema graphs by hand, so that each rule is tested on the smallest shape that shows it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

from sparkindex.errors import UsageError
from sparkindex.scaffold.columns import choose_columns
from sparkindex.scaffold.reflect import ColumnFacts, Reference, SchemaGraph, TableFacts, categorize
from sparkindex.scaffold.relations import choose_roots, infer_index
from tests.scaffold.helpers import names, reflect, relation, rich_sqlite


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> SchemaGraph:
    return reflect(rich_sqlite(tmp_path_factory.mktemp("rich")))


# -- roots ----------------------------------------------------------------------------------------
def test_default_roots_are_unreferenced_tables_largest_first(graph: SchemaGraph) -> None:
    # lineitem (487 rows) is referenced by nobody; orders, customer, ... are referenced NOT NULL.
    # book and author are referenced only by the link table book_author, which is never a root;
    # employee only through nullable keys and itself; audit_log (no key) is a root all the same.
    assert choose_roots(graph) == ["lineitem", "audit_log", "employee", "book", "author", "currency"]


def test_named_roots_keep_their_order_and_unknown_tables_are_refused(graph: SchemaGraph) -> None:
    assert choose_roots(graph, ["orders", "part", "orders"]) == ["orders", "part"]
    with pytest.raises(UsageError, match=r"--table 'ordres'.*not found.*orders"):
        choose_roots(graph, ["ordres"])


def _table(
    name: str, *cols: str, pk: tuple[str, ...] = ("id",), refs: tuple[Reference, ...] = (), rows: int = 1
) -> TableFacts:
    columns = tuple(ColumnFacts(c, "INTEGER", "plain", c not in pk and not c.endswith("_nn"), True) for c in cols)
    return TableFacts(name, columns, pk, (), refs, rows)


def test_a_schema_where_every_table_is_referenced_asks_for_table() -> None:
    a = _table("a", "id", "b_id_nn", refs=(Reference("a", ("b_id_nn",), "b", ("id",), False),))
    b = _table("b", "id", "a_id_nn", refs=(Reference("b", ("a_id_nn",), "a", ("id",), False),))
    graph = SchemaGraph("sqlite", {"a": a, "b": b})
    with pytest.raises(UsageError, match="--table"):
        choose_roots(graph)


def test_row_count_ties_are_broken_by_name() -> None:
    graph = SchemaGraph("sqlite", {n: _table(n, "id", rows=5) for n in ("zeta", "alpha", "mid")})
    assert choose_roots(graph) == ["alpha", "mid", "zeta"]


# -- many-to-one chains and the depth limit -----------------------------------------------------------
def test_lineitem_follows_many_to_one_chains_to_depth_3_with_composite_keys(graph: SchemaGraph) -> None:
    index = infer_index(graph, "lineitem", depth=3)
    assert index.id == ("l_orderkey", "l_linenumber") and index.key_source == "primary key"
    assert names(index.relations) == ["orders", "partsupp"]
    supply = relation(index, "partsupp")
    assert (supply.kind, supply.local_key, supply.remote_key) == (
        "object",
        ("l_partkey", "l_suppkey"),
        ("ps_partkey", "ps_suppkey"),
    )
    assert names(supply.children) == ["part", "supplier"]
    nation = relation(index, "orders.customer.nation")
    assert nation.children == []
    [cut] = nation.cuts
    assert cut.kind == "depth" and cut.skipped == "region"
    assert "--depth 4" in cut.text and "n_regionkey" in cut.text


def test_depth_1_keeps_only_the_first_hop_and_says_what_was_cut(graph: SchemaGraph) -> None:
    index = infer_index(graph, "lineitem", depth=1)
    assert [r.children for r in index.relations] == [[], []]
    assert {c.skipped for c in relation(index, "orders").cuts} == {"customer"}
    assert {c.skipped for c in relation(index, "partsupp").cuts} == {"part", "supplier"}


def test_depth_0_keeps_the_root_columns_only(graph: SchemaGraph) -> None:
    index = infer_index(graph, "orders", depth=0)
    assert index.relations == []
    assert {c.skipped for c in index.cuts} == {"customer", "lineitem"}


# -- one-to-many ----------------------------------------------------------------------------------
def test_orders_nest_their_lineitems_ordered_by_key(graph: SchemaGraph) -> None:
    index = infer_index(graph, "orders", depth=3)
    assert names(index.relations) == ["customer", "lineitem"]
    items = relation(index, "lineitem")
    assert (items.kind, items.local_key, items.remote_key, items.order_by) == (
        "nested",
        ("o_orderkey",),
        ("l_orderkey",),
        ("l_orderkey", "l_linenumber"),
    )
    # below a nested child only many-to-one chains are followed, and never back to the root
    assert names(items.children) == ["partsupp"]
    assert names(relation(index, "lineitem.partsupp").children) == ["part", "supplier"]
    assert relation(index, "lineitem.partsupp.supplier").cuts[0].kind == "depth"


def test_many_to_many_through_a_link_table_is_nested_through_it(graph: SchemaGraph) -> None:
    book = infer_index(graph, "book", depth=3)
    link = relation(book, "book_author")
    assert (link.kind, link.remote_key, link.order_by) == ("nested", ("book_id",), ("book_id", "author_id"))
    assert link.link_to == "author"
    author = relation(book, "book_author.author")
    assert (author.kind, author.local_key, author.remote_key) == ("object", ("author_id",), ("author_id",))
    # and the other way round
    books = relation(infer_index(graph, "author", depth=3), "book_author.book")
    assert books.kind == "object"


def test_a_reference_to_a_unique_key_and_a_table_keyed_by_it(graph: SchemaGraph) -> None:
    book = infer_index(graph, "book", depth=3)
    currency = relation(book, "currency")
    assert (currency.local_key, currency.remote_key) == (("currency_code",), ("code",))
    index = infer_index(graph, "currency", depth=3)
    assert index.usable and index.id == ("code",) and index.key_source == "unique key"


def test_a_table_without_a_usable_key_is_not_indexed_and_says_why(graph: SchemaGraph) -> None:
    index = infer_index(graph, "audit_log", depth=3)
    assert not index.usable
    assert index.reason is not None and "no primary key" in index.reason and "unique" in index.reason


# -- cycles and self-references ------------------------------------------------------------------------
def test_self_references_and_cycles_are_cut_where_they_close(graph: SchemaGraph) -> None:
    index = infer_index(graph, "employee", depth=3)
    assert names(index.relations) == ["dept", "department"]
    kinds = {(c.kind, c.table, c.columns, c.ref_table) for c in index.cuts}
    assert ("self", "employee", ("manager_id",), "employee") in kinds  # the manager object
    assert ("self-children", "employee", ("manager_id",), "employee") in kinds  # the reports
    assert ("no key", "audit_log", ("emp_id",), "employee") in kinds
    [cycle] = relation(index, "dept").cuts
    assert (cycle.kind, cycle.table, cycle.ref_table) == ("cycle", "department", "employee")
    assert "employee > dept" in cycle.text
    # the nested departments' own key back to the employee is the nesting itself, not a cycle
    assert relation(index, "department").cuts == []


def test_names_avoid_columns_and_each_other() -> None:
    refs = (
        Reference("trip", ("from_id",), "city", ("id",), True),
        Reference("trip", ("to_id",), "city", ("id",), True),
        Reference("trip", ("city",), "city", ("id",), True),
    )
    trip = _table("trip", "id", "from_id", "to_id", "city", refs=refs)
    city = _table("city", "id")
    index = infer_index(SchemaGraph("sqlite", {"trip": trip, "city": city}), "trip", depth=2)
    assert names(index.relations) == ["from", "to", "city_by_city"]


# -- columns ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("col_type", "category"),
    [
        (sa.Integer(), "plain"),
        (postgresql.DOUBLE_PRECISION(), "plain"),  # SQLAlchemy 2.1: a Float is no Numeric
        (sa.Numeric(12, 2), "plain"),
        (sa.String(30), "plain"),
        (postgresql.JSONB(), "plain"),
        (sa.Uuid(), "plain"),
        (sa.Text(), "large_text"),
        (sa.String(8000), "large_text"),
        (sa.LargeBinary(), "binary"),
        (postgresql.BYTEA(), "binary"),
        (mysql.SET("a", "b"), "set"),  # a String by type whose values are Python sets
        (postgresql.ARRAY(sa.Text()), "unsupported"),
        (postgresql.INET(), "unsupported"),
        (postgresql.INTERVAL(), "unsupported"),
        (sa.types.NullType(), "unsupported"),  # a type SQLAlchemy did not recognise
    ],
)
def test_column_categories(col_type: sa.types.TypeEngine[object], category: str) -> None:
    assert categorize(col_type) == category


def test_left_out_columns_are_listed_with_why(graph: SchemaGraph) -> None:
    choice = choose_columns(graph.table("book"))
    assert choice.explicit == ["book_id", "title", "blurb", "published", "currency_code"]
    assert [name for name, _ in choice.left_out] == ["cover"]
    assert choice.large_text == ("blurb",)
    assert choose_columns(graph.table("orders")).explicit is None  # nothing left out: no list


def test_unbounded_text_keys_are_not_called_large_text(tmp_path: Path) -> None:
    """PostgreSQL schemas key rows by `text` (handles, slugs, codes): short identifiers, not the
    prose whose size the comment warns about."""
    meta = sa.MetaData()
    sa.Table("person", meta, sa.Column("handle", sa.Text(), primary_key=True), sa.Column("bio", sa.Text()))
    sa.Table(
        "note",
        meta,
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("author", sa.Text(), sa.ForeignKey("person.handle"), nullable=False),
        sa.Column("slug", sa.Text(), nullable=False, unique=True),
        sa.Column("body", sa.Text()),
    )
    url = f"sqlite:///{tmp_path / 'notes.db'}"
    engine = sa.create_engine(url)
    meta.create_all(engine)
    engine.dispose()
    graph = reflect(url)
    assert choose_columns(graph.table("person")).large_text == ("bio",)
    assert choose_columns(graph.table("note")).large_text == ("body",)


def test_link_tables_with_a_surrogate_key_or_their_own_data_are_many_to_many(tmp_path: Path) -> None:
    """Django's many-to-many table (an `id` beside the two foreign keys) and a link that records
    when it was made are link tables too: the entities on both sides stay roots, and the link's
    own columns ride in the nested element. A link-shaped table others reference is an entity."""
    meta = sa.MetaData()
    for name in ("book", "author", "tag"):
        sa.Table(name, meta, sa.Column("id", sa.Integer(), primary_key=True), sa.Column("name", sa.String(40)))
    sa.Table(
        "book_author",
        meta,
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("book_id", sa.Integer(), sa.ForeignKey("book.id"), nullable=False),
        sa.Column("author_id", sa.Integer(), sa.ForeignKey("author.id"), nullable=False),
        sa.UniqueConstraint("book_id", "author_id"),
    )
    # a review: its own id, the book and the author it is about, its text; no unique pair
    sa.Table(
        "review",
        meta,
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("book_id", sa.Integer(), sa.ForeignKey("book.id"), nullable=False),
        sa.Column("author_id", sa.Integer(), sa.ForeignKey("author.id"), nullable=False),
        sa.Column("body", sa.Text()),
    )
    sa.Table(
        "book_tag",
        meta,
        sa.Column("book_id", sa.Integer(), sa.ForeignKey("book.id"), primary_key=True),
        sa.Column("tag_id", sa.Integer(), sa.ForeignKey("tag.id"), primary_key=True),
        sa.Column("added", sa.String(20)),
    )
    url = f"sqlite:///{tmp_path / 'links.db'}"
    engine = sa.create_engine(url)
    meta.create_all(engine)
    engine.dispose()
    graph = reflect(url)
    assert graph.is_link("book_author") and graph.is_link("book_tag") and not graph.is_link("review")
    assert sorted(choose_roots(graph)) == ["review", "tag"]  # review references book and author NOT NULL
    book = infer_index(graph, "book", 3)
    through_author = relation(book, "book_author")
    assert through_author.kind == "nested" and through_author.link_to == "author"
    through_tag = relation(book, "book_tag")
    assert through_tag.link_to == "tag" and "added" in through_tag.columns.kept


def test_a_link_shaped_table_that_others_reference_is_an_entity(graph: SchemaGraph) -> None:
    # TPC-H's partsupp: two NOT NULL foreign keys as its key, and lineitem references it
    assert graph.table("partsupp").has_link_shape and not graph.is_link("partsupp")


def test_rows_are_counted_no_further_than_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table the server has no estimate for (SQLite; PostgreSQL before ANALYZE) is counted,
    but never past the limit: init on a freshly restored large database reads a bounded prefix."""
    import sparkindex.scaffold.reflect as reflect_module

    url = f"sqlite:///{tmp_path / 'big.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE big (id INTEGER PRIMARY KEY)")
        conn.exec_driver_sql(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500) "
            "INSERT INTO big SELECT i FROM n"
        )
    engine.dispose()
    monkeypatch.setattr(reflect_module, "EXACT_COUNT_LIMIT", 100)
    big = reflect(url).table("big")
    assert (big.rows, big.rows_estimated) == (100, True)
    monkeypatch.setattr(reflect_module, "EXACT_COUNT_LIMIT", 1000)
    big = reflect(url).table("big")
    assert (big.rows, big.rows_estimated) == (500, False)
