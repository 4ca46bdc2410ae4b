"""Spark DDL made from Arrow schemas: the one place the jobs turn `filterlib.tables` (and the tasks' Arrow output
schemas) into the schema strings Spark takes."""

from __future__ import annotations

import pyarrow as pa

from filterlib.tables import Table, sql_type


def _type(t: pa.DataType) -> str:
    """The Spark SQL type of an Arrow type: the tables' types, and structs of them (a task's nested row)."""
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"`{f.name}`: {_type(f.type)}" for f in t) + ">"
    return sql_type(t)


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an Arrow schema made of the types the tables and tasks use."""
    return ", ".join(f"`{f.name}` {_type(f.type)}" for f in schema)


def table_ddl(table: Table) -> str:
    """The Spark DDL of a Delta table, dump_id included, in its column order."""
    return spark_ddl(table.arrow())
