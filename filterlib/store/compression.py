"""Message body compression as RocketMQ clients write it: zlib, LZ4 frame or zstd, selected by sysflag bits 8–10."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from filterlib.store.commitlog import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK

ZLIB = "ZLIB"
LZ4 = "LZ4"
ZSTD = "ZSTD"
_TYPE_BY_BITS = {0: ZLIB, 1: LZ4, 2: ZSTD, 3: ZLIB}
_BITS_BY_TYPE = {LZ4: 0x100, ZSTD: 0x200, ZLIB: 0x300}


class DecompressError(ValueError):
    """A body that the client's Compressor cannot inflate; `java_class` is the exception the Java client meets."""

    def __init__(self, java_class: str, message: str):
        super().__init__(message)
        self.java_class = java_class

    def __str__(self) -> str:
        return f"{self.java_class}: {self.args[0]}"


def compression_type(sys_flag: int) -> str | None:
    """The codec a sysflag names (type bits 0 mean zlib, pre-4.9.4), None if uncompressed; DecompressError for 4–7
    (CompressionType.findByValue throws)."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    bits = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    if bits not in _TYPE_BY_BITS:
        raise DecompressError("RuntimeException", f"Unknown compress type value: {bits}")
    return _TYPE_BY_BITS[bits]


def client_sys_flags(sys_flags: np.ndarray, body_sizes: np.ndarray, keeps_compressed_flag: bool | np.ndarray
                     ) -> np.ndarray:
    """The sysFlag each delivered message holds after the client's `MessageDecoder.decode`, which inflates every
    compressed body it delivers: 5.x clears COMPRESSED_FLAG with the inflate, so only where the body is not empty
    (an empty body is never inflated); a 4.9 client keeps it (`keeps_compressed_flag`, per message or for all:
    `brokerversion.client_keeps_compressed_flag`)."""
    flags = np.asarray(sys_flags, dtype=np.int64)
    keep = np.asarray(keeps_compressed_flag) | (np.asarray(body_sizes) <= 0)
    return np.where(keep, flags, flags & ~COMPRESSED_FLAG)


def sys_flag_for(ctype: str) -> int:
    """The sysflag bits a 4.9.4+ producer sets for a codec (COMPRESSED_FLAG | type)."""
    return COMPRESSED_FLAG | _BITS_BY_TYPE[ctype]


def decompress(data: bytes, ctype: str) -> bytes:
    """Inflate a stored body as the RocketMQ client's Compressor of that codec does (5.3.3: InflaterInputStream,
    lz4-java 1.8.0 LZ4FrameInputStream, zstd-jni 1.5.2-2 ZstdInputStream): the same bytes, or DecompressError
    where Java throws, including on truncated input, trailing bytes and concatenated frames."""
    if ctype == ZLIB:
        return _zlib(data)
    if ctype == LZ4:
        return _lz4(data)
    if ctype == ZSTD:
        return _zstd(data)
    raise ValueError(f"unknown compression type {ctype!r}")


def _zlib(data: bytes) -> bytes:
    """InflaterInputStream: bytes after the stream's end are ignored; a stream that asks for a preset dictionary
    just ends (read returns -1 once needsDictionary), with what was inflated before (nothing)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data)
    except zlib.error as e:
        if str(e).startswith("Error 2 "):  # Z_NEED_DICT
            return b""
        raise DecompressError("ZipException", str(e).partition(": ")[2] or str(e)) from None
    if not d.eof:
        raise DecompressError("EOFException", "Unexpected end of ZLIB input stream")
    return out


_LZ4_MAGIC = 0x184D2204
_PREMATURE = "Stream ended prematurely"
_LZ4_MESSAGES = {"contentChecksum_invalid": "Content checksum mismatch",
                 "blockChecksum_invalid": "Block checksum mismatch",
                 "headerChecksum_invalid": "Stream frame descriptor corrupted",
                 "frameSize_wrong": "Size check mismatch"}
"""lz4-java's words for the checks liblz4 makes too."""


def _lz4_oversized(frame: bytes) -> str:
    """lz4-java's message for a frame (header already checked) whose block size exceeds the BD maximum: the first
    such block's size (without the incompressible bit) and the maximum, found by walking the block headers."""
    flg, bd = frame[4], frame[5]
    limit = 1 << (2 * ((bd >> 4) & 7) + 8)
    pos = 7 + (8 if flg & 0x08 else 0)
    while pos + 4 <= len(frame):
        size = int.from_bytes(frame[pos:pos + 4], "little") & 0x7FFFFFFF
        if size > limit:
            return f"Block size {size} exceeded max: {limit}"
        if size == 0:
            break
        pos += 4 + size + (4 if flg & 0x10 else 0)
    return "Block size exceeded max"


def _lz4(data: bytes) -> bytes:
    """LZ4FrameInputStream: frames one after another until the input ends cleanly between frames (skippable
    frames skipped), with lz4-java's own header rules (the dictionary-id bit is "reserved", dependent blocks are
    refused); python-lz4 decodes each frame's blocks and checks its checksums and content size."""
    import lz4.frame

    out = []
    pos, n, first = 0, len(data), True
    while True:
        if pos == n and not first:
            return b"".join(out)
        if n - pos < 4:
            raise DecompressError("IOException", _PREMATURE)
        magic = int.from_bytes(data[pos:pos + 4], "little")
        if magic >> 4 == 0x184D2A5:
            if n - pos < 8:
                raise DecompressError("IOException", _PREMATURE)
            skip = int.from_bytes(data[pos + 4:pos + 8], "little", signed=True)
            pos += 8 + max(skip, 0)
            if pos > n:
                raise DecompressError("IOException", _PREMATURE)
            first = False
            continue
        if magic != _LZ4_MAGIC:
            raise DecompressError("IOException", "Stream unsupported")
        if n - pos < 6:
            raise DecompressError("IOException", _PREMATURE)
        flg, bd = data[pos + 4], data[pos + 5]
        if flg & 1:
            raise DecompressError("RuntimeException", "Reserved0 field must be 0")
        if flg & 2:
            raise DecompressError("RuntimeException", "Reserved1 field must be 0")
        if not flg & 0x20:
            raise DecompressError("RuntimeException",
                                  "Dependent block stream is unsupported (BLOCK_INDEPENDENCE must be set)")
        if flg >> 6 != 1:
            raise DecompressError("RuntimeException", f"Version {flg >> 6} is unsupported")
        if bd & 0x8F:
            raise DecompressError("RuntimeException", "Reserved fields must be 0")
        if (bd >> 4) & 7 < 4:
            raise DecompressError("IllegalArgumentException",
                                  f"Block size must be 4-7. Cannot use value of [{(bd >> 4) & 7}]")
        d = lz4.frame.LZ4FrameDecompressor()
        try:
            out.append(d.decompress(data[pos:]))
        except RuntimeError as e:
            code = str(e).rpartition("ERROR_")[2]
            text = _lz4_oversized(data[pos:]) if code == "maxBlockSize_invalid" else _LZ4_MESSAGES.get(code, str(e))
            raise DecompressError("IOException", text) from None
        if not d.eof:
            raise DecompressError("IOException", _PREMATURE)
        pos = n - len(d.unused_data or b"")
        first = False


_ZSTD_READ = 131075  # zstd-jni's input buffer: ZSTD_DStreamInSize(), one block plus its header


def _zstd(data: bytes) -> bytes:
    """ZstdInputStream (zstd-jni 1.5.2-2) over the body: frames one after another. The stream reads its input
    131,075 bytes at a time and fails on a truncated source only if a read delivered bytes after the last frame
    it completed: a partial frame (or fewer than 5 stray bytes) that came in the same read as that frame's end is
    dropped silently, its decodable output kept."""
    import zstandard

    out = []
    pos, n, last_end = 0, len(data), None
    while pos < n:
        d = zstandard.ZstdDecompressor().decompressobj()
        try:
            out.append(d.decompress(data[pos:]))
        except zstandard.ZstdError as e:
            raise DecompressError("IOException", "Decompression error: " + str(e).partition(": ")[2]) from None
        if not d.eof:
            if last_end is None or (last_end - 1) // _ZSTD_READ < (n - 1) // _ZSTD_READ:
                raise DecompressError("IOException", "Read error or truncated source")
            break
        pos = n - len(d.unused_data)
        last_end = pos
    return b"".join(out)


def compress(data: bytes, ctype: str, level: int = 5) -> bytes:
    """Deflate a body byte for byte as the RocketMQ client's compressor (CompressorFactory) does.

    ZLIB: `Deflater(level)` zlib stream.  LZ4: lz4-java `LZ4FrameOutputStream` defaults (4 MiB independent
    blocks, no block/content checksum, no content size; `level` is ignored, as by RocketMQ's Lz4Compressor).
    ZSTD: zstd-jni `ZstdOutputStream(level)` written, flushed, closed: a frame without content size whose data
    ends in a flushed (non-last) block followed by an empty last block.  Python's one-shot LZ4/zstd helpers
    write different frame headers (fitted block size, stored content size), so the streaming APIs are used.
    zstd output also depends on the library version: equal to the client's only with libzstd 1.5.2, the one
    zstd-jni 1.5.2-2 (every RocketMQ 5.x) carries, hence the zstandard pin in setup.cfg.
    """
    if ctype == ZLIB:
        return zlib.compress(data, level)
    if ctype == LZ4:
        import lz4.frame
        c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False,
                                         content_checksum=False, auto_flush=True)
        return c.begin() + c.compress(data) + c.flush()
    if ctype == ZSTD:
        import zstandard
        c = zstandard.ZstdCompressor(level=level, write_content_size=False).compressobj()
        out = c.compress(data) + c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        return out + c.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)
    raise ValueError(f"unknown compression type {ctype!r}")


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The body a consumer sees: inflated when the sysflag says it is compressed, else unchanged (an empty body is
    never inflated, and its type bits never read: MessageDecoder looks at both only when the length is positive)."""
    if not body:
        return body
    ctype = compression_type(sys_flag)
    return body if ctype is None else decompress(body, ctype)


def body_errors(sys_flag: np.ndarray, body: pa.Array) -> pa.Array:
    """Per record, why the client's decode of its body fails ("JavaClass: message"), null where it decodes: only
    compressed, non-empty bodies are inflated (one at a time: most dumps have few), every other row is null."""
    flags = np.asarray(sys_flag, dtype=np.int64)
    rows = np.flatnonzero(flags & COMPRESSED_FLAG)
    if not len(rows):
        return pa.nulls(len(flags), pa.string())
    out: list[str | None] = [None] * len(flags)
    for i in rows.tolist():
        data = body[i].as_py()
        try:
            decompress_body(data or b"", int(flags[i]))
        except DecompressError as e:
            out[i] = str(e)
    return pa.array(out, pa.string())
