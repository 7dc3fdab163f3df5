#!/bin/sh
# run-oshmem.sh [REPS] [SIZE...]: builds oshmem_osu.c with oshcc and runs
# it REPS times (default 5) with Open MPI's OSHMEM over UCX, on shared
# memory (UCX's choice of transports; collectives over the vader BTL) and
# on TCP loopback (UCX_TLS=tcp,self on lo; collectives, which OSHMEM runs
# through MPI's, over the tcp BTL), 2 and 4 PEs (4 on 2 CPUs oversubscribed, unbound, as goshbench runs
# them), printing every run's lines behind the transport's name:
#   shm|tcp NP SIZE OP latency_us
# Needs oshcc and oshrun (Debian: libopenmpi-dev, openmpi-bin). Debian's
# OSHMEM 4.1.4 faults in shmem_finalize, even in a program that only
# calls shmem_init and shmem_finalize: the figures are printed before it,
# and oshrun's complaint goes to $dir/err, shown only if no line came.
# docs/performance.md ("... beside the C runtimes, same sitting") says how
# the figures compare with goshbench's.
set -eu
reps=${1:-5}
[ $# -gt 0 ] && shift
sizes=${*:-8 1048576}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
oshcc -O2 -o "$dir/prog" "$(dirname "$0")/oshmem_osu.c"
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
i=0
while [ $i -lt "$reps" ]; do
	for np in 2 4; do
		for tr in shm tcp; do
			set -- --mca btl vader,self
			[ $tr = tcp ] && set -- --mca btl tcp,self -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo
			# shellcheck disable=SC2086
			oshrun $root --oversubscribe -np $np --bind-to none --mca spml ucx "$@" \
				"$dir/prog" $sizes 2>"$dir/err" >"$dir/out" || true
			[ -s "$dir/out" ] || cat "$dir/err" >&2
			sed "s/^/$tr /" "$dir/out"
		done
	done
	i=$((i + 1))
done
