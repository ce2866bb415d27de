/* SPDX-License-Identifier: MIT */
/* Built without CUDA: no CUDA memory can have been imported. */
#include "copy.h"
#include "mem.h"

void copy_cuda_mem_release(struct mem_import *imp)
{
	(void)imp;
}
