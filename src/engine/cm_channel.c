/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CM event channels: a queue plus a pipe whose read end is readable exactly
 * while the queue holds an event (one byte in the pipe for a non-empty
 * queue), so poll() on uiw_cm_channel_fd() is exact and events can be
 * withdrawn (uiw_cm_purge) without leaving stale wake-ups behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_int.h"

UIW_EXPORT struct uiw_cm_channel *uiw_cm_channel_create(void)
{
    struct uiw_cm_channel *ch = calloc(1, sizeof(*ch));
    int p[2];
    if (!ch)
        return NULL;
    if (pipe2(p, O_CLOEXEC) < 0) {
        free(ch);
        return NULL;
    }
    /* The write end never blocks (it holds at most one byte anyway). */
    (void)fcntl(p[1], F_SETFL, O_NONBLOCK);
    ch->rd = p[0];
    ch->wr = p[1];
    pthread_mutex_init(&ch->lock, NULL);
    return ch;
}

UIW_EXPORT void uiw_cm_channel_destroy(struct uiw_cm_channel *ch)
{
    if (!ch)
        return;
    struct uiw_cm_ev_node *n = ch->head;
    while (n) {
        struct uiw_cm_ev_node *next = n->next;
        free(n);
        n = next;
    }
    close(ch->rd);
    close(ch->wr);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
}

UIW_EXPORT int uiw_cm_channel_fd(const struct uiw_cm_channel *ch)
{
    return ch ? ch->rd : -1;
}

/* ch->lock held: the queue became non-empty / empty. */
static void wake_set(struct uiw_cm_channel *ch)
{
    const char b = 1;
    while (write(ch->wr, &b, 1) < 0 && errno == EINTR)
        ;
}

static void wake_clear(struct uiw_cm_channel *ch)
{
    char b;
    /* The byte is there (invariant), so this read does not block even
     * when the application left the read end blocking. */
    while (read(ch->rd, &b, 1) < 0 && errno == EINTR)
        ;
}

UIW_EXPORT void uiw_cm_channel_set_sink(struct uiw_cm_channel *ch, uiw_cm_sink_fn fn, void *arg)
{
    if (!ch)
        return;
    pthread_mutex_lock(&ch->lock);
    ch->sink = fn;
    ch->sink_arg = arg;
    pthread_mutex_unlock(&ch->lock);
}

int uiw_cm_queue(struct uiw_cm_channel *ch, const struct uiw_cm_event *ev)
{
    struct uiw_cm_ev_node *n;

    pthread_mutex_lock(&ch->lock);
    if (ev->conn && ev->conn->ev_dead) {
        pthread_mutex_unlock(&ch->lock);
        return 0; /* being destroyed: nobody wants it */
    }
    /* An empty queue: nothing queued can be overtaken by the sink. */
    if (!ch->head && ch->sink && ch->sink(ev, ch->sink_arg)) {
        if (ev->type == UIW_CM_CONNECT_REQUEST && ev->conn)
            ev->conn->popped = true; /* as uiw_cm_get_event */
        pthread_mutex_unlock(&ch->lock);
        return 0;
    }
    n = malloc(sizeof(*n));
    if (!n) {
        pthread_mutex_unlock(&ch->lock);
        uiw_log("cm: out of memory, event %d lost", (int)ev->type);
        return -ENOMEM;
    }
    n->ev = *ev;
    n->next = NULL;
    if (ch->tail)
        ch->tail->next = n;
    else {
        ch->head = n;
        wake_set(ch);
    }
    ch->tail = n;
    pthread_mutex_unlock(&ch->lock);
    return 0;
}

/* ch->lock held. */
static void drop_events(struct uiw_cm_channel *ch, struct uiw_conn *c)
{
    struct uiw_cm_ev_node **pp = &ch->head, *prev = NULL;
    bool had = ch->head != NULL;
    while (*pp) {
        struct uiw_cm_ev_node *n = *pp;
        if (n->ev.conn == c) {
            *pp = n->next;
            free(n);
            continue;
        }
        prev = n;
        pp = &n->next;
    }
    ch->tail = prev;
    if (had && !ch->head)
        wake_clear(ch);
}

bool uiw_cm_purge(struct uiw_cm_channel *ch, struct uiw_conn *c)
{
    pthread_mutex_lock(&ch->lock);
    c->ev_dead = true;
    drop_events(ch, c);
    bool popped = c->popped;
    pthread_mutex_unlock(&ch->lock);
    return popped;
}

bool uiw_cm_claim_unpopped(struct uiw_cm_channel *ch, struct uiw_conn *c)
{
    bool mine;
    pthread_mutex_lock(&ch->lock);
    mine = !c->popped;
    if (mine) {
        c->ev_dead = true;
        drop_events(ch, c);
    }
    pthread_mutex_unlock(&ch->lock);
    return mine;
}

UIW_EXPORT int uiw_cm_get_event(struct uiw_cm_channel *ch, struct uiw_cm_event *ev)
{
    if (!ch || !ev)
        return -EINVAL;
    for (;;) {
        pthread_mutex_lock(&ch->lock);
        struct uiw_cm_ev_node *n = ch->head;
        if (n) {
            ch->head = n->next;
            if (!ch->head) {
                ch->tail = NULL;
                wake_clear(ch);
            }
            /* From here on the ULP owns a new connection. */
            if (n->ev.type == UIW_CM_CONNECT_REQUEST && n->ev.conn)
                n->ev.conn->popped = true;
            pthread_mutex_unlock(&ch->lock);
            *ev = n->ev;
            free(n);
            return 0;
        }
        pthread_mutex_unlock(&ch->lock);
        int fl = fcntl(ch->rd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK))
            return -EAGAIN;
        struct pollfd p = {.fd = ch->rd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0 && errno == EINTR)
            return -EINTR;
    }
}
