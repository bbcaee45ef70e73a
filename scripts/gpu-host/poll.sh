#!/bin/bash
# poll.sh MAX STEP (on the GPU host, from the repo root): wait for /tmp/res/DONE up to MAX s, printing
# progress every STEP s; stops at once where no pass runs (no /tmp/res); packs /tmp/res to $OUT/res.tgz
MAX=${1:-500}; STEP=${2:-15}; t=0
[ -d /tmp/res ] || { echo "no /tmp/res: nothing running on this machine"; exit 3; }
while [ $t -lt $MAX ] && [ ! -f /tmp/res/DONE ]; do sleep $STEP; t=$((t+STEP)); done
echo "waited ${t}s DONE=$([ -f /tmp/res/DONE ] && echo yes || echo no)"
ls /tmp/res 2>/dev/null | head -40
for f in /tmp/res/*.txt; do echo "== $f"; tail -n ${TAILN:-15} $f; done 2>/dev/null | tail -c 11000
[ -n "$OUT" ] && tar -czf $OUT/res.tgz -C /tmp res 2>/dev/null
