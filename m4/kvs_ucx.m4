dnl kvs_ucx.m4: the peer transfer component, libkvspeer (peer/), with its
dnl UCX transport, and its tests.
dnl
dnl KVS_CHECK_UCX: --with-ucx: unset = build libkvspeer when its two
dnl dependencies are there; no = do not build it; yes = require them (fail
dnl if either is missing).  The dependencies:
dnl   UCX (libucx-dev, ucx.pc, 1.13 in Debian 12): headers only.  libkvspeer
dnl     loads libucp at run time, and only when a host asks for the UCX
dnl     transport: libucs installs SIGSEGV/SIGBUS/SIGILL/SIGFPE handlers
dnl     from its constructor and libucm hooks mmap/brk, which a library
dnl     must not do to a host that never asked for UCX (peer/ucx.c).
dnl   nettle (nettle-dev): HMAC-SHA256 of the cluster secret's
dnl     challenge-response, constant-time comparison (the registry's
dnl     digests use it too: one crypto library for the tree).
dnl Sets have_ucx, UCX_CFLAGS, CRYPTO_CFLAGS, CRYPTO_LIBS,
dnl HAVE_UCX (define and conditional), KVS_UCP_SONAME (define).
AC_DEFUN([KVS_CHECK_UCX], [
AC_ARG_WITH([ucx],
	[AS_HELP_STRING([--with-ucx],
		[build libkvspeer, the peer block transfer over TCP and UCX (default: detect libucx-dev and nettle-dev)])],
	[], [with_ucx=check])
have_ucx=no
kvs_ucx_why=""
UCX_CFLAGS=""
CRYPTO_CFLAGS=""
CRYPTO_LIBS=""
AS_IF([test "x$with_ucx" != xno], [
	PKG_CHECK_MODULES([UCX], [ucx >= 1.13], [kvs_have_ucx_pc=yes],
		[kvs_have_ucx_pc=no; kvs_ucx_why="libucx-dev (ucx >= 1.13) not found"])
	PKG_CHECK_MODULES([CRYPTO], [nettle >= 3.4], [kvs_have_crypto=yes],
		[kvs_have_crypto=no; kvs_ucx_why="${kvs_ucx_why:+$kvs_ucx_why, }nettle-dev (nettle >= 3.4) not found"])
	AS_IF([test "x$kvs_have_ucx_pc" = xyes], [
		kvs_save_CPPFLAGS="$CPPFLAGS"
		CPPFLAGS="$CPPFLAGS $UCX_CFLAGS"
		dnl The calls peer/ucx.c resolves at run time must exist in these headers.
		AC_CHECK_HEADER([ucp/api/ucp.h], [], [kvs_have_ucx_pc=no; kvs_ucx_why="ucp/api/ucp.h not usable"])
		AS_IF([test "x$kvs_have_ucx_pc" = xyes], [
			AC_CHECK_DECLS([ucp_get_nbx, ucp_ep_close_nbx, ucp_worker_get_efd],
				[], [kvs_have_ucx_pc=no; kvs_ucx_why="UCX is older than 1.13 (no ucp_get_nbx)"],
				[[#include <ucp/api/ucp.h>]])
		])
		CPPFLAGS="$kvs_save_CPPFLAGS"
	])
	AS_IF([test "x$kvs_have_ucx_pc" = xyes && test "x$kvs_have_crypto" = xyes], [have_ucx=yes])
	AS_IF([test "x$have_ucx" = xno && test "x$with_ucx" = xyes],
		[AC_MSG_ERROR([--with-ucx: $kvs_ucx_why])])
], [kvs_ucx_why="--without-ucx"])
AS_IF([test "x$have_ucx" = xyes], [
	dnl dlopen() by soname: the run-time linker's path finds Debian's and
	dnl vendors' (MOFED) builds alike; LD_LIBRARY_PATH for one elsewhere.
	kvs_ucp_soname="libucp.so.0"
	AC_DEFINE_UNQUOTED([KVS_UCP_SONAME], ["$kvs_ucp_soname"], [libucp loaded by libkvspeer's UCX transport])
	AC_DEFINE([HAVE_UCX], [1], [Define to 1 if libkvspeer (peer transfer, UCX transport) is built])
	kvs_ucx_summary="yes (UCX $($PKG_CONFIG --modversion ucx), nettle $($PKG_CONFIG --modversion nettle))"
], [
	AC_DEFINE([HAVE_UCX], [0], [Define to 1 if libkvspeer (peer transfer, UCX transport) is built])
	kvs_ucx_summary="no: not compiled in ($kvs_ucx_why)"
])
AC_SUBST([UCX_CFLAGS])
AC_SUBST([CRYPTO_CFLAGS])
AC_SUBST([CRYPTO_LIBS])
AM_CONDITIONAL([HAVE_UCX], [test "x$have_ucx" = xyes])
])
