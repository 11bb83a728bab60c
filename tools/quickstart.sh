#!/usr/bin/env bash
# The single-machine mode in one command: install into .venv, then run the
# whole service in the foreground (API, conductor, agent and an in-process
# Placement; SQLite, no auth, API on 127.0.0.1) and show it working: the
# devices the agent discovered (the fake FPGA, plus this machine's PCI
# devices matched by a [pci] device_spec in $CYBORG_CONFIG), their resource
# providers in Placement, and Nova's part played against the API: a device
# profile, accelerator requests, and a bind to the fake device.
# Ctrl-C stops everything; a second start reuses the state directory.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CYBORG_VENV:-$PWD/.venv}
STATE=${CYBORG_STATE_DIR:-$PWD/state}
PORT=${CYBORG_PORT:-6666}
CONFIG=${CYBORG_CONFIG:-}

EXTRAS=all-in-one

# An editable install follows the code: pip runs again only when what it
# reads changed (setup.cfg, requirements.txt) or the venv is new.
if python3 tools/install_stamp.py check "$VENV" "$EXTRAS"; then
  echo "==> $VENV is up to date; nothing to install"
else
  echo "==> installing into $VENV (the first time takes a minute or two)"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e ".[$EXTRAS]"
  python3 tools/install_stamp.py write "$VENV" "$EXTRAS"
fi

echo "==> starting cyborg-all-in-one (state in $STATE); Ctrl-C stops it"
mkdir -p "$STATE"
exec "$VENV/bin/cyborg-all-in-one" --state-dir "$STATE" --port "$PORT" \
  --demo ${CONFIG:+--config-file "$CONFIG"}
