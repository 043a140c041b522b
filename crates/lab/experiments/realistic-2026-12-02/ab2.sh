#!/usr/bin/env bash
# Runs named on the command line in turn (the letter picks /tmp/outlive-<letter>): C = the handover at
# commit with chromiumoxide's Page.navigate (which waits for the load), D = the same with Page.navigate
# sent through the relay (answered at commit), B = cc1ad27 (as in ab.sh). Usage: ab2.sh C1 B3 …
# Results go to docs/measurements/realistic-2026-12-02.
set -euo pipefail
out="$(cd "$(dirname "$0")/../../../.." && pwd)/docs/measurements/realistic-2026-12-02"
for run in "$@"; do
  bin=/tmp/outlive-${run:0:1}
  echo "$(date -u +%H:%M:%S) $run start" >> "$out/run-order.txt"
  RUST_LOG=outlive::checkpoint=debug "$bin" bench --storage-only --samples 20 --out "/tmp/realistic-$run" > "/tmp/realistic-$run.log" 2>&1
  cp "/tmp/realistic-$run/storage.json" "$out/storage-$run.json"
  cp "/tmp/realistic-$run/storage-summary.txt" "$out/storage-$run-summary.txt"
  cp "/tmp/realistic-$run.log" "$out/storage-$run-debug.log"
  echo "$(date -u +%H:%M:%S) $run end" >> "$out/run-order.txt"
done
