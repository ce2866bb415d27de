/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "client.h"

void client_free_registration(struct kvs_client *c)
{
	for (unsigned i = 0; i < c->reg_nr_mems; i++)
		if (c->reg_mems[i].fd >= 0)
			close(c->reg_mems[i].fd);
	for (unsigned i = 0; i < c->reg_nr_layers; i++)
		free((char *)c->reg_layers[i].name);
	c->reg_mems = mfree(c->reg_mems);
	c->reg_layers = mfree(c->reg_layers);
	c->reg_nr_mems = c->reg_nr_layers = 0;
	c->registered = false;
}

static bool has_fd(uint32_t kind)
{
	return kind == KVS_MEM_HOST_FD || kind == KVS_MEM_CUDA_VMM_FD;
}

static int send_registration(struct kvs_client *c, const struct kvs_mem *mems, unsigned nr_mems,
			     const struct kvs_layer *layers, unsigned nr_layers, uint32_t flags)
{
	size_t len = sizeof(struct kvs_msg_register) + nr_mems * sizeof(struct kvs_wire_mem) +
		     nr_layers * sizeof(struct kvs_wire_layer);
	struct kvs_msg_register *m;
	struct kvs_wire_mem *wm;
	struct kvs_wire_layer *wl;
	struct kvs_msg_reply rep;
	int fds[KVS_MAX_FDS];
	unsigned nfds = 0;
	ssize_t n;
	int r;

	if (len > KVS_MSG_MAX)
		return -E2BIG;
	m = calloc(1, len);
	if (!m)
		return -ENOMEM;
	m->hdr.type = KVS_MSG_REGISTER;
	m->hdr.size = (uint32_t)len;
	m->nr_mems = nr_mems;
	m->nr_layers = nr_layers;
	m->flags = flags;
	wm = (struct kvs_wire_mem *)(m + 1);
	wl = (struct kvs_wire_layer *)(wm + nr_mems);
	for (unsigned i = 0; i < nr_mems; i++) {
		wm[i].kind = mems[i].kind;
		wm[i].size = mems[i].size;
		if (has_fd(mems[i].kind)) {
			if (nfds == KVS_MAX_FDS) {
				free(m);
				return -E2BIG;
			}
			wm[i].fd_index = nfds;
			fds[nfds++] = mems[i].fd;
		} else {
			memcpy(wm[i].ipc_handle, mems[i].ipc_handle, sizeof(wm[i].ipc_handle));
		}
	}
	for (unsigned i = 0; i < nr_layers; i++) {
		const struct kvs_layer *l = &layers[i];

		if (!l->name || strlen(l->name) >= sizeof(wl[i].name)) {
			free(m);
			client_log(c, KVS_LOG_ERR, "layer %u: a name of 1-%zu characters is required",
				   i, sizeof(wl[i].name) - 1);
			return -EINVAL;
		}
		strcpy(wl[i].name, l->name);
		wl[i].mem_index = l->mem;
		wl[i].segments = l->segments;
		wl[i].offset = l->offset;
		wl[i].num_blocks = l->num_blocks;
		wl[i].segment_bytes = l->segment_bytes;
		wl[i].kv_stride = l->kv_stride;
		wl[i].block_stride = l->block_stride;
	}
	memset(&rep, 0, sizeof(rep));
	n = client_request(c, m, len, fds, nfds, &rep, sizeof(rep), NULL);
	free(m);
	if (n < 0)
		return (int)n;
	r = client_reply_status(c, &rep, (size_t)n, "REGISTER");
	if (r < 0 && r != -EBADMSG) {
		rep.text[sizeof(rep.text) - 1] = '\0';
		client_log(c, KVS_LOG_ERR, "registration refused: %s", rep.text);
	}
	return r;
}

/* Keep a private copy (names, duplicated fds) for kvs_reconnect(). */
static int keep_registration(struct kvs_client *c, const struct kvs_mem *mems, unsigned nr_mems,
			     const struct kvs_layer *layers, unsigned nr_layers, uint32_t flags)
{
	client_free_registration(c);
	c->reg_mems = calloc(nr_mems, sizeof(*mems));
	c->reg_layers = calloc(nr_layers, sizeof(*layers));
	if (!c->reg_mems || !c->reg_layers)
		goto fail;
	for (unsigned i = 0; i < nr_mems; i++) {
		c->reg_mems[i] = mems[i];
		c->reg_mems[i].fd = -1;
		c->reg_nr_mems = i + 1;
		if (has_fd(mems[i].kind)) {
			c->reg_mems[i].fd = fcntl(mems[i].fd, F_DUPFD_CLOEXEC, 3);
			if (c->reg_mems[i].fd < 0)
				goto fail;
		}
	}
	for (unsigned i = 0; i < nr_layers; i++) {
		c->reg_layers[i] = layers[i];
		c->reg_layers[i].name = strdup(layers[i].name);
		c->reg_nr_layers = i + 1;
		if (!c->reg_layers[i].name)
			goto fail;
	}
	c->reg_flags = flags;
	c->registered = true;
	return 0;
fail:
	client_free_registration(c);
	return -ENOMEM;
}

int client_send_registration(struct kvs_client *c)
{
	return send_registration(c, c->reg_mems, c->reg_nr_mems, c->reg_layers, c->reg_nr_layers,
				 c->reg_flags);
}

int kvs_register(struct kvs_client *c, const struct kvs_mem *mems, unsigned nr_mems,
		 const struct kvs_layer *layers, unsigned nr_layers, uint32_t flags)
{
	int r;

	if (!mems || !layers || !nr_mems || !nr_layers)
		return -EINVAL;
	r = send_registration(c, mems, nr_mems, layers, nr_layers, flags);
	if (r == 0)
		r = keep_registration(c, mems, nr_mems, layers, nr_layers, flags);
	return r;
}

int kvs_unregister(struct kvs_client *c)
{
	struct kvs_msg_hdr h = { .type = KVS_MSG_UNREGISTER, .size = sizeof(h) };
	struct kvs_msg_reply rep;
	ssize_t n;
	int r;

	memset(&rep, 0, sizeof(rep));
	n = client_request(c, &h, sizeof(h), NULL, 0, &rep, sizeof(rep), NULL);
	if (n < 0)
		return (int)n;
	r = client_reply_status(c, &rep, (size_t)n, "UNREGISTER");
	if (r == 0)
		client_free_registration(c);
	return r;
}

int kvs_host_alloc(uint64_t size, int *ret_fd, void **ret_ptr)
{
	void *p;
	int fd, r;

	if (size == 0)
		return -EINVAL;
	fd = memfd_create("kvstash-kv", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	/* kvstashd maps only memory that cannot shrink under its copies. */
	if (ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		close(fd);
		return r;
	}
	*ret_fd = fd;
	*ret_ptr = p;
	return 0;
}

void kvs_host_free(int fd, void *ptr, uint64_t size)
{
	if (ptr)
		munmap(ptr, size);
	if (fd >= 0)
		close(fd);
}

unsigned client_registered_layers(const struct kvs_client *c)
{
	return c->registered ? c->reg_nr_layers : 0;
}
