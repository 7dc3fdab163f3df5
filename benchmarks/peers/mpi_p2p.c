/*
 * mpi_p2p: MPI two-sided latency and bandwidth by the OSU Micro-Benchmarks'
 * definitions (osu_latency, osu_bw), so that issue 12's peer figures can be
 * measured in the same sitting as goshbench's comm-latency and comm-bw
 * (benchmarks/peers/run.sh, docs/performance.md).
 *
 *   latency: rank 0 sends, rank 1 receives and sends the same size back;
 *            one-way time = elapsed / (2 * iterations).
 *   bw:      rank 0 posts a window of 64 MPI_Isend, waits for them all and
 *            then for a 4-byte reply that rank 1 sends once its 64 matching
 *            MPI_Irecv completed; bandwidth = size * 64 * iterations /
 *            elapsed.
 *
 * Usage: mpirun -np 2 ./mpi_p2p SIZE... ; each size prints one line
 *   SIZE latency_us bw_GBps
 * Warm-up iterations are not timed. Buffers are touched before timing.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int iters_for(long size, int lat) {
	if (size <= 8192) return lat ? 10000 : 1000;
	if (size <= 65536) return lat ? 2000 : 200;
	return lat ? 200 : 40;
}

int main(int argc, char **argv) {
	int rank, n;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (n != 2) {
		if (rank == 0) fprintf(stderr, "mpi_p2p: run with exactly 2 processes\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	long maxsize = 0;
	for (int i = 1; i < argc; i++) {
		long s = atol(argv[i]);
		if (s < 0) {
			if (rank == 0) fprintf(stderr, "mpi_p2p: bad size %s\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		if (s > maxsize) maxsize = s;
	}
	char *sbuf = malloc(maxsize * WINDOW + 1), *rbuf = malloc(maxsize * WINDOW + 1);
	if (!sbuf || !rbuf) MPI_Abort(MPI_COMM_WORLD, 3);
	memset(sbuf, 'a', maxsize * WINDOW + 1);
	memset(rbuf, 'b', maxsize * WINDOW + 1);
	MPI_Request req[WINDOW];
	char ack[4];
	for (int a = 1; a < argc; a++) {
		long size = atol(argv[a]);
		/* latency */
		int iters = iters_for(size, 1), warm = iters / 10;
		double t0 = 0;
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < iters + warm; i++) {
			if (i == warm) t0 = MPI_Wtime();
			if (rank == 0) {
				MPI_Send(sbuf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
				MPI_Recv(rbuf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(rbuf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(sbuf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
			}
		}
		double lat = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
		/* bandwidth */
		iters = iters_for(size, 0);
		warm = iters / 10;
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < iters + warm; i++) {
			if (i == warm) t0 = MPI_Wtime();
			if (rank == 0) {
				for (int w = 0; w < WINDOW; w++)
					MPI_Isend(sbuf + w * size, size, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &req[w]);
				MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
				MPI_Recv(ack, 4, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				for (int w = 0; w < WINDOW; w++)
					MPI_Irecv(rbuf + w * size, size, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &req[w]);
				MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
				MPI_Send(ack, 4, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
			}
		}
		double el = MPI_Wtime() - t0;
		double bw = (double)size * WINDOW * iters / el / 1e9;
		if (rank == 0) printf("%ld %.3f %.3f\n", size, lat, bw);
		fflush(stdout);
	}
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return 0;
}
