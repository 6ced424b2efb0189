#!/bin/sh
# Installs the load bench's peers (docs/performance.md, "Peers") into a scratch
# directory outside the repository, at the exact versions this folder pins:
#   $BENCH_PEERS_DIR (default: ${XDG_CACHE_HOME:-$HOME/.cache}/flatgate-bench)
#     portkey/  the Portkey gateway and the hono packages, from npm
#               (portkey-packages.txt; --no-save --ignore-scripts)
#     litellm/  a virtual environment of its own (never the project's) with the
#               LiteLLM proxy: its dependencies pinned (litellm-deps.txt), then
#               LiteLLM's own wheels checked by SHA-256 (litellm-hashed.txt)
#     vllm-router/  a virtual environment of its own with the vLLM router (a
#               Rust binary in a wheel) and its launcher's imports, every wheel
#               pinned and checked by SHA-256 (vllm-router-hashed.txt)
# Called by benchmarks/setup_tools.sh when BENCH_PEERS=1; given peers' names
# (sh setup_peers.sh vllm-router), installs only those. An install whose pins
# have not changed is kept. Never fails: without a peer, the bench skips its row
# and says why.
set -u

here=$(cd "$(dirname "$0")" && pwd)
dir=${BENCH_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flatgate-bench}
python=${BENCH_PEERS_PYTHON:-python3}

note() { echo "setup_peers: $*" >&2; }

# The pins an install was made from, kept beside it: unchanged pins, no reinstall.
same_pins() { [ -f "$1/.pins" ] && [ "$(cat "$1/.pins")" = "$2" ]; }

install_portkey() {
    target="$dir/portkey"
    pins=$(cat "$here/portkey-packages.txt")
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        note "node or npm is missing: the portkey row will be skipped"
        return 0
    fi
    if same_pins "$target" "$pins"; then
        note "portkey: installed in $target"
        return 0
    fi
    specs=$(grep -v '^#' "$here/portkey-packages.txt" | grep -v '^[[:space:]]*$' | tr '\n' ' ')
    rm -rf "$target" && mkdir -p "$target/node_modules" || return 0
    note "portkey: npm install $specs"
    # shellcheck disable=SC2086
    if (cd "$target" && npm install --prefix "$target" --no-save --no-package-lock \
            --ignore-scripts --no-audit --no-fund --loglevel=error $specs); then
        printf '%s' "$pins" >"$target/.pins"
    else
        note "npm install failed: the portkey row will be skipped"
    fi
}

# A peer in a virtual environment of its own (never the project's): $1 its
# name, then its requirement files in benchmarks/peers/, installed in order:
# one named *-hashed.txt with --no-deps, every wheel checked by SHA-256; any
# other as pip resolves it.
install_venv() {
    name=$1
    shift
    target="$dir/$name"
    pins=$(cd "$here" && cat "$@")
    if same_pins "$target" "$pins"; then
        note "$name: installed in $target"
        return 0
    fi
    if ! command -v "$python" >/dev/null 2>&1; then
        note "$python is missing: the $name row will be skipped"
        return 0
    fi
    rm -rf "$target" && mkdir -p "$target" || return 0
    note "$name: a virtual environment in $target/venv"
    pip="$target/venv/bin/python -m pip --disable-pip-version-check --no-input --quiet"
    if ! "$python" -m venv "$target/venv"; then
        note "python -m venv failed: the $name row will be skipped"
        return 0
    fi
    for reqs in "$@"; do
        case "$reqs" in
            *-hashed.txt) how="--no-deps --require-hashes --only-binary :all:" ;;
            *) how="" ;;
        esac
        # shellcheck disable=SC2086
        if ! $pip install $how -r "$here/$reqs"; then
            note "pip install failed: the $name row will be skipped"
            return 0
        fi
    done
    $pip check >&2 || note "$name: pip check reports conflicts (above)"
    printf '%s' "$pins" >"$target/.pins"
}

mkdir -p "$dir" || { note "cannot create $dir: the peer rows will be skipped"; exit 0; }
for peer in ${*:-portkey litellm vllm-router}; do
    case "$peer" in
        portkey) install_portkey ;;
        litellm) install_venv litellm litellm-deps.txt litellm-hashed.txt ;;
        vllm-router) install_venv vllm-router vllm-router-hashed.txt ;;
        *) note "unknown peer $peer (portkey, litellm, vllm-router)" ;;
    esac
done
exit 0
