#!/usr/bin/env bash
# The single-machine mode in one command: install into .venv, start the
# service in the background (API, conductor, agent and an in-process
# Placement; SQLite, no auth, API on 127.0.0.1), and show it working: the
# devices the agent discovered (the fake FPGA, plus this machine's PCI
# devices matched by a [pci] device_spec in $CYBORG_CONFIG), their resource
# providers in Placement, and a device profile created and listed.
#   tools/quickstart.sh         install, start (or reuse) and demonstrate
#   tools/quickstart.sh stop    stop the service started here
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CYBORG_VENV:-$PWD/.venv}
STATE=${CYBORG_STATE_DIR:-$PWD/state}
PORT=${CYBORG_PORT:-6666}
URL=http://127.0.0.1:$PORT
PIDFILE=$STATE/all-in-one.pid
CONFIG=${CYBORG_CONFIG:-}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

if [ "${1:-}" = stop ]; then
  if running; then kill "$(cat "$PIDFILE")"; echo "stopped"; else echo "not running"; fi
  rm -f "$PIDFILE"
  exit 0
fi

echo "==> installing into $VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e ".[all-in-one]"

mkdir -p "$STATE"
if running; then
  echo "==> already running (pid $(cat "$PIDFILE"))"
else
  echo "==> starting cyborg-all-in-one (state in $STATE)"
  nohup "$VENV/bin/cyborg-all-in-one" --state-dir "$STATE" --port "$PORT" \
    ${CONFIG:+--config-file "$CONFIG"} > "$STATE/all-in-one.out" 2>&1 &
  echo $! > "$PIDFILE"
fi
for _ in $(seq 1 60); do
  curl -sf "$URL/v2" > /dev/null && break
  running || { cat "$STATE/all-in-one.out"; exit 1; }
  sleep 0.5
done

show() { "$VENV/bin/python" -m json.tool; }
echo "==> GET $URL/v2"
curl -sf "$URL/v2" | show
# The agent's first report: what it found and what Placement now holds
# (the in-process Placement is visible only to the service, which prints
# it once the report is in).
for _ in $(seq 1 120); do
  grep -q '^Resource providers in Placement:' "$STATE/all-in-one.out" && break
  running || { cat "$STATE/all-in-one.out"; exit 1; }
  sleep 0.5
done
echo "==> discovered by the agent, synced by the conductor"
sed -n '/^Discovered devices/,/^cyborg-all-in-one: stopped/p' "$STATE/all-in-one.out" \
  | grep -v '^cyborg-all-in-one' || true
echo "==> GET $URL/v2/devices"
curl -sf "$URL/v2/devices" | show
echo "==> GET $URL/v2/deployables (rp_uuid: the resource provider in Placement)"
curl -sf "$URL/v2/deployables" | show
if curl -sf "$URL/v2/device_profiles?name=demo-fpga" | grep -q '"demo-fpga"'; then
  echo "==> device profile demo-fpga exists from an earlier start (state reused)"
else
  echo "==> POST $URL/v2/device_profiles (demo-fpga)"
  curl -s -X POST -H 'Content-Type: application/json' "$URL/v2/device_profiles" \
    -d '[{"name": "demo-fpga", "description": "one FPGA with the fake trait",
          "groups": [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]}]' | show
fi
echo "==> GET $URL/v2/device_profiles"
curl -sf "$URL/v2/device_profiles" | show
echo
echo "The API is serving on $URL (pid $(cat "$PIDFILE"), log $STATE/cyborg.log)."
echo "Stop it with: tools/quickstart.sh stop"
