/*
 * oshmem_osu: OpenSHMEM (Open MPI's OSHMEM) one-sided operations and
 * collectives timed as the OSU Micro-Benchmarks' osu_oshm_* tests time
 * them, so that issues 8 and 10's OSHMEM figures can be measured in the
 * same sitting as goshbench (benchmarks/peers/run.sh oshmem,
 * docs/performance.md). OpenSHMEM 1.4 calls (what OSHMEM 4.1 has).
 *
 * One-sided (2 PEs; PE 0 times, PE 1 waits in the final barrier):
 *   put     shmem_putmem of SIZE bytes to PE 1, then shmem_quiet
 *   get     shmem_getmem of SIZE bytes from PE 1
 *   fadd    shmem_long_atomic_fetch_add on PE 1 (8 B only)
 *   cswap   shmem_long_atomic_compare_swap on PE 1 (8 B only)
 * Collectives (every PE; each call timed alone, an untimed
 * shmem_barrier_all after it; the figure is the mean over PEs):
 *   bcast     shmem_broadcast64 from PE 0
 *   sumtoall  shmem_longlong_sum_to_all (every PE gets the sum: an
 *             allreduce; 1.4 has no reduce to one root)
 *   fcollect  shmem_fcollect64, SIZE bytes from every PE
 *   barrier   shmem_barrier_all in a loop
 *
 * Usage: oshrun -np N ./oshmem_osu SIZE... ; each size prints lines
 *   N SIZE OP latency_us
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static long psync[SHMEM_REDUCE_SYNC_SIZE > SHMEM_BCAST_SYNC_SIZE ? SHMEM_REDUCE_SYNC_SIZE : SHMEM_BCAST_SYNC_SIZE];
static long psync2[SHMEM_COLLECT_SYNC_SIZE];
static long word;

static double now_us(void) {
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1e6 + tv.tv_usec;
}

static int iters_for(long size) {
	if (size <= 8192) return 2000;
	if (size <= 65536) return 400;
	return 40;
}

/* mean over PEs of a per-PE value */
static double mean(double mine, int np) {
	static double in, out;
	static double wrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
	in = mine;
	shmem_barrier_all();
	shmem_double_sum_to_all(&out, &in, 1, 0, 0, np, wrk, psync);
	shmem_barrier_all();
	return out / np;
}

int main(int argc, char **argv) {
	shmem_init();
	int me = shmem_my_pe(), np = shmem_n_pes();
	for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE && i < (int)(sizeof psync / sizeof psync[0]); i++) psync[i] = SHMEM_SYNC_VALUE;
	for (int i = 0; i < SHMEM_COLLECT_SYNC_SIZE; i++) psync2[i] = SHMEM_SYNC_VALUE;
	long maxsize = 8;
	for (int i = 1; i < argc; i++) {
		long s = atol(argv[i]);
		if (s < 8 || s % 8 != 0) {
			if (me == 0) fprintf(stderr, "oshmem_osu: size %s is not a positive multiple of 8\n", argv[i]);
			shmem_global_exit(2);
		}
		if (s > maxsize) maxsize = s;
	}
	char *src = shmem_malloc(maxsize), *dst = shmem_malloc(maxsize * np);
	long long *wrk = shmem_malloc(sizeof(long long) * (maxsize / 8 / 2 + 1 + SHMEM_REDUCE_MIN_WRKDATA_SIZE));
	if (!src || !dst || !wrk) shmem_global_exit(3);
	memset(src, me + 1, maxsize);
	memset(dst, 0, maxsize * np);
	shmem_barrier_all();
	for (int a = 1; a < argc; a++) {
		long size = atol(argv[a]), n = size / 8;
		int iters = iters_for(size), warm = iters / 10 + 1;
		double t0, t;
		if (np == 2) {
			const char *names[] = {"put", "get", "fadd", "cswap"};
			for (int op = 0; op < 4; op++) {
				if (op >= 2 && size != 8) continue;
				shmem_barrier_all();
				if (me == 0) {
					t0 = 0;
					for (int i = 0; i < iters + warm; i++) {
						if (i == warm) t0 = now_us();
						switch (op) {
						case 0: shmem_putmem(dst, src, size, 1); shmem_quiet(); break;
						case 1: shmem_getmem(dst, src, size, 1); break;
						case 2: (void)shmem_long_atomic_fetch_add(&word, 1, 1); break;
						case 3: (void)shmem_long_atomic_compare_swap(&word, i, i + 1, 1); break;
						}
					}
					printf("%d %ld %s %.3f\n", np, size, names[op], (now_us() - t0) / iters);
				}
				shmem_barrier_all();
			}
		}
		const char *cnames[] = {"bcast", "sumtoall", "fcollect", "barrier"};
		for (int op = 0; op < 4; op++) {
			double sum = 0;
			shmem_barrier_all();
			for (int i = 0; i < iters + warm; i++) {
				t0 = now_us();
				switch (op) {
				case 0: shmem_broadcast64(dst, src, n, 0, 0, 0, np, psync); break;
				case 1: shmem_longlong_sum_to_all((long long *)dst, (long long *)src, n, 0, 0, np, wrk, psync); break;
				case 2: shmem_fcollect64(dst, src, n, 0, 0, np, psync2); break;
				case 3: shmem_barrier_all(); break;
				}
				t = now_us() - t0;
				if (i >= warm) sum += t;
				shmem_barrier_all();
			}
			double m = mean(sum / iters, np);
			if (me == 0) printf("%d %ld %s %.3f\n", np, size, cnames[op], m);
		}
		if (me == 0) fflush(stdout);
	}
	shmem_barrier_all();
	shmem_finalize();
	return 0;
}
