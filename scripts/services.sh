#!/usr/bin/env bash
# Makes sure PostgreSQL (DATABASE_URL), Redis (REDIS_URL) and RabbitMQ
# (RABBITMQ_URL) answer, and that a headless Chromium (the ops console's
# browser tests) and Node.js with npm (the Node.js client sample's tests)
# are installed. When one
# points at this machine and is down, it is started with the machine's Debian
# packages (installed with apt-get when missing). Exits non-zero with the reason
# when a service cannot be made to answer. `make test`, `make run` and CI all
# come through here.
set -euo pipefail

DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
RABBITMQ_URL=${RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672/}

say() { printf 'services: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
		die "need root to run: $* (install it yourself or run as root)"
	fi
}

apt_install() {
	say "installing $* with apt-get"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null ||
		die "apt-get update failed; install $* by hand"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null ||
		die "apt-get install $* failed; install it by hand"
}

# host_of URL prints the host part of a URL.
host_of() { sed -E 's#^[a-z]+://([^@/]*@)?(\[[^]]*\]|[^:/?]*).*#\2#' <<<"$1"; }
port_of() {
	local p
	p=$(sed -nE 's#^[a-z]+://([^@/]*@)?(\[[^]]*\]|[^:/?]*):([0-9]+).*#\3#p' <<<"$1")
	echo "${p:-$2}"
}
is_local() { case "$1" in 127.0.0.1 | localhost | "::1" | "[::1]" | "") return 0 ;; *) return 1 ;; esac; }

wait_for() { # wait_for NAME CHECK...
	local name=$1
	shift
	for _ in $(seq 1 60); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	die "$name did not come up within 30 s"
}

# --- PostgreSQL -------------------------------------------------------------
pg_ok() { pg_isready -q -d "$DATABASE_URL" && psql "$DATABASE_URL" -Atqc 'SELECT 1' >/dev/null; }

ensure_postgres() {
	command -v pg_isready >/dev/null || apt_install postgresql-client
	if pg_ok 2>/dev/null; then return; fi
	local host
	host=$(host_of "$DATABASE_URL")
	is_local "$host" || die "PostgreSQL at $host does not answer (DATABASE_URL); start it or point DATABASE_URL at a running server"

	local fresh=""
	if ! ls /etc/postgresql/*/main/postgresql.conf >/dev/null 2>&1; then
		apt_install postgresql
		fresh=1
	fi
	local version
	version=$(ls /etc/postgresql | sort -V | tail -n 1)
	if [ -n "$fresh" ]; then
		# A freshly installed development server: trust local TCP connections,
		# as the default DATABASE_URL (user postgres, no password) expects.
		local hba=/etc/postgresql/$version/main/pg_hba.conf
		as_root sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
	fi
	say "starting PostgreSQL $version"
	as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start ||
		die "could not start PostgreSQL $version (see /var/log/postgresql/)"
	wait_for PostgreSQL pg_isready -q -d "$DATABASE_URL"
	pg_ok || die "PostgreSQL runs but refuses $DATABASE_URL (check the user, password and pg_hba.conf)"
}

# --- Redis ------------------------------------------------------------------
redis_ok() { [ "$(redis-cli -u "$REDIS_URL" ping 2>/dev/null)" = "PONG" ]; }

ensure_redis() {
	command -v redis-cli >/dev/null || apt_install redis-tools
	if redis_ok; then return; fi
	local host port
	host=$(host_of "$REDIS_URL")
	port=$(port_of "$REDIS_URL" 6379)
	is_local "$host" || die "Redis at $host does not answer (REDIS_URL); start it or point REDIS_URL at a running server"
	command -v redis-server >/dev/null || apt_install redis-server
	say "starting Redis on port $port"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
		--dir "${TMPDIR:-/tmp}" --logfile "${TMPDIR:-/tmp}/kumiko-redis-$port.log" >/dev/null ||
		die "could not start redis-server"
	wait_for Redis redis_ok
}

# --- RabbitMQ ---------------------------------------------------------------
# rabbit_ok: the broker answers the AMQP 0-9-1 protocol header with a frame.
rabbit_ok() {
	local host port reply
	host=$(host_of "$RABBITMQ_URL")
	port=$(port_of "$RABBITMQ_URL" 5672)
	reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "AMQP\0\0\11\1" >&3 && head -c 1 <&3 | od -An -tx1' "$host" "$port" 2>/dev/null) || return 1
	[ "$(tr -d ' \n' <<<"$reply")" = "01" ]
}

ensure_rabbitmq() {
	if rabbit_ok; then return; fi
	local host
	host=$(host_of "$RABBITMQ_URL")
	is_local "$host" || die "RabbitMQ at $host does not answer (RABBITMQ_URL); start it or point RABBITMQ_URL at a running broker"
	command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
	say "starting RabbitMQ"
	as_root rabbitmq-server -detached >/dev/null 2>&1 || true # the package may have started it already
	wait_for RabbitMQ rabbit_ok
}

# --- Chromium ---------------------------------------------------------------
# The console's browser tests drive a headless Chromium (chromedp); they fail,
# not skip, without one.
ensure_chromium() {
	command -v chromium >/dev/null || apt_install chromium
	command -v chromium >/dev/null || die "chromium is not on PATH after installing it"
}

# --- Node.js ----------------------------------------------------------------
# samples/node-client's tests run its programs (npm ci fetches the pinned
# amqplib); they fail, not skip, without node and npm.
ensure_node() {
	command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
	command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are not on PATH after installing them"
}

ensure_postgres
ensure_redis
ensure_rabbitmq
ensure_chromium
ensure_node
say "PostgreSQL, Redis and RabbitMQ are up; Chromium and Node.js are installed"
