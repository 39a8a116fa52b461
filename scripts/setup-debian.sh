#!/usr/bin/env bash
# Installs the Debian packages troupe needs, if any is missing. Idempotent and
# quick when everything is present. Uses sudo when not run as root.
#   scripts/setup-debian.sh          build tools, libraries, test and benchmark deps
#                                    (the PostgreSQL server: the tests start one of
#                                    their own on 127.0.0.1, tests/postgres/server.sh)
#   scripts/setup-debian.sh --peer   also CAF and plotting, for the side-by-side benchmarks
set -euo pipefail

packages=(g++ cmake make ccache pkg-config
          libasio-dev librocksdb-dev libboost-json1.81-dev catch2 libbenchmark-dev
          libjemalloc-dev libpq-dev postgresql-15 python3 python3-prometheus-client)
if [[ "${1:-}" == "--peer" ]]; then
  packages+=(libcaf-dev gnuplot-nox python3)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo)
fi
echo "installing: ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
