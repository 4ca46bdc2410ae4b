"""Message body compression as RocketMQ clients write it: zlib, LZ4 frame or zstd, selected by sysflag bits 8–10."""

from __future__ import annotations

import zlib

from filterlib.store.commitlog import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK

ZLIB = "ZLIB"
LZ4 = "LZ4"
ZSTD = "ZSTD"
_TYPE_BY_BITS = {0: ZLIB, 1: LZ4, 2: ZSTD, 3: ZLIB}
_BITS_BY_TYPE = {LZ4: 0x100, ZSTD: 0x200, ZLIB: 0x300}


def compression_type(sys_flag: int) -> str | None:
    """The codec a sysflag names (type bits 0 mean zlib, pre-4.9.4), None if uncompressed; ValueError for 4–7."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    bits = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    if bits not in _TYPE_BY_BITS:
        raise ValueError(f"unknown compression type {bits} in sysflag {sys_flag:#x}")
    return _TYPE_BY_BITS[bits]


def sys_flag_for(ctype: str) -> int:
    """The sysflag bits a 4.9.4+ producer sets for a codec (COMPRESSED_FLAG | type)."""
    return COMPRESSED_FLAG | _BITS_BY_TYPE[ctype]


def decompress(data: bytes, ctype: str) -> bytes:
    """Inflate a stored body with the named codec (streaming for zstd: the frame may omit its content size)."""
    if ctype == ZLIB:
        return zlib.decompress(data)
    if ctype == LZ4:
        import lz4.frame
        return lz4.frame.decompress(data)
    if ctype == ZSTD:
        import zstandard
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise ValueError(f"unknown compression type {ctype!r}")


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
    """The body a consumer sees: inflated when the sysflag says it is compressed, else unchanged."""
    ctype = compression_type(sys_flag)
    return body if ctype is None else decompress(body, ctype)
