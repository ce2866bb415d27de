dnl kvs_cuda.m4: the CUDA mover (sidecar/movers/cuda/), the GPU helpers
dnl (tools/gpu/) and the GPU tests.
dnl
dnl KVS_CHECK_CUDA: --with-cuda: unset = detect /usr/local/cuda; no =
dnl disable; yes or DIR = require it (fail if missing).  The runtime is
dnl linked statically and driver functions are reached through
dnl cudaGetDriverEntryPointByVersion, so a binary built with CUDA needs no
dnl libcuda at link time and starts on hosts without an NVIDIA driver.
dnl Sets have_cuda, CUDA_CFLAGS, CUDA_LIBS, CUDA_DIR, NVCC, CUDA_ARCHS,
dnl HAVE_CUDA (define and conditional).
AC_DEFUN([KVS_CHECK_CUDA], [
AC_ARG_WITH([cuda],
	[AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
		[CUDA toolkit location (default: detect /usr/local/cuda)])],
	[], [with_cuda=check])
have_cuda=no
CUDA_CFLAGS=""
CUDA_LIBS=""
AS_CASE([$with_cuda],
	[no], [],
	[yes|check], [cuda_dir=/usr/local/cuda],
	[cuda_dir="$with_cuda"])
AS_IF([test "x$with_cuda" != xno], [
	AC_PATH_PROG([NVCC], [nvcc], [no], [$cuda_dir/bin])
	kvs_save_CPPFLAGS="$CPPFLAGS"; kvs_save_LIBS="$LIBS"
	CPPFLAGS="$CPPFLAGS -I$cuda_dir/include"
	AC_CHECK_HEADER([cuda_runtime_api.h], [cuda_hdr=yes], [cuda_hdr=no])
	AS_IF([test "x$cuda_hdr" = xyes && test -f "$cuda_dir/lib64/libcudart_static.a" &&
	       test "x$NVCC" != xno], [have_cuda=yes])
	CPPFLAGS="$kvs_save_CPPFLAGS"; LIBS="$kvs_save_LIBS"
	AS_IF([test "x$have_cuda" = xno && test "x$with_cuda" != xcheck],
		[AC_MSG_ERROR([CUDA requested but not usable under $cuda_dir (need nvcc, headers and libcudart_static.a)])])
])
AS_IF([test "x$have_cuda" = xyes], [
	CUDA_CFLAGS="-I$cuda_dir/include"
	dnl Static runtime; librt/libdl are what libcudart_static needs.
	CUDA_LIBS="-L$cuda_dir/lib64 -lcudart_static -ldl -lrt -lpthread"
	CUDA_DIR="$cuda_dir"
	AC_DEFINE([HAVE_CUDA], [1], [Define to 1 if the CUDA backend is built])
], [
	AC_DEFINE([HAVE_CUDA], [0], [Define to 1 if the CUDA backend is built])
])
AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc])
AC_ARG_VAR([CUDA_ARCHS], [nvcc -gencode list (default: sm_90 + PTX)])
AS_IF([test -z "$CUDA_ARCHS"],
	[CUDA_ARCHS="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"])
AC_SUBST([CUDA_CFLAGS])
AC_SUBST([CUDA_LIBS])
AC_SUBST([CUDA_DIR])
AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
])
