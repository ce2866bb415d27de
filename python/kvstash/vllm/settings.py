# SPDX-License-Identifier: MIT
"""What a vLLM engine's configuration means for kvstash.

Both ways into vLLM (KvstashConnector and KvstashOffloadingSpec) start
here, in the scheduler process and in every worker process alike: each
process derives the same instance name and namespace from the same
VllmConfig, so the scheduler's leases and the workers' blocks meet in one
kvstash instance without any message between them.

Everything is read from the config by attribute (duck typing): the module
imports nothing of vLLM, so the tests can hand it small stand-ins.

Refusals are errors at start-up, never silent fallbacks:
  - block keys are vLLM's own block hashes, so they must be the same in
    every process and every restart: only the CBOR hashes (sha256_cbor,
    xxhash_cbor) are, and only with PYTHONHASHSEED set (vLLM draws the root
    of the chain from os.urandom otherwise; see init_none_hash);
  - one kvstash instance is one tensor-parallel group: pipeline stages
    would each need their own instance and lease, and context parallelism
    changes what a block hash covers.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any

# vLLM's hash names -> the short name put into the namespace.
HASHES = {"sha256_cbor": "sha256c", "xxhash_cbor": "xxh3c"}

_NAME_OK = re.compile(r"[^A-Za-z0-9._:/@+=-]")
_INSTANCE_MAX = 63   # kvstash(7): instance names
_NS_MAX = 127        # kvstash(7): namespaces

PREFIX = "kvstash."  # our keys in kv_connector_extra_config


class ConfigError(ValueError):
    """The vLLM configuration cannot work with kvstash; the message says why and what to change."""


def _extra(vllm_config: Any) -> dict[str, Any]:
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    if ktc is None:
        raise ConfigError("kvstash needs --kv-transfer-config (kv_transfer_config is not set)")
    return dict(getattr(ktc, "kv_connector_extra_config", None) or {})


def _bool(v: Any, key: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return v.lower() in ("1", "true", "yes", "on")
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise ConfigError(f"{PREFIX}{key} must be true or false, not {v!r}")


def _number(v: Any, key: str, lo: float, hi: float) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{PREFIX}{key} must be a number, not {v!r}") from None
    if not lo <= x <= hi:
        raise ConfigError(f"{PREFIX}{key} must lie in [{lo}, {hi}], not {v!r}")
    return x


def sanitize(text: str, limit: int) -> str:
    """@text with every character kvstash does not accept in names replaced by '_', cut to @limit."""
    return _NAME_OK.sub("_", text)[:limit]


def check_hash(vllm_config: Any, environ: dict[str, str] | None = None) -> str:
    """vLLM's prefix-caching hash name, if its keys are reproducible across processes; else ConfigError."""
    env = os.environ if environ is None else environ
    algo = getattr(getattr(vllm_config, "cache_config", None), "prefix_caching_hash_algo", None)
    if algo not in HASHES:
        raise ConfigError(
            f"kvstash keys blocks by vLLM's block hashes, which must be the same in every process: "
            f"prefix_caching_hash_algo is {algo!r}, use --prefix-caching-hash-algo sha256_cbor or "
            f"xxhash_cbor ('sha256' and 'xxhash' hash pickled Python objects)"
        )
    if env.get("PYTHONHASHSEED") is None:
        raise ConfigError(
            "kvstash keys blocks by vLLM's block hashes: set PYTHONHASHSEED (the same value for "
            "every vLLM process that should share blocks); without it vLLM roots the hash chain "
            "in os.urandom and no saved block could ever be found again"
        )
    return algo


@dataclass(frozen=True)
class Settings:
    """kvstash's view of one vLLM engine (see docs/VLLM.md for every key)."""

    socket: str | None          # kvstashd's socket; None: $KVSTASH_SOCKET, else /run/kvstash/kvstash.sock
    instance: str               # one engine: its scheduler and its tp_size workers
    namespace: str              # what the bytes of a block mean (model, dtype, block size, layout, TP, hash)
    block_size: int             # tokens per vLLM block
    tp_size: int
    hash_algo: str
    kv_layout: str              # "NHD" or "HND": the byte order inside one K or V block
    use_mla: bool               # one latent segment per layer, the same on every rank (replicated)
    load_mode: str              # "async": loads run between steps; "sync": before the forward pass
    cross_layer_blocks: bool    # ask vLLM for one tensor whose blocks hold every layer
    timeout_ms: int             # socket requests (connect, register)
    query_timeout_s: float      # how long the scheduler waits for a QUERY's completion
    reconnect_s: float          # how often a session that lost kvstashd tries to reconnect


def kv_layout(vllm_config: Any, environ: dict[str, str] | None = None, flavour: str = "c") -> str:
    """The KV-cache layout vLLM will use: VLLM_KV_CACHE_LAYOUT wins (as in vLLM's
    get_kv_cache_layout), else what the connector asks vLLM for: KvstashConnector
    kvstash.kv_cache_layout or NHD; vLLM's OffloadingConnector (flavour "o") always HND."""
    env = os.environ if environ is None else environ
    if flavour == "o":
        layout = env.get("VLLM_KV_CACHE_LAYOUT") or "HND"
    else:
        layout = env.get("VLLM_KV_CACHE_LAYOUT") or _extra(vllm_config).get(PREFIX + "kv_cache_layout") or "NHD"
    if layout not in ("NHD", "HND"):
        raise ConfigError(f"KV cache layout must be NHD or HND, not {layout!r}")
    return layout


def _dtype_name(vllm_config: Any) -> str:
    cache_dtype = str(getattr(vllm_config.cache_config, "cache_dtype", "auto") or "auto")
    if cache_dtype != "auto":
        return cache_dtype
    return str(getattr(vllm_config.model_config, "dtype", "unknown")).replace("torch.", "")


def namespace_for(vllm_config: Any, *, tp_size: int, hash_algo: str, layout_tag: str,
                  flavour: str = "c") -> str:
    """The namespace: readable parts (model, dtype, block size, layout, TP, hash), then a
    digest of every factor, so that two configurations whose readable parts collide after
    shortening still get different namespaces.  @flavour separates the two ways into vLLM
    ("c": KvstashConnector, "o": the OffloadingSpec), which register different geometries."""
    mc = vllm_config.model_config
    cc = vllm_config.cache_config
    factors = {
        "model": str(getattr(mc, "model", "")),
        "revision": str(getattr(mc, "revision", None)),
        "quantization": str(getattr(mc, "quantization", None)),
        "dtype": _dtype_name(vllm_config),
        "block_size": int(cc.block_size),
        "layout": layout_tag,
        "tp_size": tp_size,
        "hash": hash_algo,
        "flavour": flavour,
    }
    digest = hashlib.sha256(repr(sorted(factors.items())).encode()).hexdigest()[:10]
    tail = f"/{sanitize(factors['dtype'], 24)}/b{cc.block_size}/{layout_tag}/tp{tp_size}/{HASHES[hash_algo]}/{flavour}{digest}"
    head = "vllm/"
    room = _NS_MAX - len(head) - len(tail)
    model = sanitize(factors["model"].strip("/"), max(room, 1)) or "model"
    return head + model + tail


def layout_tag(use_mla: bool, layout: str) -> str:
    """How a block's bytes are arranged, as the namespace names it.

    "kv2-NHD": per layer a K and a V segment, each a block's tokens x heads x head_dim
    (the canonical form every supported attention layout is registered in); "mla": per
    layer one latent segment (tokens x dim), replicated over the ranks.
    """
    return "mla" if use_mla else f"kv2-{layout}"


def settings_for(vllm_config: Any, *, flavour: str = "c", environ: dict[str, str] | None = None) -> Settings:
    """Check @vllm_config and derive the Settings; ConfigError says what to change."""
    hash_algo = check_hash(vllm_config, environ)
    extra = _extra(vllm_config)
    unknown = sorted(k for k in extra if k.startswith(PREFIX) and k[len(PREFIX):] not in _KEYS)
    if unknown:
        raise ConfigError(f"unknown kv_connector_extra_config keys {unknown}; known: "
                          f"{sorted(PREFIX + k for k in _KEYS)}")

    pc = vllm_config.parallel_config
    pp = int(getattr(pc, "pipeline_parallel_size", 1) or 1)
    if pp != 1:
        raise ConfigError("kvstash does not support pipeline parallelism yet (pipeline_parallel_size "
                          f"{pp}): each stage would need its own kvstash instance and lease")
    dcp = int(getattr(pc, "decode_context_parallel_size", 1) or 1)
    pcp = int(getattr(pc, "prefill_context_parallel_size", 1) or 1)
    if dcp != 1 or pcp != 1:
        raise ConfigError("kvstash does not support context parallelism (decode/prefill_context_"
                          f"parallel_size {dcp}/{pcp}): a block hash would cover other tokens")
    tp = int(pc.tensor_parallel_size)

    mc = vllm_config.model_config
    use_mla = bool(getattr(mc, "use_mla", False))
    layout = kv_layout(vllm_config, environ, flavour)
    tag = layout_tag(use_mla, layout)

    explicit_ns = extra.get(PREFIX + "namespace")
    if explicit_ns is not None:
        namespace = str(explicit_ns)
        if not namespace or len(namespace) > _NS_MAX or _NAME_OK.search(namespace):
            raise ConfigError(f"{PREFIX}namespace must be 1-{_NS_MAX} characters of "
                              f"[A-Za-z0-9._:/@+=-], not {namespace!r}")
    else:
        namespace = namespace_for(vllm_config, tp_size=tp, hash_algo=hash_algo, layout_tag=tag,
                                  flavour=flavour)

    instance = extra.get(PREFIX + "instance")
    if instance is None:
        # engine_id is drawn once in the process that parsed the arguments and travels
        # with the config to the engine core and to every worker: one id per engine.
        engine_id = getattr(vllm_config.kv_transfer_config, "engine_id", None)
        if not engine_id:
            raise ConfigError("kv_transfer_config.engine_id is empty: set it, or kvstash.instance")
        instance = f"vllm-{engine_id}"
        dp_size = int(getattr(pc, "data_parallel_size", 1) or 1)
        if dp_size > 1:
            instance += f"-dp{int(getattr(pc, 'data_parallel_rank', 0) or 0)}"
    instance = str(instance)
    if not instance or _NAME_OK.search(instance) or len(instance) > _INSTANCE_MAX:
        instance = sanitize(instance, _INSTANCE_MAX - 11) + "-" + hashlib.sha256(instance.encode()).hexdigest()[:10]

    load_mode = str(extra.get(PREFIX + "load_mode", "async"))
    if load_mode not in ("async", "sync"):
        raise ConfigError(f"{PREFIX}load_mode must be 'async' or 'sync', not {load_mode!r}")
    socket = extra.get(PREFIX + "socket")
    return Settings(
        socket=str(socket) if socket else None,
        instance=instance,
        namespace=namespace,
        block_size=int(vllm_config.cache_config.block_size),
        tp_size=tp,
        hash_algo=hash_algo,
        kv_layout=layout,
        use_mla=use_mla,
        load_mode=load_mode,
        cross_layer_blocks=_bool(extra.get(PREFIX + "cross_layer_blocks", True), "cross_layer_blocks"),
        timeout_ms=int(_number(extra.get(PREFIX + "timeout_ms", 5000), "timeout_ms", 1, 600_000)),
        query_timeout_s=_number(extra.get(PREFIX + "query_timeout_s", 2.0), "query_timeout_s", 0.001, 600),
        reconnect_s=_number(extra.get(PREFIX + "reconnect_s", 5.0), "reconnect_s", 0.0, 3600),
    )


# The keys of kv_connector_extra_config this package reads (after "kvstash.").
_KEYS = frozenset({
    "socket", "instance", "namespace", "kv_cache_layout", "load_mode", "cross_layer_blocks",
    "timeout_ms", "query_timeout_s", "reconnect_s",
})

KEYS = tuple(sorted(PREFIX + k for k in _KEYS))


def block_key(block_hash: bytes) -> bytes:
    """A vLLM block hash as a kvstash key: its first 16 bytes (all of an xxh3-128 digest,
    a truncation of a SHA-256 one), exactly as kvstash.keys.block_keys computes them."""
    b = bytes(block_hash)
    if len(b) < 16:
        raise ValueError(f"a vLLM block hash has at least 16 bytes, this one {len(b)}")
    return b[:16]
