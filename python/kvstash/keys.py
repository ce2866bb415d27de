# SPDX-License-Identifier: MIT
"""vLLM-compatible prefix-chained block keys.

kvstashd never hashes tokens: an engine names each full block of tokens by
a 16-byte key that covers the whole prefix up to and including the block.
To share blocks with vLLM (and between engines that agree on vLLM's
scheme), this module computes exactly what vLLM's prefix cache computes
(vllm/v1/core/kv_cache_utils.py, vllm/utils/hashing.py):

    NONE_HASH = H(seed)                   seed: the PYTHONHASHSEED string
    hash[i]   = H((hash[i-1] or NONE_HASH, tuple(block_tokens[i]), extra_keys[i]))
    H(obj)    = digest(cbor2.dumps(obj, canonical=True))

with digest xxh3-128 ("xxhash_cbor", 16 bytes) or SHA-256 ("sha256_cbor",
32 bytes).  vLLM chains the full digest; a kvstash key is its first 16
bytes (for xxh3-128 that is the whole digest; for SHA-256 a truncation,
still a uniformly distributed 128-bit hash).

vLLM draws NONE_HASH from os.urandom when PYTHONHASHSEED is unset, so its
block hashes are then private to one process.  Here the root is always
explicit or derived from PYTHONHASHSEED: a random root would make every
saved block unreachable from any other process.

Canonical CBOR comes from cbor2 when it is installed; otherwise from the
small encoder below, which handles exactly the types that occur in block
hashes (int, bool, None, bytes, str, tuple/list) and is tested to produce
cbor2's bytes.  xxh3-128 comes from the xxhash package (Debian:
python3-xxhash).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

try:
    import cbor2 as _cbor2
except ImportError:  # pragma: no cover - exercised where cbor2 is absent
    _cbor2 = None

try:
    import xxhash as _xxhash

    if not hasattr(_xxhash, "xxh3_128_digest"):  # xxhash < 2.0
        _xxhash = None
except ImportError:  # pragma: no cover
    _xxhash = None

KEY_SIZE = 16

# ---- canonical CBOR (RFC 8949 section 4.2.1 / cbor2 canonical=True) -----------

_U64 = 1 << 64


def _head(major: int, n: int) -> bytes:
    """Initial byte(s) of a data item: major type and shortest argument."""
    mt = major << 5
    if n < 24:
        return bytes((mt | n,))
    if n < 0x100:
        return bytes((mt | 24, n))
    if n < 0x10000:
        return bytes((mt | 25,)) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes((mt | 26,)) + n.to_bytes(4, "big")
    return bytes((mt | 27,)) + n.to_bytes(8, "big")


def _encode(obj: Any, out: bytearray) -> None:
    if obj is None:
        out.append(0xF6)
    elif obj is True:
        out.append(0xF5)
    elif obj is False:
        out.append(0xF4)
    elif isinstance(obj, int):
        major, n = (0, obj) if obj >= 0 else (1, -1 - obj)
        if n < _U64:
            out += _head(major, n)
        else:  # bignum: tag 2 (positive) or 3 (negative) over big-endian bytes
            payload = n.to_bytes((n.bit_length() + 7) // 8, "big")
            out += _head(6, 2 + major) + _head(2, len(payload)) + payload
    elif isinstance(obj, (bytes, bytearray)):
        out += _head(2, len(obj))
        out += obj
    elif isinstance(obj, str):
        data = obj.encode("utf-8")
        out += _head(3, len(data)) + data
    elif isinstance(obj, (tuple, list)):
        out += _head(4, len(obj))
        for item in obj:
            _encode(item, out)
    else:
        raise TypeError(f"block hashes hold int, bool, None, bytes, str, tuple and list, not {type(obj).__name__}")


def canonical_cbor(obj: Any) -> bytes:
    """Canonical CBOR of @obj by the built-in encoder (cbor2 not needed)."""
    out = bytearray()
    _encode(obj, out)
    return bytes(out)


def cbor_dumps(obj: Any) -> bytes:
    """cbor2.dumps(obj, canonical=True) when cbor2 is installed, else canonical_cbor()."""
    if _cbor2 is not None:
        return _cbor2.dumps(obj, canonical=True)
    return canonical_cbor(obj)


# ---- hash functions ---------------------------------------------------------------


def _xxh3_128(data: bytes) -> bytes:
    if _xxhash is None:
        raise ModuleNotFoundError(
            "xxh3-128 block keys need the xxhash package (>= 2.0): apt-get install "
            "python3-xxhash, or pip install xxhash; or use hash='sha256'"
        )
    return _xxhash.xxh3_128_digest(data)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


_DIGESTS: dict[str, Callable[[bytes], bytes]] = {
    "xxh3_128": _xxh3_128,
    "xxhash_cbor": _xxh3_128,  # vLLM's name
    "sha256": _sha256,
    "sha256_cbor": _sha256,  # vLLM's name
}


def hash_function(hash: str = "xxh3_128") -> Callable[[Any], bytes]:
    """vLLM's hash function @hash: object -> digest of its canonical CBOR."""
    try:
        digest = _DIGESTS[hash]
    except KeyError:
        raise ValueError(f"hash must be one of {sorted(_DIGESTS)}, not {hash!r}") from None
    return lambda obj: digest(cbor_dumps(obj))


def none_hash(seed: str | None = None, hash: str = "xxh3_128") -> bytes:
    """vLLM's NONE_HASH (the parent of every first block) for @seed.

    seed None: $PYTHONHASHSEED, which is what vLLM uses; unset is an
    error, because vLLM would then pick a random root that no other process
    can reproduce.
    """
    if seed is None:
        seed = os.environ.get("PYTHONHASHSEED")
        if seed is None:
            raise ValueError(
                "no root for the block hash chain: pass root= (a seed string or the "
                "parent hash bytes), or set PYTHONHASHSEED as for vLLM"
            )
    return hash_function(hash)(seed)


def hash_block_tokens(
    parent_block_hash: bytes | None,
    block_token_ids: Sequence[int],
    extra_keys: tuple[Any, ...] | None = None,
    *,
    hash: str = "xxh3_128",
    root: bytes | None = None,
) -> bytes:
    """One link of the chain, like vLLM's hash_block_tokens: the full digest.

    A falsy parent is replaced by @root (NONE_HASH), as in vLLM.
    """
    if not parent_block_hash:
        parent_block_hash = root if root is not None else none_hash(None, hash)
    return hash_function(hash)((parent_block_hash, tuple(block_token_ids), extra_keys))


def block_hashes(
    token_ids: Iterable[int],
    block_size: int = 16,
    root: bytes | str | None = None,
    hash: str = "xxh3_128",
    extra_keys: Sequence[tuple[Any, ...] | None] | None = None,
) -> list[bytes]:
    """vLLM's block hashes (full digests) of every full block of @token_ids.

    root: bytes are the parent hash of the first block (NONE_HASH, or the
    hash of the block before @token_ids to continue a chain); a str is a
    seed hashed as vLLM's init_none_hash does; None takes PYTHONHASHSEED.
    extra_keys: one entry (a tuple or None) per full block, as vLLM passes
    for LoRA, multimodal inputs or a cache salt.  A trailing partial block
    is not hashed.
    """
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    if hasattr(token_ids, "tolist"):  # torch / numpy: one conversion, not one per token
        token_ids = token_ids.tolist()  # type: ignore[union-attr]
    tokens = token_ids if isinstance(token_ids, (list, tuple)) else list(token_ids)
    nblocks = len(tokens) // block_size
    if extra_keys is not None and len(extra_keys) < nblocks:
        raise ValueError(f"extra_keys has {len(extra_keys)} entries for {nblocks} blocks")
    h = hash_function(hash)
    parent = root if isinstance(root, (bytes, bytearray)) else none_hash(root, hash)
    out: list[bytes] = []
    for i in range(nblocks):
        extra = extra_keys[i] if extra_keys is not None else None
        parent = h((bytes(parent), tuple(tokens[i * block_size : (i + 1) * block_size]), extra))
        out.append(parent)
    return out


def block_keys(
    token_ids: Iterable[int],
    block_size: int = 16,
    root: bytes | str | None = None,
    hash: str = "xxh3_128",
    extra_keys: Sequence[tuple[Any, ...] | None] | None = None,
) -> list[bytes]:
    """16-byte kvstash keys of every full block: block_hashes() cut to 16 bytes."""
    return [d[:KEY_SIZE] for d in block_hashes(token_ids, block_size, root, hash, extra_keys)]


__all__ = [
    "KEY_SIZE",
    "block_hashes",
    "block_keys",
    "canonical_cbor",
    "cbor_dumps",
    "hash_block_tokens",
    "hash_function",
    "none_hash",
]
