/* SPDX-License-Identifier: MIT */
/*
 * Embed sidecar/movers/cuda/gather.fatbin (built by nvcc from gather.cu) as read-only
 * data: kvs_gather_fatbin[] and its end.  The path is relative to the
 * build directory, where make runs the assembler.
 */
	.section .rodata
	.balign 64
	.global kvs_gather_fatbin
	.type kvs_gather_fatbin, @object
kvs_gather_fatbin:
	.incbin "sidecar/movers/cuda/gather.fatbin"
	.global kvs_gather_fatbin_end
kvs_gather_fatbin_end:
	.byte 0
	.section .note.GNU-stack,"",@progbits
