#!/usr/bin/env bash
# Side-by-side storage benches of two release builds, in turn, on this machine (nothing else
# running): B A B A. A = 0e8e336 (the restore fix, frames read with the whole capture script),
# B = cc1ad27 (frames read through their installed script first). Both with the realistic case.
# Usage: ab.sh [results folder, docs/measurements/realistic-2026-12-02 by default]
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
out=${1:-$root/docs/measurements/realistic-2026-12-02}
for run in B1 A1 B2 A2; do
  bin=/tmp/outlive-${run:0:1}
  echo "$(date -u +%H:%M:%S) $run start" >> "$out/run-order.txt"
  RUST_LOG=outlive::checkpoint=debug "$bin" bench --storage-only --samples 20 --out "/tmp/realistic-$run" > "/tmp/realistic-$run.log" 2>&1
  cp "/tmp/realistic-$run/storage.json" "$out/storage-$run.json"
  cp "/tmp/realistic-$run/storage-summary.txt" "$out/storage-$run-summary.txt"
  echo "$(date -u +%H:%M:%S) $run end" >> "$out/run-order.txt"
done
