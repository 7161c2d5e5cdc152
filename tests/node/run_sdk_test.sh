#!/usr/bin/env bash
# run_sdk_test.sh - installs the OpenAI Node SDK (idempotent) and runs sdk_test.mjs.
cd "$(dirname "$0")"
./install.sh || exit $?
exec node sdk_test.mjs
