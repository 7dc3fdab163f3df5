/*
 * mpi_coll: Open MPI collectives timed as the OSU Micro-Benchmarks time
 * them (osu_allreduce, osu_reduce, osu_bcast, osu_barrier), so that issue
 * 8's MPI figures can be measured in the same sitting as goshbench's
 * collective suites (benchmarks/peers/run.sh, docs/performance.md).
 *
 * Each call is timed alone and followed by an untimed MPI_Barrier; a
 * process's latency is its mean over the timed calls, and the figure is
 * the mean over processes (goshbench's "latency per call, averaged over
 * PEs"). allreduce sums float64, reduce int64 to rank 0 (goshbench's
 * element types for them); bcast is from rank 0. Buffers are touched before timing.
 *
 * Usage: mpirun -np N ./mpi_coll SIZE... ; each size prints one line
 *   N SIZE allreduce_us reduce_us bcast_us barrier_us
 * (barrier does not depend on SIZE: it is measured again on each line).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALLREDUCE, REDUCE, BCAST, BARRIER, NOPS };

static int iters_for(long size) {
	if (size <= 8192) return 2000;
	if (size <= 65536) return 400;
	return 40;
}

static double timed(int op, double *src, double *dst, long long *isrc, long long *idst, long n, int iters) {
	int warm = iters / 10 + 1;
	double sum = 0;
	for (int i = 0; i < iters + warm; i++) {
		double t0 = MPI_Wtime();
		switch (op) {
		case ALLREDUCE: MPI_Allreduce(src, dst, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
		case REDUCE: MPI_Reduce(isrc, idst, n, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD); break;
		case BCAST: MPI_Bcast(src, n, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
		case BARRIER: MPI_Barrier(MPI_COMM_WORLD); break;
		}
		double t = MPI_Wtime() - t0;
		if (i >= warm) sum += t;
		MPI_Barrier(MPI_COMM_WORLD);
	}
	double mine = sum * 1e6 / iters, all = 0;
	int np;
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return all / np;
}

int main(int argc, char **argv) {
	int rank, np;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	long maxsize = 8;
	for (int i = 1; i < argc; i++) {
		long s = atol(argv[i]);
		if (s < 8 || s % 8 != 0) {
			if (rank == 0) fprintf(stderr, "mpi_coll: size %s is not a positive multiple of 8\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		if (s > maxsize) maxsize = s;
	}
	long maxn = maxsize / 8;
	double *src = malloc(maxn * sizeof(double)), *dst = malloc(maxn * sizeof(double));
	long long *isrc = malloc(maxn * sizeof(long long)), *idst = malloc(maxn * sizeof(long long));
	if (!src || !dst || !isrc || !idst) MPI_Abort(MPI_COMM_WORLD, 3);
	for (long i = 0; i < maxn; i++) {
		src[i] = rank + i;
		dst[i] = 0;
		isrc[i] = rank + i;
		idst[i] = 0;
	}
	for (int a = 1; a < argc; a++) {
		long size = atol(argv[a]), n = size / 8;
		int iters = iters_for(size);
		double r[NOPS];
		for (int op = 0; op < NOPS; op++) r[op] = timed(op, src, dst, isrc, idst, n, iters);
		if (rank == 0) printf("%d %ld %.3f %.3f %.3f %.3f\n", np, size, r[ALLREDUCE], r[REDUCE], r[BCAST], r[BARRIER]);
		fflush(stdout);
	}
	free(src);
	free(dst);
	free(isrc);
	free(idst);
	MPI_Finalize();
	return 0;
}
