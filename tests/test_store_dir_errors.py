"""A store directory with missing or damaged parts: a clear error naming the path, or the broker's own fallback."""

from __future__ import annotations

import pytest

from filterlib.errors import StoreFormatError
from filterlib.store.storedir import StoreDir


def _store(tmp_path, files=("00000000000000000000",)):
    (tmp_path / "commitlog").mkdir()
    for name in files:
        (tmp_path / "commitlog" / name).write_bytes(b"\0" * 4096)
    (tmp_path / "config").mkdir()
    return tmp_path


def test_missing_store_directory_names_the_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(StoreFormatError, match="store directory not found") as info:
        StoreDir(str(missing))
    assert info.value.path == str(missing)


def test_store_without_commitlog_files_is_an_error_naming_where_it_looked(tmp_path):
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / "notes.txt").write_text("x")
    with pytest.raises(StoreFormatError, match="no commitlog files") as info:
        StoreDir(str(tmp_path))
    assert info.value.path.endswith("commitlog")


def test_unreadable_config_falls_back_to_its_backup_like_the_broker(tmp_path):
    root = _store(tmp_path)
    (root / "config" / "topics.json").write_text('{"topicConfigTable":{')  # truncated by a full disk
    (root / "config" / "topics.json.bak").write_text('{"topicConfigTable":{"T":{"readQueueNums":4}},"x":{0:1}}')
    sd = StoreDir(str(root))
    assert sd.config("topics") == {"topicConfigTable": {"T": {"readQueueNums": 4}}, "x": {0: 1}}
    assert any("topics.json" in i and "backup" in i for i in sd.issues)


def test_empty_config_uses_backup_and_absent_config_is_none(tmp_path):
    root = _store(tmp_path)
    (root / "config" / "consumerOffset.json").write_text("")
    (root / "config" / "consumerOffset.json.bak").write_text('{"offsetTable":{"T@G":{0:5}}}')
    sd = StoreDir(str(root))
    assert sd.config("consumerOffset") == {"offsetTable": {"T@G": {0: 5}}}
    assert sd.config("subscriptionGroup") is None
    assert sd.issues == []


def test_both_config_and_backup_unreadable_is_recorded_not_fatal(tmp_path):
    root = _store(tmp_path)
    (root / "config" / "consumerFilter.json").write_text("{oops")
    (root / "config" / "consumerFilter.json.bak").write_text("[1,")
    sd = StoreDir(str(root))
    assert sd.config("consumerFilter") is None
    assert any("neither the file nor its backup" in i for i in sd.issues)


def test_a_listed_commitlog_directory_that_does_not_exist_is_an_issue(tmp_path):
    root = _store(tmp_path)
    sd = StoreDir(str(root), commitlog_dirs=[str(root / "commitlog"), str(root / "commitlog2")])
    assert [f.base for f in sd.commitlog.files] == [0]
    assert any("commitlog2" in i and "not found" in i for i in sd.issues)


def test_dump_registry_falls_back_to_its_backup_like_the_broker(tmp_path):
    from filterlib.rebuild.dumpregistry import load_registry
    from filterlib.registry import ConsumerFilterManager

    root = _store(tmp_path)
    path = root / "config" / "consumerFilter.json"
    src = ConsumerFilterManager(20, 32)
    src.register("T", "G", "a > 1", "SQL92", 7, now=100)
    src.persist(path, now=200)
    src.persist(path, now=200)  # the first copy moves to .bak
    path.write_text('{"filterDataByTopic":{')  # truncated by a full disk
    out = load_registry(StoreDir(str(root)), 20, 32)
    assert out.dump_registry == str(path) + ".bak"
    assert out.registry.get("T", "G").expression == "a > 1"
    assert any(str(path) in i and "unreadable" in i for i in out.issues)
    path.write_text("")  # an empty file: passed over without a word, as file2String's empty text is
    out = load_registry(StoreDir(str(root)), 20, 32)
    assert out.dump_registry == str(path) + ".bak" and out.issues == []
