#!/bin/bash
# Alternating storage benches: before (9f0fc2f) and warm (the warm-up), 3 pairs.
# The two release builds are /tmp/ab/outlive-before and /tmp/ab/outlive-warm.
# Results: docs/measurements/warm-up-2026-12-02 (run-order.txt, side-by-side.txt).
cd "$(dirname "$0")/../../../.."
for i in 1 2 3; do
  for v in before warm; do
    mkdir -p /tmp/ab/$v$i
    echo "$v$i start $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/ab/run-order.txt
    /tmp/ab/outlive-$v bench --storage-only --samples 20 --out /tmp/ab/$v$i > /tmp/ab/$v$i/log 2>&1
  done
done
echo "end $(date -u +%H:%M:%S)" >> /tmp/ab/run-order.txt
