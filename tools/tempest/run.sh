#!/bin/bash
# Run cyborg-tempest-plugin's API tests against this checkout, behind a real
# Keystone, with a real Placement, RabbitMQ, conductor and agent (fake
# driver), then tear everything down. See README.rst beside this file.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

WORK_DIR=${WORK_DIR:-/tmp/cyborg-tempest}
KS_VENV=${KS_VENV:-$WORK_DIR/venvs/keystone}
TEMPEST_VENV=${TEMPEST_VENV:-$WORK_DIR/venvs/tempest}
TEMPEST_VERSION=${TEMPEST_VERSION:-47.0.0}
PLUGIN_VERSION=${PLUGIN_VERSION:-2.8.0}
# Device profiles, accelerator requests, devices, deployables and
# attributes, and their SRBAC checks (in plugin 2.8.0: every API test).
# Named one by one so that a module a later plugin adds is chosen, not run
# by surprise.
DEFAULT_REGEX='^cyborg_tempest_plugin\.tests\.api\.((test_device_profile|test_device_profile_negative|test_accelerator_request|test_accelerator_request_negative|test_device|test_device_negative|test_deployables|test_deployable_negative|test_attributes|test_attribute_negative)\.|test_srbac\..*(arqs?|devices|deployables|attributes|device_profiles)\b)'
TEMPEST_REGEX=${TEMPEST_REGEX:-$DEFAULT_REGEX}
TEMPEST_CONCURRENCY=${TEMPEST_CONCURRENCY:-2}
POLICY_MODE=${POLICY_MODE:-new}          # new | legacy | both ([oslo_policy] enforce_new_defaults)
DB_BACKEND=${DB_BACKEND:-auto}           # auto | mysql | sqlite
DB_NAME=${DB_NAME:-cyborg_tempest}
SERVICE_PASS=${SERVICE_PASS:-cyborg-secret}
# The agent's [DEFAULT] host, and so the compute node's name in Placement.
COMPUTE_HOST=${COMPUTE_HOST:-$(hostname -s 2>/dev/null || python3 -c \
  'import socket; print(socket.gethostname().split(".")[0])')}
REPORT_INTERVAL=${REPORT_INTERVAL:-2}
RABBIT=${RABBIT:-guest:guest@127.0.0.1:5672}   # user:password@host:port
RABBIT_USER=${RABBIT%%:*}
VHOST=cyborg-tempest-$$-$(date +%s)

case $POLICY_MODE in
  new) NEW_DEFAULTS=true ;;
  legacy) NEW_DEFAULTS=false ;;
  both)
    # One full run per mode (the service restarts with the other policy
    # defaults); both must pass.
    rc=0
    for mode in legacy new; do
      POLICY_MODE=$mode "$0" "$@" || rc=1
    done
    for mode in legacy new; do
      grep -h "^\[tempest $mode\]" "$WORK_DIR/summary-$mode.txt" 2>/dev/null || true
    done
    exit $rc ;;
  *) echo "POLICY_MODE must be new, legacy or both" >&2; exit 2 ;;
esac

RUN_DIR=$WORK_DIR/run
KS_DIR=$RUN_DIR/keystone
CYBORG_DIR=$RUN_DIR/cyborg
PLACEMENT_DIR=$RUN_DIR/placement
WORKSPACE=$RUN_DIR/tempest
START=$(date +%s)

log() { echo "[tempest-run $(( $(date +%s) - START ))s] $*"; }

# A port nobody listens on: the preferred one if free, else any.
free_port() {
  python3 - "$1" <<'PY'
import socket, sys
for port in (int(sys.argv[1]), 0):
    s = socket.socket()
    # As the servers do: a port left in TIME_WAIT by a previous run is free.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(('127.0.0.1', port))
    except OSError:
        continue
    print(s.getsockname()[1])
    break
PY
}

wait_http() {  # url seconds pid
  local i
  for i in $(seq 1 "$2"); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

mysql_root() { mysql -uroot -h127.0.0.1 --protocol=tcp "$@"; }

rabbitmqctl_q() { rabbitmqctl -q "$@" >/dev/null; }

# SIGTERM to all at once, then SIGKILL to any still there after 20 s
# (the services stop within about 10 s, even with a neighbour gone).
stop_pids() {
  local pid alive
  for pid in "$@"; do
    kill "$pid" 2>/dev/null
  done
  for _ in $(seq 1 100); do
    alive=
    for pid in "$@"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ -n "$alive" ] || break
    sleep 0.2
  done
  for pid in "$@"; do
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  return 0
}

KS_PID=
CYBORG_PID=
AGENT_PID=
CONDUCTOR_PID=
PLACEMENT_PID=
TEMPEST_PID=
DB_CREATED=
VHOST_CREATED=
SUMMARY=
cleanup() {
  local rc=$?
  set +e
  if [ -n "$TEMPEST_PID" ]; then
    kill -- "-$TEMPEST_PID" 2>/dev/null
    wait "$TEMPEST_PID" 2>/dev/null
  fi
  if [ -z "$KS_PID" ] && [ -f "$KS_DIR/serve.pid" ]; then
    KS_PID=$(cat "$KS_DIR/serve.pid")
  fi
  stop_pids "$CYBORG_PID" "$AGENT_PID" "$CONDUCTOR_PID" "$PLACEMENT_PID" \
    "$KS_PID"
  if [ -n "$DB_CREATED" ]; then
    mysql_root -e "DROP DATABASE IF EXISTS \`$DB_NAME\`"
  fi
  if [ -n "$VHOST_CREATED" ]; then
    rabbitmqctl_q delete_vhost "$VHOST"
  fi
  log "torn down (logs kept in $RUN_DIR); exit $rc"
  # The verdict closes the output.
  if [ -s "$SUMMARY" ]; then
    tail -n 1 "$SUMMARY"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK_DIR/venvs"
rm -rf "$RUN_DIR"
mkdir -p "$KS_DIR" "$CYBORG_DIR" "$PLACEMENT_DIR" "$WORKSPACE"
command -v rabbitmqctl >/dev/null || {
  echo "rabbitmqctl not found: each run makes its own RabbitMQ vhost" >&2
  exit 2
}

# pip prints one warning per package for index locations that may not exist:
# keep installs quiet and in a log, shown only on failure.
pip_into() {  # venv log packages...
  local venv=$1 logf=$2; shift 2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q "$@" >>"$logf" 2>&1; then
    tail -n 30 "$logf" >&2; return 1
  fi
}

# --- the service's venv: /tmp/venv when it has cyborg-api, else our own ---
if [ -z "${CYBORG_VENV:-}" ]; then
  CYBORG_VENV=/tmp/venv
  [ -x "$CYBORG_VENV/bin/cyborg-api" ] || CYBORG_VENV=$WORK_DIR/venvs/cyborg
fi
if [ ! -x "$CYBORG_VENV/bin/cyborg-api" ] || [ ! -x "$CYBORG_VENV/bin/cyborg-dbsync" ]; then
  log "installing the service into $CYBORG_VENV"
  pip_into "$CYBORG_VENV" "$WORK_DIR/cyborg-install.log" -e "$REPO"
fi
# Run this checkout's code even if the venv was installed from another clone.
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
# As the services will import it (from /, not from the caller's directory):
# a run that tested another tree's code would prove nothing.
CYBORG_SRC=$(cd / && "$CYBORG_VENV/bin/python" -c \
  'import cyborg, os; print(os.path.dirname(os.path.dirname(os.path.realpath(cyborg.__file__))))')
if [ "$CYBORG_SRC" != "$(realpath "$REPO")" ]; then
  echo "$CYBORG_VENV imports cyborg from $CYBORG_SRC, not from $REPO" >&2
  exit 2
fi

# --- Placement: the service's venv when it has it (a test dependency) ---
has_placement() {
  "$1/bin/python" -c 'import placement.deploy, cheroot' 2>/dev/null
}
if [ -z "${PLACEMENT_VENV:-}" ]; then
  PLACEMENT_VENV=$CYBORG_VENV
  has_placement "$PLACEMENT_VENV" || PLACEMENT_VENV=$WORK_DIR/venvs/placement
fi
if ! has_placement "$PLACEMENT_VENV"; then
  log "installing openstack-placement into $PLACEMENT_VENV"
  pip_into "$PLACEMENT_VENV" "$WORK_DIR/placement-install.log" \
    openstack-placement cheroot
fi

# --- tempest and the plugin, pinned, in their own venv ---
if ! "$TEMPEST_VENV/bin/python" - "$TEMPEST_VERSION" "$PLUGIN_VERSION" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(not (version('tempest') == sys.argv[1]
              and version('cyborg-tempest-plugin') == sys.argv[2]))
PY
then
  log "installing tempest $TEMPEST_VERSION + cyborg-tempest-plugin $PLUGIN_VERSION"
  pip_into "$TEMPEST_VENV" "$WORK_DIR/tempest-install.log" \
    "tempest==$TEMPEST_VERSION" "cyborg-tempest-plugin==$PLUGIN_VERSION"
fi

# --- 1. Keystone: the test suite's own (tests/keystone_service.py) ---
[ -x "$KS_VENV/bin/keystone-manage" ] || log "installing keystone into $KS_VENV"
log "starting keystone"
if ! "$CYBORG_VENV/bin/python" "$HERE/keystone_local.py" --dir "$KS_DIR" \
    --venv "$KS_VENV" >"$KS_DIR/started.json" 2>"$RUN_DIR/keystone-setup.log"; then
  tail -n 30 "$RUN_DIR/keystone-setup.log" >&2; exit 1
fi
started() {  # key
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$KS_DIR/started.json" "$1"
}
KS_PID=$(started pid)
echo "$KS_PID" >"$KS_DIR/serve.pid"
KS_URL=$(started url)
# The bootstrap's admin, whose password the launcher chose.
ADMIN_PASS=$(started admin_password)
log "keystone serves $KS_URL"

# --- 2. Cyborg in Keystone ---
CYBORG_PORT=$(free_port "${CYBORG_PORT:-6666}")
CYBORG_URL=http://127.0.0.1:$CYBORG_PORT
python3 "$HERE/keystone_setup.py" --auth-url "$KS_URL/v3" \
  --admin-password "$ADMIN_PASS" --service-password "$SERVICE_PASS" \
  --endpoint "$CYBORG_URL/v2"

# --- 3. the database ---
if [ "$DB_BACKEND" != sqlite ] && command -v mysql >/dev/null \
    && mysql_root -e 'SELECT 1' >/dev/null 2>&1 \
    && "$CYBORG_VENV/bin/python" -c 'import pymysql' 2>/dev/null; then
  mysql_root -e "DROP DATABASE IF EXISTS \`$DB_NAME\`; CREATE DATABASE \`$DB_NAME\` CHARACTER SET utf8mb4"
  DB_CREATED=1
  DB_URL="mysql+pymysql://root@127.0.0.1/$DB_NAME?charset=utf8mb4"
  log "database: MariaDB $DB_NAME on 127.0.0.1"
elif [ "$DB_BACKEND" = mysql ]; then
  echo "DB_BACKEND=mysql but MariaDB (root, no password, on 127.0.0.1) or PyMySQL is unavailable" >&2
  exit 2
else
  DB_URL="sqlite:///$CYBORG_DIR/cyborg.sqlite"
  [ "$DB_BACKEND" = sqlite ] && why="asked for" || why="MariaDB or PyMySQL unavailable"
  log "database: SQLite $CYBORG_DIR/cyborg.sqlite ($why)"
fi

# --- 4. Placement (noauth2, SQLite) and the compute node Nova would make ---
"$PLACEMENT_VENV/bin/python" "$HERE/placement_server.py" \
  --db "$PLACEMENT_DIR/placement.sqlite" --port-file "$PLACEMENT_DIR/port" \
  >"$PLACEMENT_DIR/placement.log" 2>&1 &
PLACEMENT_PID=$!
for _ in $(seq 1 60); do
  [ -s "$PLACEMENT_DIR/port" ] && break
  kill -0 "$PLACEMENT_PID" 2>/dev/null || break
  sleep 0.5
done
[ -s "$PLACEMENT_DIR/port" ] || {
  echo "placement did not start" >&2
  tail -n 30 "$PLACEMENT_DIR/placement.log" >&2
  exit 1
}
PLACEMENT_URL=http://127.0.0.1:$(cat "$PLACEMENT_DIR/port")
wait_http "$PLACEMENT_URL/" 30 "$PLACEMENT_PID" || {
  echo "placement did not answer on $PLACEMENT_URL" >&2
  tail -n 30 "$PLACEMENT_DIR/placement.log" >&2
  exit 1
}
node=$(python3 "$HERE/compute_host.py" create-node \
  --placement "$PLACEMENT_URL" --host "$COMPUTE_HOST")
log "placement on $PLACEMENT_URL; $node"

# --- 5. a RabbitMQ virtual host for this run ---
rabbitmqctl_q add_vhost "$VHOST"
VHOST_CREATED=1
rabbitmqctl_q set_permissions -p "$VHOST" "$RABBIT_USER" '.*' '.*' '.*'
TRANSPORT_URL=rabbit://$RABBIT/$VHOST
log "RabbitMQ virtual host $VHOST"

# --- 6. the services ---
CONF=$CYBORG_DIR/cyborg.conf
sed -e "s|@STATE_DIR@|$CYBORG_DIR|" -e "s|@CYBORG_PORT@|$CYBORG_PORT|" \
    -e "s|@DB_URL@|$DB_URL|" -e "s|@KS_URL@|$KS_URL|g" \
    -e "s|@SERVICE_PASS@|$SERVICE_PASS|" -e "s|@NEW_DEFAULTS@|$NEW_DEFAULTS|" \
    -e "s|@HOST@|$COMPUTE_HOST|" -e "s|@TRANSPORT_URL@|$TRANSPORT_URL|" \
    -e "s|@PLACEMENT_URL@|$PLACEMENT_URL|g" \
    -e "s|@REPORT_INTERVAL@|$REPORT_INTERVAL|" \
    "$HERE/cyborg.conf.in" > "$CONF"

"$CYBORG_VENV/bin/cyborg-dbsync" --config-file "$CONF" upgrade \
  >"$CYBORG_DIR/dbsync.log" 2>&1 || { cat "$CYBORG_DIR/dbsync.log" >&2; exit 1; }

start_service() {  # name; $! is its pid
  "$CYBORG_VENV/bin/$1" --config-file "$CONF" >"$CYBORG_DIR/$1.log" 2>&1 &
}
conductor_started() {
  grep -q 'cyborg-conductor started' "$CYBORG_DIR/cyborg-conductor.log"
}

start_service cyborg-conductor
CONDUCTOR_PID=$!
# A report sent before the conductor's queue exists is lost and the agent
# waits report_timeout for the answer: start the agent after it.
for _ in $(seq 1 120); do
  conductor_started && break
  kill -0 "$CONDUCTOR_PID" 2>/dev/null || break
  sleep 0.5
done
conductor_started || {
  echo "cyborg-conductor did not start" >&2
  grep -E 'WARNING|ERROR' "$CYBORG_DIR/cyborg-conductor.log" | tail -n 20 >&2
  exit 1
}
start_service cyborg-agent
AGENT_PID=$!
start_service cyborg-api
CYBORG_PID=$!
wait_http "$CYBORG_URL/v2" 30 "$CYBORG_PID" || {
  echo "cyborg-api did not answer on $CYBORG_URL/v2" >&2
  tail -n 30 "$CYBORG_DIR/cyborg-api.log" >&2; exit 1; }
log "cyborg-api on $CYBORG_URL (policy: $POLICY_MODE defaults, code from $REPO)"

# --- 7. the agent's report, via the conductor, in the API and Placement ---
if ! python3 "$HERE/compute_host.py" wait-for-device \
    --placement "$PLACEMENT_URL" --host "$COMPUTE_HOST" \
    --auth-url "$KS_URL/v3" --admin-password "$ADMIN_PASS" \
    --cyborg "$CYBORG_URL/v2" --timeout "${DEVICE_TIMEOUT:-90}" \
    --pid "$CONDUCTOR_PID" --pid "$AGENT_PID" --pid "$CYBORG_PID" \
    >"$CYBORG_DIR/inventory.log" 2>&1; then
  echo "the fake device did not show up:" >&2
  cat "$CYBORG_DIR/inventory.log" >&2
  for f in cyborg-agent cyborg-conductor; do
    echo "--- $f" >&2
    grep -E 'WARNING|ERROR' "$CYBORG_DIR/$f.log" | tail -n 10 >&2
  done
  exit 1
fi
while read -r line; do
  log "$line"
done <"$CYBORG_DIR/inventory.log"

# --- 8. tempest ---
sed -e "s|@WORKSPACE@|$WORKSPACE|g" -e "s|@ADMIN_PASS@|$ADMIN_PASS|" \
    -e "s|@KS_URL@|$KS_URL|g" -e "s|@NEW_DEFAULTS@|$NEW_DEFAULTS|" \
    "$HERE/tempest.conf.in" > "$WORKSPACE/tempest.conf"
mkdir -p "$WORKSPACE/logs" "$WORKSPACE/lock"
log "tempest run --regex '$TEMPEST_REGEX' --concurrency $TEMPEST_CONCURRENCY"
cd "$WORKSPACE"
# In its own process group, in the background: a signal to this script then
# interrupts the wait at once, and cleanup stops tempest and its workers.
# Failures are judged below from the subunit stream, not from the exit code.
setsid "$TEMPEST_VENV/bin/tempest" run --config-file "$WORKSPACE/tempest.conf" \
  --regex "$TEMPEST_REGEX" --concurrency "$TEMPEST_CONCURRENCY" \
  >"$WORKSPACE/tempest-run.log" 2>&1 &
TEMPEST_PID=$!
wait "$TEMPEST_PID" || true
TEMPEST_PID=
grep -E '^\{[0-9]+\}|^Totals|^ - ' "$WORKSPACE/tempest-run.log" || true

# --- 9. verdict ---
if ! "$TEMPEST_VENV/bin/stestr" last --subunit >"$WORKSPACE/results.subunit" 2>/dev/null; then
  echo "tempest produced no results:" >&2; tail -n 40 "$WORKSPACE/tempest-run.log" >&2; exit 1
fi
log "wall time so far $(( $(date +%s) - START ))s; logs: $CYBORG_DIR/cyborg-*.log, $WORKSPACE/logs/tempest.log"
SUMMARY=$WORKSPACE/summary.txt
verdict=0
"$TEMPEST_VENV/bin/python" "$HERE/summarize.py" --policy-mode "$POLICY_MODE" \
  <"$WORKSPACE/results.subunit" \
  >"$SUMMARY" || verdict=$?
head -n -1 "$SUMMARY"
# The counts line, for POLICY_MODE=both to print both modes at the end.
grep '^tempest:' "$SUMMARY" | sed "s/^/[tempest $POLICY_MODE] /" \
  >"$WORK_DIR/summary-$POLICY_MODE.txt" || true
exit $verdict
