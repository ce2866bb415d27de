/* SPDX-License-Identifier: MIT */
/*
 * KVSPEER_TRANSPORT_UCX: RDMA READ through libucp, loaded at run time.
 *
 * Why dlopen: libucs installs SIGSEGV, SIGBUS, SIGILL and SIGFPE handlers
 * and a SIGHUP handler from its constructor (UCX_HANDLE_ERRORS=bt and
 * UCX_DEBUG_SIGNO=SIGHUP by default, ucs/debug/debug.c ucs_debug_init()),
 * and libucm hooks mmap/brk/malloc for its memory events.  A library must
 * not do that to a host that never asked for UCX, so libkvspeer links no
 * UCX library; it loads libucp only when a host chooses this transport,
 * and only once the host's environment switched the handlers off
 * (UCX_HANDLE_ERRORS=none, UCX_DEBUG_SIGNO=0: the host's decision, made
 * before the first UCX library is loaded in the process).
 *
 * Which transports.  A peer with a memory key reads what the key covers
 * (the registered memory) only where the NIC checks keys: verbs (rc, dc,
 * with ud for wire-up).  UCX over TCP checks nothing: its software RMA
 * (ucp/rma/rma_sw.c: ucp_put_handler, ucp_get_req_handler) and the TCP
 * transport's own PUT (uct/tcp/tcp_ep.c: uct_tcp_ep_handle_put_req, taken
 * whatever UCX_TCP_PUT_ENABLE says) write and read any address a connected
 * peer names, and a UCX TCP interface listens for anyone.  So UCX_TLS is
 * set here, over the environment: "rc,dc", or "tcp" only when the host
 * set KVSPEER_F_UCX_ALLOW_TCP (tests, benchmarks between trusted
 * programs).
 *
 * Threads: the worker is the service thread's (single-threaded); the
 * context is created with mt_workers_shared so that mem_register() may
 * map memory from the host's threads.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/why.h"
#include "peer/kp.h"
#include "peer/ucx.h"

#if HAVE_UCX
#include <ucp/api/ucp.h>


/*
 * UCX over TCP, tuned to reach the wire's speed (docs/PERFORMANCE.md, "Peer
 * transfer"): the software GET's fragments are the TCP interface's send
 * segment (8 KiB by default: a third of the wire or less).  UCT keys are
 * given without their table's prefix (uct_config_modify() matches field
 * names: UCX_TCP_TX_SEG_SIZE is "TX_SEG_SIZE" here); TLS=tcp makes the TCP
 * interface the only one they can reach.
 */
static const char *const tcp_tuning[][2] = {
	{ "TX_SEG_SIZE", "256k" },
	{ "RX_SEG_SIZE", "256k" },
};

struct ucp_fns {
	ucs_status_t (*config_read)(const char *, const char *, ucp_config_t **);
	ucs_status_t (*config_modify)(ucp_config_t *, const char *, const char *);
	void (*config_release)(ucp_config_t *);
	ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *,
				     ucp_context_h *);
	void (*cleanup)(ucp_context_h);
	ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *);
	void (*worker_destroy)(ucp_worker_h);
	ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t **, size_t *);
	void (*worker_release_address)(ucp_worker_h, ucp_address_t *);
	ucs_status_t (*worker_get_efd)(ucp_worker_h, int *);
	ucs_status_t (*worker_arm)(ucp_worker_h);
	unsigned (*worker_progress)(ucp_worker_h);
	ucs_status_t (*mem_map)(ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *);
	ucs_status_t (*mem_unmap)(ucp_context_h, ucp_mem_h);
	ucs_status_t (*rkey_pack)(ucp_context_h, ucp_mem_h, void **, size_t *);
	void (*rkey_buffer_release)(void *);
	ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
	ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
	ucs_status_t (*ep_rkey_unpack)(ucp_ep_h, const void *, ucp_rkey_h *);
	void (*rkey_destroy)(ucp_rkey_h);
	ucs_status_ptr_t (*get_nbx)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h,
				    const ucp_request_param_t *);
	ucs_status_t (*request_check_status)(void *);
	void (*request_free)(void *);
	const char *(*status_string)(ucs_status_t);
};

struct pucx {
	struct kvspeer *kp;
	void *dl;
	struct ucp_fns f;
	ucp_context_h ctx;
	ucp_worker_h worker;
	ucp_address_t *addr;
	size_t addr_len;
	int efd;
	bool tcp;
};

struct pucx_ep {
	struct pucx *u;
	ucp_ep_h ep;
	struct conn *c;
	uint32_t inflight;
	bool failed;
};

struct pucx_rkey {
	struct pucx *u;
	ucp_rkey_h rkey;
};

struct get_ctx {
	struct pucx_ep *ep;
	pucx_get_done_fn done;
	void *arg;
	uint32_t block;
};

static int status_errno(ucs_status_t s)
{
	switch (s) {
	case UCS_OK:
		return 0;
	case UCS_ERR_NO_MEMORY:
		return -ENOMEM;
	case UCS_ERR_TIMED_OUT:
		return -ETIMEDOUT;
	case UCS_ERR_CANCELED:
		return -ECANCELED;
	case UCS_ERR_UNREACHABLE:
		return -EHOSTUNREACH;
	case UCS_ERR_CONNECTION_RESET:
	case UCS_ERR_ENDPOINT_TIMEOUT:
		return -ECONNRESET;
	case UCS_ERR_NO_DEVICE:
	case UCS_ERR_UNSUPPORTED:
		return -EPROTONOSUPPORT;
	default:
		return -EIO;
	}
}

#define SYM(field, name)                                           \
	do {                                                       \
		*(void **)&u->f.field = dlsym(u->dl, name);        \
		if (!u->f.field) {                                 \
			WHY("%s has no %s", KVS_UCP_SONAME, name); \
			return -EPROTONOSUPPORT;                   \
		}                                                  \
	} while (0)

static int load(struct pucx *u, char *why, size_t wl)
{
	u->dl = dlopen(KVS_UCP_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!u->dl) {
		WHY("cannot load %s: %s", KVS_UCP_SONAME, dlerror());
		return -EPROTONOSUPPORT;
	}
	SYM(config_read, "ucp_config_read");
	SYM(config_modify, "ucp_config_modify");
	SYM(config_release, "ucp_config_release");
	SYM(init_version, "ucp_init_version");
	SYM(cleanup, "ucp_cleanup");
	SYM(worker_create, "ucp_worker_create");
	SYM(worker_destroy, "ucp_worker_destroy");
	SYM(worker_get_address, "ucp_worker_get_address");
	SYM(worker_release_address, "ucp_worker_release_address");
	SYM(worker_get_efd, "ucp_worker_get_efd");
	SYM(worker_arm, "ucp_worker_arm");
	SYM(worker_progress, "ucp_worker_progress");
	SYM(mem_map, "ucp_mem_map");
	SYM(mem_unmap, "ucp_mem_unmap");
	SYM(rkey_pack, "ucp_rkey_pack");
	SYM(rkey_buffer_release, "ucp_rkey_buffer_release");
	SYM(ep_create, "ucp_ep_create");
	SYM(ep_close_nbx, "ucp_ep_close_nbx");
	SYM(ep_rkey_unpack, "ucp_ep_rkey_unpack");
	SYM(rkey_destroy, "ucp_rkey_destroy");
	SYM(get_nbx, "ucp_get_nbx");
	SYM(request_check_status, "ucp_request_check_status");
	SYM(request_free, "ucp_request_free");
	/* libucs, a dependency of libucp: dlsym searches it through the handle. */
	SYM(status_string, "ucs_status_string");
	return 0;
}

/* What the host's environment must say before UCX is loaded (see the top). */
static int check_env(char *why, size_t wl)
{
	const char *he = getenv("UCX_HANDLE_ERRORS");
	const char *ds = getenv("UCX_DEBUG_SIGNO");

	if (!he || strcmp(he, "none") || !ds || strcmp(ds, "0")) {
		WHY("libucs would install signal handlers in this process: set UCX_HANDLE_ERRORS=none and UCX_DEBUG_SIGNO=0 in the environment before kvspeer_new()");
		return -EPERM;
	}
	return 0;
}

static int modify(struct pucx *u, ucp_config_t *cfg, const char *k, const char *v, char *why,
		  size_t wl)
{
	ucs_status_t s = u->f.config_modify(cfg, k, v);

	if (s != UCS_OK) {
		WHY("UCX_%s=%s: %s", k, v, u->f.status_string(s));
		return status_errno(s);
	}
	return 0;
}

int pucx_new(struct kvspeer *kp, struct pucx **ret, char *why, size_t wl)
{
	bool tcp = kp->p.flags & KVSPEER_F_UCX_ALLOW_TCP;
	ucp_params_t params = {
		.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
		/* RMA: the fetcher's gets; over TCP the server's software RMA needs it too. */
		.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
		.mt_workers_shared = 1,
	};
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};
	ucp_config_t *cfg = NULL;
	struct pucx *u;
	ucs_status_t s;
	int r;

	r = check_env(why, wl);
	if (r < 0)
		return r;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->kp = kp;
	u->efd = -1;
	u->tcp = tcp;
	r = load(u, why, wl);
	if (r < 0)
		goto fail;
	s = u->f.config_read(NULL, NULL, &cfg);
	if (s != UCS_OK) {
		WHY("ucp_config_read: %s", u->f.status_string(s));
		r = status_errno(s);
		goto fail;
	}
	/* Over the environment: an operator's UCX_TLS must not bring TCP back. */
	r = modify(u, cfg, "TLS", tcp ? "tcp" : "rc,dc", why, wl);
	if (r == 0 && kp->p.ucx_devices)
		r = modify(u, cfg, "NET_DEVICES", kp->p.ucx_devices, why, wl);
	for (size_t i = 0; r == 0 && tcp && i < sizeof(tcp_tuning) / sizeof(tcp_tuning[0]); i++)
		r = modify(u, cfg, tcp_tuning[i][0], tcp_tuning[i][1], why, wl);
	if (r < 0)
		goto fail;
	s = u->f.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, cfg, &u->ctx);
	u->f.config_release(cfg);
	cfg = NULL;
	if (s != UCS_OK) {
		WHY("no %s transport (ucp_init: %s)%s", tcp ? "UCX TCP" : "verbs (rc, dc)",
		    u->f.status_string(s),
		    tcp ? "" : "; KVSPEER_TRANSPORT_TCP serves hosts without RDMA");
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	s = u->f.worker_create(u->ctx, &wp, &u->worker);
	if (s == UCS_OK)
		s = u->f.worker_get_address(u->worker, &u->addr, &u->addr_len);
	if (s == UCS_OK)
		s = u->f.worker_get_efd(u->worker, &u->efd);
	if (s != UCS_OK) {
		WHY("UCX worker: %s", u->f.status_string(s));
		r = status_errno(s);
		goto fail;
	}
	if (u->addr_len > PW_MAX_TADDR) {
		WHY("UCX worker address of %zu bytes (limit %u)", u->addr_len, PW_MAX_TADDR);
		r = -E2BIG;
		goto fail;
	}
	if (tcp)
		kp_log(kp, KVSPEER_LOG_WARNING,
		       "UCX over TCP (KVSPEER_F_UCX_ALLOW_TCP): any host that reaches this node can read and write this process's memory; tests only");
	*ret = u;
	return 0;
fail:
	if (cfg)
		u->f.config_release(cfg);
	pucx_free(u);
	return r;
}

void pucx_free(struct pucx *u)
{
	if (!u)
		return;
	if (u->addr)
		u->f.worker_release_address(u->worker, u->addr);
	if (u->worker)
		u->f.worker_destroy(u->worker);
	if (u->ctx)
		u->f.cleanup(u->ctx);
	/* libucp stays loaded: UCX does not support being unloaded (its constructors ran). */
	free(u);
}

int pucx_fd(struct pucx *u)
{
	return u->efd;
}

void pucx_progress(struct pucx *u)
{
	/* Drain, then arm; BUSY means events arrived meanwhile: drain again. */
	for (int i = 0; i < 64; i++) {
		while (u->f.worker_progress(u->worker))
			;
		if (u->f.worker_arm(u->worker) != UCS_ERR_BUSY)
			return;
	}
}

int pucx_address(struct pucx *u, const void **ret_addr, size_t *ret_len)
{
	*ret_addr = u->addr;
	*ret_len = u->addr_len;
	return 0;
}

int pucx_mem_map(struct pucx *u, void *addr, size_t len, void **ret_memh, void **ret_rkey,
		 size_t *ret_rkey_len)
{
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
			      UCP_MEM_MAP_PARAM_FIELD_PROT,
		.address = addr,
		.length = len,
		/*
		 * Remote read only.  UCX 1.13 registers with every access right
		 * whatever this says (ucp_mm.c, UCT_MD_MEM_ACCESS_ALL): a peer with
		 * the key could also write the region.  Said in kvspeer(7).
		 */
		.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_REMOTE_READ,
	};
	ucp_mem_h memh;
	void *rkey;
	size_t rlen;
	ucs_status_t s;

	s = u->f.mem_map(u->ctx, &mp, &memh);
	if (s != UCS_OK)
		return status_errno(s);
	s = u->f.rkey_pack(u->ctx, memh, &rkey, &rlen);
	if (s != UCS_OK || rlen > PW_MAX_RKEY) {
		if (s == UCS_OK)
			u->f.rkey_buffer_release(rkey);
		u->f.mem_unmap(u->ctx, memh);
		return s == UCS_OK ? -E2BIG : status_errno(s);
	}
	*ret_memh = memh;
	*ret_rkey = rkey;
	*ret_rkey_len = rlen;
	return 0;
}

void pucx_mem_unmap(struct pucx *u, void *memh, void *rkey)
{
	if (rkey)
		u->f.rkey_buffer_release(rkey);
	if (memh)
		u->f.mem_unmap(u->ctx, memh);
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct pucx_ep *e = arg;

	/* In UCX's progress: mark only; the gets in flight fail on their own. */
	e->failed = true;
	kp_log_peer(e->u->kp, KVSPEER_LOG_WARNING, "UCX endpoint to %s failed: %s",
		    e->c ? e->c->addr_str : "?", e->u->f.status_string(status));
}

int pucx_ep_new(struct pucx *u, const void *addr, size_t len, struct conn *c, struct pucx_ep **ret)
{
	struct pucx_ep *e = calloc(1, sizeof(*e));
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.address = addr,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = { .cb = ep_error, .arg = NULL },
	};
	ucs_status_t s;

	(void)len; /* the address is self-describing; its length was bounded by the parser */
	if (!e)
		return -ENOMEM;
	e->u = u;
	e->c = c;
	ep.err_handler.arg = e;
	s = u->f.ep_create(u->worker, &ep, &e->ep);
	if (s != UCS_OK) {
		free(e);
		return status_errno(s);
	}
	*ret = e;
	return 0;
}

void pucx_ep_close(struct pucx *u, struct pucx_ep *e)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = UCP_EP_CLOSE_FLAG_FORCE };
	ucs_status_ptr_t req;
	uint64_t until = peer_now_ns() + 5000 * NSEC_PER_MSEC;

	e->c = NULL;
	/* FORCE completes every request of the endpoint with an error. */
	req = u->f.ep_close_nbx(e->ep, &p);
	while (UCS_PTR_IS_PTR(req) && u->f.request_check_status(req) == UCS_INPROGRESS &&
	       peer_now_ns() < until)
		u->f.worker_progress(u->worker);
	if (UCS_PTR_IS_PTR(req))
		u->f.request_free(req);
	/* Their callbacks must have run before a fetch may finish (fetch.c: fetch_closed()). */
	while (e->inflight && peer_now_ns() < until)
		u->f.worker_progress(u->worker);
	if (e->inflight)
		kp_log(u->kp, KVSPEER_LOG_ERR, "UCX: %u gets did not complete after a forced close",
		       e->inflight);
	else
		free(e);
	/* With gets still out (a UCX bug) the context stays, leaked, for their callbacks. */
}

int pucx_rkey_unpack(struct pucx_ep *e, const void *buf, size_t len, struct pucx_rkey **ret)
{
	struct pucx_rkey *k;
	ucs_status_t s;

	(void)len;
	if (!buf)
		return -EINVAL;
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->u = e->u;
	s = e->u->f.ep_rkey_unpack(e->ep, buf, &k->rkey);
	if (s != UCS_OK) {
		free(k);
		return status_errno(s);
	}
	*ret = k;
	return 0;
}

void pucx_rkey_free(struct pucx_rkey *k)
{
	if (!k)
		return;
	k->u->f.rkey_destroy(k->rkey);
	free(k);
}

static void get_done(void *request, ucs_status_t status, void *user_data)
{
	struct get_ctx *g = user_data;
	struct pucx_ep *e = g->ep;

	e->inflight--;
	g->done(g->arg, g->block, status_errno(status));
	e->u->f.request_free(request);
	free(g);
}

int pucx_get(struct pucx_ep *e, void *dst, uint64_t len, uint64_t raddr, struct pucx_rkey *k,
	     pucx_get_done_fn done, void *arg, uint32_t block)
{
	struct get_ctx *g;
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						  UCP_OP_ATTR_FIELD_USER_DATA };
	ucs_status_ptr_t req;

	if (e->failed || !k)
		return -ECONNRESET;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->ep = e;
	g->done = done;
	g->arg = arg;
	g->block = block;
	p.cb.send = get_done;
	p.user_data = g;
	req = e->u->f.get_nbx(e->ep, dst, len, raddr, k->rkey, &p);
	if (req == NULL) {
		/* Done at once: the callback is not called. */
		free(g);
		done(arg, block, 0);
		return 0;
	}
	if (UCS_PTR_IS_ERR(req)) {
		free(g);
		return status_errno(UCS_PTR_STATUS(req));
	}
	e->inflight++;
	return 0;
}

#else /* !HAVE_UCX: the UCX transport is not compiled in */

int pucx_new(struct kvspeer *kp, struct pucx **ret, char *why, size_t wl)
{
	snprintf(why, wl, "not compiled in (configure --with-ucx)");
	return -EPROTONOSUPPORT;
}
void pucx_free(struct pucx *u)
{
}
int pucx_fd(struct pucx *u)
{
	return -1;
}
void pucx_progress(struct pucx *u)
{
}
int pucx_address(struct pucx *u, const void **ret_addr, size_t *ret_len)
{
	return -EPROTONOSUPPORT;
}
int pucx_mem_map(struct pucx *u, void *addr, size_t len, void **ret_memh, void **ret_rkey,
		 size_t *ret_rkey_len)
{
	return -EPROTONOSUPPORT;
}
void pucx_mem_unmap(struct pucx *u, void *memh, void *rkey)
{
}
int pucx_ep_new(struct pucx *u, const void *addr, size_t len, struct conn *c, struct pucx_ep **ret)
{
	return -EPROTONOSUPPORT;
}
void pucx_ep_close(struct pucx *u, struct pucx_ep *ep)
{
}
int pucx_rkey_unpack(struct pucx_ep *ep, const void *buf, size_t len, struct pucx_rkey **ret)
{
	return -EPROTONOSUPPORT;
}
void pucx_rkey_free(struct pucx_rkey *k)
{
}
int pucx_get(struct pucx_ep *ep, void *dst, uint64_t len, uint64_t raddr, struct pucx_rkey *k,
	     pucx_get_done_fn done, void *arg, uint32_t block)
{
	return -EPROTONOSUPPORT;
}
#endif
