"""The two kinds of section every pipeline model is built from, and shared field types.

Every section forbids unknown keys (:class:`Strict`), so a typo in the YAML fails loudly with its
key path instead of being ignored; a definition the search server interprets (an analyzer, a
similarity) keeps the keys sparkindex does not know (:class:`Open`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict


def _as_list(value: object) -> object:
    if isinstance(value, str):
        return [value]
    return value


#: one column or a list of columns (``id: sku`` or ``id: [shop, sku]``)
KeyColumns = Annotated[list[str], BeforeValidator(_as_list)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Open(BaseModel):
    """A definition the server interprets (its parameters are the server's business), whose few
    parameters sparkindex relies on are still checked."""

    model_config = ConfigDict(extra="allow")
