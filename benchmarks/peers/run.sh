#!/bin/sh
# run.sh p2p|coll|oshmem [REPS] [SIZE...]: builds one peer program and runs
# it REPS times (default 5), printing every run's lines behind the
# transport's name, to be read beside goshbench (docs/performance.md,
# "... beside MPI, same sitting" and "Every C peer beside goshmem, same
# sitting"):
#   p2p:    btl SIZE latency_us bw_GBps                           (mpi_p2p.c, 2 processes)
#   coll:   btl NP SIZE allreduce_us reduce_us bcast_us barrier_us (mpi_coll.c, NP = 2, 4)
#   oshmem: shm|tcp NP SIZE OP latency_us                          (oshmem_osu.c, NP = 2, 4)
# p2p and coll run Open MPI two-sided (pml ob1) over its shared-memory
# (vader) and TCP loopback BTLs. oshmem runs Open MPI's OSHMEM over UCX on
# shared memory (UCX's choice of transports; collectives, which OSHMEM
# runs through MPI's, over the vader BTL) and on TCP loopback
# (UCX_TLS=tcp,self on lo; collectives over the tcp BTL). Debian's OSHMEM
# 4.1.4 faults in shmem_finalize, even in a program that only calls
# shmem_init and shmem_finalize: the figures are printed before it, and
# oshrun's complaint is shown only if no line came.
# Processes are not bound (--bind-to none), 4 on 2 CPUs oversubscribed, as
# goshbench runs 4 PEs. Needs Open MPI's compilers and launchers (Debian:
# libopenmpi-dev, openmpi-bin).
set -eu
what=${1:?usage: run.sh p2p|coll|oshmem [REPS] [SIZE...]}
shift
reps=${1:-5}
[ $# -gt 0 ] && shift
here=$(dirname "$0")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
case $what in
p2p) sizes=${*:-8 65536 1048576}; nps=2; trs="vader tcp"; mpicc -O2 -o "$dir/prog" "$here/mpi_p2p.c" ;;
coll) sizes=${*:-8 1048576}; nps="2 4"; trs="vader tcp"; mpicc -O2 -o "$dir/prog" "$here/mpi_coll.c" ;;
oshmem) sizes=${*:-8 1048576}; nps="2 4"; trs="shm tcp"; oshcc -O2 -o "$dir/prog" "$here/oshmem_osu.c" ;;
*) echo "run.sh: $what: not p2p, coll or oshmem" >&2; exit 2 ;;
esac
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
i=0
while [ $i -lt "$reps" ]; do
	for np in $nps; do
		for tr in $trs; do
			case $tr in
			vader | tcp) set -- mpirun --mca pml ob1 --mca btl "$tr,self" ;;
			esac
			[ "$what" = oshmem ] && set -- oshrun --mca spml ucx --mca btl vader,self
			[ "$what" = oshmem ] && [ "$tr" = tcp ] &&
				set -- oshrun --mca spml ucx --mca btl tcp,self -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo
			rc=0
			# shellcheck disable=SC2086
			"$@" $root --oversubscribe -np "$np" --bind-to none "$dir/prog" $sizes \
				2>"$dir/err" >"$dir/out" || rc=$?
			[ -s "$dir/out" ] || cat "$dir/err" >&2
			[ $rc = 0 ] || [ "$what" = oshmem ] || exit $rc
			sed "s/^/$tr /" "$dir/out"
		done
	done
	i=$((i + 1))
done
