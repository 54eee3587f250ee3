#!/usr/bin/env bash
# Session 15 call A: check_gdn on branch gdnprepkh's test binary (both preps, every width, no ncu).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15; mkdir -p $B && tar -xJf .devbin/n15/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== check_gdn (both preps, every width; bench with -kh rows; no ncu)"
GDN_NCU=0 OUT=$O/gdn timeout 540 bash bench/gpu/check_gdn.sh $B/gdn > "$O/check_gdn.txt" 2>&1; echo "check_gdn rc $?"
grep -E "^test |test result|prep|8seq|gdn_split|ERROR SUMMARY|FAILED" "$O/check_gdn.txt" | head -90
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null && find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete
