/* SPDX-License-Identifier: MIT */
/*
 * A session: one engine rank (or scheduler, or admin CLI) connected over
 * the socket.  The control thread owns the socket side (handshake,
 * registration, death); the I/O worker serving the session owns the ring
 * side.  What the worker reads of the session is its data-path view,
 * struct wsession (io/worker-types.h), embedded here as `w` and filled by the
 * control thread (session_new(), create_region(), before ATTACH).  They
 * hand over through worker commands and acks, which carry the view;
 * session_of() goes back from it to the session.
 *
 * Lifetime: created on accept, freed by the control thread after the
 * worker acknowledged DETACH (no op in flight, nothing of it referenced);
 * its memory goes after the batch of events that freed it (ev_defer()).
 */
#ifndef KVS_SESSION_H
#define KVS_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <urcu/compiler.h>
#include <urcu/list.h>
#include <shmq/shmq.h>
#include <kvstash/abi.h>

#include "control/loop.h"
#include "control/reg-build.h"
#include "control/slots.h"
#include "io/worker.h"
#include "obs/counters.h"
#include "obs/log.h"
#include "wire/proto.h"

struct daemon;
struct worker;
struct instance;
struct nspace;

enum session_state {
	S_NEW,	    /* connected, no HELLO yet */
	S_ACTIVE,   /* HELLO done */
	S_CLOSING,  /* socket gone or GOODBYE: waiting for the worker */
};

/*
 * A reply train (STATUS, STATS) waiting for room in the socket: sent as
 * the client reads, on EPOLLOUT, while the session reads no new request.
 */
struct out_queue {
	uint8_t *buf; /* packets back to back, each sized by its header */
	size_t len;
	size_t off; /* first byte not sent */
};

struct session {
	uint64_t id;
	struct ev_source ev; /* the socket (ev.fd) in the control loop */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool peer_allowed; /* allow-list verdict on the credentials captured at accept */
	enum session_state state;
	struct hello_req hello;
	char prefix[200]; /* "session N (pid P, instance I rank R)" */
	struct daemon *d;
	struct instance *inst;
	struct nspace *ns;
	struct cds_list_head node;	/* daemon.sessions */
	struct cds_list_head inst_node; /* instance.sessions */

	struct shmq_region *region;
	bool fences_pinned; /* its KVS_PART_FENCES is registered with the GPUs (movers_pin()) */
	uint32_t sq_entries, cq_entries;
	uint64_t arg_bytes;
	uint32_t max_inflight;

	struct worker *worker;
	/* The worker's view: its registration (w.reg, w.retired), commands, acks, rings. */
	struct wsession w;

	/* control thread: a request waiting for the worker's ack */
	bool waiting;
	uint32_t waiting_seq;
	uint32_t waiting_type;
	/*
	 * Host engine memory this session has mapped (its registration's,
	 * live or retired until freed): what [session] max_mapped_bytes and
	 * [server] max_mapped_bytes_per_uid bound.  Control thread only.
	 */
	uint64_t mapped_host;

	struct counters_session st;
	uint64_t created_ns;

	struct slot_holder sl; /* its connection slot in daemon.slots (slots.c) */

	struct log_ratelimit log_rl; /* the control thread's lines about this session */
	struct out_queue out;
	struct ev_deferred dead; /* frees the memory after the batch */
};

/*
 * Control thread.  Queue a reply train of @len bytes (@buf, malloc'd,
 * ours now) and send what the socket takes; the rest goes on EPOLLOUT.
 * 0, or -errno when the session must close.
 */
int session_queue(struct session *s, uint8_t *buf, size_t len);
/* EPOLLOUT: send more of the queued train.  0, or -errno to close. */
int session_flush(struct session *s);
/* Ask for what the session waits for now: replies to send, or a request. */
void session_update_events(struct session *s);
/* Engine sessions past HELLO (admin ones not counted). */
unsigned session_count_active(const struct daemon *d);

/* Build the log prefix after HELLO. */
void session_set_prefix(struct session *s);

/* The session whose data-path view @ws is (an ack's, a command's). */
static inline struct session *session_of(struct wsession *ws)
{
	return caa_container_of(ws, struct session, w);
}

/* Load-acquire: see wsession_reg(). */
static inline struct registration *session_reg(struct session *s)
{
	return wsession_reg(&s->w);
}

/* Store-release, pairing with the worker's wsession_reg(). */
static inline void session_publish_reg(struct session *s, struct registration *reg)
{
	wsession_publish_reg(&s->w, reg);
}

#endif /* KVS_SESSION_H */
