#!/bin/sh
# kvstashd's readiness protocol with systemd (Type=notify): READY=1 (with
# MAINPID) comes only once the pool is ready and the socket accepts
# connections, and STOPPING=1 when SIGTERM starts the drain; kvstashd then
# exits 0.  A real kvstashd, notifying a datagram socket this test binds
# in place of systemd's.  Skips (77) without libsystemd or python3.
set -eu
b=${top_builddir:-.}
grep -q '^#define HAVE_SYSTEMD 1' "$b/config.h" || { echo "built without libsystemd: skipping"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "no python3: skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/kvstash.conf" <<CONF
[server]
socket = $tmp/run/kvstash.sock
[pool]
size = 64M
[log]
level = info
CONF
python3 - "$b/sidecar/kvstashd" "$tmp" <<'PY'
import os, signal, socket, subprocess, sys

kvstashd, tmp = sys.argv[1:3]
notify = os.path.join(tmp, "notify")
sock = os.path.join(tmp, "run", "kvstash.sock")
log = os.path.join(tmp, "kvstashd.log")


def fail(msg):
    print("FAIL:", msg)
    with open(log) as f:
        print(f.read())
    sys.exit(1)


ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
ns.bind(notify)
ns.settimeout(60)
with open(log, "w") as out:
    p = subprocess.Popen([kvstashd, "--config", os.path.join(tmp, "kvstash.conf")],
                         env=dict(os.environ, NOTIFY_SOCKET=notify), stdout=out, stderr=subprocess.STDOUT)
try:
    msg = ns.recv(4096).decode()
    fields = dict(line.split("=", 1) for line in msg.splitlines() if "=" in line)
    if fields.get("READY") != "1":
        fail(f"first notification is not READY=1: {msg!r}")
    if fields.get("MAINPID") != str(p.pid):
        fail(f"MAINPID {fields.get('MAINPID')} is not kvstashd's pid {p.pid}")
    # At READY=1 engines may start: the socket must take a connection now.
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        c.connect(sock)
    except OSError as e:
        fail(f"READY=1 sent but {sock} refuses connections: {e}")
    c.close()
    with open(log) as f:
        text = f.read()
    if " ready in " not in text:
        fail("READY=1 sent before the pool reported ready")
    p.send_signal(signal.SIGTERM)
    msg = ns.recv(4096).decode()
    if "STOPPING=1" not in msg.splitlines():
        fail(f"SIGTERM: the next notification is not STOPPING=1: {msg!r}")
    rc = p.wait(60)
    if rc != 0:
        fail(f"kvstashd exited {rc} after SIGTERM")
except socket.timeout:
    fail("no notification within 60 s")
finally:
    if p.poll() is None:
        p.kill()
print("ok: READY=1 (MAINPID) once the pool is ready and the socket accepts; STOPPING=1 on SIGTERM; exit 0")
PY
