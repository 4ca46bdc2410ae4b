"""Delta writes for the jobs: each table lives at <warehouse>/<table>, and a run replaces one dump's rows at once."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DUMP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")


def table_path(warehouse: str, table: str) -> str:
    """<warehouse>/<table> (a local directory or a Hadoop URI)."""
    return f"{warehouse.rstrip('/')}/{table}"


def check_dump_id(dump_id: str) -> str:
    """The dump id if it is safe inside a SQL predicate (letters, digits and ._:@+-), else ValueError."""
    if not DUMP_ID.match(dump_id):
        raise ValueError(f"dump id {dump_id!r} must start with a letter or digit and hold only letters, digits "
                         f"and . _ : @ + - (pass --dump-id)")
    return dump_id


def replace_dump(df: DataFrame, warehouse: str, table: str, dump_id: str) -> str:
    """Overwrite the rows of one dump_id in a Delta table in ONE commit (replaceWhere); other dumps stay."""
    path = table_path(warehouse, table)
    (df.write.format("delta").mode("overwrite")
     .option("replaceWhere", f"dump_id = '{check_dump_id(dump_id)}'")
     .save(path))
    return path


def read_dump(spark: SparkSession, warehouse: str, table: str, dump_id: str) -> DataFrame:
    """One dump's rows of a table."""
    from pyspark.sql import functions as F

    return spark.read.format("delta").load(table_path(warehouse, table)).where(F.col("dump_id") == dump_id)
