/*
 * The C twin of gofloor (../main.go): the same ping-pong through a shared
 * page, with the same work per side, and no runtime around it. gofloor runs
 * it as "-role ping|pong -shm FILE -n N -work US" and reads the pinger's
 * JSON line.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void work_for(int us)
{
	double end = now_us() + us;
	while (now_us() < end)
		;
}

/* The index of the p-th percentile by nearest rank, as stats.Percentile (internal/stats). */
static int nearest_rank(int n, double p)
{
	int i = (int)(n * p / 100 + 0.5) - 1;
	return i < 0 ? 0 : i >= n ? n - 1 : i;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *role = NULL, *shm = NULL;
	int n = 5000, work = 20, warmup = 100;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-role"))
			role = argv[i + 1];
		else if (!strcmp(argv[i], "-shm"))
			shm = argv[i + 1];
		else if (!strcmp(argv[i], "-n"))
			n = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-work"))
			work = atoi(argv[i + 1]);
	}
	if (!role || !shm || n <= 0 || (strcmp(role, "ping") && strcmp(role, "pong"))) {
		fprintf(stderr, "usage: %s -role ping|pong -shm FILE [-n N] [-work US]\n", argv[0]);
		return 2;
	}
	int fd = open(shm, O_RDWR);
	if (fd < 0) {
		perror(shm);
		return 1;
	}
	volatile uint64_t *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	volatile uint64_t *ping = mem, *pong = mem + 8; /* 64 bytes apart, as in Go */
	int pinger = !strcmp(role, "ping");
	double *lat = calloc(n, sizeof(double)), sum = 0;
	if (!lat)
		return 1;

	for (uint64_t seq = 1; seq <= (uint64_t)(n + warmup); seq++) {
		if (!pinger) {
			while (__atomic_load_n(ping, __ATOMIC_ACQUIRE) != seq)
				;
			work_for(work);
			__atomic_store_n(pong, seq, __ATOMIC_RELEASE);
			continue;
		}
		double start = now_us();
		work_for(work);
		__atomic_store_n(ping, seq, __ATOMIC_RELEASE);
		while (__atomic_load_n(pong, __ATOMIC_ACQUIRE) != seq)
			;
		if (seq > (uint64_t)warmup) {
			lat[seq - warmup - 1] = now_us() - start;
			sum += lat[seq - warmup - 1];
		}
	}
	if (pinger) {
		qsort(lat, n, sizeof(double), by_value);
		printf("{\"p50_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f,\"max_us\":%.3f}\n",
		       lat[nearest_rank(n, 50)], lat[nearest_rank(n, 99)], sum / n, lat[n - 1]);
	}
	return 0;
}
