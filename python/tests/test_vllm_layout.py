# SPDX-License-Identifier: MIT
"""kvstash.vllm.layout and .settings: vLLM's KV tensors and configs as kvstash sees them.

Shapes and stride orders are those of vLLM commit 9aaf83ef502fc37bc647f6e474314d48ba36cd1c:
FlashAttention (2, num_blocks, block_size, heads, head_dim) with stride order
NHD (0,1,2,3,4) or HND (0,1,3,2,4) and, across layers, (2,0,1,3,4,5);
FlashInfer (num_blocks, 2, block_size, heads, head_dim); MLA (num_blocks,
block_size, dim).  No kvstashd and no vLLM are needed.
"""

from __future__ import annotations

import pytest

from kvstash.vllm import layout as L
from kvstash.vllm import settings as S
import vllm_stubs as vs

NB, BS, H, D, E = 8, 16, 2, 8, 2
SEG = BS * H * D * E
G = L.Geometry(num_blocks=NB, block_size=BS, num_kv_heads=H, head_size=D, use_mla=False, kv_layout="NHD")


def permuted(shape, order):
    """Strides of a contiguous tensor of physical shape [shape[i] for i in order], seen in logical order."""
    phys = [shape[i] for i in order]
    strides_phys, acc = [0] * len(phys), 1
    for i in reversed(range(len(phys))):
        strides_phys[i] = acc
        acc *= phys[i]
    out = [0] * len(shape)
    for p, lg in enumerate(order):
        out[lg] = strides_phys[p]
    return tuple(out)


def test_flash_attention_split_kv():
    shape = (2, NB, BS, H, D)
    x = L.layer_view("l0", 4096, shape, permuted(shape, (0, 1, 2, 3, 4)), E, G)
    assert (x.segments, x.segment_bytes, x.block_stride, x.kv_stride, x.num_blocks) == (2, SEG, SEG, NB * SEG, NB)
    assert x.base == 4096


def test_flashinfer_kv_inside_the_block():
    shape = (NB, 2, BS, H, D)
    x = L.layer_view("l0", 0, shape, permuted(shape, (0, 1, 2, 3, 4)), E, G)
    assert (x.segments, x.segment_bytes, x.block_stride, x.kv_stride) == (2, SEG, 2 * SEG, SEG)


def test_kernel_blocks_make_one_block():
    """vLLM splits a block into kernel blocks when the kernel needs smaller ones."""
    shape = (2, NB * 2, BS // 2, H, D)
    x = L.layer_view("l0", 0, shape, permuted(shape, (0, 1, 2, 3, 4)), E, G)
    assert (x.num_blocks, x.segment_bytes, x.block_stride, x.kv_stride) == (NB, SEG, SEG, NB * SEG)


def test_hnd_is_checked_against_the_namespace():
    shape = (2, NB, BS, H, D)
    hnd = permuted(shape, (0, 1, 3, 2, 4))
    with pytest.raises(L.LayoutError, match="HND but the namespace says NHD"):
        L.layer_view("l0", 0, shape, hnd, E, G)
    g = L.Geometry(NB, BS, H, D, False, "HND")
    assert L.layer_view("l0", 0, shape, hnd, E, g).segment_bytes == SEG
    with pytest.raises(L.LayoutError, match="NHD but the namespace says HND"):
        L.layer_view("l0", 0, shape, permuted(shape, (0, 1, 2, 3, 4)), E, g)
    split = (2, NB * 2, BS // 2, H, D)
    with pytest.raises(L.LayoutError, match="kernel blocks"):
        L.layer_view("l0", 0, split, permuted(split, (0, 1, 3, 2, 4)), E, g)


def test_mla():
    g = L.Geometry(NB, BS, 1, 576, True, "NHD")
    shape = (NB, BS, 576)
    x = L.layer_view("l0", 0, shape, permuted(shape, (0, 1, 2)), E, g)
    assert (x.segments, x.segment_bytes, x.block_stride) == (1, BS * 576 * E, BS * 576 * E)


@pytest.mark.parametrize("shape,strides,why", [
    ((2, NB, BS, H, D + 1), None, "not a layout kvstash knows"),
    ((3, NB, BS, H, D), None, "not a layout kvstash knows"),
    ((2, NB, BS, H, D), (NB * BS * H * D * 2, BS * H * D * 2, H * D * 2, D * 2, 2), "not contiguous"),
])
def test_unknown_layouts_are_refused(shape, strides, why):
    strides = strides or permuted(shape, tuple(range(len(shape))))
    with pytest.raises(L.LayoutError, match=why):
        L.layer_view("l0", 0, shape, strides, E, G)


def test_too_few_blocks_are_refused():
    g = L.Geometry(2, BS, H, D, False, "NHD")
    with pytest.raises(L.LayoutError, match="too few"):
        L.layer_view("l0", 0, (2, 2, BS, H, D), permuted((2, 2, BS, H, D), (0, 1, 2, 3, 4)), E, g)


def test_cross_layers_are_the_same_geometry_as_per_layer():
    layers = 3
    names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
    kvc = vs.kv_cache_config(num_blocks=NB, layer_names=names, block_size=BS, heads=H, head_size=D)
    cross = vs.FakeTensor(1 << 20, (NB, layers, 2, BS, H, D))
    xs = L.views_of_cross_layers(cross, vs.FlashAttentionBackend, kvc, G)
    per = L.views_of_layers({n: vs.FakeTensor(1 << 24 | i << 16, (2, NB, BS, H, D)) for i, n in enumerate(names)},
                            kvc, G)
    geom = lambda v: (v.layer.name, v.layer.segments, v.layer.segment_bytes, v.layer.num_blocks)  # noqa: E731
    assert [geom(v) for v in xs] == [geom(v) for v in per]
    # cross-layer: layer i at i * 2 * SEG within a block of layers * 2 * SEG, V right after K
    assert [v.layer.base - (1 << 20) for v in xs] == [i * 2 * SEG for i in range(layers)]
    assert {(v.layer.block_stride, v.layer.kv_stride) for v in xs} == {(layers * 2 * SEG, SEG)}


def test_shared_kv_layers_register_once():
    names = ["a", "b"]
    kvc = vs.kv_cache_config(num_blocks=NB, layer_names=names, block_size=BS, heads=H, head_size=D)
    kvc.kv_cache_tensors = [vs.types.SimpleNamespace(size=0, shared_by=["a", "b"])]
    t = vs.FakeTensor(0, (2, NB, BS, H, D))
    assert [v.layer.name for v in L.views_of_layers({"a": t, "b": t}, kvc, G)] == ["a"]


def test_mamba_and_hybrid_are_refused():
    kvc = vs.kv_cache_config(num_blocks=NB, layer_names=["a"], block_size=BS, heads=H, head_size=D)
    with pytest.raises(L.LayoutError, match="Mamba"):
        L.views_of_layers({"a": [vs.FakeTensor(0, (NB, 4))]}, kvc, G)
    kvc.kv_cache_groups = kvc.kv_cache_groups * 2
    with pytest.raises(L.LayoutError, match="one KV-cache group"):
        L.geometry_of(kvc, BS, False, "NHD")


def test_cpu_tensors_outside_announced_memory_are_refused():
    view = L.View(L.CudaLayer("l0", 12345, num_blocks=NB, segment_bytes=SEG, block_stride=SEG), "cpu", None)
    with pytest.raises(L.LayoutError, match="announce_host_memory"):
        L.host_layers([view])


# ---- settings --------------------------------------------------------------------------

ENV = {"PYTHONHASHSEED": "0"}


def ns(**kw):
    return S.settings_for(vs.vllm_config(**kw), environ=ENV).namespace


def test_namespace_encodes_every_factor():
    base = ns()
    assert base.startswith("vllm/test/tiny/bfloat16/b16/kv2-NHD/tp1/xxh3c/c")
    variants = [ns(model="test/other"), ns(block_size=32), ns(tp=2), ns(hash_algo="sha256_cbor"),
                ns(use_mla=True)]
    assert len({base, *variants}) == 6
    cfg = vs.vllm_config()
    cfg.model_config.dtype = "torch.float16"
    assert S.settings_for(cfg, environ=ENV).namespace != base
    assert S.settings_for(vs.vllm_config(), environ={**ENV, "VLLM_KV_CACHE_LAYOUT": "HND"}).namespace != base
    # the OffloadingSpec registers another geometry, and vLLM's OffloadingConnector asks for HND
    o = S.settings_for(vs.vllm_config(), flavour="o", environ=ENV)
    assert o.namespace != base and o.kv_layout == "HND"
    assert ns() == base                                   # the same in every process


def test_long_model_names_fit():
    n = ns(model="/models/" + "x" * 300)
    assert len(n) <= 127 and "/b16/kv2-NHD/tp1/xxh3c/" in n


def test_instance_is_the_engine_id():
    s = S.settings_for(vs.vllm_config(engine_id="3f2c-aa"), environ=ENV)
    assert s.instance == "vllm-3f2c-aa"
    cfg = vs.vllm_config(engine_id="e")
    cfg.parallel_config.data_parallel_size, cfg.parallel_config.data_parallel_rank = 4, 2
    assert S.settings_for(cfg, environ=ENV).instance == "vllm-e-dp2"
    odd = S.settings_for(vs.vllm_config(engine_id="a b" * 40), environ=ENV).instance
    assert len(odd) <= 63 and " " not in odd


def test_explicit_settings_are_checked():
    with pytest.raises(S.ConfigError, match="namespace"):
        S.settings_for(vs.vllm_config(extra={"kvstash.namespace": "bad name"}), environ=ENV)
    with pytest.raises(S.ConfigError, match="load_mode"):
        S.settings_for(vs.vllm_config(extra={"kvstash.load_mode": "later"}), environ=ENV)
    with pytest.raises(S.ConfigError, match="cross_layer_blocks"):
        S.settings_for(vs.vllm_config(extra={"kvstash.cross_layer_blocks": "maybe"}), environ=ENV)
    s = S.settings_for(vs.vllm_config(extra={"kvstash.namespace": "shared/qwen3", "kvstash.load_mode": "sync"}),
                       environ=ENV)
    assert (s.namespace, s.load_mode) == ("shared/qwen3", "sync")


def test_block_keys_are_kvstash_keys():
    import kvstash.keys

    toks = list(range(48))
    for algo, name in (("xxh3_128", "xxhash_cbor"), ("sha256", "sha256_cbor")):
        hashes = kvstash.keys.block_hashes(toks, 16, root="0", hash=algo)
        assert [S.block_key(h) for h in hashes] == kvstash.keys.block_keys(toks, 16, root="0", hash=name)
