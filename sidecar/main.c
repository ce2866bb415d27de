/* SPDX-License-Identifier: MIT */
/*
 * kvstashd: the KV-cache offload sidecar.  See kvstashd(8).
 *
 * Exit codes: 0 clean shutdown; 1 runtime failure; 2 bad usage or
 * configuration; 3 the socket is held by a live daemon.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <kvstash/wire.h>
#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "common/mem.h"
#include "base/conf.h"
#include "control/cluster.h"
#include "control/peer-host.h"
#include "control/tier-attach.h"
#include "control/daemon.h"
#include "control/lifecycle.h"
#include "obs/metrics.h"
#include "obs/log.h"

#define DEFAULT_CONFIG SYSCONFDIR "/kvstash/kvstash.conf"

enum {
	EXIT_RUNTIME = 1,
	EXIT_USAGE = 2,
	EXIT_INUSE = 3,
};

enum {
	OPT_CHECK = 1000,
	OPT_VERSION,
	OPT_KEY_BASE = 2000, /* one generated option per configuration key */
};

/* "--pool-size": the configuration key of a generated option. */
static void option_name(const struct config_key_info *k, char *buf, size_t len)
{
	snprintf(buf, len, "%s-%s", k->section, k->key);
	for (char *p = buf; *p; p++)
		if (*p == '_')
			*p = '-';
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvstashd [OPTIONS]\n"
		"\n"
		"KV-cache offload sidecar for LLM inference engines.\n"
		"\n"
		"  -c, --config=FILE       configuration file (default %s)\n"
		"  -o SECTION.KEY=VALUE    set one configuration key (repeatable)\n"
		"      --SECTION-KEY=VALUE the same, e.g. --pool-size=8G\n"
		"      --check-config      validate, print the effective configuration, exit\n"
		"  -h, --help              this text\n"
		"  -V, --version           print the version\n"
		"\n"
		"Configuration keys (kvstash.conf(5)):\n",
		DEFAULT_CONFIG);
	for (unsigned i = 0; config_key_at(i); i++) {
		const struct config_key_info *k = config_key_at(i);
		char name[64];

		option_name(k, name, sizeof(name));
		fprintf(f, "  --%s\n      [%s] %s: %s\n", name, k->section, k->key, k->help);
	}
}

/*
 * The soft RLIMIT_NOFILE (often 1024) is kept low for programs that use
 * select(); kvstashd uses epoll (and poll in libmicrohttpd), so it takes
 * the hard limit, as systemd advises daemons to: every session holds a
 * socket, a region and its registered fds.  Then say so when even that
 * is below what the configured limits may hold.
 */
static void raise_fd_limit(const struct kvs_config *cfg)
{
	uint64_t need = (uint64_t)cfg->max_sessions * (2 + KVS_MAX_FDS) + cfg->max_handshakes +
			cfg->max_admin_sessions + 64;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		log_warning_errno(errno, "getrlimit(RLIMIT_NOFILE)");
		return;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t was = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			log_warning_errno(errno, "cannot raise RLIMIT_NOFILE from %llu to %llu",
					  (unsigned long long)was, (unsigned long long)rl.rlim_max);
			rl.rlim_cur = was;
		} else {
			log_info("RLIMIT_NOFILE raised from %llu to %llu", (unsigned long long)was,
				 (unsigned long long)rl.rlim_cur);
		}
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
		log_notice("RLIMIT_NOFILE is %llu, below the %llu fds max_sessions = %u may hold: "
			   "past it, new connections wait until fds are freed",
			   (unsigned long long)rl.rlim_cur, (unsigned long long)need,
			   cfg->max_sessions);
}

/* The command line, before the configuration file is read. */
struct cmdline {
	const char *config;
	bool explicit_config; /* -c or KVSTASH_CONFIG: the file must exist */
	bool check;	      /* --check-config */
	char **sets;	      /* SECTION.KEY=VALUE from -o and --SECTION-KEY, in order */
	unsigned nsets;
};

#define GO_ON (-1) /* not an exit code: the step passed */

/*
 * The options, with one generated per configuration key: GO_ON, or the
 * exit code (--help, --version, a bad option).
 */
static int parse_args(int argc, char **argv, struct cmdline *cl)
{
	static char names[128][64];
	struct option opts[160] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, OPT_CHECK },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
	};
	unsigned nopts = 4, nkeys = 0;
	int c;

	while (config_key_at(nkeys) && nkeys < 128) {
		option_name(config_key_at(nkeys), names[nkeys], sizeof(names[nkeys]));
		opts[nopts++] = (struct option){ names[nkeys], required_argument, NULL,
						 OPT_KEY_BASE + (int)nkeys };
		nkeys++;
	}
	cl->sets = calloc((size_t)argc, sizeof(*cl->sets));
	if (!cl->sets)
		return EXIT_RUNTIME;

	/* Options first, applied after the file so the command line wins. */
	while ((c = getopt_long(argc, argv, "c:o:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			cl->config = optarg;
			cl->explicit_config = true;
			break;
		case 'o':
			cl->sets[cl->nsets++] = strdup(optarg);
			break;
		case OPT_CHECK:
			cl->check = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvstashd %s (wire %u.%u)\n", PACKAGE_VERSION, KVS_WIRE_MAJOR,
			       KVS_WIRE_MINOR);
			return 0;
		default:
			if (c >= OPT_KEY_BASE && c < OPT_KEY_BASE + (int)nkeys) {
				const struct config_key_info *k = config_key_at(c - OPT_KEY_BASE);
				size_t n = strlen(k->section) + strlen(k->key) + strlen(optarg) + 3;
				char *s = malloc(n);

				if (!s)
					return EXIT_RUNTIME;
				snprintf(s, n, "%s.%s=%s", k->section, k->key, optarg);
				cl->sets[cl->nsets++] = s;
				break;
			}
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvstashd: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	return GO_ON;
}

/*
 * The file, then the command line's assignments over it, validated (and
 * with --check-config, each module's section checked and the result
 * printed): GO_ON with @cfg to run, or the exit code with @cfg freed.
 */
static int load_config(struct kvs_config *cfg, struct cmdline *cl)
{
	char err[512];
	int r;

	r = config_init(cfg);
	if (r < 0) {
		fprintf(stderr, "kvstashd: %s\n", strerror(-r));
		return EXIT_RUNTIME;
	}
	r = config_load(cfg, cl->config, cl->explicit_config, err, sizeof(err));
	for (unsigned i = 0; r == 0 && i < cl->nsets; i++) {
		char e2[384];

		r = config_set_assignment(cfg, cl->sets[i], e2, sizeof(e2));
		if (r < 0)
			snprintf(err, sizeof(err), "command line: %s", e2);
	}
	if (r == 0)
		r = config_validate(cfg, err, sizeof(err));
	for (unsigned i = 0; i < cl->nsets; i++)
		free(cl->sets[i]);
	cl->sets = mfree(cl->sets);
	if (r < 0) {
		fprintf(stderr, "kvstashd: %s\n", err);
		config_free(cfg);
		return EXIT_USAGE;
	}
	if (cl->check && ((r = cluster_check_config(cfg, err, sizeof(err))) < 0 ||
			  (r = tier_check_config(cfg, err, sizeof(err))) < 0 ||
			  (r = peer_check_config(cfg, err, sizeof(err))) < 0)) {
		fprintf(stderr, "kvstashd: %s\n", err);
		config_free(cfg);
		return EXIT_USAGE;
	}
	if (cl->check) {
		printf("# effective configuration (from %s and the command line)\n", cl->config);
		config_print(cfg, stdout);
		config_free(cfg);
		return 0;
	}
	return GO_ON;
}

/* The log as configured, and the fd limit the sessions need. */
static void open_log(const struct kvs_config *cfg, const char *config)
{
	int r;

	r = log_open(strcmp(cfg->log_target, "syslog") == 0 ? LOG_TARGET_SYSLOG :
		     strcmp(cfg->log_target, "file") == 0   ? LOG_TARGET_FILE :
								LOG_TARGET_STDERR,
		     cfg->log_file, cfg->log_level);
	if (r < 0)
		log_warning_errno(r, "cannot open log file %s; logging to stderr", cfg->log_file);
	log_set_ratelimit((uint64_t)cfg->log_ratelimit_interval_ms * 1000000ull,
			  cfg->log_ratelimit_burst);
	log_info("kvstashd %s starting (wire %u.%u, config %s)", PACKAGE_VERSION, KVS_WIRE_MAJOR,
		 KVS_WIRE_MINOR, config);
	raise_fd_limit(cfg);
}

int main(int argc, char **argv)
{
	struct cmdline cl = { .config = getenv("KVSTASH_CONFIG") };
	struct kvs_config cfg;
	struct daemon d;
	int r;

	if (!cl.config)
		cl.config = DEFAULT_CONFIG;
	else
		cl.explicit_config = true;
	r = parse_args(argc, argv, &cl);
	if (r != GO_ON)
		return r;
	r = load_config(&cfg, &cl);
	if (r != GO_ON)
		return r;
	open_log(&cfg, cl.config);

	r = daemon_init(&d, &cfg, cl.config);
	if (r == 0) {
		log_notice("ready: %s", cfg.socket_path);
		metrics_set_ready(true);
#if HAVE_SYSTEMD
		/* The pool is pinned and the socket listens: now systemd may start engines. */
		sd_notifyf(0, "READY=1\nSTATUS=serving %s\nMAINPID=%lu", cfg.socket_path,
			   (unsigned long)getpid());
#endif
		r = daemon_run(&d);
	}
	daemon_fini(&d);
	log_info("kvstashd exiting%s", r ? " after an error" : "");
	log_close();
	config_free(&cfg);
	if (r == -EADDRINUSE)
		return EXIT_INUSE;
	return r ? EXIT_RUNTIME : 0;
}
