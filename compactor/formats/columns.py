"""Decoded keys and values as the latest-value table's typed columns, and schema evolution.

Column names (a public contract, documented in the README):

- a value that is a record (Avro record, JSON object, JSON Schema object): one column per
  top-level field, named after it; nested records stay structs. A field whose name is
  already a Kafka column (``key``, ``value``, ``topic``, ``partition``, ``offset``,
  ``timestamp``, ``timestampType``, ``headers``) is named ``value_<field>``;
- a key that is a record: one column per field, ``key_<field>``;
- anything else decoded (``string``, an Avro primitive): ``key_decoded`` / ``value_decoded``.

Evolution: the table's column types are fixed by the first schema that brought each column.
A later schema may add columns (a Delta schema change) and may leave columns out (null in its
rows). A schema that gives an existing column another type cannot be merged: its records are
reported as type changes and kept out of the table, whose column keeps its type.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from compactor.formats.decoder import Decoded, Group
from compactor.formats.records import first_failures
from compactor.kafka.schema import KAFKA_SCHEMA

KAFKA_COLUMNS = frozenset(KAFKA_SCHEMA.names)


def column_names(side: str, type_: pa.DataType) -> list[str]:
    """The table columns one decoded key or value becomes (see the module's rules)."""
    if not pa.types.is_struct(type_):
        return [f"{side}_decoded"]
    names = []
    for f in type_:
        if side == "key":
            names.append(f"key_{f.name}")
        else:
            names.append(f"value_{f.name}" if f.name in KAFKA_COLUMNS else f.name)
    return names


def _group_columns(side: str, group: Group) -> list[tuple[str, pa.Array]]:
    array = group.array()
    names = column_names(side, group.type)
    if not pa.types.is_struct(group.type):
        return [(names[0], array)]
    fields = array.flatten()
    return list(zip(names, fields, strict=True))


@dataclass
class TypedColumns:
    """Typed columns for a batch of records, aligned with it."""

    table: pa.Table  # one row per input row; null where nothing was decoded
    failed: list[str | None]  # per row: why the key or value did not decode
    type_changes: list[str | None]  # per row: why its schema cannot be merged
    schema_ids: list[int | None]  # per row: the schema id of the failure, if any
    added: list[str]  # columns new to ``existing``


def typed_columns(rows: int, decoded: list[tuple[str, Decoded]],
                  existing: pa.Schema) -> TypedColumns:
    """Assemble the columns of ``decoded`` (("key"|"value", Decoded) pairs) for ``rows`` rows.

    ``existing``: the table's typed columns so far (their types win). Groups are taken in
    the order their first record arrived, so within one batch the earlier schema fixes a
    new column's type.
    """
    current = {f.name: f.type for f in existing}
    order = list(existing.names)
    failed, schema_ids = first_failures(rows, decoded)
    changes: list[str | None] = [None] * rows
    placed: dict[str, list[tuple[list[int], pa.Array]]] = {}
    for side, result in decoded:
        for group in sorted(result.groups, key=lambda g: g.rows[0]):
            columns = _group_columns(side, group)
            clash = next(((n, current[n], a.type) for n, a in columns
                          if n in current and current[n] != a.type), None)
            if clash is not None:
                name, was, now = clash
                why = (f"{side} schema id {group.schema_id} gives column {name!r} the type "
                       f"{now}, but the table's column is {was}: a type change cannot be "
                       "merged (register a new field instead of changing this one)")
                for row in group.rows:
                    changes[row] = why
                    schema_ids[row] = group.schema_id
                continue
            for name, array in columns:
                if name not in current:
                    current[name] = array.type
                    order.append(name)
                placed.setdefault(name, []).append((group.rows, array))
    arrays = [_scatter(rows, placed.get(name, []), current[name]) for name in order]
    table = pa.Table.from_arrays(arrays, schema=pa.schema([(n, current[n]) for n in order]))
    added = [n for n in order if n not in existing.names]
    return TypedColumns(table, failed, changes, schema_ids, added)


def _scatter(rows: int, pieces: list[tuple[list[int], pa.Array]], type_: pa.DataType) -> pa.Array:
    """One column of ``rows`` rows from pieces (row positions, values); null elsewhere."""
    if not pieces:
        return pa.nulls(rows, type_)
    values = pa.concat_arrays([a.cast(type_) for _, a in pieces] + [pa.nulls(1, type_)])
    index = [len(values) - 1] * rows
    at = 0
    for positions, array in pieces:
        for i, row in enumerate(positions):
            index[row] = at + i
        at += len(array)
    return values.take(pa.array(index, pa.int64()))
