#!/bin/sh
# Throughput of the bundled C server against nginx, as in the servers/c report.
#   servers/c/bench/bench.sh [seconds] [runs]
# Every server is pinned to CPU 0 and wrk to CPU 1 (`taskset -c 1 wrk -t1 -c50 -dNs`); the
# targets are measured in interleaved rounds so that noise from a shared machine hits them
# alike. Targets: c epoll --threads 1, c pool --threads 4, nginx (one worker, a static 2-byte
# file) if installed; PERFCTL_EPOLL_ACCEPT=reuseport|shared selects the epoll accept mode.
# Needs: make, gcc, wrk, taskset (util-linux), python3; optionally nginx (nginx-light).
set -eu
DUR=${1:-5}
RUNS=${2:-3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=$HERE/build/perfctl-server
make -s -C "$HERE" all
TMP=$(mktemp -d)
PIDS=""
cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

free_port() {
	python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

start_c() { # name, flags...
	name=$1; shift
	taskset -c 0 "$BIN" --port 0 "$@" >"$TMP/$name.line" 2>"$TMP/$name.err" &
	PIDS="$PIDS $!"
	for _ in $(seq 50); do
		[ -s "$TMP/$name.line" ] && break
		sleep 0.1
	done
	echo "http://127.0.0.1:$(sed -E 's/.*:([0-9]+) impl.*/\1/' "$TMP/$name.line")/work?spin_us=0" \
		>"$TMP/$name.url"
}

start_c c_epoll_t1 --model epoll --threads 1
start_c c_pool_t4 --model pool --threads 4
TARGETS="c_epoll_t1 c_pool_t4"

if command -v nginx >/dev/null 2>&1; then
	mkdir -p "$TMP/www" "$TMP/logs"
	printf ok >"$TMP/www/work"
	port=$(free_port)
	cat >"$TMP/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/logs/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    default_type text/plain;
    keepalive_requests 1000000;
    client_body_temp_path $TMP/logs;
    proxy_temp_path $TMP/logs;
    fastcgi_temp_path $TMP/logs;
    uwsgi_temp_path $TMP/logs;
    scgi_temp_path $TMP/logs;
    server { listen 127.0.0.1:$port; root $TMP/www; location / { } }
}
CONF
	taskset -c 0 nginx -c "$TMP/nginx.conf" -p "$TMP" -e "$TMP/logs/error.log" &
	PIDS="$PIDS $!"
	echo "http://127.0.0.1:$port/work?spin_us=0" >"$TMP/nginx_w1.url"
	TARGETS="$TARGETS nginx_w1"
	sleep 0.5
fi

for r in $(seq "$RUNS"); do
	for t in $TARGETS; do
		rps=$(taskset -c 1 wrk -t1 -c50 -d"${DUR}s" "$(cat "$TMP/$t.url")" |
			awk '/Requests\/sec/ {print $2}')
		echo "$t $rps" | tee -a "$TMP/results"
	done
done
echo "--- median req/s over $RUNS rounds of ${DUR}s"
for t in $TARGETS; do
	printf '%s ' "$t"
	awk -v t="$t" '$1 == t {print $2}' "$TMP/results" | sort -n |
		awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
done
