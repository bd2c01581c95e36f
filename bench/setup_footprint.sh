#!/usr/bin/env bash
# What `make setup` costs on a fresh clone: wall time, the venv's size, and the most disk in use
# while installing (pip holds every downloaded wheel until it has installed them all, so the peak
# is well above the venv). Measures free space on the clone's file system, so anything else writing
# there at the same time counts too. Deletes the clone when done, and writes its record (what the
# README shows) to bench/results/setup_footprint.json, or into the folder given as $1.
# Usage: bench/setup_footprint.sh [record-dir]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
record_dir=${1:-$repo/bench/results}
load_start=$(cut -d' ' -f1 /proc/loadavg)
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

"$repo/.venv/bin/python" - "$repo" "$record_dir" "$seconds" "$venv_kib" "$(( before - $(cat "$work/lowest") ))" "$load_start" <<'PY'
import dataclasses
import sys
from pathlib import Path

repo, record_dir, seconds, venv_kib, peak_kib, load_start = sys.argv[1:]
sys.path.insert(0, str(Path(repo) / "bench"))
import record

gib = 1 / 1048576
venv, peak = int(venv_kib) * gib, int(peak_kib) * gib
table = record.Table(
    ["make setup on a fresh clone", "wall time s", "venv GiB", "peak disk use while installing GiB"],
    [["venv, pinned areal tree (requirements.lock)", seconds, f"{venv:.1f}", f"{peak:.1f}"]],
)
headline = f"make setup on a fresh clone: {seconds} s; venv {venv:.1f} GiB; peak {peak:.1f} GiB"
run = record.Run("setup_footprint", [], script="bench/setup_footprint.sh")
rec = dataclasses.replace(
    run.record([table], headline, {"seconds": int(seconds), "venv_gib": venv, "peak_gib": peak}),
    seconds=float(seconds),
    load_start=float(load_start),
    dirty=False,  # the clone holds the commit only
)
record.write(rec, Path(record_dir))
PY
