/* SPDX-License-Identifier: MIT */
/*
 * A drive kvstashd cannot use is a clear start-up error: it exits
 * non-zero before it is ready, with a log line naming the path, for
 *   - an [ssd] path in a directory that does not exist;
 *   - a file that cannot be preallocated (larger than the free space);
 *   - a file where O_DIRECT fails (tmpfs at /dev/shm, where it has none).
 * A good path next to them starts (the failures are the path's).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "itest.h"
#include "ssdtest.h"
#include "tiertest.h"

static void refused(const char *what, const char *path, const char *size)
{
	char ini[2048];
	struct kvsd d;
	int r;

	snprintf(ini, sizeof(ini), "[ssd]\npath = %s\nsize = %s\nregion_size = 1M\n", path, size);
	fprintf(stderr, "# %s: kvstashd must refuse to start (its log follows)\n", what);
	r = kvsd_start(&d, ini);
	if (r == 0)
		kvsd_kill(&d);
	CHECK(r < 0, "%s: kvstashd started on %s", what, path);
	CHECK(d.pid == 0, "%s: kvstashd still runs", what);
	CHECK(kvsd_log_contains(&d, path), "%s: no log line names %s", what, path);
	CHECK(kvsd_log_contains(&d, "ssd: "), "%s: no ssd error line", what);
	kvsd_cleanup(&d);
	it_ok("%s: kvstashd exits at start, the log names %s", what, path);
}

int main(void)
{
	char path[1024], size[64];
	struct statvfs vfs;
	struct kvsd d;
	int fd;

	it_watchdog(120);
	snprintf(path, sizeof(path), "%s/no-such-dir/drive", st_dir());
	refused("a missing directory", path, "64M");

	CHECK(statvfs(st_dir(), &vfs) == 0, "statvfs: %s", strerror(errno));
	snprintf(size, sizeof(size), "%lluM",
		 (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize / (1u << 20)) +
			 (64ull << 10));
	snprintf(path, sizeof(path), "%s/too-big", st_dir());
	refused("a size past the free space", path, size);
	CHECK(access(path, F_OK) != 0 || unlink(path) == 0, "unlink %s", path);

	fd = open("/dev/shm/kvstash-tier-odirect", O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd >= 0) {
		close(fd);
		unlink("/dev/shm/kvstash-tier-odirect");
		printf("ok - # SKIP tmpfs without O_DIRECT: /dev/shm takes O_DIRECT here\n");
	} else {
		snprintf(path, sizeof(path), "/dev/shm/kvstash-tier-%d", (int)getpid());
		refused("tmpfs (no O_DIRECT)", path, "64M");
		unlink(path);
	}

	/* The same config with a usable path starts: the refusals were the paths'. */
	it_start(&d, tt_ini("good", 16u << 20, "64M", NULL));
	tt_wait_recovered(&d, 1);
	it_stop(&d);
	it_ok("a usable path in the same config starts");
	return 0;
}
