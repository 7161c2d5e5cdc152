#!/usr/bin/env bash
# run.sh - the first command of the README: installs dependencies, builds
# the production binary (build-run/, without the test hooks: scripts/build.sh
# prod), writes a small RANDOM-WEIGHT model (a fresh machine has no model and
# no internet; its output is gibberish by design) and serves it on
# 127.0.0.1:8080. Pass a real model with MODEL=/path/to/model.gguf.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh prod
MODEL=${MODEL:-}
if [ -z "$MODEL" ]; then
  MODEL=build-run/models/tiny-random-q8_0.gguf
  mkdir -p build-run/models
  [ -f "$MODEL" ] || build-run/kvwise mkmodel --preset tiny --type q8_0 --seed 1 -o "$MODEL"
  echo "run.sh: serving $MODEL (random weights: the text it writes is noise)"
fi
exec build-run/kvwise serve -m "$MODEL" --host 127.0.0.1 --port "${PORT:-8080}" "$@"
