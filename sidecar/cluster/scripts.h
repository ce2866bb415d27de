/* SPDX-License-Identifier: MIT */
/*
 * The registry's Lua scripts (Redis >= 6.2 runs them atomically).  Loaded
 * with SCRIPT LOAD on every connection (a restarted Redis has none) and
 * run with EVALSHA.  Every script that writes block entries first checks
 * that the writer's token is the lease's: a node whose lease expired or
 * was taken over is fenced here, server-side, whatever it believes.
 * reply.c validates what each returns.
 */
#ifndef KVS_REG_SCRIPTS_H
#define KVS_REG_SCRIPTS_H

/*
 * ACQUIRE  KEYS: lease, epoch counter.  ARGV: nonce, previous token (or
 * ""), force (1: take over a live lease of another incarnation, as a
 * restarted node does), ttl ms, peer address.
 * -> {1, token, epoch, displaced token or ""} or {0, holder token, pttl}.
 */
#define SCRIPT_ACQUIRE                                                                   \
	"local cur = redis.call('HGET', KEYS[1], 'tok')\n"                               \
	"if cur and cur ~= ARGV[2] and ARGV[3] ~= '1' then\n"                            \
	"  return {0, cur, redis.call('PTTL', KEYS[1])}\n"                              \
	"end\n"                                                                          \
	"local e = redis.call('INCR', KEYS[2])\n"                                        \
	"local tok = string.format('%d:%s', e, ARGV[1])\n"                              \
	"redis.call('DEL', KEYS[1])\n"                                                   \
	"redis.call('HSET', KEYS[1], 'tok', tok, 'epoch', tostring(e), 'addr', ARGV[5])\n" \
	"redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"                                      \
	"return {1, tok, e, cur or ''}\n"

/* RENEW  KEYS: lease.  ARGV: token, ttl ms.  -> 1, or 0 (lost). */
#define SCRIPT_RENEW                                        \
	"if redis.call('HGET', KEYS[1], 'tok') == ARGV[1] then\n" \
	"  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"         \
	"  return 1\n"                                        \
	"end\n"                                               \
	"return 0\n"

/* RELEASE  KEYS: lease.  ARGV: token.  -> 1, or 0 (not ours). */
#define SCRIPT_RELEASE                                      \
	"if redis.call('HGET', KEYS[1], 'tok') == ARGV[1] then\n" \
	"  return redis.call('DEL', KEYS[1])\n"               \
	"end\n"                                               \
	"return 0\n"

/*
 * REGISTER  KEYS: lease, then ninserts block keys, then block keys to
 * remove.  ARGV: token, node, epoch, ninserts, entry ttl ms.
 * -> the number of block keys, or the error "FENCED".  A hash left empty
 * by HDEL is deleted by Redis; the entry TTL bounds what a node that died
 * for good leaves behind (live nodes refresh theirs, registry.c).
 */
#define SCRIPT_REGISTER                                                   \
	"if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then\n"            \
	"  return redis.error_reply('FENCED lease lost')\n"                 \
	"end\n"                                                              \
	"local node, ep, ttl = ARGV[2], ARGV[3], ARGV[5]\n"                  \
	"local n = tonumber(ARGV[4]) + 1\n"                                  \
	"for i = 2, n do\n"                                                  \
	"  redis.call('HSET', KEYS[i], node, ep)\n"                          \
	"  redis.call('PEXPIRE', KEYS[i], ttl)\n"                            \
	"end\n"                                                              \
	"for i = n + 1, #KEYS do redis.call('HDEL', KEYS[i], node) end\n"    \
	"return #KEYS - 1\n"

/*
 * QUERY  KEYS: a chunk of block keys, in prefix order.  ARGV: the lease
 * key prefix.  The holders of the first key whose lease holds the epoch
 * their entry carries are the candidates; each keeps its run while it
 * holds the next key under the same epoch; the loop ends when none is
 * left.  -> {node, run, epoch, addr, ...} for every candidate.
 */
#define SCRIPT_QUERY                                                         \
	"local pfx = ARGV[1]\n"                                                 \
	"local cand, run, addr, eps, n = {}, {}, {}, {}, 0\n"                   \
	"local h = redis.call('HGETALL', KEYS[1])\n"                            \
	"for j = 1, #h, 2 do\n"                                                 \
	"  local l = redis.call('HMGET', pfx .. h[j], 'epoch', 'addr')\n"       \
	"  if l[1] and l[1] == h[j + 1] then\n"                                 \
	"    n = n + 1; cand[n] = h[j]; eps[n] = h[j + 1]\n"                    \
	"    addr[n] = l[2] or ''; run[n] = 1\n"                                \
	"  end\n"                                                               \
	"end\n"                                                                 \
	"local alive, i = n, 2\n"                                               \
	"while alive > 0 and i <= #KEYS do\n"                                   \
	"  for c = 1, n do\n"                                                   \
	"    if run[c] == i - 1 then\n"                                         \
	"      if redis.call('HGET', KEYS[i], cand[c]) == eps[c] then\n"        \
	"        run[c] = i\n"                                                  \
	"      else\n"                                                          \
	"        alive = alive - 1\n"                                           \
	"      end\n"                                                           \
	"    end\n"                                                             \
	"  end\n"                                                               \
	"  i = i + 1\n"                                                         \
	"end\n"                                                                 \
	"local out = {}\n"                                                      \
	"for c = 1, n do\n"                                                     \
	"  out[#out + 1] = cand[c]; out[#out + 1] = run[c]\n"                  \
	"  out[#out + 1] = eps[c]; out[#out + 1] = addr[c]\n"                  \
	"end\n"                                                                 \
	"return out\n"

#endif /* KVS_REG_SCRIPTS_H */
