#!/usr/bin/env bash
# Runs each libFuzzer target for N seconds, seeded with real inputs (vocabularies, templates).
# Crashes are written as crash-* files in build/fuzz/artifacts and make the target fail.
set -euo pipefail
secs=$1; shift
art=build/fuzz/artifacts
mkdir -p "$art"
status=0
for f in "$@"; do
  name=$(basename "$f")
  corpus=build/fuzz/corpus-$name
  mkdir -p "$corpus"
  seeds=fuzz/seeds/$name
  echo "== $name (${secs}s)"
  args=("$corpus")
  [ -d "$seeds" ] && args+=("$seeds")
  if ! "$f" -max_total_time="$secs" -artifact_prefix="$art/" -print_final_stats=1 "${args[@]}" 2>"build/fuzz/$name.log"; then
    tail -40 "build/fuzz/$name.log"; status=1
  else
    tail -3 "build/fuzz/$name.log"
  fi
done
exit $status
