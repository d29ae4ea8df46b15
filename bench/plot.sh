#!/bin/sh
# Draws the benchmark results as PNGs with gnuplot (Debian's gnuplot-nox):
#  - busbw and time against size, one line per program, for every
#    RESULTS/compare-<op>-n<N>.csv that bench/compare.py wrote, and every
#    RESULTS/hosts-<op>-<link>-<layout>.csv of bench/compare_hosts.py (with the
#    link-rate bound as a line of its own), and its share-of-the-bound bars
#    (RESULTS/hosts-<op>-bound-share.csv);
#  - training throughput bars with scaling-efficiency lines, from
#    RESULTS/training-wide.csv (bench/training_results.py), when it exists.
#
#   bench/plot.sh [RESULTS [OUTDIR]]      (bench/results, docs/plots)
set -eu

results=${1:-bench/results}
outdir=${2:-docs/plots}
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
[ -d "$results" ] || { echo "plot.sh: no results folder $results (run bench/compare.py first)" >&2; exit 1; }
mkdir -p "$outdir"

columns() { head -n 1 "$1" | tr ',' '\n' | wc -l; }

# $1 csv, $2 png, $3 title, $4 y label, $5 extra gnuplot settings
plot_sweep() {
  gnuplot <<EOF
set terminal pngcairo size 900,540 font ',10'
set output '$2'
set datafile separator ','
set title '$3'
set key top left
set grid
set logscale x 2
set format x '%.0b%BB'
set xtics 16
set xlabel 'size'
set ylabel '$4'
$5
plot for [i=2:$(columns "$1")] '$1' using 1:i with linespoints pointsize 0.6 linewidth 1.5 title columnheader(i)
EOF
  echo "plot.sh: wrote $2"
}

found=0
for csv in "$results"/compare-*-n*.csv; do
  [ -e "$csv" ] || continue
  case "$csv" in *-time.csv) continue ;; esac
  found=1
  stem=$(basename "$csv" .csv)            # compare-allreduce-n2
  op=$(echo "$stem" | sed 's/^compare-\(.*\)-n[0-9]*$/\1/')
  n=$(echo "$stem" | sed 's/.*-n\([0-9]*\)$/\1/')
  plot_sweep "$csv" "$outdir/busbw-$op-n$n.png" "$op, $n ranks, one host: bus bandwidth (higher is better)" \
    'busbw (GB/s)' 'set yrange [0:*]'
  if [ -e "$results/$stem-time.csv" ]; then
    plot_sweep "$results/$stem-time.csv" "$outdir/time-$op-n$n.png" "$op, $n ranks, one host: time per call (lower is better)" \
      'time (us)' 'set logscale y 10'
  fi
done

for csv in "$results"/hosts-*-*-*.csv; do
  [ -e "$csv" ] || continue
  case "$csv" in *-time.csv | *-bound-share.csv) continue ;; esac
  found=1
  stem=$(basename "$csv" .csv)            # hosts-allreduce-10gbit-2x1
  op=$(echo "$stem" | cut -d- -f2)
  link=$(echo "$stem" | cut -d- -f3)
  layout=$(echo "$stem" | cut -d- -f4)
  where="$(echo "$layout" | sed 's/x/ hosts x /') rank(s), link $link"
  plot_sweep "$csv" "$outdir/busbw-$op-$link-$layout.png" "$op across namespace hosts, $where: bus bandwidth (higher is better)" \
    'busbw (GB/s)' 'set yrange [0:*]'
  if [ -e "$results/$stem-time.csv" ]; then
    plot_sweep "$results/$stem-time.csv" "$outdir/time-$op-$link-$layout.png" \
      "$op across namespace hosts, $where: time per call (lower is better)" 'time (us)' 'set logscale y 10'
  fi
done

for csv in "$results"/hosts-*-bound-share.csv; do
  [ -e "$csv" ] || continue
  found=1
  op=$(basename "$csv" .csv | cut -d- -f2)
  gnuplot <<EOF
set terminal pngcairo size 1000,540 font ',10'
set output '$outdir/bound-share-$op.png'
set datafile separator ','
set title '$op across namespace hosts: busbw at the largest size as a share of the link-rate bound'
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set key outside right
set grid ytics
set ylabel '% of the link-rate bound'
set yrange [0:110]
plot for [i=2:$(columns "$csv")] '$csv' using i:xtic(1) title columnheader(i), 90 with lines dashtype 2 linecolor 'black' title '90 %'
EOF
  echo "plot.sh: wrote $outdir/bound-share-$op.png"
done

training="$results/training-wide.csv"
if [ -e "$training" ]; then
  found=1
  # Columns: workers, then <framework>_img_sec and <framework>_efficiency pairs.
  ncol=$(columns "$training")
  gnuplot <<EOF
set terminal pngcairo size 900,540 font ',10'
set output '$outdir/training-throughput.png'
set datafile separator ','
set title 'Synthetic ResNet training: throughput (bars) and scaling efficiency (lines)'
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set key top left
set grid ytics
set xlabel 'workers'
set ylabel 'images/s (all workers)'
set y2label 'scaling efficiency'
set yrange [0:*]
set y2range [0:1.2]
set y2tics 0.2
set offsets 0, 0, graph 0.12, 0
set ytics nomirror
plot for [i=2:$ncol:2] '$training' using i:xtic(1) title columnheader(i), \
     for [i=3:$ncol:2] '$training' using (\$0):i axes x1y2 with linespoints linewidth 2 pointsize 1 title columnheader(i)
EOF
  echo "plot.sh: wrote $outdir/training-throughput.png"
fi

[ "$found" = 1 ] || { echo "plot.sh: nothing to plot in $results" >&2; exit 1; }
