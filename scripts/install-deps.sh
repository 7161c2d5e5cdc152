#!/usr/bin/env bash
# install-deps.sh - installs exactly what kvwise needs to build and test,
# from Debian's packages. Idempotent: does nothing when all are present.
#   build:  cmake ninja-build pkg-config gcc, libpcre2-dev (pre-tokenizer
#           regexes), libmicrohttpd-dev (HTTP server), libcjson-dev (JSON),
#           libxxhash-dev (prefix-cache block hashes)
#   tests:  clang + libclang-rt-14-dev (libFuzzer, sanitizers), nodejs/npm
#           (OpenAI SDK and reference tokenizer/template tests), curl, tmux
#           (progress bars in a real terminal), chromium (the memory page,
#           headless), systemd (systemd-analyze verify of the unit file)
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config libpcre2-dev libmicrohttpd-dev
      libcjson-dev libxxhash-dev clang libclang-rt-14-dev nodejs npm curl ripgrep tmux chromium systemd)
missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node/npm may come from outside Debian on some images: accept any working ones.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=()
  for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all dependencies present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}"
