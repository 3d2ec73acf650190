/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine test fixture's connection manager part (test_cm.c,
 * test_cm_limits.c, test_peer_timeout.c): a non-blocking uiw_cm channel and
 * its next event with a timeout. Include after the engine's header (the
 * uiw_cm API) and eng_test.h.
 */
#ifndef UIWARP_CM_TEST_H
#define UIWARP_CM_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include "eng_test.h"

/* A uiw_cm channel whose descriptor is non-blocking, or NULL. */
static inline struct uiw_cm_channel *eng_cm_chan(void)
{
    struct uiw_cm_channel *ch = uiw_cm_channel_create();
    if (ch)
        fcntl(uiw_cm_channel_fd(ch), F_SETFL, O_NONBLOCK);
    return ch;
}

/* Next event within ms: 0, -ETIMEDOUT or an error. */
static inline int eng_cm_next(struct uiw_cm_channel *ch, struct uiw_cm_event *ev, int ms)
{
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    for (;;) {
        int rc = uiw_cm_get_event(ch, ev);
        if (rc != -EAGAIN)
            return rc;
        int64_t left = (int64_t)(end - eng_now_ms());
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = uiw_cm_channel_fd(ch), .events = POLLIN};
        poll(&p, 1, (int)left);
    }
}

#endif
