/* SPDX-License-Identifier: MIT */
/*
 * The registry's commands to Redis (command.c): a request per command,
 * the list of those in flight, and the reply's dispatch to the request's
 * done function.  Control thread only.
 */
#ifndef KVS_REG_COMMAND_H
#define KVS_REG_COMMAND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster/registry-internal.h"

/* A request whose reply @done takes; NULL: no memory. */
struct req *cmd_new(req_done_fn *done);

/* Send argv; the request is the callback's.  -EIO when hiredis refuses (q freed). */
int cmd_send(struct registry *r, struct req *q, int argc, const char **argv, const size_t *lens);

/*
 * EVALSHA of one of our scripts: argv[0..2] are filled in here, the
 * @nkeys keys and @nargs arguments follow; cmd_send_text_script() when
 * they all are C strings (it measures them).
 */
int cmd_send_script(struct registry *r, struct req *q, int script, uint32_t nkeys, uint32_t nargs,
		    const char **argv, size_t *lens);
int cmd_send_text_script(struct registry *r, struct req *q, int script, uint32_t nkeys,
			 uint32_t nargs, const char **argv, size_t *lens);

/* Argument *@k of a command built in r->argv (ARGV_MAX bounds a batch's and a query's). */
static inline void cmd_arg(struct registry *r, uint32_t *k, const void *p, size_t len)
{
	r->argv[*k] = p;
	r->argvlen[(*k)++] = len;
}

static inline void cmd_arg_str(struct registry *r, uint32_t *k, const char *s)
{
	cmd_arg(r, k, s, strlen(s));
}

/*
 * A reply that was an error (reply_*() said -EIO: the text is Redis') or
 * not what @malformed names: counted, and the connection goes (pump_run()).
 */
void cmd_refused(struct registry *r, const redisReply *reply, int rc, const char *malformed);

#endif /* KVS_REG_COMMAND_H */
