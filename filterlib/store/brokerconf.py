"""broker.conf in java.util.Properties syntax, and the broker's typed reading of it (MixAll.properties2Object)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from filterlib.javalang import java_parse_int
from filterlib.store.commitlog import DEFAULT_COMMITLOG_FILE_SIZE, DEFAULT_DELAY_LEVELS
from filterlib.store.consumequeue import DEFAULT_CQ_FILE_SIZE
from filterlib.store.consumequeue_ext import DEFAULT_EXT_FILE_SIZE

_WS = " \t\f"


def _logical_lines(text: str) -> list[str]:
    """java.util.Properties LineReader: skip blanks and #/! comments, join lines ending in an odd backslash run."""
    out: list[str] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while True:
            run = len(line) - len(line.rstrip("\\"))
            if run % 2 == 0 or i >= len(lines):
                if run % 2 == 1:
                    line = line[:-1]
                break
            line = line[:-1] + lines[i].lstrip(_WS)
            i += 1
        out.append(line)
    return out


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(s):
            break
        c = s[i]
        if c == "u":
            hexs = s[i + 1:i + 5]
            if len(hexs) != 4 or any(h not in "0123456789abcdefABCDEF" for h in hexs):
                raise ValueError("Malformed \\uxxxx encoding.")
            out.append(chr(int(hexs, 16)))
            i += 5
            continue
        out.append({"t": "\t", "r": "\r", "n": "\n", "f": "\f"}.get(c, c))
        i += 1
    return "".join(out)


def parse_properties_text(text: str) -> dict[str, str]:
    """Parse Java .properties text into a dict (later keys win), with Java's separators and escapes."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        n = len(line)
        key_end = n
        while i < n:
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=:" or c in _WS:
                key_end = i
                break
            i += 1
        key_end = min(key_end, n)
        j = key_end
        while j < n and line[j] in _WS:
            j += 1
        if j < n and line[j] in "=:":
            j += 1
            while j < n and line[j] in _WS:
                j += 1
        props[_unescape(line[:key_end])] = _unescape(line[j:])
    return props


def load_properties(path: str) -> dict[str, str]:
    """Read a .properties file (ISO-8859-1, as Properties.load(InputStream) does)."""
    with open(path, encoding="latin-1") as f:
        return parse_properties_text(f.read())


@dataclass
class BrokerFilterConf:
    """The broker and store settings the replay needs, with RocketMQ 5.3.3 defaults."""

    brokerClusterName: str = "DefaultCluster"
    brokerName: str = ""
    brokerId: int = 0
    brokerRole: str = "ASYNC_MASTER"
    enablePropertyFilter: bool = False
    enableCalcFilterBitMap: bool = False
    enableConsumeQueueExt: bool = False
    expectConsumerNumUseFilter: int = 32
    maxErrorRateOfBloomFilter: int = 20
    filterSupportRetry: bool = False
    bitMapLengthConsumeQueueExt: int = 64
    mappedFileSizeCommitLog: int = DEFAULT_COMMITLOG_FILE_SIZE
    mappedFileSizeConsumeQueue: int = DEFAULT_CQ_FILE_SIZE
    mappedFileSizeConsumeQueueExt: int = DEFAULT_EXT_FILE_SIZE
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    checkCRCOnRecover: bool = True
    checkCommitLogOffsetOnRecover: bool = False
    enableMultiDispatch: bool = False
    enableLmq: bool = False
    storePathRootDir: str = ""
    storePathCommitLog: str = ""
    storeType: str = "default"
    iteratorWhenUseRocksdbConsumeQueue: bool = True

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> BrokerFilterConf:
        """Apply properties like MixAll.properties2Object: ints that fail to parse are ignored, booleans are
        `Boolean.parseBoolean` (only "true", any case, is true), strings are trimmed."""
        conf = cls()
        for f in fields(cls):
            if f.name not in props:
                continue
            raw = props[f.name]
            if f.type in ("bool", bool):
                setattr(conf, f.name, raw.lower() == "true")
            elif f.type in ("int", int):
                v = java_parse_int(raw)
                if v is not None:
                    setattr(conf, f.name, v)
            else:
                setattr(conf, f.name, raw.strip())
        return conf

    @classmethod
    def load(cls, path: str) -> BrokerFilterConf:
        """Read a broker.conf file."""
        return cls.from_properties(load_properties(path))
