"""Submitted like a job (same --archives/--py-files): reports, from inside Spark tasks on the executors, which
Python ran them and where filterlib, the compiled dependencies and pyspark came from. One JSON line on stdout."""

import json
import sys

from jobs.spark import build_session


def where(_):
    import importlib.util
    import os

    import mmh3
    import numba
    import pyarrow

    import filterlib
    from filterlib import tags

    yield json.dumps({
        "executable": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(),
        "filterlib": filterlib.__file__, "pyspark": importlib.util.find_spec("pyspark").origin,
        "numba": numba.__file__, "pyarrow": pyarrow.__file__, "mmh3": mmh3.__file__,
        "tags_code": tags.tags_code("TagA"),
    })


if __name__ == "__main__":
    spark = build_session("probe_env")
    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()
    print(json.dumps({"driver": {"executable": sys.executable, "jobs_spark": sys.modules["jobs.spark"].__file__},
                      "tasks": [json.loads(r) for r in rows]}))
    spark.stop()
