#!/usr/bin/env bash
# Start the database and messaging servers the tests use, if they are
# installed here but not listening. Prints what it did; never fails the run
# itself (the tests will say clearly what is missing).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

ensure() {
  local name=$1 port=$2; shift 2
  listening "$port" && return 0
  echo "==> $name is not listening on $port; starting it"
  "$@" >/dev/null 2>&1 || echo "    could not start $name: $*"
  for _ in $(seq 1 30); do listening "$port" && return 0; sleep 1; done
  echo "    $name still not listening on $port"
}

command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] && \
  ensure MariaDB 3306 start-stop-daemon --start --oknodo --background \
    --exec /usr/sbin/mariadbd
[ -d /etc/postgresql ] && \
  ensure PostgreSQL 5432 pg_ctlcluster --skip-systemctl-redirect \
    "$(ls /etc/postgresql | head -n1)" main start
command -v rabbitmq-server >/dev/null && \
  ensure RabbitMQ 5672 rabbitmq-server -detached
exit 0
