#!/bin/sh
# run-mpi.sh p2p|coll [REPS] [SIZE...]: builds mpi_p2p.c or mpi_coll.c
# with mpicc and runs it REPS times (default 5) over Open MPI's
# shared-memory (vader) and TCP loopback transports, printing every run's
# line behind the transport's name:
#   p2p:  btl SIZE latency_us bw_GBps                           (2 processes)
#   coll: btl NP SIZE allreduce_us reduce_us bcast_us barrier_us (NP = 2, 4)
# Processes are not bound (--bind-to none), 4 on 2 CPUs oversubscribed, as
# goshbench runs 4 PEs. Needs mpicc and mpirun from Open MPI (Debian:
# libopenmpi-dev, openmpi-bin). docs/performance.md ("... beside MPI, same
# sitting") says how the figures compare with goshbench's.
set -eu
what=${1:?usage: run-mpi.sh p2p|coll [REPS] [SIZE...]}
shift
reps=${1:-5}
[ $# -gt 0 ] && shift
case $what in
p2p) sizes=${*:-8 65536 1048576}; nps=2 ;;
coll) sizes=${*:-8 1048576}; nps="2 4" ;;
*) echo "run-mpi.sh: $what: not p2p or coll" >&2; exit 2 ;;
esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mpicc -O2 -o "$dir/prog" "$(dirname "$0")/mpi_$what.c"
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
i=0
while [ $i -lt "$reps" ]; do
	for np in $nps; do
		for btl in vader tcp; do
			# shellcheck disable=SC2086
			mpirun $root --oversubscribe -np $np --bind-to none --mca pml ob1 \
				--mca btl $btl,self "$dir/prog" $sizes | sed "s/^/$btl /"
		done
	done
	i=$((i + 1))
done
