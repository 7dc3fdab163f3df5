#!/bin/sh
# run-mpi.sh [REPS] [SIZE...]: builds mpi_p2p.c with mpicc and runs it REPS
# times (default 5) over Open MPI's shared-memory (vader) and TCP loopback
# transports, 2 processes, printing every run's line:
#   btl SIZE latency_us bw_GBps
# Needs mpicc and mpirun from Open MPI (Debian: libopenmpi-dev, openmpi-bin).
# docs/performance.md ("MPI beside goshmem") says how the figures compare.
set -eu
reps=${1:-5}
[ $# -gt 0 ] && shift
sizes=${*:-8 65536 1048576}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mpicc -O2 -o "$dir/mpi_p2p" "$(dirname "$0")/mpi_p2p.c"
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
i=0
while [ $i -lt "$reps" ]; do
	for btl in vader tcp; do
		# shellcheck disable=SC2086
		mpirun $root --oversubscribe -np 2 --bind-to none --mca pml ob1 \
			--mca btl $btl,self "$dir/mpi_p2p" $sizes | sed "s/^/$btl /"
	done
	i=$((i + 1))
done
