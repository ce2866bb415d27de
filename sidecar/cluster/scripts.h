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
 * Model.  A node's lease, lease:<node> {tok, epoch, addr}, says it is
 * alive and under which epoch.  What it holds is one set per epoch and
 * namespace, n:<node>:<epoch>:<digest>, of 16-byte block keys (its "run
 * sets"), listed in sets:<node>; nodes lists every node that ever took a
 * lease.  A query tests its first key against each live node's set of
 * the namespace (a script), then asks the sets of the nodes holding it
 * for whole chunks of keys with plain SMISMEMBERs: Redis does a set lookup
 * per key and nothing else, and a registration is one variadic SADD or
 * SREM per namespace per batch.  Only the live epoch's sets are ever read, so a
 * node's blocks vanish with its lease and come back only as it
 * re-registers them under its new epoch; its ACQUIRE unlinks its old
 * sets.  Sets carry the entry TTL, refreshed as the node registers, so a
 * node that left for good leaves nothing after one entry TTL; ACQUIRE
 * drops from nodes the names with neither a lease nor a list of sets.
 */

/*
 * ACQUIRE  KEYS: lease, epoch counter, the node's list of run sets, the
 * cluster's node list.  ARGV: nonce, previous token (or ""), force (1:
 * take over a live lease of another incarnation, as a restarted node
 * does), ttl ms, peer address, node name, lease key prefix, this
 * process's incarnation id (16 hex digits), the epoch floor (the highest
 * epoch it held, or the wall clock in ms if higher).  A lease of the same
 * incarnation id is this process's own, whatever its token (an older one,
 * from a replica promoted while behind): taken over too.  The epoch is
 * above the counter and above the floor, so it never repeats, even if
 * Redis forgot (Lua's numbers are doubles: exact to 2^53, and tostring()
 * writes an integer below 10^14 without an exponent; ms are below until
 * the year 5138).
 * -> {1, token, epoch, displaced token or ""} or {0, holder token, pttl}.
 */
#define SCRIPT_ACQUIRE                                                                     \
	"local cur = redis.call('HGET', KEYS[1], 'tok')\n"                                 \
	"if cur and cur ~= ARGV[2] and ARGV[3] ~= '1' and\n"                               \
	"    redis.call('HGET', KEYS[1], 'inc') ~= ARGV[8] then\n"                         \
	"  return {0, cur, redis.call('PTTL', KEYS[1])}\n"                                 \
	"end\n"                                                                            \
	"local e = redis.call('INCR', KEYS[2])\n"                                          \
	"if e <= tonumber(ARGV[9]) then\n"                                                 \
	"  e = tonumber(ARGV[9]) + 1\n"                                                    \
	"  redis.call('SET', KEYS[2], tostring(e))\n"                                      \
	"end\n"                                                                            \
	"local tok = string.format('%d:%s', e, ARGV[1])\n"                                 \
	"redis.call('DEL', KEYS[1])\n"                                                     \
	"redis.call('HSET', KEYS[1], 'tok', tok, 'epoch', tostring(e), 'addr', ARGV[5],\n" \
	"  'inc', ARGV[8])\n"                                                              \
	"redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"                                        \
	"for _, s in ipairs(redis.call('SMEMBERS', KEYS[3])) do\n"                         \
	"  redis.call('UNLINK', s)\n"                                                      \
	"end\n"                                                                            \
	"redis.call('DEL', KEYS[3])\n"                                                     \
	"local lst = string.sub(KEYS[3], 1, #KEYS[3] - #ARGV[6])\n"                        \
	"for _, nd in ipairs(redis.call('SMEMBERS', KEYS[4])) do\n"                        \
	"  if redis.call('EXISTS', ARGV[7] .. nd, lst .. nd) == 0 then\n"                  \
	"    redis.call('SREM', KEYS[4], nd)\n"                                            \
	"  end\n"                                                                          \
	"end\n"                                                                            \
	"redis.call('SADD', KEYS[4], ARGV[6])\n"                                           \
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
 * REGISTER  KEYS: lease.  ARGV: token, node, epoch, entry ttl ms, run set
 * prefix ("kvs:<cluster>:n:"), the node's list of run sets, the number of
 * insert groups and of remove groups, then per group its 16-byte digest
 * and its count, then the 16-byte keys in group order (a group's keys
 * after the previous group's).  -> the number of keys, or the error
 * "FENCED".  Each group is one variadic SADD or SREM, in slices (Lua's
 * unpack() is bounded by its stack); a set left empty is deleted by
 * Redis.
 */
#define SCRIPT_REGISTER                                                              \
	"if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then\n"                    \
	"  return redis.error_reply('FENCED lease lost')\n"                          \
	"end\n"                                                                      \
	"local ttl, lst = ARGV[4], ARGV[6]\n"                                        \
	"local spfx = ARGV[5] .. ARGV[2] .. ':' .. ARGV[3] .. ':'\n"                 \
	"local gi, gr = tonumber(ARGV[7]), tonumber(ARGV[8])\n"                      \
	"local first = 9 + 2 * (gi + gr)\n"                                          \
	"local m = first\n"                                                          \
	"for g = 0, gi + gr - 1 do\n"                                                \
	"  local set, c = spfx .. ARGV[9 + 2 * g], tonumber(ARGV[10 + 2 * g])\n"     \
	"  local cmd = g < gi and 'SADD' or 'SREM'\n"                                \
	"  for j = m, m + c - 1, 4000 do\n"                                          \
	"    redis.call(cmd, set, unpack(ARGV, j, math.min(j + 3999, m + c - 1)))\n" \
	"  end\n"                                                                    \
	"  if g < gi then\n"                                                         \
	"    redis.call('PEXPIRE', set, ttl)\n"                                      \
	"    redis.call('SADD', lst, set)\n"                                         \
	"  end\n"                                                                    \
	"  m = m + c\n"                                                              \
	"end\n"                                                                      \
	"if gi > 0 then redis.call('PEXPIRE', lst, ttl) end\n"                       \
	"return #ARGV - first + 1\n"

/*
 * QUERY  KEYS: the cluster's node list.  ARGV: the lease key prefix, the
 * run set prefix, the namespace digest (16 bytes), the asking node's name,
 * the first key of a query (16 bytes).  The candidates: every other node
 * whose lease is live and whose run set of that epoch and namespace holds
 * the key.  -> {node, 1, epoch, addr, ...} per candidate, at most 1024
 * (reply.c's bound).  The rest of the query is plain SMISMEMBERs on the
 * candidates' sets (regquery.c): no script call per key.
 */
#define SCRIPT_QUERY                                                                   \
	"local out = {}\n"                                                             \
	"for _, nd in ipairs(redis.call('SMEMBERS', KEYS[1])) do\n"                    \
	"  if nd ~= ARGV[4] and #out < 4096 then\n"                                    \
	"    local l = redis.call('HMGET', ARGV[1] .. nd, 'epoch', 'addr')\n"          \
	"    if l[1] and redis.call('SISMEMBER',\n"                                    \
	"        ARGV[2] .. nd .. ':' .. l[1] .. ':' .. ARGV[3], ARGV[5]) == 1 then\n" \
	"      out[#out + 1] = nd; out[#out + 1] = 1\n"                                \
	"      out[#out + 1] = l[1]; out[#out + 1] = l[2] or ''\n"                     \
	"    end\n"                                                                    \
	"  end\n"                                                                      \
	"end\n"                                                                        \
	"return out\n"

#endif /* KVS_REG_SCRIPTS_H */
