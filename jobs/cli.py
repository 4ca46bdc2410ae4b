"""What every job entry point shares: the one-line input error, the defaults file, logging, the job's session."""

from __future__ import annotations

import argparse
import json
import logging
import os
import posixpath
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from filterlib import brokerversion, tables
from filterlib.errors import StoreFormatError
from filterlib.rebuild.dumpregistry import RegistryLoad, load_registry
from filterlib.store import fs as sfs
from filterlib.store.storedir import StoreDir
from filterlib.subscriptions import Subscription, SubscriptionsError, load_subscriptions
from jobs.delta_io import check_dump_id, layout_problem, warehouse_problem
from jobs.faults import EXIT_BUSY, EXIT_FAULT, describe
from jobs.runlock import DumpBusy, MarkerError, RunLock

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The checkout, the site-packages of an install, or `make dist`'s --py-files zip (then ROOT is the .zip itself and
# the defaults files are its members conf/*.json: load_defaults reads them from the archive).
ROOT = Path(__file__).resolve().parent.parent


class InputError(Exception):
    """Bad input found before any Spark work: one line for the user, exit code 2."""


def _zip_member(path: Path) -> tuple[Path, str] | None:
    """(archive, member) when `path` lies inside a zip file (e.g. <dist>/rocketmq_filter_replay.zip/conf/x.json)."""
    for parent in path.parents:
        if parent.is_file():
            return (parent, path.relative_to(parent).as_posix()) if zipfile.is_zipfile(parent) else None
    return None


def _read_text(path: str) -> str:
    """A file's text, also when the path lies inside a zip on sys.path (how --py-files ships the code)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError) as e:
        inside = _zip_member(Path(path))
        if inside is None:
            raise OSError(e.errno, e.strerror) from None
        archive, member = inside
        try:
            with zipfile.ZipFile(archive) as z:
                return z.read(member).decode("utf-8")
        except KeyError:
            raise OSError(f"no member {member} in {archive}") from None


def load_defaults(path: str | os.PathLike) -> dict[str, Any]:
    """A job's defaults file (a JSON object); InputError naming the file when it is missing or malformed.

    The path may lie inside the --py-files zip (`make dist` packs conf/*.json beside filterlib/ and jobs/)."""
    path = str(path)
    try:
        data = json.loads(_read_text(path))
    except OSError as e:
        raise InputError(f"{path}: cannot read the defaults file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object of defaults")
    return data


def apply_writer_conf(spark: SparkSession, defaults: Mapping[str, Any]) -> None:
    """The defaults file's `parquet_conf` set on the running session: SQL settings reach the Parquet writers' Hadoop
    configuration, also in a session the job did not start (spark-submit, a test, a notebook)."""
    for key, value in (defaults.get("parquet_conf") or {}).items():
        spark.conf.set(key, str(value))


def add_session_args(p: argparse.ArgumentParser, defaults: Path, keys: str = "master, spark_conf") -> None:
    """The --defaults and --master flags every entry point has."""
    p.add_argument("--defaults", metavar="FILE", default=str(defaults),
                   help=f"job defaults (JSON: {keys}); default {defaults.relative_to(ROOT)}")
    p.add_argument("--master", metavar="URL",
                   help="Spark master when not run by spark-submit (default: the defaults file's, else local[*])")


def check_file(path: str | None, what: str) -> None:
    """InputError when an optional input file is given but missing or unreadable."""
    if path is None:
        return
    if not os.path.isfile(path):
        raise InputError(f"{path}: {what} not found or not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: {what} is not readable")


def writable_dir(path: str, what: str, shown: str | None = None) -> None:
    """Create the directory `path` if missing and check it is writable; otherwise InputError naming it (as the user
    gave it: `shown`) and `what` it is for, before any Spark work."""
    shown = shown or path
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise InputError(f"{shown}: cannot create {what} ({e.strerror or e})") from None
    if not os.access(path, os.W_OK):
        raise InputError(f"{shown}: {what} is not writable")


def job_logger(prog: str) -> logging.Logger:
    """The job's logger: one timestamped line per stage on stderr."""
    log = logging.getLogger(prog)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s " + prog + ": %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def job_session(app_name: str, defaults: dict[str, Any], master: str | None,
                warehouse: str | None = None) -> SparkSession:
    """The job's own SparkSession (jobs.spark's builder) with the defaults file's settings; an s3a:// warehouse
    brings the S3A connector."""
    from jobs.spark import build_session

    spark = build_session(app_name, master=master or defaults.get("master"),
                          conf={k: str(v) for k, v in (defaults.get("spark_conf") or {}).items()},
                          locations=[warehouse])
    spark.sparkContext.setLogLevel("WARN")
    _quiet_task_failures(spark)
    return spark


# What Spark logs, task by task, when tasks fail: each failure's Java stack and Python traceback, then the tasks it
# cancels. The job ends with one sentence naming the cause (jobs.faults), or with the exception itself when it
# recognises none, so in a session it starts these stay quiet (RMQ_REPLAY_TASK_LOGS=1 keeps them).
_TASK_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                 "org.apache.spark.storage.BlockManager", "org.apache.spark.TaskContextImpl",
                 "org.apache.spark.api.python.PythonRunner",
                 "org.apache.spark.sql.execution.datasources.FileFormatWriter",
                 "org.apache.spark.storage.memory.MemoryStore", "org.apache.spark.scheduler.DAGScheduler",
                 "org.apache.spark.util.Utils")


def _quiet_task_failures(spark: SparkSession) -> None:
    """Turn off the loggers that repeat a failing task's stack (see _TASK_LOGGERS)."""
    if os.environ.get("RMQ_REPLAY_TASK_LOGS") == "1":
        return
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _TASK_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:  # another logging backend: keep Spark's own output
        pass


def run_main(prog: str, prepare: Callable[[], Any], app_name: Callable[[Any], str], defaults: Callable[[Any], dict],
             master: str | None, work: Callable[[SparkSession, Any], Any], spark: SparkSession | None,
             break_lock: bool | None = None, resolve: Callable[[SparkSession, Any], Any] | None = None) -> int:
    """Validate (InputError → one line, exit 2), start Spark if no session is given (failure → one line, exit 1),
    check that a warehouse given as a URI answers (exit 2), run, print the summary's lines; an InputError raised
    by the run (e.g. a warehouse without the dump) is exit 2.

    A job that writes the dump's tables passes break_lock (True or False): it then holds the dump's run marker
    (jobs.runlock) from before any work to its end, and another run holding it is one sentence and exit 3
    (EXIT_BUSY), before Spark starts when the warehouse is local and the dump id known. `resolve` completes the
    inputs with the session first (job 2 without --dump-id finds the dump in the dumps table). A failure part-way
    that jobs.faults recognises (a store read, a table write, a Delta conflict) is one sentence and its exit code."""
    try:
        inputs = prepare()
    except InputError as e:
        return _fail(prog, str(e), 2)
    lock: RunLock | None = None
    wh = getattr(inputs, "warehouse", None)
    early = break_lock is not None and wh is not None and "://" not in wh and getattr(inputs, "dump_id", None)
    try:
        if early:
            lock = _lock(prog, inputs, None, break_lock)
        own = spark is None
        if own:
            try:
                spark = job_session(app_name(inputs), defaults(inputs), master, wh)
            except Exception as e:  # the session builder's own errors (no Delta jars, no Java) are one line too
                return _fail(prog, f"cannot start Spark: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                             1)
        said = None
        try:
            check_warehouse(spark, wh)
            if break_lock is not None and wh is not None:
                check_layout_of(spark, wh)
            if break_lock is not None and lock is None:
                if resolve is not None:
                    inputs = resolve(spark, inputs)
                lock = _lock(prog, inputs, spark, break_lock)
            summary = work(spark, inputs)
        except Exception as e:
            said = describe(e, getattr(inputs, "dump_id", None)) if not isinstance(e, InputError) else (str(e), 2)
            if said is None:
                raise
        finally:
            if lock is not None:
                lock.release()
                lock = None
            if own:
                spark.stop()  # before the sentence: the tasks Spark cancels log as they end
        if said is not None:
            return _fail(prog, *said)
    except (DumpBusy, MarkerError) as e:
        return _fail(prog, str(e), EXIT_BUSY if isinstance(e, DumpBusy) else EXIT_FAULT)
    finally:
        if lock is not None:
            lock.release()
    for line in summary.lines():
        print(line)
    return 0


def _fail(prog: str, message: str, code: int) -> int:
    """Print `<prog>: error: <message>` on stderr; return the exit code."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def _lock(prog: str, inputs: Any, spark: SparkSession | None, break_lock: bool) -> RunLock:
    """The dump's run marker, acquired (DumpBusy when another run holds it)."""
    lock = RunLock(prog, inputs.warehouse, inputs.dump_id, spark, job_logger(prog))
    lock.acquire(break_lock)
    return lock


def add_run_args(p: argparse.ArgumentParser) -> None:
    """--break-lock, for the jobs that write a dump's tables."""
    p.add_argument("--break-lock", action="store_true",
                   help="remove the dump's run marker (<warehouse>/_runs/<dump_id>.lock) before starting: for a "
                        "run you know is dead whose marker has not gone stale yet (a marker without a heartbeat "
                        "for 10 minutes, or left by a pid no longer running on this host, is replaced anyway)")


def check_warehouse(spark: SparkSession, warehouse: str | None) -> None:
    """InputError when a warehouse URI's file system does not answer: no connector for the scheme, no such bucket,
    connection refused, credentials rejected (jobs.delta_io.warehouse_problem). Needs the session: Delta reads and
    writes through Spark's Hadoop file systems, so this asks the same ones."""
    problem = warehouse_problem(spark, warehouse) if warehouse else None
    if problem:
        raise InputError(problem)


def check_layout_of(spark: SparkSession, warehouse: str) -> None:
    """InputError, before any work, when a table in the warehouse was laid out by a release before the tables were
    partitioned by dump: the jobs write only partitioned tables (jobs.delta_io.layout_problem names the tables and
    the upgrade command)."""
    problem = layout_problem(spark, warehouse, tables.TABLES)
    if problem:
        raise InputError(problem)


def open_store(store: str, broker_conf: str | None) -> StoreDir:
    """The dump with its broker.conf; InputError naming the store or the broker.conf when either is unusable."""
    check_file(broker_conf, "broker.conf")
    try:
        return StoreDir(store, broker_conf=broker_conf)
    except StoreFormatError as e:
        raise InputError(str(e)) from None
    except (OSError, UnicodeError) as e:
        raise InputError(f"{broker_conf}: cannot read broker.conf ({e})") from None
    except ValueError as e:
        raise InputError(f"{broker_conf}: malformed broker.conf ({e})") from None


def read_subscriptions(path: str | None) -> list[Subscription]:
    """The subscriptions file's entries ([] without one); InputError naming the file and the entry."""
    if path is None:
        return []
    try:
        return load_subscriptions(path)
    except SubscriptionsError as e:
        raise InputError(str(e)) from None


def _store_name(store: str) -> str:
    """The store directory's name: the last segment of a path, or of a URI's path (its bucket when it has none)."""
    if sfs.is_remote(store):
        u = urlsplit(store)
        return posixpath.basename(u.path.rstrip("/")) or u.netloc.rsplit("@", 1)[-1]
    if sfs.scheme_of(store) == "file":
        store = urlsplit(store).path
    return os.path.basename(os.path.normpath(os.path.abspath(store)))


def dump_id_of(given: str | None, store: str) -> str:
    """The dump id given, else the store directory's name; InputError when it is unfit for a predicate."""
    dump_id = given or _store_name(store)
    try:
        return check_dump_id(dump_id)
    except ValueError as e:
        raise InputError(str(e)) from None


def add_broker_version_arg(p: argparse.ArgumentParser, default_text: str) -> None:
    """The --broker-version flag both jobs have."""
    p.add_argument("--broker-version", metavar="X.Y.Z",
                   help=f"the RocketMQ release the dump's broker ran ({default_text}): rules that changed between "
                        f"releases follow it (filterlib/brokerversion.py; 4.9.7, 5.3.3 and 5.5.1 are held to their "
                        f"real jars, 5.4.0 and 5.5.0 keep 5.3.3's filter registry, releases before 5.0.0 follow "
                        f"4.9.7)")


def broker_version_of(given: str | None, default: str = brokerversion.DEFAULT) -> str:
    """The release number given (else `default`), normalised; InputError when it is not one."""
    try:
        return str(brokerversion.BrokerVersion.parse(given or default))
    except ValueError as e:
        raise InputError(f"--broker-version: {e}") from None


def resolve_version(given: str | None, store: StoreDir) -> tuple[str, str]:
    """The release to replay (the flag's, else the one the dump's files show, else the default) and a summary line
    saying which and why (`brokerversion.detect`); InputError when the flag is not a release number."""
    if given is not None:
        version = broker_version_of(given)
        return version, f"broker version {version} (given by --broker-version)"
    found, evidence = brokerversion.detect(store)
    if found is None:
        return brokerversion.DEFAULT, f"broker version {brokerversion.DEFAULT} (default: {evidence})"
    return str(found), f"broker version {found} (detected: {evidence})"


def config_or_note(store: StoreDir, name: str, instead: str, notes: list[str]) -> Any | None:
    """The dump's config/<name> (`StoreDir.config`), or None with one sentence in `notes` when the dump keeps it only
    in config/rdb/ (configManagerVersion=v2's one RocksDB database, not read), naming it and what the job does
    `instead`; any other unreadable config raises StoreFormatError as before."""
    try:
        return store.config(name)
    except StoreFormatError as e:
        if e.path != os.path.join(store.root, "config", "rdb"):
            raise
        notes.append(f"{e}: {instead}")
        return None


def dump_registry(store: StoreDir, subscriptions: Sequence[Subscription] = (),
                  version: str = brokerversion.DEFAULT) -> RegistryLoad:
    """The dump's consumerFilter.json under the broker's bloom settings and the release's registry rules (without
    one, the registered SQL92 subscriptions given, with bornTime 0); InputError when the bloom settings themselves
    are invalid."""
    conf = store.conf
    rules = brokerversion.registry_rules(version)
    topic_exists = None
    notes = []
    if rules.requires_topic_config:
        unread: list[str] = []
        table = config_or_note(store, "topics", f"every topic is taken as present ({version} registers a SQL92 "
                                                f"filter only for a topic of its topic table)", unread)
        notes += unread
        if table is None and not unread:
            notes.append(f"{version}: the broker registers a SQL92 filter only for a topic of its topic table, and "
                         f"the dump has no readable config/topics.json: every topic is taken as present")
        elif table is not None:
            topic_exists = set(table.get("topicConfigTable") or {}).__contains__
    try:
        out = load_registry(store, conf.maxErrorRateOfBloomFilter, conf.expectConsumerNumUseFilter,
                            subscriptions, rules, topic_exists, conf.enableCalcFilterBitMap)
    except ValueError as e:
        raise InputError(f"bloom filter settings maxErrorRateOfBloomFilter={conf.maxErrorRateOfBloomFilter}, "
                         f"expectConsumerNumUseFilter={conf.expectConsumerNumUseFilter}: {e}") from None
    out.issues += notes
    return out
