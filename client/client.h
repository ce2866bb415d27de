/* SPDX-License-Identifier: MIT */
/*
 * libkvstash internals shared by the files of client/: client.c (requests,
 * completions), connect.c (the session), prep.c (submission), register.c,
 * sync.c, status.c, fence.c and cuda.c.  Declarations only: it includes
 * none of them.
 */
#ifndef KVS_CLIENT_H
#define KVS_CLIENT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <shmq/shmq.h>
#include <kvstash/kvstash.h>

/*
 * What the library accepts from kvstashd at most (sidecar/base/conf.c caps
 * [session] sq_entries_max and arg_bytes_max at these), so that nothing a
 * HELLO reply says can make the library allocate or map absurd amounts.
 */
#define CLIENT_SQ_MAX	 (1u << 16)
#define CLIENT_ARG_MAX	 (1ull << 30)
#define CLIENT_ERRNO_MAX 4095 /* a status or res below -4095 is no errno */

/* pending.state: an SQE handed out by kvs_get_sqe(), then submitted. */
#define PEND_FREE      0
#define PEND_RESERVED  1 /* being prepared: no CQE may complete it yet */
#define PEND_SUBMITTED 2 /* published in the SQ: its CQE is due */

struct pending {
	uint64_t user_data;
	uint32_t gen;
	uint32_t count; /* keys / block ids: the most a CQE's res may claim */
	uint8_t state;
	uint8_t opcode;
	bool cluster; /* a QUERY with KVS_QUERY_CLUSTER: its CQE must carry the answer */
	/*
	 * Its prep failed while SQEs after it were handed out (the ring can
	 * give back only the newest): it goes as a NOP whose completion the
	 * library takes (prep.c, prep_fail()).
	 */
	bool swallow;
	int32_t fence; /* SAVE AFTER, LOAD PROGRESS: its fence slot; -1: none */
};

/* An SQE handed out by kvs_get_sqe() and not submitted yet. */
struct client_resv {
	struct kvs_sqe *sqe; /* in the SQ (or dead_sqes): matched by address, never by contents */
	uint32_t slot;	     /* its struct pending */
	bool args;	     /* it holds arguments from arg_start on */
	uint64_t arg_start;
};

#define ANS_NONE UINT32_MAX

struct local_cqe {
	struct kvs_cqe cqe; /* user_data already the application's */
	uint64_t tag;	    /* the library's tag, for the sync helpers */
	uint32_t ans;	    /* the checked cluster answer's slot in kvs_client.ans, or ANS_NONE */
};

struct kvs_client {
	char path[108];
	struct kvs_connect_opts opts;
	char instance[KVS_NAME_MAX];
	char ns[KVS_NS_MAX];
	int fd;
	bool dead;
	uint32_t seq;
	struct kvs_session_info info;

	struct shmq_region *region;
	struct shmq_ring sq; /* producer */
	struct shmq_ring cq; /* consumer */
	uint8_t *args;
	uint64_t args_size;
	uint64_t arg_head;    /* free-running: bytes below are free again */
	uint64_t arg_tail;    /* free-running: next byte to hand out */
	uint64_t *arg_end;    /* per SQ slot: what is free once it was consumed (kvs_submit()) */
	uint32_t sq_tail;     /* committed SQ tail (free-running) */
	uint32_t sq_freed;    /* SQ index up to which arguments were reclaimed */
	uint32_t sq_reserved; /* SQEs handed out, not yet submitted */
	struct client_resv *resv; /* those, in SQ order */

	struct pending *pend;
	uint32_t *pend_free;
	uint32_t pend_cap, pend_nfree;

	struct local_cqe *lq; /* completions made or kept by the library */
	uint32_t lq_head, lq_n, lq_cap;
	struct kvs_cqe *cur;  /* handed out by peek, not yet seen */
	bool cur_local;	      /* cur is lq's head; else it is cur_cqe */
	struct kvs_cqe cur_cqe; /* private copy of a ring CQE: kvstashd cannot touch it */
	uint32_t cur_ans;	/* cur_cqe's answer slot, or ANS_NONE */

	/*
	 * KVS_CONNECT_CLUSTER: the answers kvstashd writes, one per CQ entry
	 * (KVS_PART_CLUSTER, shared: copied once, never read twice), and the
	 * library's checked copies.  A copy lives as long as its completion
	 * is kept (lq, cur, a sync helper's list): at most every operation
	 * slot plus the CQE being looked at, so ans_cap = pend_cap + 2 slots
	 * taken from a free list never run out, and reaping allocates nothing.
	 */
	const struct kvs_cluster_answer *ans_part;
	struct kvs_cluster_answer *ans;
	uint32_t *ans_free;
	uint32_t ans_cap, ans_nfree;

	struct kvs_sqe *dead_sqes; /* handed out after kvstashd died */

	struct client_fences *fx; /* KVS_CONNECT_FENCES (fence.c); else NULL */

	/* kept for kvs_reconnect() */
	bool registered;
	struct kvs_mem *reg_mems;
	struct kvs_layer *reg_layers;
	unsigned reg_nr_mems, reg_nr_layers;
	uint32_t reg_flags;
};

void client_log(struct kvs_client *c, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * One request/reply exchange on the socket.  @reply receives up to @cap
 * bytes; a reply fd (HELLO) goes to *@ret_fd when non-NULL.  Returns the
 * reply length or -errno (-ECONNRESET when kvstashd went away).
 */
ssize_t client_request(struct kvs_client *c, void *msg, size_t len, const int *fds, unsigned nfds,
		       void *reply, size_t cap, int *ret_fd);

/* Is @status a 0 or -errno a reply may carry? */
bool client_status_plausible(int32_t status);

/* kvstashd is gone: complete everything pending locally. */
void client_mark_dead(struct kvs_client *c);
/* Operation slot @slot is free again (a new gen: its old tag matches nothing). */
void client_pend_put(struct kvs_client *c, uint32_t slot);
/* Complete operation @slot locally with -ECONNRESET (kvstashd is gone). */
void client_complete_reset(struct kvs_client *c, uint32_t slot);

/* Pop one completion (ring or local) as a copy, with its tag.  0 or -EAGAIN. */
int client_reap(struct kvs_client *c, struct local_cqe *ret);
/* Keep a completion for later peeks. */
void client_defer(struct kvs_client *c, const struct local_cqe *l);
/* Sleep until a completion may be there, up to @timeout_ns, noticing death. */
int client_wait(struct kvs_client *c, int64_t timeout_ns);

/* A slot for a checked cluster answer, or ANS_NONE when none is free. */
uint32_t client_ans_get(struct kvs_client *c);
/* The answer of a kept completion: its slot back to the free list (ANS_NONE: nothing). */
void client_ans_put(struct kvs_client *c, uint32_t ans);

/* Tag of the newest SQE from kvs_get_sqe() (never read back from shared memory). */
uint64_t client_last_tag(const struct kvs_client *c);

/*
 * Status of a plain reply (REGISTER, UNREGISTER, a refused admin request)
 * of @n bytes: its 0 or -errno, or -EBADMSG (logged, naming @what) when
 * the reply is not a well-formed KVS_MSG_REPLY with a plausible status.
 */
int client_reply_status(struct kvs_client *c, const struct kvs_msg_reply *rep, size_t n,
			const char *what);

void client_free_registration(struct kvs_client *c);
int client_send_registration(struct kvs_client *c);
/* Layers of the registration kept for kvs_reconnect(); 0 before one. */
unsigned client_registered_layers(const struct kvs_client *c);

/* ---- fence.c: the fence slots (KVS_CONNECT_FENCES) ---- */

#define FENCE_SAVE 1
#define FENCE_LOAD 2

/* At connect: the state and the watchdog thread. */
int client_fences_new(struct kvs_client *c);
/* A new session's KVS_PART_FENCES (of @bytes) is mapped at @slots: every slot free, a new gen. */
int client_fences_attach(struct kvs_client *c, struct kvs_fence *slots, uint64_t bytes);
/*
 * The session's region goes (reconnect): kept mapped, with the slots'
 * CUDA registration, until kvs_close() when streams may wait on it.
 * Returns true when it took @region (the caller must not destroy it).
 */
bool client_fences_retire(struct kvs_client *c, struct shmq_region *region);
/* kvs_close(): armed slots released, the watchdog stopped, retired regions destroyed. */
void client_fences_free(struct kvs_client *c);
/* Arm a slot for an operation of @kind with @count values; 0 or -errno. */
int client_fence_arm(struct kvs_client *c, int kind, uint32_t count, struct kvs_fence_ref *ret);
/* Operation with slot @slot completed with @res (a LOAD's waits are released here too). */
void client_fence_end(struct kvs_client *c, int32_t slot, int32_t res);

/* cuda.c, for fence.c: 0 or -errno (-ENODEV without a driver). */
int client_cuda_host_register(void *p, size_t size, uint64_t *ret_dptr);
void client_cuda_host_unregister(void *p);
int client_cuda_stream_wait(void *stream, uint64_t dptr, uint32_t value);
int client_cuda_stream_write(void *stream, uint64_t dptr, uint32_t value);

#endif /* KVS_CLIENT_H */
