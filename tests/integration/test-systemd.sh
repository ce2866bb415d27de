#!/bin/sh
# The systemd unit built from systemd/kvstashd.service.in passes
# `systemd-analyze verify`.  Skips (77) where systemd-analyze is absent.
set -eu
command -v systemd-analyze >/dev/null 2>&1 || { echo "no systemd-analyze: skipping"; exit 77; }
b=${top_builddir:-.}
s=${top_srcdir:-.}
unit="$b/systemd/kvstashd.service"
[ -f "$unit" ] || { echo "FAIL: $unit was not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# verify checks that ExecStart exists: point it at the build tree's daemon.
sed -e "s|^ExecStart=[^ ]*kvstashd |ExecStart=$(cd "$b" && pwd)/sidecar/kvstashd |" "$unit" >"$tmp/kvstashd.service"
grep -q '^Type=notify$' "$tmp/kvstashd.service" || { echo "FAIL: not Type=notify"; exit 1; }
grep -q '^LimitMEMLOCK=infinity$' "$tmp/kvstashd.service" || { echo "FAIL: memlock not unlimited"; exit 1; }
grep -q '^ExecReload=' "$tmp/kvstashd.service" || { echo "FAIL: no ExecReload"; exit 1; }
# The SSD tier's default place, writable under ProtectSystem=strict.
grep -q '^ProtectSystem=strict$' "$tmp/kvstashd.service" || { echo "FAIL: not ProtectSystem=strict"; exit 1; }
grep -q '^StateDirectory=kvstash kvstash/ssd$' "$tmp/kvstashd.service" || { echo "FAIL: no StateDirectory for /var/lib/kvstash/ssd"; exit 1; }
# Raw block devices only by an operator's drop-in.
if grep -q '^DeviceAllow=.*block' "$tmp/kvstashd.service"; then echo "FAIL: block devices open by default"; exit 1; fi
out=$(systemd-analyze verify --man=no "$tmp/kvstashd.service" 2>&1) || { echo "$out"; echo "FAIL: verify"; exit 1; }
# verify exits 0 on some warnings: treat any line about our unit as a failure.
if printf '%s\n' "$out" | grep -q "kvstashd.service"; then
	printf '%s\n' "$out"
	echo "FAIL: systemd-analyze reported problems"
	exit 1
fi
# The runtime directory and the system user.
grep -q '^d /run/kvstash 0750 kvstash kvstash' "$s/systemd/tmpfiles/kvstash.conf" || { echo "FAIL: tmpfiles entry"; exit 1; }
grep -q '^u kvstash ' "$s/systemd/sysusers/kvstash.conf" || { echo "FAIL: sysusers entry"; exit 1; }
echo "ok: unit verified"
