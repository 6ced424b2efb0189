#!/bin/sh
# Installs redis-server (a Debian package) when it is missing: the limits'
# tests run against a real one (tests/redisserver.py) and must never skip.
# Called by `make test` before pytest. Fails loudly when it cannot install.
set -u

command -v redis-server >/dev/null 2>&1 && exit 0
[ -x /usr/bin/redis-server ] && exit 0

fail() {
    echo "setup_redis: $1; install redis-server (7.0 or later) and run again" >&2
    exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "redis-server is missing and there is no apt-get here"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    fail "redis-server is missing, and this is not root and has no passwordless sudo"
fi
echo "setup_redis: installing redis-server" >&2
# shellcheck disable=SC2086
{ $SUDO apt-get update -qq && \
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server; } \
    || fail "apt-get failed"
# The package may start the system service; the tests run their own servers
# on free ports and never need that one.
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] \
    || fail "redis-server is still missing after apt-get"
exit 0
