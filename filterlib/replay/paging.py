"""The consumer's pulls over one consume queue, as DefaultMessageStore.getMessage (5.3.3) pages through it.

Every unit is filtered exactly once whatever the call boundaries (a unit a full batch stops at is read again by
the next call before any filter sees it), so the filter verdicts are computed beforehand, set-at-a-time
(`filterlib.engine.decide`), and this replays only the paging: per call the request offset, status, next
begin offset, messages returned and messages the commit-log layer dropped, and for each unit the call that
filtered it. The scan of one call stops at the end of the consume-queue file (travelCqFileNumWhenGetMessage
files when nothing was found; for a RocksDB queue, `units_per_file` 0, after maxMsgNums units per iterator before
5.5.0 and at the queue's end from 5.5.0 on, whose RocksDBReusableIterator reads on batch after batch: see
`PullConfig.rocksdb_to_queue_end`),
after maxFilterMessageSize bytes of units, or when the batch is full (message count, pull size, and the in-memory
or on-disk transfer limits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from filterlib import message_filter as mf
from filterlib import vocabulary as vocab
from filterlib.engine.decide import OUTCOMES, Decisions, Units, client_decode_layer, decide_units
from filterlib.kernel_cache import njit

CQ_UNIT_SIZE = 20
_CQ = vocab.LAYERS.index(vocab.CONSUME_QUEUE)
_CL = vocab.LAYERS.index(vocab.COMMIT_LOG)
_DELIVERED = OUTCOMES.index(vocab.DELIVERED)
MAX_PULL_MSG_SIZE = 128 * 1024 * 1024

FOUND = 0
NO_MATCHED_MESSAGE = 1
NO_MESSAGE_IN_QUEUE = 2
OFFSET_TOO_SMALL = 3
OFFSET_OVERFLOW_ONE = 4
OFFSET_OVERFLOW_BADLY = 5
STATUS_NAMES = ("FOUND", "NO_MATCHED_MESSAGE", "NO_MESSAGE_IN_QUEUE", "OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_ONE",
                "OFFSET_OVERFLOW_BADLY")


@dataclass(frozen=True)
class PullConfig:
    """MessageStoreConfig's paging limits (5.3.3 defaults) and the consumer's batch size (pullBatchSize)."""

    batch_size: int = 32
    max_filter_message_size: int = 16000
    max_transfer_bytes_in_memory: int = 256 * 1024
    max_transfer_count_in_memory: int = 32
    max_transfer_bytes_on_disk: int = 64 * 1024
    max_transfer_count_on_disk: int = 8
    travel_cq_file_num: int = 1
    max_total_msg_size: int = MAX_PULL_MSG_SIZE
    rocksdb_to_queue_end: bool = False
    """A RocksDB queue's iterator runs to the queue's end (5.5.0 on, iteratorWhenUseRocksdbConsumeQueue true:
    `filterlib.brokerversion.store_rules`), not one batch of units per call (5.3.3)."""


@dataclass
class Calls:
    """The pulls of one queue: per call (request offset, status, next begin offset, messages, filtered), and per
    unit the index of the call that filtered it (-1: never reached)."""

    request_offset: np.ndarray
    status: np.ndarray
    next_begin_offset: np.ndarray
    message_count: np.ndarray
    filter_message_count: np.ndarray
    unit_call: np.ndarray

    def status_names(self) -> list[str]:
        return [STATUS_NAMES[s] for s in self.status.tolist()]


@dataclass(frozen=True)
class Span:
    """Where a run of a file queue's units sits in its queue, when the queue is replayed in pieces: the queue's
    first offset and whether the queue's end lies at this run's end. A call of a file queue never scans past the end
    of its consumequeue file (travelCqFileNumWhenGetMessage 1), so the calls started at a file's first offset are
    the same whatever came before: a run of whole files, once the pull has reached it, pages on its own."""

    queue_min: int
    holds_end: bool


def span_start(start: int, begin: int, end: int, span: Span) -> int | None:
    """The offset the pull's calls reach the run [begin, end) at (`start` itself where the pull starts in it, or
    before the queue), None when none of its calls lies in the run."""
    at = start if begin == span.queue_min else max(start, begin)
    return None if at >= end and not span.holds_end else at


@njit(cache=True)
def _batch_full(size, max_msg_nums, max_pull, buf, count, in_mem, bytes_mem, count_mem, bytes_disk, count_disk):
    """isTheBatchFull for a unit of batchNum 1."""
    if buf == 0 or count == 0:
        return False
    if count + 1 > max_msg_nums:
        return True
    if buf + size > max_pull:
        return True
    if in_mem:
        if buf + size > bytes_mem:
            return True
        return count > count_mem - 1
    if buf + size > bytes_disk:
        return True
    return count > count_disk - 1


@njit(cache=True)
def _replay(start, min_offset, max_offset, units_per_file, sizes, cq_pass, cl_pass, in_mem, max_msg_nums,
            max_filter, max_pull, bytes_mem, count_mem, bytes_disk, count_disk, travel):
    n = len(sizes)
    cap = 16
    req = np.empty(cap, np.int64)
    st = np.empty(cap, np.int8)
    nxt = np.empty(cap, np.int64)
    msgs = np.empty(cap, np.int64)
    filt = np.empty(cap, np.int64)
    unit_call = np.full(n, -1, np.int64)
    calls = 0
    offset = start
    while True:
        if calls == cap:
            cap *= 2
            req = np.concatenate((req, np.empty(cap - calls, np.int64)))
            st = np.concatenate((st, np.empty(cap - calls, np.int8)))
            nxt = np.concatenate((nxt, np.empty(cap - calls, np.int64)))
            msgs = np.concatenate((msgs, np.empty(cap - calls, np.int64)))
            filt = np.concatenate((filt, np.empty(cap - calls, np.int64)))
        status = NO_MATCHED_MESSAGE
        nextb = offset
        buf = 0
        count = 0
        filtered = 0
        if max_offset == 0:
            status = NO_MESSAGE_IN_QUEUE
            nextb = 0
        elif offset < min_offset:
            status = OFFSET_TOO_SMALL
            nextb = min_offset
        elif offset == max_offset:
            status = OFFSET_OVERFLOW_ONE
        elif offset > max_offset:
            status = OFFSET_OVERFLOW_BADLY
            nextb = max_offset
        else:
            files = 0
            while buf <= 0 and nextb < max_offset and files < travel:
                files += 1
                if units_per_file > 0:
                    file_end = (nextb // units_per_file + 1) * units_per_file
                elif units_per_file < 0:  # 5.5.0's RocksDBReusableIterator: batch after batch to the queue's end
                    file_end = max_offset
                else:  # RocksDBConsumeQueue.iterateFrom(offset, maxMsgNums): at most a batch of units per call
                    file_end = nextb + max_msg_nums
                qo = nextb
                while qo < file_end and nextb < max_offset:
                    i = qo - min_offset
                    size = sizes[i]
                    if (qo - offset) * CQ_UNIT_SIZE >= max_filter:
                        break
                    if _batch_full(size, max_msg_nums, max_pull, buf, count, in_mem[i], bytes_mem, count_mem,
                                   bytes_disk, count_disk):
                        break
                    if buf >= max_pull:
                        break
                    nextb = qo + 1
                    qo += 1
                    unit_call[i] = calls
                    if not cq_pass[i]:
                        continue
                    if not cl_pass[i]:
                        filtered += 1
                        continue
                    buf += size
                    count += 1
                    status = FOUND
        req[calls] = offset
        st[calls] = status
        nxt[calls] = nextb
        msgs[calls] = count
        filt[calls] = filtered
        calls += 1
        if status == OFFSET_OVERFLOW_ONE or status == NO_MESSAGE_IN_QUEUE or status == OFFSET_OVERFLOW_BADLY \
                or nextb == offset:
            break
        offset = nextb
    return req[:calls], st[:calls], nxt[:calls], msgs[:calls], filt[:calls], unit_call


def replay_pulls(start: int, min_offset: int, sizes: np.ndarray, cq_pass: np.ndarray, cl_pass: np.ndarray,
                 units_per_file: int, config: PullConfig | None = None, in_mem: np.ndarray | None = None,
                 span: Span | None = None) -> Calls:
    """Pull a queue from `start` until getMessage says there is nothing more, as the harness's replay does.

    sizes / cq_pass / cl_pass are per unit from `min_offset` to the queue's end (the commit-log verdict matters
    only where the consume-queue layer passed); `in_mem` is estimateInMemByCommitOffset per unit (default: all
    in memory — whether the broker would have read a unit from page cache depends on its RAM). With `span`, the
    units are whole consumequeue files [min_offset, min_offset + len(sizes)) of a longer queue: the calls that lie
    in them, call indices counted from the first of those.
    """
    c = config or PullConfig()
    n = len(sizes)
    if in_mem is None:
        in_mem = np.ones(n, dtype=bool)
    if span is not None:
        if units_per_file <= 0 or c.travel_cq_file_num != 1:
            raise ValueError("only a file queue paged one file per call can be replayed in pieces")
        at = span_start(int(start), int(min_offset), int(min_offset) + n, span)
        if at is None:
            empty = np.zeros(0, np.int64)
            return Calls(empty, np.zeros(0, np.int8), empty, empty, empty, np.full(n, -1, np.int64))
        calls = replay_pulls(at, min_offset, sizes, cq_pass, cl_pass, units_per_file, config, in_mem)
        if not span.holds_end:  # the run's own end is no queue end: drop the OFFSET_OVERFLOW_ONE call made there
            if calls.status[-1] != OFFSET_OVERFLOW_ONE:
                raise AssertionError("a run of whole files ended in a call other than OFFSET_OVERFLOW_ONE")
            calls = Calls(calls.request_offset[:-1], calls.status[:-1], calls.next_begin_offset[:-1],
                          calls.message_count[:-1], calls.filter_message_count[:-1], calls.unit_call)
        return calls
    max_pull = min(max(c.max_total_msg_size, 100), MAX_PULL_MSG_SIZE)
    max_filter = max(c.max_filter_message_size, c.batch_size * CQ_UNIT_SIZE)
    per_file = -1 if units_per_file == 0 and c.rocksdb_to_queue_end else int(units_per_file)
    out = _replay(int(start), int(min_offset), int(min_offset + n), per_file,
                  np.asarray(sizes, dtype=np.int64), np.asarray(cq_pass, dtype=bool), np.asarray(cl_pass, dtype=bool),
                  np.asarray(in_mem, dtype=bool), c.batch_size, max_filter, max_pull,
                  c.max_transfer_bytes_in_memory, c.max_transfer_count_in_memory, c.max_transfer_bytes_on_disk,
                  c.max_transfer_count_on_disk, c.travel_cq_file_num)
    return Calls(*out)


def passes(layer: np.ndarray, outcome: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(consume-queue layer passed, commit-log layer passed) per unit, from its deciding layer and outcome, as
    getMessage pages: a unit stays at the consume-queue layer only where that layer dropped it; the commit-log
    verdict matters only where the consume-queue layer passed."""
    return layer != _CQ, (layer != _CL) | (outcome == _DELIVERED)


def pull_queue(f: mf.ExpressionMessageFilter, units: Units, sizes: np.ndarray, start: int, min_offset: int,
               units_per_file: int, config: PullConfig | None = None, engine_cache: dict | None = None,
               span: Span | None = None, own: mf.ExpressionMessageFilter | None = None) -> tuple[Decisions, Calls]:
    """One subscription's pulls over one queue (units from `min_offset` on; with `span`, a run of whole files of
    it): every unit's verdict set-at-a-time, the calls paged from `start`, then the client's decode of each call's
    returned messages. `own`: a member's own filter (`decide_units`)."""
    decisions = decide_units(f, units, engine_cache, own)
    cq_pass, cl_pass = passes(decisions.layer, decisions.outcome)
    calls = replay_pulls(start, min_offset, sizes, cq_pass, cl_pass, units_per_file, config, span=span)
    client_decode_layer(decisions, calls.unit_call, units.decode_errors, min_offset)
    return decisions, calls
