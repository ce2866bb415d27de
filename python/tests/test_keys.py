# SPDX-License-Identifier: MIT
"""Block keys: vLLM's chain, golden vectors, and the built-in CBOR encoder.

The golden vectors were computed with cbor2 and xxhash (Debian 12's
python3-cbor2 5.4.6 and python3-xxhash 3.0.0) by vLLM's formula:
    NONE_HASH = H("0"); hash[i] = H((hash[i-1], tuple(tokens), None))
    H(obj) = digest(cbor2.dumps(obj, canonical=True))
They pin the scheme: every engine that shares blocks must keep producing
exactly these bytes, with or without cbor2.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from kvstash import keys as K

TOKENS = list(range(1000, 1040))  # two full 16-token blocks and 8 tokens more

GOLDEN = {
    "xxh3_128": (
        "1ebe36576dcb573f26b99533a20aaeca",
        ["45e10e34ad1aea9e71fa5267c1a3fd78", "5492333e0f8f921a29b61c28df9edb4d"],
    ),
    "sha256": (
        "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e",
        ["749fdc796f99efd836e0126282116392", "2d5697df551c58c422455b94c9c0db1d"],
    ),
}
GOLDEN_EXTRA = ["a243bd4125df5cf3226efed74e8b4c58", "27779bce46eb4a1355ad8324fc56b724"]


@pytest.fixture(params=["cbor2", "builtin"])
def encoder(request, monkeypatch):
    """Run a test once with cbor2 (when installed) and once with the built-in encoder."""
    if request.param == "cbor2":
        pytest.importorskip("cbor2")
    else:
        monkeypatch.setattr(K, "_cbor2", None)
    return request.param


@pytest.mark.parametrize("hash", ["xxh3_128", "sha256"])
def test_golden_vectors(encoder, hash):
    if hash == "xxh3_128":
        pytest.importorskip("xxhash")
    root, keys = GOLDEN[hash]
    assert K.none_hash("0", hash).hex() == root
    assert [k.hex() for k in K.block_keys(TOKENS, 16, root="0", hash=hash)] == keys
    # vLLM's names for the same functions
    alias = {"xxh3_128": "xxhash_cbor", "sha256": "sha256_cbor"}[hash]
    assert K.block_keys(TOKENS, 16, root="0", hash=alias) == K.block_keys(TOKENS, 16, root="0", hash=hash)


def test_golden_vector_with_extra_keys(encoder):
    pytest.importorskip("xxhash")
    got = K.block_keys([0] * 32, 16, root="kvstash", extra_keys=[("lora-a",), None])
    assert [k.hex() for k in got] == GOLDEN_EXTRA


def test_the_chain_is_vllms_formula():
    """Recompute vLLM's hash_block_tokens by hand from cbor2 and xxhash."""
    cbor2 = pytest.importorskip("cbor2")
    xxhash = pytest.importorskip("xxhash")

    def h(obj):
        return xxhash.xxh3_128_digest(cbor2.dumps(obj, canonical=True))

    parent = h("42")
    want = []
    for i in range(len(TOKENS) // 16):
        parent = h((parent, tuple(TOKENS[i * 16:(i + 1) * 16]), None))
        want.append(parent)
    assert K.block_hashes(TOKENS, 16, root="42") == want
    assert K.hash_block_tokens(None, TOKENS[:16], root=h("42")) == want[0]
    assert K.hash_block_tokens(want[0], TOKENS[16:32]) == want[1]


def test_sha256_keys_are_the_digests_first_16_bytes():
    full = K.block_hashes(TOKENS, 16, root="0", hash="sha256")
    assert all(len(d) == 32 for d in full)
    assert K.block_keys(TOKENS, 16, root="0", hash="sha256") == [d[:16] for d in full]
    assert full[0] == hashlib.sha256(K.cbor_dumps((K.none_hash("0", "sha256"), tuple(TOKENS[:16]), None))).digest()


def test_prefix_chaining():
    pytest.importorskip("xxhash")
    base = list(range(64))
    keys = K.block_keys(base, root="s")
    assert len(keys) == 4 and len(set(keys)) == 4 and all(len(k) == 16 for k in keys)
    assert K.block_keys(base[:40], root="s") == keys[:2]  # a trailing partial block is not hashed
    changed = base.copy()
    changed[35] += 1  # in block 2
    other = K.block_keys(changed, root="s")
    assert other[:2] == keys[:2] and other[2] != keys[2] and other[3] != keys[3]
    assert K.block_keys(base, root="t")[0] != keys[0]
    assert K.block_keys(base, block_size=32, root="s")[0] not in keys
    # Continuing a chain from a block hash gives the same later keys.
    full = K.block_hashes(base, root="s")
    assert K.block_hashes(base[32:], root=full[1]) == full[2:]


def test_the_root_defaults_to_pythonhashseed(monkeypatch):
    pytest.importorskip("xxhash")
    monkeypatch.setenv("PYTHONHASHSEED", "123")
    assert K.block_keys(TOKENS) == K.block_keys(TOKENS, root="123")
    monkeypatch.delenv("PYTHONHASHSEED")
    with pytest.raises(ValueError, match="PYTHONHASHSEED"):
        K.block_keys(TOKENS)


def test_bad_arguments():
    with pytest.raises(ValueError):
        K.block_keys(TOKENS, root="0", hash="md5")
    with pytest.raises(ValueError):
        K.block_keys(TOKENS, block_size=0, root="0")
    with pytest.raises(ValueError):
        K.block_keys(TOKENS, root="0", extra_keys=[None])  # 2 blocks, 1 entry
    with pytest.raises(TypeError):
        K.canonical_cbor(1.5)
    with pytest.raises(TypeError):
        K.canonical_cbor({"a": 1})


def _random_object(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        # integers around every length boundary of the CBOR head, both signs
        bits = rng.choice([0, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 200])
        n = rng.getrandbits(bits) if bits else 0
        n += rng.choice([-1, 0, 1]) if n > 1 else 0
        return n if rng.random() < 0.5 else -n - rng.randrange(2)
    if kind == 1:
        return rng.choice([None, True, False, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32,
                           2**64 - 1, 2**64, -(2**64), -(2**64) - 1])
    if kind == 2:
        return rng.randbytes(rng.choice([0, 1, 23, 24, 255, 256, 300]))
    if kind == 3:
        return "".join(chr(rng.choice([0x41, 0xE9, 0x4E2D, 0x1F600])) for _ in range(rng.randrange(30)))
    if kind == 4:
        return bytearray(rng.randbytes(rng.randrange(20)))
    size = rng.choice([0, 1, 3, 16, 23, 24, 30])
    items = [_random_object(rng, depth + 1) for _ in range(size)]
    return tuple(items) if kind in (5, 6) else items


def test_builtin_cbor_equals_cbor2_canonical():
    cbor2 = pytest.importorskip("cbor2")
    rng = random.Random(20240611)
    for i in range(3000):
        obj = _random_object(rng)
        assert K.canonical_cbor(obj) == cbor2.dumps(obj, canonical=True), f"object {i}: {obj!r}"
    # The shape of every block hash input, with 16-byte and 32-byte parents.
    for parent in (bytes(range(16)), bytes(range(32))):
        obj = (parent, tuple(rng.randrange(200_000) for _ in range(16)), ("salt", 7))
        assert K.canonical_cbor(obj) == cbor2.dumps(obj, canonical=True)
