#!/usr/bin/env bash
# A three-node Postgres cluster on one machine, for tests and for trying failover by hand:
# one etcd, three Patroni-managed Postgres nodes in synchronous mode (strict), and HAProxy in
# front (writes to the node whose Patroni REST API answers `/primary`, reads to `/replica`).
# docs/ha.md has the same configuration for real machines, annotated.
#
#   scripts/ha-cluster.sh start DIR [PORT_BASE]   start everything under DIR, wait for a primary
#                                                 and a synchronous standby, print the ports
#   scripts/ha-cluster.sh stop DIR                stop everything started under DIR, by pid
#   scripts/ha-cluster.sh status DIR              each node's role, from its REST API
#
# Ports (all on 127.0.0.1), PORT_BASE (default 25400) and the ten that follow it:
#   +0 HAProxy writes   +1 HAProxy reads   +2 HAProxy stats (HTTP)
#   +3 etcd clients     +4 etcd peers
#   +5 +6 +7 Postgres of nodes n1 n2 n3    +8 +9 +10 their Patroni REST APIs
# They are written to DIR/cluster.env. Tests give each cluster its own DIR and a free range, so
# clusters run side by side. Never 5432: the machine's own Postgres holds it.
#
# Postgres refuses to run as root: when run as root, Patroni (and so Postgres) runs as the
# `postgres` user and DIR is handed to it. Needs Debian's patroni, etcd-server and haproxy
# (tests/conformance/install.sh installs them) and PostgreSQL 15's server binaries.
set -euo pipefail

die() {
  echo "ha-cluster.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '6,10p' "$0" >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
cmd=$1
dir=$2
base=${3:-25400}

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
NODES=(n1 n2 n3)

ports() {
  HA_WRITE_PORT=$((base + 0))
  HA_READ_PORT=$((base + 1))
  HA_STATS_PORT=$((base + 2))
  ETCD_CLIENT_PORT=$((base + 3))
  ETCD_PEER_PORT=$((base + 4))
}
pg_port() { echo $((base + 5 + $1)); }
api_port() { echo $((base + 8 + $1)); }

# The prefix that runs a command as the user Postgres runs as: `postgres` when we are root,
# else ourselves. setpriv execs (runuser would stay as the parent), so a background command's
# `$!` is its own pid, the pid `stop` kills.
PG_RUN=()
if [[ "$(id -u)" == 0 ]]; then
  PG_RUN=(setpriv --reuid postgres --regid postgres --init-groups --)
fi
as_pg() { "${PG_RUN[@]}" "$@"; }

need() {
  command -v "$1" >/dev/null 2>&1 || [[ -x "$2" ]] ||
    die "$1 is not installed (apt-get install -y patroni etcd-server haproxy, or tests/conformance/install.sh)"
}

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local secs=$1
  shift
  local until=$((SECONDS + secs))
  local rc
  while true; do
    rc=0
    "$@" >/dev/null || rc=$?
    [[ $rc == 0 ]] && return 0
    # 2: it will never succeed (a process it needs exited).
    [[ $rc != 2 ]] && ((SECONDS < until)) || return 1
    sleep 0.2
  done
}

http_ok() { curl -fs -o /dev/null --max-time 2 "$1"; }


# Every node as a server of a HAProxy section: its Postgres port, checked on its Patroni API.
haproxy_servers() {
  for i in 0 1 2; do
    echo "  server ${NODES[$i]} 127.0.0.1:$(pg_port $i) check port $(api_port $i)"
  done
}

write_configs() {
  ports
  local i n
  cat >"$dir/cluster.env" <<EOF
HA_WRITE_PORT=$HA_WRITE_PORT
HA_READ_PORT=$HA_READ_PORT
HA_STATS_PORT=$HA_STATS_PORT
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
EOF
  for i in 0 1 2; do
    n=${NODES[$i]}
    echo "PG_PORT_$n=$(pg_port $i)" >>"$dir/cluster.env"
    echo "API_PORT_$n=$(api_port $i)" >>"$dir/cluster.env"
    mkdir -p "$dir/$n"
    # Timings are a test's: a failover within seconds. docs/ha.md gives production ones.
    cat >"$dir/$n/patroni.yml" <<EOF
scope: threadstream
namespace: /threadstream/
name: $n
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$(api_port $i)
  connect_address: 127.0.0.1:$(api_port $i)
etcd3:
  hosts: 127.0.0.1:$ETCD_CLIENT_PORT
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    # A crashed primary is failed over at once rather than restarted in place.
    primary_start_timeout: 0
    synchronous_mode: true
    synchronous_mode_strict: true
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 100
        # A WAL segment no longer needed is deleted, not renamed for reuse with its old bytes:
        # after threadstream scrub, no node keeps an erased row in pg_wal (docs/ha.md).
        wal_recycle: "off"
  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: 127.0.0.1:$(pg_port $i)
  connect_address: 127.0.0.1:$(pg_port $i)
  data_dir: $dir/$n/data
  bin_dir: $PG_BIN
  pgpass: $dir/$n/pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: replicator
      password: replicator
  parameters:
    unix_socket_directories: $dir/$n
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication replicator 127.0.0.1/32 trust
tags:
  nofailover: false
  noloadbalance: false
EOF
  done
  {
    cat <<EOF
global
  maxconn 2000
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 2s
listen stats
  mode http
  bind 127.0.0.1:$HA_STATS_PORT
  stats enable
  stats uri /
listen primary
  bind 127.0.0.1:$HA_WRITE_PORT
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
EOF
    haproxy_servers
    cat <<EOF
listen replicas
  bind 127.0.0.1:$HA_READ_PORT
  balance roundrobin
  option httpchk GET /replica
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
EOF
    haproxy_servers
  } >"$dir/haproxy.cfg"
}

# Starts `$2...` (a program, not a function: `$!` must be its pid) in the background with its
# output in $1.log and its pid in $1.pid.
spawn() {
  local name=$1
  shift
  "$@" >"$name.log" 2>&1 </dev/null &
  echo $! >"$name.pid"
}

role_of() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$(api_port "$1")/primary" || true)
  if [[ $code == 200 ]]; then
    echo primary
    return
  fi
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$(api_port "$1")/replica" || true)
  if [[ $code == 200 ]]; then echo replica; else echo down; fi
}

# The primary is up and a standby is synchronous (`/sync` answers 200 on the synchronous one).
cluster_ready() {
  local i primary=0 sync=0 f
  for f in "$dir/etcd.pid" "$dir"/n?/patroni.pid "$dir/haproxy.pid"; do
    alive "$(cat "$f")" || {
      echo "ha-cluster.sh: ${f%.pid} exited; see ${f%.pid}.log" >&2
      return 2
    }
  done
  for i in 0 1 2; do
    http_ok "http://127.0.0.1:$(api_port $i)/primary" && primary=$((primary + 1))
    http_ok "http://127.0.0.1:$(api_port $i)/sync" && sync=$((sync + 1))
  done
  [[ $primary == 1 && $sync -ge 1 ]] || return 1
  as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$HA_WRITE_PORT" -U postgres -d postgres -Atc \
    "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'" 2>/dev/null | grep -q 1
}

start() {
  need patroni /usr/bin/patroni
  need etcd /usr/bin/etcd
  need haproxy /usr/sbin/haproxy
  [[ -x "$PG_BIN/postgres" ]] || die "no PostgreSQL server binaries in $PG_BIN"
  [[ ! -e "$dir/etcd.pid" ]] || die "$dir already holds a cluster (stop it first)"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  write_configs
  if [[ "$(id -u)" == 0 ]]; then
    chown -R postgres: "$dir"
    # Postgres must reach its data dir through every parent (a test's temp dir is 0700).
    chmod a+x "$dir"
  fi
  # Everything runs from the cluster's directory: the caller's (a checkout under a 0700
  # directory, say) may be closed to the postgres user, and Patroni and initdb fail there.
  cd "$dir"

  spawn "$dir/etcd" "${PG_RUN[@]}" etcd --name e1 --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e1=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state new
  wait_for 20 http_ok "http://127.0.0.1:$ETCD_CLIENT_PORT/health" ||
    die "etcd did not start; see $dir/etcd.log"

  local i n
  for i in 0 1 2; do
    n=${NODES[$i]}
    spawn "$dir/$n/patroni" "${PG_RUN[@]}" patroni "$dir/$n/patroni.yml"
  done
  spawn "$dir/haproxy" haproxy -db -f "$dir/haproxy.cfg"

  wait_for 120 cluster_ready ||
    die "no primary with a synchronous standby within 120 s; see $dir/n*/patroni.log"
  wait_for 20 as_pg "$PG_BIN/pg_isready" -h 127.0.0.1 -p "$HA_WRITE_PORT" ||
    die "HAProxy's write port $HA_WRITE_PORT does not reach the primary"
  cat "$dir/cluster.env"
  echo "ready"
}

# Whether pid $1 runs (a zombie does not: what we started is reaped by whoever adopted it,
# not always at once).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

# Sends $1 to the pid in file $2 if it is alive; waits up to $3 s for it to exit.
stop_pid() {
  local sig=$1 file=$2 secs=$3 pid
  [[ -f "$file" ]] || return 0
  pid=$(head -1 "$file")
  [[ -n "$pid" ]] || return 0
  kill "-$sig" "$pid" 2>/dev/null || return 0
  local until=$((SECONDS + secs))
  while alive "$pid" && ((SECONDS < until)); do sleep 0.1; done
  if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
}

stop() {
  [[ -d "$dir" ]] || return 0
  dir=$(cd "$dir" && pwd)
  stop_pid TERM "$dir/haproxy.pid" 5
  local n
  # Patroni first (so it does not restart Postgres), then any postmaster it left: immediate
  # shutdown (SIGQUIT) by the pid in its postmaster.pid.
  for n in "${NODES[@]}"; do stop_pid KILL "$dir/$n/patroni.pid" 5; done
  for n in "${NODES[@]}"; do
    [[ -f "$dir/$n/data/postmaster.pid" ]] && stop_pid QUIT "$dir/$n/data/postmaster.pid" 10
  done
  stop_pid TERM "$dir/etcd.pid" 5
  rm -f "$dir/haproxy.pid" "$dir"/n?/patroni.pid "$dir/etcd.pid"
}

status() {
  local i
  for i in 0 1 2; do echo "${NODES[$i]} $(role_of $i)"; done
}

case $cmd in
start)
  # Whatever started is stopped again if the start fails half-way.
  trap 'rc=$?; if [[ $rc != 0 ]]; then stop; fi' EXIT
  start
  trap - EXIT
  ;;
stop) stop ;;
status)
  [[ -f "$dir/cluster.env" ]] || die "no cluster in $dir"
  # shellcheck disable=SC1091
  base=$(sed -n 's/^HA_WRITE_PORT=//p' "$dir/cluster.env")
  status
  ;;
*) usage ;;
esac
