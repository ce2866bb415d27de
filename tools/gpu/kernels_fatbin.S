/* SPDX-License-Identifier: MIT */
/* Embed tools/gpu/kernels.fatbin (nvcc output, in the build directory). */
	.section .rodata
	.balign 64
	.global gpu_test_fatbin
	.type gpu_test_fatbin, @object
gpu_test_fatbin:
	.incbin "tools/gpu/kernels.fatbin"
	.byte 0
	.section .note.GNU-stack,"",@progbits
