/* SPDX-License-Identifier: MIT */
/*
 * Admission of accepted connections (admit.c): per-host limits on
 * connections and locks, and the budget of unauthenticated connections.
 * Service thread only.
 */
#ifndef KVS_PEER_ADMIT_H
#define KVS_PEER_ADMIT_H

#include "peer/internal.h"

int admit_init(struct kvspeer *kp);
void admit_fini(struct kvspeer *kp);
/*
 * May a connection from @sa be accepted?  0 and its host's account in
 * *@ret (possibly after closing another unauthenticated connection to
 * make room), or -EUSERS (counted by reason).
 */
int admit_accept(struct kvspeer *kp, const struct sockaddr_storage *sa, struct peer_acct **ret);
/* admit_accept() said yes, but no conn came of it: @a goes if unused. */
void admit_cancel(struct kvspeer *kp, struct peer_acct *a);
/* @c, just made, counts against @a, unauthenticated. */
void admit_attach(struct kvspeer *kp, struct conn *c, struct peer_acct *a);
void admit_authenticated(struct kvspeer *kp, struct conn *c);
/* @c closed (its locks already ended). */
void admit_release(struct kvspeer *kp, struct conn *c);
/* May @c's host take one more lock?  false (counted) at max_locks_per_peer. */
bool admit_may_lock(struct kvspeer *kp, const struct conn *c);
/* @c's host holds one more lock, one fewer. */
void admit_locked(struct conn *c);
void admit_unlock(struct conn *c);

#endif /* KVS_PEER_ADMIT_H */
