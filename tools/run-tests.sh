#!/usr/bin/env bash
# The whole test suite on a fresh machine: install the service and its test
# dependencies into .venv-test, check style, then run every test against the
# real MariaDB, PostgreSQL (and, as they land, RabbitMQ, Placement, Keystone)
# on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CYBORG_TEST_VENV:-$PWD/.venv-test}

echo "==> installing into $VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -r requirements.txt -r test-requirements.txt -e .
# The C MySQL driver (the mysql extra), which the service uses instead of
# PyMySQL where it is installed, builds only against MariaDB's client
# headers; without them everything runs on PyMySQL.
if pkg-config --exists libmariadb 2>/dev/null; then
    "$VENV/bin/pip" install -q "mysqlclient>=2.2.0" ||
        echo "==> mysqlclient did not build: MariaDB through PyMySQL"
else
    echo "==> no libmariadb-dev: MariaDB through PyMySQL"
fi

tools/ensure-services.sh

echo "==> lint (tools/lint.sh)"
RUFF="$VENV/bin/ruff" tools/lint.sh

echo "==> cyborg-tempest-plugin API tests, legacy then new policy defaults (real Keystone)"
CYBORG_VENV="$VENV" POLICY_MODE=${POLICY_MODE:-both} tools/tempest/run.sh

echo "==> pytest"
# loadgroup: the tests of one xdist_group (those sharing the Nova cloud)
# run on one worker, which starts that rig once. Three workers on two
# cores: a third of the time the cores wait on servers, processes and
# sockets (measured: 24.7 min with two workers, 22.3 with three while
# other work ran beside them). The 20 slowest tests at the end: where
# the suite's time goes.
"$VENV/bin/pytest" -q -n "${CYBORG_TEST_WORKERS:-3}" --dist loadgroup \
    --durations=20 tests "$@"
