#!/bin/sh
# Installs the load bench's external tools (Debian packages) when missing:
# wrk (saturation throughput), nginx-light (the nginx rows) and redis-server
# (the OpenAI workload's gateway-redis row); with
# BENCH_PEERS=1, also the peers (the Portkey gateway and the LiteLLM proxy,
# into a scratch directory outside the repository: peers/setup_peers.sh).
# Called by `make bench-load`. Never fails the target: without a tool, the
# bench skips that row or figure and says why.
set -u

case "${BENCH_PEERS:-0}" in
    0 | "") ;;
    *) sh "$(dirname "$0")/peers/setup_peers.sh" ;;
esac

missing=""
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    missing="$missing nginx-light"
fi
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
    missing="$missing redis-server"
fi
[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_tools: no apt-get here; missing:$missing (those rows will be skipped)" >&2
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "setup_tools: not root and no sudo; missing:$missing (those rows will be skipped)" >&2
    exit 0
fi
echo "setup_tools: installing$missing" >&2
# shellcheck disable=SC2086
if ! { $SUDO apt-get update -qq && \
       DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing; }; then
    echo "setup_tools: apt-get failed; missing:$missing (those rows will be skipped)" >&2
fi
# nginx-light's package scripts may start the system service: the bench runs
# its own nginx with its own config and never needs that one.
exit 0
