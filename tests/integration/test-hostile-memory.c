/* SPDX-License-Identifier: MIT */
/*
 * Engine memory that could make kvstashd fault fatally is never mapped.
 *
 *  1. Seals before size.  An engine sends an unsealed memfd and, while
 *     kvstashd handles the REGISTER, shrinks it and then seals it against
 *     shrinking.  A daemon that read the size before the seals maps the old
 *     size, and the next SAVE from the cut-off part dies with SIGBUS in the
 *     I/O worker.  The race is run for many rounds, each timed to land the
 *     shrink and the seal inside the daemon's handling (the delay follows
 *     which way the last rounds missed: -ERANGE, too early; -EPERM, too
 *     late).  Whatever the timing, every REGISTER must be refused or give
 *     a mapping whose SAVEs work, and kvstashd must live.
 *  2. hugetlbfs.  F_SEAL_SHRINK does not stop fallocate(PUNCH_HOLE) on a
 *     hugetlbfs memfd, and a hole there needs a free huge page: an engine
 *     that punches one and takes every free huge page makes the daemon's
 *     next access SIGBUS.  A sealed MFD_HUGETLB memfd is refused with
 *     -EOPNOTSUPP and a reason, nothing of it mapped, and the session keeps
 *     working.  As root the test reserves a huge page when none is free, so
 *     that a daemon accepting such memory would really be attacked (and the
 *     test fail on its death); without one the refusal is still checked.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define RACE_BLOCKS 16u
#define RACE_SEG    4096u
#define RACE_SIZE   ((uint64_t)RACE_BLOCKS * RACE_SEG)
#define RACE_ROUNDS 20000u

/* A spin-wait hint; only the shrinker's timing depends on it, no result does. */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() __asm__ volatile("" ::: "memory")
#endif

static struct kvsd d;

/* Fail, naming the signal, if kvstashd is gone. */
static void check_daemon(const char *after)
{
	int st;

	if (waitpid(d.pid, &st, WNOHANG) == d.pid) {
		d.pid = 0; /* reaped */
		CHECK(false, "kvstashd died after %s: %s %d (%s)", after,
		      WIFSIGNALED(st) ? "signal" : "exit status",
		      WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
		      WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "-");
	}
	CHECK(pid_alive(d.pid), "kvstashd is gone after %s", after);
}

static void one_layer(struct kvs_layer *l, const char *name, uint32_t blocks, uint64_t seg)
{
	*l = (struct kvs_layer){ .name = name,
				 .mem = 0,
				 .segments = 1,
				 .offset = 0,
				 .num_blocks = blocks,
				 .segment_bytes = seg,
				 .block_stride = seg };
}

/* ---- 1. shrink-then-seal against REGISTER --------------------------- */

/*
 * The shrinker waits for a round number, spins for the round's delay, then
 * shrinks the memfd to nothing and seals it.  Store-release of R.round
 * (main) pairs with the load-acquire here, so fd and delay are seen; the
 * store-release of R.done pairs with main's load-acquire, so main reads
 * err after the shrinker's syscalls.
 */
static struct {
	int fd;
	unsigned delay;
	int err;
	unsigned round;
	unsigned done;
} R;

static void *shrinker(void *arg)
{
	unsigned seen = 0;

	(void)arg;
	for (;;) {
		unsigned r;

		while ((r = __atomic_load_n(&R.round, __ATOMIC_ACQUIRE)) == seen)
			cpu_relax();
		if (r == UINT32_MAX)
			return NULL;
		seen = r;
		for (volatile unsigned i = 0; i < R.delay; i++)
			cpu_relax();
		if (ftruncate(R.fd, 0) < 0 || fcntl(R.fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
			R.err = errno;
		__atomic_store_n(&R.done, seen, __ATOMIC_RELEASE);
	}
}

static void race_shrink_then_seal(void)
{
	unsigned rounds = RACE_ROUNDS, early = 0, late = 0, won = 0;
	const char *env = getenv("KVSTASH_RACE_ROUNDS");
	uint64_t est = 64, rng = 0x9e3779b97f4a7c15ull;
	uint8_t keys[RACE_BLOCKS * KVS_KEY_SIZE];
	uint32_t ids[RACE_BLOCKS];
	struct kvs_client *c;
	struct kvs_layer lay;
	pthread_t t;
	int r;

	if (env && atoi(env) > 0)
		rounds = (unsigned)atoi(env);
	r = test_connect(&d, KVS_ROLE_WORKER, "race", "model-race", 0, 1, &c);
	CHECK(r == 0, "connect: %s", kvs_strerror(r));
	one_layer(&lay, "race.0", RACE_BLOCKS, RACE_SEG);
	it_ids(ids, RACE_BLOCKS, 0);
	CHECK(pthread_create(&t, NULL, shrinker, NULL) == 0, "pthread_create");

	for (unsigned i = 1; i <= rounds; i++) {
		struct kvs_mem mem = { .kind = KVS_MEM_HOST_FD, .size = RACE_SIZE };
		int fd = memfd_create("kvstash-race", MFD_CLOEXEC | MFD_ALLOW_SEALING);

		CHECK(fd >= 0 && ftruncate(fd, (off_t)RACE_SIZE) == 0, "memfd: %s",
		      strerror(errno));
		mem.fd = fd;
		R.fd = fd;
		/* Jitter of +-50 % around the estimate, so rounds spread over the window. */
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		R.delay = (unsigned)(est / 2 + rng % (est + 1));
		__atomic_store_n(&R.round, i, __ATOMIC_RELEASE);
		r = kvs_register(c, &mem, 1, &lay, 1, 0);
		while (__atomic_load_n(&R.done, __ATOMIC_ACQUIRE) != i)
			cpu_relax();
		CHECK(R.err == 0, "shrink and seal: %s", strerror(R.err));
		if (r == -ERANGE) {
			early++; /* the daemon saw the shrunk size: shrink later */
			est += est / 16 + 1;
		} else if (r == -EPERM) {
			late++; /* the daemon saw no seal: seal earlier */
			est -= est / 16 + (est > 0);
		} else {
			/*
			 * Accepted.  Then the mapping must be real: SAVE every
			 * block, the last ones lying past what the file holds
			 * now if the daemon mapped a size it read before the seal.
			 */
			CHECK_RES(r, 0, "REGISTER of a memfd shrunk and sealed meanwhile");
			won++;
			it_keys(keys, RACE_BLOCKS, i);
			r = it_save(c, keys, ids, RACE_BLOCKS).res;
			check_daemon("a SAVE from a memfd shrunk before its seal");
			CHECK(r >= 0, "SAVE: %s", kvs_strerror(r));
			CHECK_RES(kvs_unregister(c), 0, "UNREGISTER");
		}
		close(fd);
		if (i % 1000 == 0)
			check_daemon("the REGISTER races");
	}
	__atomic_store_n(&R.round, UINT32_MAX, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	check_daemon("the REGISTER races");
	CHECK_RES(kvs_nop_sync(c, OP_TIMEOUT_MS), 0, "NOP after the races");
	kvs_close(c);
	it_ok("shrink-then-seal raced against REGISTER %u times (%u seen shrunk, %u unsealed, "
	      "%u accepted): kvstashd lives",
	      rounds, early, late, won);
}

/* ---- 2. hugetlbfs memfds -------------------------------------------- */

static unsigned long huge_kb(void)
{
	unsigned long kb = 0;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static long read_long(const char *path)
{
	long v = -1;
	FILE *f = fopen(path, "r");

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static bool write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	bool ok;

	if (!f)
		return false;
	ok = fprintf(f, "%ld\n", v) > 0;
	return fclose(f) == 0 && ok;
}

static char free_path[128];
static long added; /* huge pages this test added to vm.nr_hugepages */
static int lock_fd = -1;

static long free_huge(void)
{
	return read_long(free_path);
}

static void give_back_huge(void)
{
	if (added) {
		long nr = read_long("/proc/sys/vm/nr_hugepages");

		if (nr >= added)
			write_long("/proc/sys/vm/nr_hugepages", nr - added);
		added = 0;
	}
	if (lock_fd >= 0)
		close(lock_fd); /* drops the flock */
	lock_fd = -1;
}

/*
 * One free huge page, reserving one (as root) when there is none.  The
 * flock keeps two runs of this test (release and ASan builds) from
 * undoing each other's reservation.
 */
static bool have_huge_page(void)
{
	long nr;

	if (free_huge() >= 1)
		return true;
	lock_fd = open("/tmp/kvstash-test-hugepages.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX) < 0)
		return false;
	nr = read_long("/proc/sys/vm/nr_hugepages");
	if (nr < 0 || !write_long("/proc/sys/vm/nr_hugepages", nr + 1))
		return false;
	added = read_long("/proc/sys/vm/nr_hugepages") - nr;
	if (added < 0)
		added = 0;
	atexit(give_back_huge);
	return free_huge() >= 1;
}

/*
 * What an engine does to a daemon that accepted its hugetlbfs memory:
 * punch the page out, take every free huge page, and have the daemon read
 * the hole.  Only a daemon that accepts such memory gets here.
 */
static void attack_huge(struct kvs_client *c, int hfd, uint64_t hsize)
{
	uint8_t key[KVS_KEY_SIZE];
	uint32_t id = 0;
	long n;
	void *hog;

	CHECK(fallocate(hfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)hsize) == 0,
	      "punch: %s", strerror(errno));
	n = free_huge();
	hog = n > 0 ? mmap(NULL, (size_t)n * hsize, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0)
		    : MAP_FAILED;
	it_keys(key, 1, 77);
	it_save(c, key, &id, 1);
	check_daemon("a SAVE from a hugetlbfs memfd with a hole and no free huge page");
	if (hog != MAP_FAILED)
		munmap(hog, (size_t)n * hsize);
}

static void hugetlb_refused(void)
{
	unsigned long kb = huge_kb();
	uint64_t hsize = (uint64_t)kb << 10;
	struct kvs_mem mem = { .kind = KVS_MEM_HOST_FD, .size = 4096 };
	struct kvs_client *c;
	struct kvs_layer lay;
	struct test_kv kv;
	bool page;
	int hfd, r;
	void *p;

	hfd = kb ? memfd_create("kvstash-huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB) : -1;
	if (hfd < 0) {
		printf("# skip: this kernel has no hugetlbfs memfds (%s)\n", strerror(errno));
		return;
	}
	snprintf(free_path, sizeof(free_path),
		 "/sys/kernel/mm/hugepages/hugepages-%lukB/free_hugepages", kb);
	page = have_huge_page();
	CHECK(ftruncate(hfd, (off_t)hsize) == 0, "ftruncate: %s", strerror(errno));
	CHECK(fcntl(hfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "seal: %s",
	      strerror(errno));
	if (page) {
		/* The engine's own data in it, as a real engine would have. */
		p = mmap(NULL, hsize, PROT_READ | PROT_WRITE, MAP_SHARED, hfd, 0);
		CHECK(p != MAP_FAILED, "map the huge page: %s", strerror(errno));
		memset(p, POISON, 4096);
		munmap(p, hsize);
	} else {
		printf("# no free huge page and none could be reserved: refusal checked without "
		       "one\n");
	}

	r = test_connect(&d, KVS_ROLE_WORKER, "huge", "model-huge", 0, 1, &c);
	CHECK(r == 0, "connect: %s", kvs_strerror(r));
	/* 4 KiB declared, as in the report: a daemon munmap()ing that much leaks the huge page. */
	mem.fd = hfd;
	one_layer(&lay, "huge.0", 1, 4096);
	r = kvs_register(c, &mem, 1, &lay, 1, 0);
	if (r == 0 && page)
		attack_huge(c, hfd, hsize);
	check_daemon("a REGISTER of a hugetlbfs memfd");
	CHECK_RES(r, -EOPNOTSUPP, "REGISTER of a sealed hugetlbfs memfd");
	CHECK(kvsd_log_contains(&d, "hugetlbfs"), "the refusal does not say why");
	CHECK(proc_map_count(d.pid, "kvstash-huge") == 0, "kvstashd mapped the hugetlbfs memfd");
	close(hfd);
	give_back_huge();

	/* The session took no harm: plain memory registers and saves. */
	CHECK(test_kv_alloc(&kv, LAYOUT_PAGE_FIRST, 2, 4, 4096) == 0, "test_kv_alloc");
	CHECK_RES(test_kv_register(c, &kv), 0, "REGISTER of a plain memfd after the refusal");
	{
		uint8_t keys[2 * KVS_KEY_SIZE];
		uint32_t ids[2] = { 0, 1 };

		it_keys(keys, 2, 5);
		CHECK_RES(it_save(c, keys, ids, 2).res, 2, "SAVE after the refusal");
	}
	kvs_close(c);
	test_kv_free(&kv);
	it_ok("a sealed hugetlbfs memfd is refused (-EOPNOTSUPP, %s), nothing of it mapped",
	      page ? "with a huge page free" : "no huge page free");
}

int main(void)
{
	it_watchdog(600);
	it_start(&d, NULL);
	race_shrink_then_seal();
	hugetlb_refused();
	it_stop(&d);
	return 0;
}
