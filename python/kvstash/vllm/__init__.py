# SPDX-License-Identifier: MIT
"""kvstash for vLLM: two ways to make kvstashd vLLM's KV-cache offload.

  - kvstash.vllm.connector.KvstashConnector, a KVConnectorBase_V1:
    --kv-transfer-config '{"kv_connector": "KvstashConnector",
      "kv_connector_module_path": "kvstash.vllm.connector", "kv_role": "kv_both",
      "kv_load_failure_policy": "recompute"}'
  - kvstash.vllm.offload.KvstashOffloadingSpec, for vLLM's OffloadingConnector:
    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "KvstashOffloadingSpec",
                                    "spec_module_path": "kvstash.vllm.offload"}}'

See docs/VLLM.md.  Importing this package imports no vLLM: the two classes
are loaded (with vLLM) on first access, the rest (settings, layout, the
scheduler and worker cores) works without it.
"""

from __future__ import annotations

from typing import Any

from .layout import announce_host_memory, forget_host_memory
from .settings import KEYS, ConfigError, Settings, settings_for

# The vLLM commit whose interfaces this package follows (vllm-project/vllm
# main of 2026-05-19): KVConnectorBase_V1 in
# vllm/distributed/kv_transfer/kv_connector/v1/base.py, the kv_offload
# interfaces in vllm/v1/kv_offload/{base,factory}.py and worker/worker.py.
VLLM_COMMIT = "9aaf83ef502fc37bc647f6e474314d48ba36cd1c"

_LAZY = {
    "KvstashConnector": "connector",
    "KvstashConnectorMetadata": "connector",
    "KvstashWorkerMetadata": "connector",
    "KvstashOffloadingSpec": "offload",
    "KvstashOffloadingManager": "offload",
    "KvstashLoadStoreSpec": "offload",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kvstash.vllm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


__all__ = ["KEYS", "VLLM_COMMIT", "ConfigError", "Settings", "announce_host_memory", "forget_host_memory",
           "settings_for", *sorted(_LAZY)]
