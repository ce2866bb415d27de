dnl kvs_uring.m4: liburing for the SSD tier (sidecar/ssd/).
dnl
dnl KVS_CHECK_URING: --with-liburing: unset = detect (pkg-config liburing);
dnl no = build without the SSD tier; yes = require it (fail if missing).
dnl Debian 12: liburing-dev 2.3.  Sets have_uring, URING_CFLAGS,
dnl URING_LIBS, uring_summary, HAVE_LIBURING (define and conditional).
AC_DEFUN([KVS_CHECK_URING], [
AC_ARG_WITH([liburing],
	[AS_HELP_STRING([--with-liburing],
		[build the SSD tier with liburing (default: detect)])],
	[], [with_liburing=check])
have_uring=no
URING_CFLAGS=""
URING_LIBS=""
AS_IF([test "x$with_liburing" != xno], [
	PKG_CHECK_MODULES([URING], [liburing >= 2.3], [have_uring=yes], [
		AS_IF([test "x$with_liburing" = xyes],
			[AC_MSG_ERROR([liburing >= 2.3 not found (liburing-dev)])])
	])
])
dnl The kernel interfaces the drive code names must be in the headers.
AS_IF([test "x$have_uring" = xyes], [
	kvs_save_CFLAGS="$CFLAGS"; CFLAGS="$CFLAGS $URING_CFLAGS"
	AC_CHECK_DECLS([IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_SINGLE_ISSUER, STATX_DIOALIGN],
		[], [have_uring=no], [[#include <liburing.h>
		#include <linux/stat.h>]])
	CFLAGS="$kvs_save_CFLAGS"
	AS_IF([test "x$have_uring" = xno && test "x$with_liburing" = xyes],
		[AC_MSG_ERROR([liburing or kernel headers too old for the SSD tier (need liburing 2.3, Linux 6.1 headers)])])
])
AS_IF([test "x$have_uring" = xyes], [
	uring_summary="yes (liburing $($PKG_CONFIG --modversion liburing))"
	AC_DEFINE([HAVE_LIBURING], [1], [Define to 1 if the SSD tier is built (liburing)])
], [
	uring_summary="no: the SSD tier is not compiled in (needs liburing-dev >= 2.3)"
	AS_IF([test "x$with_liburing" = xcheck],
		[AC_MSG_WARN([liburing not found: building without the SSD tier (apt-get install liburing-dev)])])
	URING_CFLAGS=""
	URING_LIBS=""
	AC_DEFINE([HAVE_LIBURING], [0], [Define to 1 if the SSD tier is built (liburing)])
])
AC_SUBST([URING_CFLAGS])
AC_SUBST([URING_LIBS])
AM_CONDITIONAL([HAVE_LIBURING], [test "x$have_uring" = xyes])
])
