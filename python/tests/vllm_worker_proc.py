# SPDX-License-Identifier: MIT
"""One vLLM worker rank in a process of its own, driven by vllm_engine.ProcWorker.

Requests and replies are pickles with a 4-byte length in front, on stdin
and stdout: ("init", params), ("step", meta, writes, finished, snapshot),
("read", block), ("fill", blocks, byte), ("close",).  Replies are ("ok",
value) or ("err", traceback).  The vLLM stand-ins are installed for good:
this process has no other use.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The package of the source tree, its generated kvstash._abi in the build tree's.
sys.path[:0] = [str(HERE.parent), str(Path(os.environ.get("top_builddir", HERE.parents[1])) / "python"), str(HERE)]

import vllm_stubs  # noqa: E402

vllm_stubs.install()

import kvstash.vllm  # noqa: E402,F401
import vllm_engine  # noqa: E402


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # Nothing else may write to the reply channel.
    sys.stdout = sys.stderr
    worker = None
    while True:
        head = inp.read(4)
        if len(head) < 4:
            break
        msg = pickle.loads(inp.read(struct.unpack("<I", head)[0]))
        try:
            if msg[0] == "init":
                worker = vllm_engine.WorkerRank(msg[1])
                reply = ("ok", None)
            elif msg[0] == "step":
                reply = ("ok", worker.step(*msg[1:]))
            elif msg[0] == "read":
                reply = ("ok", worker.read(msg[1]))
            elif msg[0] == "fill":
                worker.fill(msg[1], msg[2])
                reply = ("ok", None)
            elif msg[0] == "close":
                if worker is not None:
                    worker.close()
                    worker = None
                reply = ("ok", None)
            else:
                reply = ("err", f"unknown request {msg[0]!r}")
        except BaseException:
            reply = ("err", traceback.format_exc())
        data = pickle.dumps(reply)
        out.write(struct.pack("<I", len(data)) + data)
        out.flush()
    if worker is not None:
        worker.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
