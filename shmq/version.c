/* SPDX-License-Identifier: MIT */
/*
 * The version of the library actually loaded, for comparison with the
 * SHMQ_VERSION a program was compiled against.
 */
#include <shmq/shmq.h>

const char *shmq_version(void)
{
	return SHMQ_VERSION;
}
