#!/usr/bin/env bash
# What `make setup` costs on a fresh clone: wall time, the venv's size, and the most disk in use
# while installing (pip holds every downloaded wheel until it has installed them all, so the peak
# is well above the venv). Measures free space on the clone's file system, so anything else writing
# there at the same time counts too. Deletes the clone when done. Usage: bench/setup_footprint.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/vlrollout-setup.XXXXXX")
sampler=
trap '[ -n "$sampler" ] && kill "$sampler" 2>/dev/null; rm -rf "$work"' EXIT

free_kib() { df -Pk "$work" | awk 'NR==2 {print $4}'; }
git clone -q "$repo" "$work/clone"
before=$(free_kib)
echo "$before" > "$work/lowest"
(
  lowest=$before
  while sleep 1; do
    now=$(free_kib)
    if [ "$now" -lt "$lowest" ]; then lowest=$now; echo "$lowest" > "$work/lowest"; fi
  done
) &
sampler=$!
start=$(date +%s)
make -C "$work/clone" setup
seconds=$(( $(date +%s) - start ))
kill "$sampler"; sampler=

gib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1048576}'; }
venv_kib=$(du -sk "$work/clone/.venv" | cut -f1)
echo "make setup on a fresh clone: ${seconds} s"
echo "venv: $(gib "$venv_kib") GiB; peak disk use while installing: $(gib $(( before - $(cat "$work/lowest") ))) GiB"
