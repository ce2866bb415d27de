/* SPDX-License-Identifier: MIT */
/*
 * The reason for a refusal, for the caller to log or send back.
 *
 * A function that can refuse its input takes `char *why, size_t wl` as
 * its last two parameters (a buffer and its size) and says why with
 * WHY(fmt, ...) before it returns -errno.  The caller may pass NULL or a
 * size of 0 when it does not want the text: then nothing is written.
 * The text is truncated to fit and always NUL-terminated.
 *
 * One macro for libkvspeer and kvstashd, header-only (common/).
 */
#ifndef KVS_COMMON_WHY_H
#define KVS_COMMON_WHY_H

#include <stdio.h>

#define WHY(...) ((void)(why && wl ? snprintf(why, wl, __VA_ARGS__) : 0))

#endif /* KVS_COMMON_WHY_H */
