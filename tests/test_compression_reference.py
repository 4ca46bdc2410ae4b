"""Body decompression against the real client Compressors (harness `eval`, kind `decompress`): every codec on
valid bodies, truncated ones, trailing bytes, concatenated and skippable frames, flipped bytes and header flags
lz4-java or zstd-jni treat their own way. The same bytes where Java inflates, an error where Java throws."""

from __future__ import annotations

import base64
import gzip
import random
import zlib

import lz4.frame
import pytest
import refharness
import zstandard

from filterlib.store.compression import ZLIB, DecompressError, compress, decompress_body, sys_flag_for

ZSTD_READ = 131075  # zstd-jni reads its input this many bytes at a time


def _skippable(size: int, magic: int = 0x184D2A50) -> bytes:
    return magic.to_bytes(4, "little") + size.to_bytes(4, "little") + bytes(size)


def _flip(data: bytes, i: int, mask: int = 0xFF) -> bytes:
    b = bytearray(data)
    b[i] ^= mask
    return bytes(b)


def _lz4_header_flag(frame: bytes, flg: int | None = None, bd: int | None = None) -> bytes:
    """An lz4 frame with its FLG or BD byte replaced and the header checksum left as it was."""
    b = bytearray(frame)
    if flg is not None:
        b[4] = flg
    if bd is not None:
        b[5] = bd
    return bytes(b)


def corpus() -> list[tuple[str, int, bytes]]:
    rng = random.Random(20261125)
    small = b"hello world " * 20
    big = rng.randbytes(300_000) + b"abc" * 100_000
    noise = rng.randbytes(40_000)
    cases = []
    for ct in ("ZLIB", "LZ4", "ZSTD"):
        f = sys_flag_for(ct)
        for name, body in (("small", small), ("big", big), ("noise", noise)):
            c = compress(body, ct)
            cases.append((f"{ct} {name}", f, c))
            for cut in sorted({1, 3, 4, 5, 6, 10, len(c) // 2, len(c) - 4, len(c) - 1}):
                if 0 < cut < len(c):
                    cases.append((f"{ct} {name} cut at {cut}", f, c[:cut]))
            second = compress(b"second", ct)
            for tail_name, tail in (("junk", b"junk"), ("1 zero", b"\0"), ("3 zeros", b"\0" * 3),
                                    ("8 zeros", b"\0" * 8), ("a frame", second), ("half a frame", second[:7]),
                                    ("a frame cut short", second[:-2])):
                cases.append((f"{ct} {name} + {tail_name}", f, c + tail))
            cases.append((f"{ct} {name} middle byte flipped", f, _flip(c, len(c) // 2)))
            cases.append((f"{ct} {name} last byte flipped", f, _flip(c, len(c) - 1, 0x01)))
        cases.append((f"{ct} garbage", f, b"garbage bytes here"))
        cases.append((f"{ct} one byte", f, b"\x00"))
    z = sys_flag_for("ZSTD")
    frame = compress(small, "ZSTD")
    for k in (-1, 0, 1):  # the first frame ends one byte before, at, or after zstd-jni's first read
        pad = _skippable(ZSTD_READ + k - 8 - len(frame)) + frame
        cases.append((f"ZSTD frames ending at read+{k}, then half a frame", z, pad + frame[:9]))
        cases.append((f"ZSTD frames ending at read+{k}, then 4 stray bytes", z, pad + b"junk"))
    cases += [("ZSTD skippable then frame", z, _skippable(4) + frame),
              ("ZSTD frame then skippable", z, frame + _skippable(4)),
              ("ZSTD skippable only", z, _skippable(16)),
              ("ZSTD skippable cut short", z, _skippable(16)[:12]),
              ("ZSTD one-shot frame with size and checksum", z,
               zstandard.ZstdCompressor(write_checksum=True).compress(small)),
              ("ZSTD bad checksum", z, _flip(zstandard.ZstdCompressor(write_checksum=True).compress(small), -1, 1)),
              ("ZSTD big frame then half a frame in the next read", z, compress(big, "ZSTD") + frame[:9])]
    lz = sys_flag_for("LZ4")
    frame = compress(small, "LZ4")
    cases += [("LZ4 content checksum", lz, lz4.frame.compress(small, content_checksum=True)),
              ("LZ4 bad content checksum", lz, _flip(lz4.frame.compress(small, content_checksum=True), -1, 1)),
              ("LZ4 block checksum", lz, lz4.frame.compress(small, block_checksum=True)),
              ("LZ4 bad block checksum", lz, _flip(lz4.frame.compress(small, block_checksum=True), -6, 1)),
              ("LZ4 content size", lz, lz4.frame.compress(small, store_size=True)),
              ("LZ4 linked blocks", lz, lz4.frame.compress(big, block_linked=True)),
              ("LZ4 uncompressed blocks", lz, lz4.frame.compress(noise, block_size=lz4.frame.BLOCKSIZE_MAX64KB)),
              ("LZ4 skippable then frame", lz, _skippable(4, 0x184D2A5F) + frame),
              ("LZ4 frame then skippable", lz, frame + _skippable(4)),
              ("LZ4 skippable only", lz, _skippable(16)),
              ("LZ4 skippable cut short", lz, _skippable(16)[:12]),
              ("LZ4 header checksum flipped", lz, _flip(frame, 6)),
              ("LZ4 dictionary-id flag", lz, _lz4_header_flag(frame, flg=frame[4] | 1)),
              ("LZ4 reserved flag", lz, _lz4_header_flag(frame, flg=frame[4] | 2)),
              ("LZ4 version 0", lz, _lz4_header_flag(frame, flg=frame[4] & 0x3F)),
              ("LZ4 reserved block-size bit", lz, _lz4_header_flag(frame, bd=frame[5] | 0x80)),
              ("LZ4 block-size indicator 3", lz, _lz4_header_flag(frame, bd=0x30))]
    zl = sys_flag_for("ZLIB")
    body = compress(small, "ZLIB")
    dictionary = zlib.compressobj(zdict=b"hello world")
    cases += [("ZLIB legacy flag only (type bits 0)", 1, body),
              ("ZLIB raw deflate", zl, zlib.compress(small)[2:-4]),
              ("ZLIB gzip", zl, gzip.compress(small)),
              ("ZLIB preset dictionary", zl, dictionary.compress(small) + dictionary.flush()),
              ("ZLIB preset dictionary cut in its id", zl, bytes([0x78, 0xBB, 1]))]
    cases += [(f"type bits {bits}", 1 | bits << 8, body) for bits in (4, 5, 6, 7)]
    return cases


@pytest.fixture(scope="module")
def java_results():
    cases = corpus()
    results = refharness.eval_cases([{"kind": "decompress", "id": i, "sys_flag": f,
                                      "body": base64.b64encode(d).decode()} for i, (_, f, d) in enumerate(cases)])
    return list(zip(cases, results, strict=True))


def test_decompression_equals_the_client_compressors(java_results):
    errors_seen = ok_seen = 0
    for (label, flag, data), r in java_results:
        if "body" in r:
            ok_seen += 1
            assert decompress_body(data, flag) == base64.b64decode(r["body"]), label
        else:
            errors_seen += 1
            with pytest.raises(DecompressError):
                decompress_body(data, flag)
    assert errors_seen > 40 and ok_seen > 40  # the corpus reaches both sides of every codec


def test_error_names_the_java_exception_and_its_message(java_results):
    """Where Java throws, the Python error is the same exception class with the same message (body_error's
    "JavaClass: message" text)."""
    for (label, flag, data), r in java_results:
        if "body" in r:
            continue
        with pytest.raises(DecompressError) as e:
            decompress_body(data, flag)
        assert e.value.java_class == r["error"], label
        assert str(e.value) == f"{r['error']}: {r['message']}", label


def test_legacy_zlib_flag_decodes():
    assert decompress_body(compress(b"x" * 100, ZLIB), 1) == b"x" * 100
