#!/usr/bin/env bash
# Session 42, call 6 (H100 80GB HBM3, a fresh start; carry [".devbin/probes"]: branch probes,
# 5e29063 = main ae32bcf + the two probes): session 41's prepared probes, as written there
# (serving-s41/next/probes.sh: the ltalgos and tails predictions). The output is call6/probes.txt.
bash docs/perf/data/serving-s41/next/probes.sh
