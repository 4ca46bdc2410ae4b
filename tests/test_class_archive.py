"""jobs.class_archive: the class-data archive `make setup` writes is the one a local session's driver maps (its
classes come from it), and an archive the JVM cannot use never breaks or clutters a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobs import class_archive

ROOT = Path(__file__).resolve().parent.parent
SESSION = ("from jobs.spark import build_session; import json, sys; "
           "s = build_session('t', master='local[1]', conf=json.loads(sys.argv[1])); print('rows', s.range(7).count())")


def _session(conf: dict[str, str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A local session started the way every job starts one, in a process of its own, counting 7 rows."""
    return subprocess.run([sys.executable, "-c", SESSION, json.dumps({"spark.ui.enabled": "false", **conf})],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=300)


def test_a_local_driver_loads_its_classes_from_the_archive(tmp_path) -> None:
    path = class_archive.build()  # `make setup` wrote it; written here when it did not
    assert path is not None and path.is_file() and path.stat().st_size > 10 << 20
    mtime = path.stat().st_mtime_ns
    assert class_archive.build() == path and path.stat().st_mtime_ns == mtime  # kept, not written again
    options = class_archive.driver_options()
    assert options is not None and f"-XX:SharedArchiveFile={path}" in options.split()
    log = tmp_path / "classes.log"
    r = _session({"spark.driver.extraJavaOptions": f"{options} -Xlog:class+load=info:file={log}"})
    assert r.returncode == 0 and "rows 7" in r.stdout, r.stderr[-2000:]
    sources = log.read_text()
    # Spark's own classes (the launcher's class path) come from the archive's top layer, not from their jars
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in sources, sources[-2000:]


def test_an_archive_the_jvm_cannot_use_is_ignored_silently(tmp_path) -> None:
    """Another class path than the archive's (a jar directory added to the driver's) and an archive that is not
    one: the session starts and counts, and the JVM says nothing of it."""
    class_archive.build()
    extra = tmp_path / "extra"
    extra.mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / class_archive.archive_path().name).write_bytes(b"not an archive")  # this Java, these jars
    for conf, env in (({"spark.driver.extraClassPath": str(extra)}, None), ({}, {"RMQ_REPLAY_JVM_DIR":
                                                                                 str(tmp_path / "bad")})):
        r = _session(conf, env)
        assert r.returncode == 0 and "rows 7" in r.stdout, r.stderr[-2000:]
        assert "cds" not in (r.stdout + r.stderr).lower(), (r.stdout + r.stderr)[-2000:]


def test_the_archive_goes_before_the_callers_java_options_unless_they_choose_their_own(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RMQ_REPLAY_JVM_DIR", str(tmp_path))
    assert class_archive.with_archive({"a": "b"}) == {"a": "b"}  # no archive: nothing added
    (tmp_path / class_archive.archive_path().name).write_bytes(b"x")
    ours = class_archive.driver_options()
    assert class_archive.with_archive({}) == {"spark.driver.extraJavaOptions": ours}
    assert class_archive.with_archive({"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}) == \
        {"spark.driver.extraJavaOptions": f"{ours} -XX:TieredStopAtLevel=1"}
    own = {"spark.driver.extraJavaOptions": "-Xshare:off"}
    assert class_archive.with_archive(own) == own


def test_explains_own_session_compiles_with_c1_unless_the_defaults_say_otherwise() -> None:
    from jobs import explain

    def inputs(conf: dict) -> explain.Inputs:
        return explain.Inputs("wh", "G", None, "key", "k", {"master": "local[2]", "spark_conf": conf})

    got = explain._session_defaults(inputs({"spark.sql.shuffle.partitions": "4"}))
    assert got == {"master": "local[2]", "spark_conf": {"spark.sql.shuffle.partitions": "4",
                                                        "spark.driver.extraJavaOptions": explain.QUICK_JIT}}
    theirs = {"spark.driver.extraJavaOptions": "-Xmx2g"}
    assert explain._session_defaults(inputs(theirs))["spark_conf"] == theirs
