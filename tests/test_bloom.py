"""filterlib.bloom: m/k formulas, bit positions, BitsArray bit order, hashTo/isHit, BloomFilterData equality.

Unit expectations come from rocketmq-facts.md §7 (worked examples) and from BitsArray's documented bit order; the
reference tests compare with the real RocketMQ 5.3.3 BloomFilter through the harness's eval mode.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from refharness import eval_cases

from filterlib import bloom
from filterlib.bloom import BloomFilter, BloomFilterData


@pytest.mark.parametrize("f, n, k, m", [(20, 32, 3, 112), (20, 64, 3, 216), (10, 128, 4, 616), (1, 1, 7, 16),
                                        (99, 1, 1, 8)])
def test_create_by_fn_facts_examples(f, n, k, m):
    bf = BloomFilter.create_by_fn(f, n)
    assert (bf.k, bf.m) == (k, m)


@pytest.mark.parametrize("f, n", [(0, 32), (100, 32), (-5, 32), (20, 0), (20, -1)])
def test_create_by_fn_rejects_what_java_rejects(f, n):
    with pytest.raises(ValueError):
        BloomFilter.create_by_fn(f, n)


def test_positions_facts_examples():
    bf = BloomFilter.create_by_fn(20, 32)
    assert bf.generate("group#topic") == BloomFilterData((79, 21, 21), 112)
    assert bf.calc_bit_positions("a") == (94, 99, 7)
    assert bf.calc_bit_positions("") == (0, 0, 0)


def test_bits_array_order_and_hash_to_facts_examples():
    bits = bloom.new_bits(16)
    for pos in (0, 9, 15):
        bloom.set_bit(bits, pos)
    assert bytes(bits) == bytes([0x01, 0x82])
    bf = BloomFilter.create_by_fn(20, 32)
    bits = bf.new_bits()
    bf.hash_to(bf.generate("group#topic"), bits)
    assert bytes(bits).hex() == "0000200000000000008000000000"
    assert bf.is_hit(bf.generate("group#topic"), bits)


def test_hash_to_and_is_hit_validate_like_java():
    bf = BloomFilter.create_by_fn(20, 32)
    with pytest.raises(ValueError):
        bf.hash_to(BloomFilterData((1, 2), 112), bf.new_bits())
    with pytest.raises(ValueError):
        bf.is_hit(BloomFilterData((1, 2, 3), 216), bf.new_bits())
    with pytest.raises(ValueError):
        bf.hash_to(bf.generate("k"), bytearray(13))
    assert not bf.is_valid(None)
    assert not bf.is_valid(BloomFilterData(None, 112))
    assert bf.is_valid(BloomFilterData([1, 2, 3], 112))
    assert bf.check_false_hit((1, 2), bytearray(b"\x06"))
    assert not bf.check_false_hit((1, 3), bytearray(b"\x06"))


def test_bloom_filter_data_equality_is_arrays_equals():
    assert BloomFilterData([1, 2, 2], 112) == BloomFilterData((1, 2, 2), 112)
    assert BloomFilterData((1, 2, 2), 112) != BloomFilterData((2, 1, 2), 112)
    assert BloomFilterData((1, 2), 112) != BloomFilterData((1, 2), 216)
    assert BloomFilterData(None, 8) == BloomFilterData(None, 8)
    assert BloomFilterData(None, 8) != BloomFilterData((), 8)


def test_bloom_filter_equality():
    assert BloomFilter(20, 32) == BloomFilter.create_by_fn(20, 32)
    assert BloomFilter(20, 32) != BloomFilter(20, 33)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=40), st.data())
def test_vectorised_helpers_agree_with_scalar(keys, data):
    bf = BloomFilter.create_by_fn(20, 32)
    datas = [bf.generate(k) for k in keys]
    positions = bloom.position_matrix(datas)
    matches = np.array(data.draw(st.lists(st.lists(st.booleans(), min_size=len(keys), max_size=len(keys)),
                                          min_size=1, max_size=8)), dtype=bool)
    bitmaps = bloom.bitmaps_from_matches(matches, positions, bf.byte_length)
    for row, bitmap in zip(matches, bitmaps, strict=True):
        assert bytes(bitmap) == bf.bitmap_of(d for d, hit in zip(datas, row, strict=True) if hit)
    hits = bloom.hit_matrix(bitmaps, positions)
    expected = [[bf.is_hit(d, bytes(bm)) for d in datas] for bm in bitmaps]
    assert hits.tolist() == expected


def _grid() -> list[tuple[int, int]]:
    rng = random.Random(11)
    grid = [(f, n) for f in (-1, 0, 1, 2, 5, 10, 20, 33, 50, 63, 75, 98, 99, 100, 101) for n in (-1, 0, 1, 2, 3, 7, 8,
                                                                                               31, 32, 33, 64, 100)]
    grid += [(f, rng.randrange(1, 5000)) for f in range(1, 100) for _ in range(4)]
    grid += [(f, n) for f in (1, 20, 99) for n in (10**6, 10**8, 2**28, 2**31 - 1)]
    grid += [(-(2**31), 5), (2**31 - 1, 5), (20, -(2**31))]
    return grid


@pytest.mark.reference
def test_m_and_k_match_java_over_grid():
    grid = _grid()
    results = eval_cases([{"kind": "bloom", "f": f, "n": n} for f, n in grid])
    mismatches = []
    for (f, n), ref in zip(grid, results, strict=True):
        try:
            bf = BloomFilter.create_by_fn(f, n)
            mine = {"m": bf.m, "k": bf.k}
        except ValueError as exc:
            mine = {"error": "IllegalArgumentException", "message": str(exc)}
        theirs = {k: ref.get(k) for k in mine}
        if mine != theirs:
            mismatches.append((f, n, theirs, mine))
    assert mismatches == []
    assert len(results) > 500


def _keys(rng: random.Random, count: int) -> list[str]:
    alphabet = ["a", "Z", "_", "%", "#", "-", "\u00e9", "\u4e2d", "\U0001f600", "\ud800", "\udc00", "\x00", " "]
    out = []
    for _ in range(count):
        group = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 10)))
        topic = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 10)))
        out.append(f"{group}#{topic}")
    return out


def _bloom_cases() -> list[dict]:
    rng = random.Random(23)
    cases = [{"kind": "bloom", "f": 20, "n": 32, "keys": ["group#topic", "a", "", "G#%RETRY%G"] + _keys(rng, 600),
              "probes": _keys(rng, 600)}]
    for f, n in [(20, 64), (10, 128), (1, 1), (99, 1), (1, 2000), (50, 5), (20, 32)]:
        for size in (1, 2, 5, 20, 100):
            cases.append({"kind": "bloom", "f": f, "n": n, "keys": _keys(rng, size), "probes": _keys(rng, 50)})
    return cases


@pytest.mark.reference
def test_positions_bits_and_hits_match_java():
    cases = _bloom_cases()
    results = eval_cases(cases)
    compared = 0
    mismatches = []
    for case, ref in zip(cases, results, strict=True):
        bf = BloomFilter.create_by_fn(case["f"], case["n"])
        datas = [bf.generate(k) for k in case["keys"]]
        for key, mine, theirs in zip(case["keys"], datas, ref["generate"], strict=True):
            compared += 1
            if mine != BloomFilterData(theirs["bit_pos"], theirs["bit_num"]):
                mismatches.append(("generate", key, theirs, mine))
        bits = bf.new_bits()
        for d in datas:
            bf.hash_to(d, bits)
        if bytes(bits).hex() != ref["bits_hex"]:
            mismatches.append(("bits", case["keys"], ref["bits_hex"], bytes(bits).hex()))
        if [bf.is_valid(d) for d in datas] != ref["valid"]:
            mismatches.append(("valid", case["keys"]))
        hits = [bf.is_hit(bf.generate(p), bits) for p in case["probes"]]
        compared += len(hits)
        if hits != ref["hits"]:
            mismatches.append(("hits", case["probes"], ref["hits"], hits))
        positions = bloom.position_matrix([bf.generate(p) for p in case["probes"]])
        vector_hits = bloom.hit_matrix(np.frombuffer(bytes(bits), dtype=np.uint8)[None, :], positions)[0]
        if vector_hits.tolist() != ref["hits"]:
            mismatches.append(("vector hits", case["probes"]))
    assert mismatches == []
    assert compared > 2000


def _data_pairs() -> list[tuple[dict, dict]]:
    rng = random.Random(5)
    pairs = [({"bit_pos": [1, 2, 3], "bit_num": 112}, {"bit_pos": [1, 2, 3], "bit_num": 112}),
             ({"bit_pos": [1, 2, 3], "bit_num": 112}, {"bit_pos": [3, 2, 1], "bit_num": 112}),
             ({"bit_pos": [1, 2, 3], "bit_num": 112}, {"bit_pos": [1, 2, 3], "bit_num": 216}),
             ({"bit_pos": [1, 2], "bit_num": 112}, {"bit_pos": [1, 2, 2], "bit_num": 112}),
             ({"bit_pos": None, "bit_num": 112}, {"bit_pos": None, "bit_num": 112}),
             ({"bit_pos": None, "bit_num": 112}, {"bit_pos": [], "bit_num": 112}),
             ({"bit_pos": [], "bit_num": 0}, {"bit_pos": [], "bit_num": 0})]
    for _ in range(200):
        a = [rng.randrange(4) for _ in range(rng.randrange(0, 4))]
        b = list(a) if rng.random() < 0.5 else [rng.randrange(4) for _ in range(rng.randrange(0, 4))]
        pairs.append(({"bit_pos": a, "bit_num": rng.choice([8, 112])}, {"bit_pos": b, "bit_num": rng.choice([8, 112])}))
    return pairs


@pytest.mark.reference
def test_bloom_filter_data_equals_matches_java():
    pairs = _data_pairs()
    results = eval_cases([{"kind": "bloom_data_equals", "a": a, "b": b} for a, b in pairs])
    mismatches = [(a, b, ref) for (a, b), ref in zip(pairs, results, strict=True)
                  if (BloomFilterData(a["bit_pos"], a["bit_num"]) == BloomFilterData(b["bit_pos"], b["bit_num"]))
                  != ref["equals"]]
    assert mismatches == []
