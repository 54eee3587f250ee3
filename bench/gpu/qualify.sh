#!/usr/bin/env bash
# Qualifies the card it runs on (any CUDA GPU: the H200 and the H100 so far)
# for the Qwen3.6 full-attention shape with `headroom qualify` itself, then
# shows that `doctor --backend cuda` applies the entry.
#
# The device machine has no Rust: build here (`cargo build --release -p headroom`),
# copy target/release/headroom to .devbin/<you>/headroom in the checkout, and run
# this script there with carry [".devbin/<you>"]:
#   bash bench/gpu/qualify.sh .devbin/<you>/headroom
# Results land in $OUT/qualifications/ (commit them under
# qualifications/<card>/, e.g. h200/ or h100/) plus $OUT/doctor-auto.json and
# $OUT/qualify.log.
set -euo pipefail
BIN=${1:?usage: qualify.sh PATH/TO/headroom [LENGTHS]}
LENGTHS=${2:-2048,8192,32768}
OUT=${OUT:?set by the device runner}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$here/env.sh"
MODEL=${HEADROOM_QUALIFY_MODEL:-qwen3.6-35b-a3b:layers=4}
mkdir -p "$OUT/qualifications"
"$BIN" qualify --backend cuda --synthetic "$MODEL" --lengths "$LENGTHS" --out "$OUT/qualifications" --dry-run
timeout 540 "$BIN" qualify --backend cuda --synthetic "$MODEL" --lengths "$LENGTHS" \
    --iterations 3 --warmup 1 --out "$OUT/qualifications" 2>&1 | tee "$OUT/qualify.log"
# Built-in entries off: a committed entry for this card has the same id, and would
# otherwise be the one applied (the new folder's copy a duplicate).
HEADROOM_BUILTIN_QUALIFICATIONS=off "$BIN" doctor --backend cuda --synthetic "$MODEL" \
    --attn-execution auto --json --qualifications "$OUT/qualifications" > "$OUT/doctor-auto.json"
python3 - "$OUT/doctor-auto.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
full = [g for g in d["layers"] if g["kind"]["attention"] == "full"]
for g in full:
    a = g["attention"]
    print("layer shape", g["kind"], "->", a["route"], a["query_block"], a["source"], a["qualification_id"])
    assert a["source"] == "qualified", a
print("doctor --backend cuda applies the qualified entry")
PY
