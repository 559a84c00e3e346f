#!/usr/bin/env bash
# Remakes the pictures in docs/images/ (shown in docs/pictures.md) with the relpos tool alone:
# `relpos run` writes each family's bias [8 heads, 64 queries, 64 keys] on the default device,
# `relpos plot` draws one head of it. Usage: docs/images/make_plots.sh [path/to/relpos]
set -euo pipefail
relpos=${1:-build/relpos}
images=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shape=(--queries 64 --keys 64)

# T5 learns a [32 buckets, 8 heads] table; the sinusoidal encoding stands in for learned values
# (column 1: cos(pi * bucket / w_1), which changes sign from bucket to bucket, so each bucket's
# extent shows).
"$relpos" run sinusoidal --positions 32 --vector-size 16 --out "$work/table.npy"
"$relpos" run t5-bias --table "$work/table.npy" "${shape[@]}" --max-distance 128 --out "$work/t5.npy"
"$relpos" plot "$work/t5.npy" --head 1 --title "T5 bidirectional, head 1" --out "$images/t5_bidirectional.png"
"$relpos" run t5-bias --table "$work/table.npy" "${shape[@]}" --max-distance 128 --causal --out "$work/t5_causal.npy"
"$relpos" plot "$work/t5_causal.npy" --head 1 --title "T5 decoder, head 1" --out "$images/t5_decoder.png"

"$relpos" run alibi-bias --heads 8 "${shape[@]}" --causal --out "$work/alibi.npy"
"$relpos" plot "$work/alibi.npy" --head 2 --title "ALiBi causal, head 2" --out "$images/alibi.png"

"$relpos" run fourier-bias --heads 8 "${shape[@]}" --out "$work/fourier.npy"   # meliad's defaults: D 128, M 1024
"$relpos" plot "$work/fourier.npy" --head 0 --title "Fourier (meliad), head 0" --out "$images/fourier.png"

# KERPLE's r1 and r2 are learned per head; ALiBi's slopes (0.5 ... 2^-8) stand in for both.
"$relpos" run alibi-slopes --heads 8 --out "$work/slopes.npy"
"$relpos" run kerple-bias --heads 8 "${shape[@]}" --variant log --r1 "$work/slopes.npy" --r2 "$work/slopes.npy" \
  --causal --out "$work/kerple.npy"
"$relpos" plot "$work/kerple.npy" --head 0 --title "KERPLE log, causal, head 0" --out "$images/kerple.png"
