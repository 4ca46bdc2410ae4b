"""The set-at-a-time filter engine: RocketMQ's filters over whole Arrow batches, with the interpreter's answers.

`Engine(filters).evaluate(batch)` — SQL92 selectors, one FilterResult per filter (`engine`); the consume-queue
layer over columns — tag hashes, the broker's tag check, the client's re-check, ext bitmaps and bloom hits
(`queue_layer`). Pure Python over pyarrow / numpy / numba: no Spark import.
"""

from filterlib.engine.engine import Engine, evaluate_batch
from filterlib.engine.results import ERROR, FALSE, KERNEL, NULL, PROGRAM, TABLE, TRUE, FilterResult

__all__ = ["Engine", "evaluate_batch", "FilterResult", "FALSE", "TRUE", "NULL", "ERROR", "TABLE", "KERNEL", "PROGRAM"]
