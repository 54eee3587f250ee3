#!/usr/bin/env bash
# Session 14's planned first GPU call for the next session (not run).
# Build on the build machine first (2 cores: ≈ 10 min), into .devbin/n15/bins.tar.xz, carry ".devbin/n15":
#   git worktree add /tmp/kh gdnprepkh && cd /tmp/kh
#   cargo test --release -p headroom-cuda --test gdn --no-run      -> gdn (the test binary, both preps)
#   cargo build --release -p headroom                             -> headroom-kh (main + the per-key-head
#       prep as the default: set `prep_per_key_head: true` in Tuning's default on a scratch commit)
#   main's `cargo build --release -p headroom`                    -> headroom-main
#   tar -cJf .devbin/n15/bins.tar.xz -C DIR gdn headroom-main headroom-kh; cp this file .devbin/n15/
# Then: bash .devbin/n15/run.sh (≈ 4–5 min of run time). A run returns at most 8 files: the
# rest is tarred into all.tgz.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15; mkdir -p $B && tar -xJf .devbin/n15/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== check_gdn (both preps, every width; bench with -kh rows; no ncu)"
GDN_NCU=0 OUT=$O/gdn timeout 420 bash bench/gpu/check_gdn.sh $B/gdn > "$O/check_gdn.txt" 2>&1; echo "check_gdn rc $?"
grep -E "^test |test result|prep-alone|8seq|gdn_split|ERROR SUMMARY|FAILED" "$O/check_gdn.txt" | head -60
echo "=== A/B: main vs the per-key-head prep (TTFT 8k/32k, W1 x2), bench/gpu/ab_serving.sh"
OUT=$O/ab timeout 400 bash bench/gpu/ab_serving.sh $B/headroom-main $B/headroom-kh; echo "ab rc $?"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null && find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete
