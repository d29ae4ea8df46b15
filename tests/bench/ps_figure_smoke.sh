#!/bin/sh
# bench/run_ps_figure.sh's smallest run (--smoke), checked for well-formed
# output: results.csv has its header and one row per configuration and worker
# count with numbers in range, and figure.png is a PNG. Skips (77) without root.
#
#   tests/bench/ps_figure_smoke.sh SOURCE_DIR BUILD_DIR
set -eu
source_dir=$1
build_dir=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
"$source_dir/bench/run_ps_figure.sh" --smoke --build-dir "$build_dir" --out "$out" || status=$?
[ "$status" -eq 77 ] && exit 77
[ "$status" -eq 0 ] || { echo "ps_figure_smoke: run_ps_figure.sh failed ($status)" >&2; exit 1; }
/usr/bin/python3 - "$out/results.csv" <<'PY'
import csv, sys
header = ["config", "workers", "servers", "samples_per_s", "efficiency", "worker_link_tx_mb", "worker_link_rx_mb",
          "server_link_tx_mb", "server_link_rx_mb", "model_worker_link_mb", "model_server_link_mb"]
with open(sys.argv[1]) as f:
    rows = list(csv.reader(f))
assert rows[0] == header, f"header {rows[0]}"
got = {(r[0], int(r[1])) for r in rows[1:]}
assert got == {(c, n) for c in ("ring", "ps1") for n in (1, 2)}, f"rows {sorted(got)}"
for r in rows[1:]:
    assert len(r) == len(header), f"row {r}"
    values = [float(v) for v in r[3:]]
    assert values[0] > 0, f"no throughput in {r}"
    assert 0 < values[1] <= 1.5, f"efficiency out of range in {r}"
    assert all(v >= 0 for v in values), f"negative value in {r}"
    if r[0] == "ps1" or int(r[1]) > 1:
        assert values[2] > 0 and values[3] > 0, f"no traffic on the worker's link in {r}"
    if r[0] == "ps1":
        assert values[4] > 0 and values[5] > 0, f"no traffic on the server's link in {r}"
print(f"ps_figure_smoke: {len(rows) - 1} rows well-formed")
PY
if command -v gnuplot >/dev/null; then
  [ "$(head -c 8 "$out/figure.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    { echo "ps_figure_smoke: figure.png is no PNG" >&2; exit 1; }
fi
