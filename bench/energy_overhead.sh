#!/usr/bin/env bash
# Energy accounting on vs off, one binary, two servers in alternating rounds (ROUNDS, default 5):
# `simple` over HTTP at concurrency 1 and 64 (p50 and throughput). Usage: bench/energy_overhead.sh
exec "$(dirname "$0")/flags_overhead.sh" on= off=--energy-accounting=false
