#!/bin/sh
# Installs the Debian packages the tests run for real, when missing:
# redis-server (the limits' and stored responses' tests, tests/redisserver.py),
# wrk and nginx (nginx-light where Debian has it: the load bench's harness
# tests run both). Called by `make test` (and `make bench`) before pytest.
# Fails loudly when it cannot install: a test never skips for a missing tool
# (tests/conftest.py fails a run that skipped anything).
set -u

# A tool is there when it is on PATH or at its Debian path (sbin may be off
# a non-root PATH).
have() {
    command -v "$1" >/dev/null 2>&1 || [ -x "$2" ]
}

missing=""
have redis-server /usr/bin/redis-server || missing="$missing redis-server"
have wrk /usr/bin/wrk || missing="$missing wrk"
have nginx /usr/sbin/nginx || missing="$missing nginx"
[ -z "$missing" ] && exit 0

fail() {
    echo "setup_tools: $1; install$missing (redis-server 7.0 or later) and run again" >&2
    exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "missing:$missing, and there is no apt-get here"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    fail "missing:$missing, and this is not root and has no passwordless sudo"
fi
# shellcheck disable=SC2086
$SUDO apt-get update -qq || fail "apt-get update failed"
packages=""
for tool in $missing; do
    case "$tool" in
        nginx)
            # nginx-light where Debian still has it; plain nginx (light since
            # trixie) elsewhere.
            if apt-cache show nginx-light >/dev/null 2>&1; then
                packages="$packages nginx-light"
            else
                packages="$packages nginx"
            fi
            ;;
        *) packages="$packages $tool" ;;
    esac
done
echo "setup_tools: installing$packages" >&2
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $packages \
    || fail "apt-get install failed"
# The packages may start their system services; the tests run their own
# servers on free ports and never need those.
have redis-server /usr/bin/redis-server || fail "redis-server is still missing after apt-get"
have wrk /usr/bin/wrk || fail "wrk is still missing after apt-get"
have nginx /usr/sbin/nginx || fail "nginx is still missing after apt-get"
exit 0
