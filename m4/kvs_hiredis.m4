dnl kvs_hiredis.m4: the cluster block registry (sidecar/cluster/) on Redis.
dnl
dnl KVS_CHECK_HIREDIS: --with-hiredis: unset = detect; no = disable; yes =
dnl require it (fail if missing).  The registry needs two libraries, both
dnl in Debian 12: hiredis (libhiredis-dev 0.14, whose async API kvstashd
dnl drives from its own epoll loop) and nettle (nettle-dev, SHA-256 for the
dnl namespace digest: a digest two tenants could collide on would let one
dnl match the other's blocks, so it must be a cryptographic hash).  Without
dnl them sidecar/cluster/stub.c answers "cluster support not compiled in".
dnl Sets have_hiredis, HIREDIS_CFLAGS, HIREDIS_LIBS, NETTLE_CFLAGS,
dnl NETTLE_LIBS, HAVE_HIREDIS (define and conditional) and REDIS_SERVER
dnl (the redis-server the tests start; "no" when absent).
AC_DEFUN([KVS_CHECK_HIREDIS], [
AC_ARG_WITH([hiredis],
	[AS_HELP_STRING([--with-hiredis],
		[build the cluster registry on Redis with hiredis and nettle (default: detect)])],
	[], [with_hiredis=check])
have_hiredis=no
AS_IF([test "x$with_hiredis" != xno], [
	PKG_CHECK_MODULES([HIREDIS], [hiredis >= 0.14], [hiredis_pc=yes], [hiredis_pc=no])
	PKG_CHECK_MODULES([NETTLE], [nettle >= 3.4], [nettle_pc=yes], [nettle_pc=no])
	AS_IF([test "x$hiredis_pc" = xyes && test "x$nettle_pc" = xyes], [
		kvs_save_CPPFLAGS="$CPPFLAGS"
		CPPFLAGS="$CPPFLAGS $HIREDIS_CFLAGS"
		dnl hiredis.pc names .../include/hiredis; kvstash includes <hiredis/async.h>.
		AC_CHECK_HEADER([hiredis/async.h], [have_hiredis=yes])
		CPPFLAGS="$kvs_save_CPPFLAGS"
	])
	AS_IF([test "x$have_hiredis" = xno && test "x$with_hiredis" = xyes],
		[AC_MSG_ERROR([--with-hiredis: hiredis >= 0.14 and nettle not found (apt-get install libhiredis-dev nettle-dev)])])
])
AS_IF([test "x$have_hiredis" = xyes],
	[AC_DEFINE([HAVE_HIREDIS], [1], [Define to 1 if the cluster registry (hiredis) is built])],
	[AC_DEFINE([HAVE_HIREDIS], [0], [Define to 1 if the cluster registry (hiredis) is built])
	 HIREDIS_CFLAGS=""; HIREDIS_LIBS=""; NETTLE_CFLAGS=""; NETTLE_LIBS=""])
AC_PATH_PROG([REDIS_SERVER], [redis-server], [no], [$PATH:/usr/sbin:/usr/bin])
AC_SUBST([HIREDIS_CFLAGS])
AC_SUBST([HIREDIS_LIBS])
AC_SUBST([NETTLE_CFLAGS])
AC_SUBST([NETTLE_LIBS])
AM_CONDITIONAL([HAVE_HIREDIS], [test "x$have_hiredis" = xyes])
])
