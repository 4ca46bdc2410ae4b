"""RocketMQ's consumer Bloom filter (filter/util BloomFilter, BitsArray, BloomFilterData) on plain bytearrays."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import mmh3
import numpy as np

from filterlib.javalang import java_utf8_encode, to_int32

_INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)


def _java_double_to_int(value: float) -> int:
    """Java `(int)` of a double: truncate toward zero, saturate at the int range, NaN gives 0."""
    if math.isnan(value):
        return 0
    if value >= _INT_MAX:
        return _INT_MAX
    if value <= _INT_MIN:
        return _INT_MIN
    return int(value)


def _log_mn(base: float, value: float) -> float:
    """`BloomFilter.logMN`: log of value in the given base, as ln(value) / ln(base)."""
    return math.log(value) / math.log(base)


@dataclass(frozen=True)
class BloomFilterData:
    """A key's bit positions and the filter's bit count; equal iff bitNum and the position arrays are equal."""

    bit_pos: tuple[int, ...] | None
    bit_num: int

    def __post_init__(self) -> None:
        if self.bit_pos is not None and not isinstance(self.bit_pos, tuple):
            object.__setattr__(self, "bit_pos", tuple(self.bit_pos))

    def to_json(self) -> dict:
        """The fastjson field names (`bitNum`, `bitPos`)."""
        return {"bitNum": self.bit_num, "bitPos": None if self.bit_pos is None else list(self.bit_pos)}

    @classmethod
    def from_json(cls, obj: dict | None) -> BloomFilterData | None:
        """Read `{"bitNum": n, "bitPos": [...]}`; missing fields take Java's defaults (0, null)."""
        if obj is None:
            return None
        bit_pos = obj.get("bitPos")
        return cls(None if bit_pos is None else tuple(int(p) for p in bit_pos), int(obj.get("bitNum") or 0))


def new_bits(bit_length: int) -> bytearray:
    """`BitsArray.create(bitLength)`: ceil(bitLength / 8) zero bytes."""
    return bytearray((bit_length + 7) // 8)


def get_bit(bits: bytes | bytearray, pos: int) -> bool:
    """`BitsArray.getBit`: byte pos/8, mask 1 << pos%8 (LSB first); bounds as Java checks them."""
    _check_bit_position(bits, pos)
    return bool(bits[pos >> 3] & (1 << (pos & 7)))


def set_bit(bits: bytearray, pos: int) -> None:
    """`BitsArray.setBit(pos, true)`."""
    _check_bit_position(bits, pos)
    bits[pos >> 3] |= 1 << (pos & 7)


def _check_bit_position(bits: bytes | bytearray, pos: int) -> None:
    """BitsArray's position check (allows pos == bitLength, which then overflows the array like Java)."""
    if pos > len(bits) * 8:
        raise ValueError(f"BitPos is greater than {len(bits) * 8}")
    if pos < 0:
        raise ValueError("BitPos is less than 0")
    if pos == len(bits) * 8:
        raise IndexError(f"Index {pos >> 3} out of bounds for length {len(bits)}")


class BloomFilter:
    """`BloomFilter.createByFn(f, n)`: k hash functions over m bits, positions from murmur3 x64-128."""

    def __init__(self, f: int, n: int):
        for name, value in (("f", f), ("n", n)):
            if isinstance(value, bool) or not isinstance(value, int) or not _INT_MIN <= value <= _INT_MAX:
                raise ValueError(f"{name} must be a Java int, got {value!r}")
        if f < 1 or f >= 100:
            raise ValueError("f must be greater or equal than 1 and less than 100")
        if n < 1:
            raise ValueError("n must be greater than 0")
        self.f = f
        self.n = n
        error_rate = f / 100.0
        self.k = _java_double_to_int(math.ceil(_log_mn(0.5, error_rate)))
        if self.k < 1:
            raise ValueError("Hash function num is less than 1, maybe you should change the value of error rate "
                             "or bit num!")
        m = _java_double_to_int(float(math.ceil(n * _log_mn(2, 1 / error_rate) * _log_mn(2, math.e))))
        self.m = _java_double_to_int(8 * float(math.ceil(m / 8.0)))

    @classmethod
    def create_by_fn(cls, error_rate_percent: int, expected_count: int) -> BloomFilter:
        """The broker's constructor; ValueError where Java throws IllegalArgumentException."""
        return cls(error_rate_percent, expected_count)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BloomFilter) and (self.f, self.n, self.k, self.m) == (other.f, other.n, other.k,
                                                                                      other.m)

    def __hash__(self) -> int:
        return hash((self.f, self.n, self.k, self.m))

    def __repr__(self) -> str:
        return f"BloomFilter(f={self.f}, n={self.n}, k={self.k}, m={self.m})"

    @property
    def byte_length(self) -> int:
        """Bytes of a bitmap for this filter (ceil(m / 8))."""
        return (self.m + 7) // 8

    def new_bits(self) -> bytearray:
        """An all-zero bitmap of this filter's size (`BitsArray.create(m)`)."""
        return new_bits(self.m)

    def calc_bit_positions(self, key: str) -> tuple[int, ...]:
        """`calcBitPositions`: k positions from h1 of murmur3_128(UTF-8 key), `~` for negatives, mod m."""
        h1 = mmh3.hash64(java_utf8_encode(key), 0, True, True)[0]
        hash1 = to_int32(h1)
        hash2 = to_int32(h1 >> 32)
        positions = []
        for i in range(1, self.k + 1):
            combined = to_int32(hash1 + i * hash2)
            if combined < 0:
                combined = ~combined
            positions.append(combined % self.m)
        return tuple(positions)

    def generate(self, key: str) -> BloomFilterData:
        """`generate(key)`: the key's positions with bitNum = m (the broker's key is "group#topic")."""
        return BloomFilterData(self.calc_bit_positions(key), self.m)

    def is_valid(self, data: BloomFilterData | None) -> bool:
        """`isValid`: data present, bitNum == m and exactly k positions."""
        return data is not None and data.bit_num == self.m and data.bit_pos is not None and len(data.bit_pos) == self.k

    def _check(self, bits: bytes | bytearray) -> None:
        """`check(bits)`: the bitmap must be m bits long."""
        if len(bits) * 8 != self.m:
            raise ValueError(f"Length({len(bits) * 8}) of bits in BitsArray is not equal to {self.m}!")

    def _require_valid(self, data: BloomFilterData) -> tuple[int, ...]:
        """Positions of valid data, else the IllegalArgumentException of hashTo/isHit."""
        if not self.is_valid(data):
            raise ValueError(f"Bloom filter data may not belong to this filter! {data}, {self!r}")
        return data.bit_pos

    def hash_to_positions(self, positions: Sequence[int], bits: bytearray) -> None:
        """`hashTo(int[], bits)`: set every position (bits set before a bad position stay set)."""
        self._check(bits)
        for pos in positions:
            set_bit(bits, pos)

    def hash_to(self, data: BloomFilterData, bits: bytearray) -> None:
        """`hashTo(BloomFilterData, bits)`: ValueError unless the data is valid for this filter."""
        self.hash_to_positions(self._require_valid(data), bits)

    def hash_key_to(self, key: str, bits: bytearray) -> None:
        """`hashTo(String, bits)`."""
        self.hash_to_positions(self.calc_bit_positions(key), bits)

    def is_hit_positions(self, positions: Sequence[int], bits: bytes | bytearray) -> bool:
        """`isHit(int[], bits)`: every position set (each one is bounds-checked, as Java evaluates all)."""
        self._check(bits)
        if not positions:
            raise IndexError("Index 0 out of bounds for length 0")
        hit = True
        for pos in positions:
            hit &= get_bit(bits, pos)
        return hit

    def is_hit(self, data: BloomFilterData, bits: bytes | bytearray) -> bool:
        """`isHit(BloomFilterData, bits)`: ValueError unless the data is valid for this filter."""
        return self.is_hit_positions(self._require_valid(data), bits)

    def is_key_hit(self, key: str, bits: bytes | bytearray) -> bool:
        """`isHit(String, bits)`."""
        return self.is_hit_positions(self.calc_bit_positions(key), bits)

    def check_false_hit(self, positions: Sequence[int], bits: bytes | bytearray) -> bool:
        """`checkFalseHit`: true iff every position is already set (no length check)."""
        return all(get_bit(bits, pos) for pos in positions)

    def bitmap_of(self, datas: Iterable[BloomFilterData]) -> bytes:
        """The bitmap after `hashTo` of each data in turn (what the dispatcher writes for matching filters)."""
        bits = self.new_bits()
        for data in datas:
            self.hash_to(data, bits)
        return bytes(bits)


def position_matrix(datas: Sequence[BloomFilterData]) -> np.ndarray:
    """Stack G datas' positions into a (G, k) int64 array (all datas must have the same k)."""
    if not datas:
        return np.zeros((0, 0), dtype=np.int64)
    return np.asarray([d.bit_pos for d in datas], dtype=np.int64)


def hit_matrix(bitmaps: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """(N, B) uint8 bitmaps × (G, k) positions → (N, G) bool: whether each bitmap hits each key."""
    bitmaps = np.asarray(bitmaps, dtype=np.uint8)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and positions.max() >= bitmaps.shape[1] * 8:
        raise ValueError("bit position beyond the bitmap")
    masks = (np.uint8(1) << (positions & 7).astype(np.uint8)).astype(np.uint8)
    gathered = bitmaps[:, positions >> 3] & masks
    return (gathered != 0).all(axis=2)


def bitmaps_from_matches(matches: np.ndarray, positions: np.ndarray, byte_length: int) -> np.ndarray:
    """(N, G) bool match matrix × (G, k) positions → (N, byte_length) uint8 bitmaps (OR of matching keys)."""
    matches = np.asarray(matches, dtype=bool)
    positions = np.asarray(positions, dtype=np.int64)
    key_masks = np.zeros((positions.shape[0], byte_length), dtype=np.uint8)
    for g, row in enumerate(positions):
        for pos in row:
            key_masks[g, pos >> 3] |= np.uint8(1 << (pos & 7))
    out = np.zeros((matches.shape[0], byte_length), dtype=np.uint8)
    for g in range(positions.shape[0]):
        out[matches[:, g]] |= key_masks[g]
    return out
