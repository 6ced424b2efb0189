#!/bin/sh
# Installs the load bench's external tools (Debian packages) when missing:
# wrk (saturation throughput), nginx (the nginx rows) and redis-server (the
# OpenAI workload's gateway-redis row), by the tests' own installer
# (tests/setup_tools.sh); with BENCH_PEERS=1, also the peers (the Portkey
# gateway and the LiteLLM proxy, into a scratch directory outside the
# repository: peers/setup_peers.sh).
# Called by `make bench-load`. Never fails the target: without a tool, the
# bench skips that row or figure and says why.
set -u

here="$(dirname "$0")"
case "${BENCH_PEERS:-0}" in
    0 | "") ;;
    *) sh "$here/peers/setup_peers.sh" ;;
esac

sh "$here/../tests/setup_tools.sh" \
    || echo "setup_tools: a tool could not be installed (its rows will be skipped)" >&2
exit 0
