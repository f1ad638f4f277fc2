#!/usr/bin/env bash
# Start or stop the servers that skurl's integration tests use, on free loopback ports:
#   redis-server  -> SKURL_TEST_REDIS_URL=redis://127.0.0.1:PORT/0
#   moto_server   -> SKURL_TEST_S3_ENDPOINT=http://127.0.0.1:PORT   (S3-compatible)
#
#   scripts/ci_services.sh start > env.sh && . env.sh   # prints `export VAR=value` lines
#   scripts/ci_services.sh stop                          # ends exactly what start began
#
# Process ids and logs live in $SKURL_CI_STATE (a fresh temporary directory when unset;
# start exports it so that stop finds it). Diagnostics go to stderr.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv_bin="${VENV:-$root/.venv}/bin"
python="$venv_bin/python"
[ -x "$python" ] || python="$(command -v python3)"

log() { echo "ci_services: $*" >&2; }

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready WHAT SECONDS PYTHON-EXPR: poll until the expression is true (it may raise).
wait_ready() {
  local what="$1" seconds="$2" probe="$3"
  "$python" - "$seconds" "$probe" <<'EOF' || { log "$what did not start; see $SKURL_CI_STATE"; return 1; }
import socket, sys, time, urllib.error, urllib.request
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    try:
        if eval(sys.argv[2]):
            sys.exit(0)
    except urllib.error.HTTPError:
        sys.exit(0)  # any HTTP answer means the server is up
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(1)
EOF
}

start_redis() {
  local port
  port="$(free_port)"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --protected-mode no \
    --daemonize yes --pidfile "$SKURL_CI_STATE/redis.pid" --logfile "$SKURL_CI_STATE/redis.log" \
    --dir "$SKURL_CI_STATE"
  wait_ready "redis-server" 20 \
    "socket.create_connection(('127.0.0.1', $port), 1).sendall(b'PING\r\n') is None"
  echo "export SKURL_TEST_REDIS_URL=redis://127.0.0.1:$port/0"
  log "redis-server on 127.0.0.1:$port"
}

start_moto() {
  local port moto
  moto="$venv_bin/moto_server"
  [ -x "$moto" ] || moto="$(command -v moto_server)"
  port="$(free_port)"
  # Detached from our stdout so that `$(ci_services.sh start)` does not wait for it.
  nohup "$moto" -H 127.0.0.1 -p "$port" </dev/null >"$SKURL_CI_STATE/moto.log" 2>&1 &
  echo $! >"$SKURL_CI_STATE/moto.pid"
  wait_ready "moto_server" 60 "urllib.request.urlopen('http://127.0.0.1:$port', timeout=1) is not None"
  echo "export SKURL_TEST_S3_ENDPOINT=http://127.0.0.1:$port"
  log "moto_server on 127.0.0.1:$port"
}

stop_pidfile() {
  local file="$1" pid
  [ -f "$file" ] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

case "${1:-}" in
  start)
    export SKURL_CI_STATE="${SKURL_CI_STATE:-$(mktemp -d -t skurl-ci-services.XXXXXX)}"
    mkdir -p "$SKURL_CI_STATE"
    echo "export SKURL_CI_STATE=$SKURL_CI_STATE"
    if command -v redis-server >/dev/null 2>&1; then
      start_redis
    else
      log "redis-server not installed: Redis tests will skip"
    fi
    if [ -x "$venv_bin/moto_server" ] || command -v moto_server >/dev/null 2>&1; then
      start_moto
    else
      log "moto_server not installed (pip install 'moto[server]'): S3 tests will skip"
    fi
    ;;
  stop)
    if [ -z "${SKURL_CI_STATE:-}" ] || [ ! -d "$SKURL_CI_STATE" ]; then
      exit 0
    fi
    stop_pidfile "$SKURL_CI_STATE/moto.pid"
    stop_pidfile "$SKURL_CI_STATE/redis.pid"
    case "$(basename "$SKURL_CI_STATE")" in  # remove only a directory that start made
      skurl-ci-services.*) rm -rf "$SKURL_CI_STATE" ;;
    esac
    log "services stopped"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
