/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ibv_get_cq_event blocks like rdma-core's read() of the channel fd:
 * EAGAIN on a non-blocking fd, EINTR from a signal whose handler lacks
 * SA_RESTART, transparent restart with SA_RESTART; events from another
 * thread wake it; one event per call, in order.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "testutil.h"

static struct ibv_cq *g_cq;

static void on_alarm(int sig)
{
    (void)sig;
}

static void alarm_in_ms(int ms, bool restart)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = ms * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static void push_one(uint64_t id)
{
    struct ibv_wc wc = {.wr_id = id, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV};
    uiw_cq_push(to_ucq(g_cq), &wc, false);
}

static void *late_push(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    CHECK_EQ(ibv_req_notify_cq(g_cq, 0), 0);
    push_one(2);
    return NULL;
}

int main(void)
{
    struct ibv_context *ctx = eng_open_lo(false);
    CHECK(ctx != NULL);
    if (!ctx)
        TEST_MAIN_END();
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    g_cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
    CHECK(g_cq != NULL);
    struct ibv_cq *cq;
    void *cqctx;

    /* Non-blocking fd, nothing queued: EAGAIN. */
    int fl = fcntl(ch->fd, F_GETFL);
    fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
    errno = 0;
    CHECK_EQ(ibv_get_cq_event(ch, &cq, &cqctx), -1);
    CHECK_EQ(errno, EAGAIN);
    fcntl(ch->fd, F_SETFL, fl);

    /* A signal without SA_RESTART interrupts the wait. */
    alarm_in_ms(50, false);
    errno = 0;
    CHECK_EQ(ibv_get_cq_event(ch, &cq, &cqctx), -1);
    CHECK_EQ(errno, EINTR);

    /* With SA_RESTART the wait goes on until the event arrives. */
    pthread_t t;
    pthread_create(&t, NULL, late_push, NULL);
    alarm_in_ms(50, true);
    CHECK_EQ(ibv_get_cq_event(ch, &cq, &cqctx), 0);
    CHECK(cq == g_cq);
    CHECK(cqctx == (void *)0x1234);
    pthread_join(t, NULL);
    ibv_ack_cq_events(cq, 1);
    struct ibv_wc wc;
    CHECK_EQ(ibv_poll_cq(g_cq, 1, &wc), 1);
    CHECK_EQ(wc.wr_id, 2);

    /* Two armed completions give two events; then nothing is left. */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(ibv_req_notify_cq(g_cq, 0), 0);
        push_one(10 + (uint64_t)i);
    }
    for (int i = 0; i < 2; i++)
        CHECK_EQ(ibv_get_cq_event(ch, &cq, &cqctx), 0);
    ibv_ack_cq_events(g_cq, 2);
    fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
    errno = 0;
    CHECK_EQ(ibv_get_cq_event(ch, &cq, &cqctx), -1);
    CHECK_EQ(errno, EAGAIN);
    fcntl(ch->fd, F_SETFL, fl);
    CHECK_EQ(ibv_poll_cq(g_cq, 1, &wc), 1);
    CHECK_EQ(ibv_poll_cq(g_cq, 1, &wc), 1);

    CHECK_EQ(ibv_destroy_cq(g_cq), 0);
    CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
    ibv_close_device(ctx);
    TEST_MAIN_END();
}
