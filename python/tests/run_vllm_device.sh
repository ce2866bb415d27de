#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The vLLM integration on a GPU machine: build kvstash with its CUDA backend,
# then run the vLLM tests, the CUDA ones included, and fail if a CUDA test
# was skipped (on this machine a skip means something is missing).
#
#   source .devkit/env && python/tests/run_vllm_device.sh
#
# Run from the top of the source tree.  It needs:
#   - .devkit/   the build dependencies (on a networked machine, from the top
#                of the tree: ../shared/device/prepare; see CONTRIBUTING.md);
#   - .vllm-src/ the few pure-Python files of vLLM the conformance test imports
#                (vllm/v1/kv_offload/{__init__,base,factory}.py,
#                worker/{__init__,worker}.py) and COMMIT naming the vLLM commit.
#                It is in .gitignore and never committed; make it from a clone
#                of vLLM with, for each file F:  git show COMMIT:F > .vllm-src/F
#   - python3 with torch (CUDA), numpy, pytest and xxhash.
# Both folders travel as carried paths.  BUILD_DIR (default build-gpu) is the
# build tree; with $OUT set, the build and test logs are written there too.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 2
build=${BUILD_DIR:-build-gpu}
log=${OUT:-/tmp}
PYTHON=${PYTHON:-python3}

fail() { echo "run_vllm_device: $*" >&2; exit 1; }

[ -f .vllm-src/vllm/v1/kv_offload/base.py ] || fail "no .vllm-src/ (carry it; see the header of this script)"
echo "vLLM source: $(head -n 1 .vllm-src/COMMIT 2>/dev/null || echo 'no COMMIT file')"
"$PYTHON" -c 'import torch, numpy, pytest, xxhash; assert torch.cuda.is_available(), "no CUDA"; print("torch", torch.__version__, torch.cuda.get_device_name(0))' \
	|| fail "$PYTHON lacks torch with CUDA, numpy, pytest or xxhash"

(
	./bootstrap && mkdir -p "$build" && cd "$build" && ../configure -q && make -j"$(nproc)"
) > "$log/vllm-device-build.log" 2>&1 || { tail -n 40 "$log/vllm-device-build.log"; fail "build failed"; }
grep -q '^#define HAVE_CUDA 1' "$build/config.h" || fail "configure found no CUDA toolkit (is /usr/local/cuda there?)"

KVSTASH_LIB=$top/$build/client/.libs/libkvstash.so.0
KVSTASHD=$top/$build/sidecar/kvstashd
export KVSTASH_LIB KVSTASHD
# Without expandable segments PyTorch's allocator hands out cudaMalloc memory,
# which kvstashd can import (see docs/VLLM.md); keep the image's NVLS settings.
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False
export PYTORCH_CUDA_ALLOC_CONF

set -- python/tests/test_vllm_offload_gpu.py python/tests/test_vllm_connector_gpu.py \
	python/tests/test_gpu_torch.py python/tests/test_vllm_connector.py python/tests/test_vllm_offload.py \
	python/tests/test_vllm_layout.py
PYTHONUNBUFFERED=1 "$PYTHON" -B -m pytest -v -rfEs -s -p no:cacheprovider "$@" 2>&1 | tee "$log/vllm-device-tests.log"
status=$(grep -cE '^(FAILED|ERROR) ' "$log/vllm-device-tests.log")
tail -n 1 "$log/vllm-device-tests.log" | grep -qE ' passed' || fail "pytest did not finish (see $log/vllm-device-tests.log)"
if grep -E '^SKIPPED .*_gpu' "$log/vllm-device-tests.log"; then
	fail "GPU tests were skipped on the GPU machine"
fi
[ "$status" -eq 0 ] || fail "$status tests failed"
grep -E '^vLLM source: ' "$log/vllm-device-tests.log" | sort -u
echo "run_vllm_device: all vLLM tests passed, the CUDA ones included"
