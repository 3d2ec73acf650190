/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp_ktest.ko: a kernel consumer of a uiwarp device, for the VM test
 * only (scripts/kernel.sh test; docs/KERNEL.md). At load it takes the
 * device named by dev= (default uiw0) and goes through the ib core's API
 * as NVMe over Fabrics or rdma_rw would: port events (its interface,
 * netdev= (default eth0), taken down and up), PD (with the core's DMA MR), CQ
 * (polled directly, by the core from a workqueue, full), QP and its state
 * machine, SRQ, fast-register MR with map_mr_sg, IB_WR_REG_MR and
 * IB_WR_LOCAL_INV completions, errors on misuse, flush on ERR,
 * ib_drain_qp, and two threads posting on a CQ polled in softirq context. Everything it creates is
 * destroyed before the load returns. One dmesg line: uiwarp_ktest: verbs test: PASS (N checks)
 *   uiwarp_ktest: verbs test: FAIL (N of M checks failed)
 * each failed check logged before it. The module stays loaded (rmmod it).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/crc32c.h>
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/netdevice.h>
#include <linux/rtnetlink.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/inet.h>
#include <linux/inetdevice.h>
#include <linux/wait.h>
#include <net/sock.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

static char *dev = "uiw0";
module_param(dev, charp, 0444);
MODULE_PARM_DESC(dev, "the uiwarp device to test (default uiw0)");

static char *netdev = "eth0";
module_param(netdev, charp, 0444);
MODULE_PARM_DESC(netdev, "the device's interface, taken down and up for the port events");

static unsigned int passed, failed;

static bool verbs = true;
module_param(verbs, bool, 0444);
MODULE_PARM_DESC(verbs, "run the verbs tests (default 1; 0: the connection test only)");

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            pr_err("check failed (line %d): " #cond ": ", __LINE__);                               \
            pr_cont(__VA_ARGS__);                                                                  \
            pr_cont("\n");                                                                         \
        }                                                                                          \
    } while (0)

static atomic_t comp_calls = ATOMIC_INIT(0);
static atomic_t qp_events = ATOMIC_INIT(0);
static int last_qp_event = -1;

static void comp_handler(struct ib_cq *cq, void *ctx)
{
    atomic_inc(&comp_calls);
}

static void qp_event(struct ib_event *ev, void *ctx)
{
    last_qp_event = ev->event;
    atomic_inc(&qp_events);
}

static enum ib_qp_state qp_state(struct ib_qp *qp)
{
    struct ib_qp_init_attr init;
    struct ib_qp_attr a;

    if (ib_query_qp(qp, &a, IB_QP_STATE, &init))
        return -1;
    return a.qp_state;
}

static int to_state(struct ib_qp *qp, enum ib_qp_state s, int extra_mask, int access)
{
    struct ib_qp_attr a = {.qp_state = s, .qp_access_flags = access, .port_num = 1};

    return ib_modify_qp(qp, &a, IB_QP_STATE | extra_mask);
}

/* Polls up to n completions into wc (the CQ is filled synchronously: what
 * a post completes is there when it returns). */
static int poll(struct ib_cq *cq, struct ib_wc *wc, int n)
{
    return ib_poll_cq(cq, n, wc);
}

static int post_reg(struct ib_qp *qp, struct ib_mr *mr, int access, u64 id, bool signaled)
{
    struct ib_reg_wr r = {
        .wr = {.opcode = IB_WR_REG_MR, .wr_id = id, .send_flags = signaled ? IB_SEND_SIGNALED : 0},
        .mr = mr,
        .key = mr->rkey,
        .access = access,
    };

    return ib_post_send(qp, &r.wr, NULL);
}

static int post_inv(struct ib_qp *qp, u32 rkey, u64 id, bool signaled)
{
    struct ib_send_wr w = {
        .opcode = IB_WR_LOCAL_INV,
        .wr_id = id,
        .send_flags = signaled ? IB_SEND_SIGNALED : 0,
        .ex.invalidate_rkey = rkey,
    };

    return ib_post_send(qp, &w, NULL);
}

/* ib_drain_qp on a QP whose CQ the core polls (IB_POLL_DIRECT) */
struct drain_rx {
    struct ib_cqe cqe;
    int status;
};

static void drain_rx_done(struct ib_cq *cq, struct ib_wc *wc)
{
    struct drain_rx *d = container_of(wc->wr_cqe, struct drain_rx, cqe);

    d->status = wc->status;
}

static void test_drain(struct ib_device *ib, struct ib_pd *pd)
{
    struct ib_qp_init_attr init = {
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };
    struct drain_rx rx = {.cqe.done = drain_rx_done, .status = -1};
    struct ib_recv_wr rw = {.wr_cqe = &rx.cqe};
    struct ib_cq *cq;
    struct ib_qp *qp;

    cq = ib_alloc_cq(ib, NULL, 16, 0, IB_POLL_DIRECT);
    CHECK(!IS_ERR(cq), "ib_alloc_cq: %ld", PTR_ERR(cq));
    if (IS_ERR(cq))
        return;
    init.send_cq = init.recv_cq = cq;
    qp = ib_create_qp(pd, &init);
    CHECK(!IS_ERR(qp), "ib_create_qp: %ld", PTR_ERR(qp));
    if (!IS_ERR(qp)) {
        CHECK(to_state(qp, IB_QPS_INIT, IB_QP_ACCESS_FLAGS, IB_ACCESS_REMOTE_WRITE) == 0, "INIT");
        CHECK(ib_post_recv(qp, &rw, NULL) == 0, "post_recv");
        /* moves the QP to ERR and waits for the flush of a marker WR on
         * each queue; the receive posted before is flushed on the way */
        ib_drain_qp(qp);
        CHECK(qp_state(qp) == IB_QPS_ERR, "state after drain %d", qp_state(qp));
        CHECK(rx.status == IB_WC_WR_FLUSH_ERR, "drained receive status %d", rx.status);
        CHECK(ib_destroy_qp(qp) == 0, "destroy");
    }
    ib_free_cq(cq);
}

/* A shared receive queue: limits, resize, a QP on it (its receives go to
 * the SRQ; its error raises IB_EVENT_QP_LAST_WQE_REACHED, nothing flushed) */
static void test_srq(struct ib_device *ib, struct ib_pd *pd, struct ib_cq *cq)
{
    struct ib_srq_init_attr si = {.attr = {.max_wr = 0, .max_sge = 1}, .srq_type = IB_SRQT_BASIC};
    struct ib_qp_init_attr init = {
        .event_handler = qp_event,
        .send_cq = cq,
        .recv_cq = cq,
        .cap = {.max_send_wr = 4, .max_send_sge = 1},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };
    struct ib_recv_wr r[5] = {};
    const struct ib_recv_wr *bad;
    struct ib_srq_attr a = {};
    struct ib_wc wc[4];
    struct ib_srq *srq;
    struct ib_qp *qp;
    int i;

    srq = ib_create_srq(pd, &si);
    CHECK(PTR_ERR(srq) == -EINVAL, "SRQ of 0 entries: %ld", PTR_ERR(srq));
    si.attr.max_wr = 4;
    srq = ib_create_srq(pd, &si);
    CHECK(!IS_ERR(srq), "ib_create_srq: %ld", PTR_ERR(srq));
    if (IS_ERR(srq))
        return;
    for (i = 0; i < 4; i++) {
        r[i].wr_id = 200 + i;
        r[i].next = &r[i + 1];
    }
    r[4].wr_id = 204;
    CHECK(ib_post_srq_recv(srq, r, &bad) == -ENOMEM && bad == &r[4], "5 receives on 4");
    CHECK(ib_query_srq(srq, &a) == 0 && a.max_wr == 4 && a.srq_limit == 0, "query: %u %u", a.max_wr,
          a.srq_limit);
    a.srq_limit = 5;
    CHECK(ib_modify_srq(srq, &a, IB_SRQ_LIMIT) == -EINVAL, "limit above the size");
    a.srq_limit = 2;
    CHECK(ib_modify_srq(srq, &a, IB_SRQ_LIMIT) == 0, "limit 2");
    a.max_wr = 3;
    CHECK(ib_modify_srq(srq, &a, IB_SRQ_MAX_WR) == -EINVAL, "resize below the 4 queued");
    a.max_wr = 8;
    CHECK(ib_modify_srq(srq, &a, IB_SRQ_MAX_WR) == 0, "resize to 8");
    memset(&a, 0, sizeof(a));
    CHECK(ib_query_srq(srq, &a) == 0 && a.max_wr == 8 && a.srq_limit == 2, "query: %u %u", a.max_wr,
          a.srq_limit);
    CHECK(ib_post_srq_recv(srq, &r[4], NULL) == 0, "the 5th receive after the resize");

    init.srq = srq;
    qp = ib_create_qp(pd, &init);
    CHECK(!IS_ERR(qp), "QP on the SRQ: %ld", PTR_ERR(qp));
    if (!IS_ERR(qp)) {
        struct ib_recv_wr rw = {};

        CHECK(ib_post_recv(qp, &rw, &bad) == -EINVAL && bad == &rw, "post_recv on an SRQ QP");
        atomic_set(&qp_events, 0);
        CHECK(to_state(qp, IB_QPS_INIT, 0, 0) == 0 && to_state(qp, IB_QPS_ERR, 0, 0) == 0,
              "INIT, ERR");
        CHECK(atomic_read(&qp_events) == 1 && last_qp_event == IB_EVENT_QP_LAST_WQE_REACHED,
              "events %d, last %d", atomic_read(&qp_events), last_qp_event);
        CHECK(ib_poll_cq(cq, 4, wc) == 0, "the SRQ's receives were flushed");
        CHECK(ib_destroy_qp(qp) == 0, "destroy");
    }
    ib_destroy_srq(srq); /* void on 6.1 */
}

static atomic_t cq_errs = ATOMIC_INIT(0);

static void cq_event(struct ib_event *ev, void *ctx)
{
    if (ev->event == IB_EVENT_CQ_ERR)
        atomic_inc(&cq_errs);
}

/* A full CQ: a local operation is refused (-ENOMEM, nothing executed), a
 * flush into it is lost with IB_EVENT_CQ_ERR */
static void test_cq_full(struct ib_device *ib, struct ib_pd *pd, struct ib_mr *mr)
{
    struct ib_cq_init_attr cqa = {.cqe = 2};
    struct ib_qp_init_attr init = {
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };
    struct ib_send_wr w = {.opcode = IB_WR_LOCAL_INV,
                           .wr_id = 300,
                           .send_flags = IB_SEND_SIGNALED,
                           .ex.invalidate_rkey = mr->rkey};
    struct ib_recv_wr r = {.wr_id = 301};
    const struct ib_send_wr *bad;
    struct ib_wc wc[4];
    struct ib_cq *cq;
    struct ib_qp *qp;
    int n;

    cq = ib_create_cq(ib, NULL, cq_event, NULL, &cqa);
    CHECK(!IS_ERR(cq), "ib_create_cq: %ld", PTR_ERR(cq));
    if (IS_ERR(cq))
        return;
    init.send_cq = init.recv_cq = cq;
    qp = ib_create_qp(pd, &init);
    CHECK(!IS_ERR(qp), "ib_create_qp: %ld", PTR_ERR(qp));
    if (!IS_ERR(qp)) {
        CHECK(to_state(qp, IB_QPS_INIT, 0, 0) == 0, "INIT");
        CHECK(ib_post_send(qp, &w, NULL) == 0 && ib_post_send(qp, &w, NULL) == 0, "2 posts");
        CHECK(ib_post_send(qp, &w, &bad) == -ENOMEM && bad == &w, "a 3rd on a full CQ");
        CHECK(ib_post_recv(qp, &r, NULL) == 0, "post_recv");
        atomic_set(&cq_errs, 0);
        CHECK(to_state(qp, IB_QPS_ERR, 0, 0) == 0, "ERR");
        CHECK(atomic_read(&cq_errs) == 1, "CQ_ERR events %d", atomic_read(&cq_errs));
        n = ib_poll_cq(cq, 4, wc);
        CHECK(n == 2 && wc[0].wr_id == 300 && wc[1].wr_id == 300, "polled %d", n);
        CHECK(ib_destroy_qp(qp) == 0, "destroy");
    }
    ib_destroy_cq(cq);
}

/* A CQ the core polls from a workqueue (as NVMe over Fabrics' hosts and
 * targets use it): the completion reaches the WR's ib_cqe through the
 * device's completion handler */
struct wq_done {
    struct ib_cqe cqe;
    struct completion done;
    int status, opcode;
};

static void wq_done_fn(struct ib_cq *cq, struct ib_wc *wc)
{
    struct wq_done *d = container_of(wc->wr_cqe, struct wq_done, cqe);

    d->status = wc->status;
    d->opcode = wc->opcode;
    complete(&d->done);
}

static void test_cq_workqueue(struct ib_device *ib, struct ib_pd *pd, struct ib_mr *mr)
{
    struct ib_qp_init_attr init = {
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };
    struct wq_done d = {.cqe.done = wq_done_fn, .status = -1};
    struct ib_send_wr w = {.opcode = IB_WR_LOCAL_INV,
                           .wr_cqe = &d.cqe,
                           .send_flags = IB_SEND_SIGNALED,
                           .ex.invalidate_rkey = mr->rkey};
    struct ib_cq *cq;
    struct ib_qp *qp;

    init_completion(&d.done);
    cq = ib_alloc_cq(ib, NULL, 8, 0, IB_POLL_WORKQUEUE);
    CHECK(!IS_ERR(cq), "ib_alloc_cq: %ld", PTR_ERR(cq));
    if (IS_ERR(cq))
        return;
    init.send_cq = init.recv_cq = cq;
    qp = ib_create_qp(pd, &init);
    CHECK(!IS_ERR(qp), "ib_create_qp: %ld", PTR_ERR(qp));
    if (!IS_ERR(qp)) {
        CHECK(to_state(qp, IB_QPS_INIT, 0, 0) == 0, "INIT");
        CHECK(ib_post_send(qp, &w, NULL) == 0, "post LOCAL_INV");
        CHECK(wait_for_completion_timeout(&d.done, 5 * HZ) > 0, "no completion in 5 s");
        CHECK(d.status == IB_WC_SUCCESS && d.opcode == IB_WC_LOCAL_INV, "status %d opcode %d",
              d.status, d.opcode);
        CHECK(ib_destroy_qp(qp) == 0, "destroy");
    }
    ib_free_cq(cq);
}

/* Port events as a consumer sees them (ib_register_event_handler; the core
 * delivers them from a workqueue): the interface down, then up */
static struct completion port_ev_done;
static enum ib_event_type port_ev_want;

static void port_ev(struct ib_event_handler *h, struct ib_event *ev)
{
    if ((ev->event == IB_EVENT_PORT_ERR || ev->event == IB_EVENT_PORT_ACTIVE) &&
        ev->element.port_num == 1 && ev->event == port_ev_want)
        complete(&port_ev_done);
}

static bool port_flip(struct net_device *nd, bool up, enum ib_event_type want)
{
    int rc;

    reinit_completion(&port_ev_done);
    port_ev_want = want;
    rtnl_lock();
    rc = dev_change_flags(nd, up ? nd->flags | IFF_UP : nd->flags & ~IFF_UP, NULL);
    rtnl_unlock();
    return rc == 0 && wait_for_completion_timeout(&port_ev_done, 5 * HZ) > 0;
}

static void test_port_events(struct ib_device *ib)
{
    struct ib_event_handler h;
    struct ib_port_attr pa;
    struct net_device *nd = dev_get_by_name(&init_net, netdev);

    CHECK(nd != NULL, "no interface %s", netdev);
    if (!nd)
        return;
    init_completion(&port_ev_done);
    INIT_IB_EVENT_HANDLER(&h, ib, port_ev);
    ib_register_event_handler(&h);
    CHECK(port_flip(nd, false, IB_EVENT_PORT_ERR), "no IB_EVENT_PORT_ERR after %s down", netdev);
    CHECK(ib_query_port(ib, 1, &pa) == 0 && pa.state == IB_PORT_DOWN, "state %d", pa.state);
    CHECK(port_flip(nd, true, IB_EVENT_PORT_ACTIVE), "no IB_EVENT_PORT_ACTIVE after %s up", netdev);
    CHECK(ib_query_port(ib, 1, &pa) == 0 && pa.state == IB_PORT_ACTIVE, "state %d", pa.state);
    ib_unregister_event_handler(&h);
    dev_put(nd);
}

/* Two threads post Fast Register + Local Invalidate pairs on their own QPs
 * sharing one CQ that the core polls in softirq context, retrying while the
 * CQ is full: every WR completes once, successfully */
#define STRESS_ROUNDS 500

struct stress {
    struct ib_qp *qp;
    struct ib_mr *mr;
    struct completion done;
    int post_errors;
};

static atomic_t stress_ok = ATOMIC_INIT(0), stress_bad = ATOMIC_INIT(0);

static void stress_done(struct ib_cq *cq, struct ib_wc *wc)
{
    atomic_inc(wc->status == IB_WC_SUCCESS ? &stress_ok : &stress_bad);
}

static struct ib_cqe stress_cqe = {.done = stress_done};

static int stress_post(struct ib_qp *qp, const struct ib_send_wr *w)
{
    int rc, tries = 0;

    while ((rc = ib_post_send(qp, w, NULL)) == -ENOMEM && tries++ < 100000)
        cond_resched(); /* the CQ is full until the softirq polls it */
    return rc;
}

static int stress_fn(void *arg)
{
    struct stress *st = arg;
    int i;

    for (i = 0; i < STRESS_ROUNDS; i++) {
        struct ib_reg_wr r = {
            .wr = {.opcode = IB_WR_REG_MR, .wr_cqe = &stress_cqe, .send_flags = IB_SEND_SIGNALED},
            .mr = st->mr,
            .access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE,
        };
        struct ib_send_wr inv = {
            .opcode = IB_WR_LOCAL_INV, .wr_cqe = &stress_cqe, .send_flags = IB_SEND_SIGNALED};

        ib_update_fast_reg_key(st->mr, ib_inc_rkey(st->mr->rkey) & 0xff);
        r.key = st->mr->rkey;
        inv.ex.invalidate_rkey = st->mr->rkey;
        if (stress_post(st->qp, &r.wr) || stress_post(st->qp, &inv))
            st->post_errors++;
    }
    complete(&st->done);
    return 0;
}

static void test_stress(struct ib_device *ib, struct ib_pd *pd, struct scatterlist *sg)
{
    struct ib_qp_init_attr init = {
        .cap = {.max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };
    struct stress st[2] = {};
    struct ib_cq *cq;
    int i, n, want = 2 * 2 * STRESS_ROUNDS;

    cq = ib_alloc_cq(ib, NULL, 64, 0, IB_POLL_SOFTIRQ);
    CHECK(!IS_ERR(cq), "ib_alloc_cq: %ld", PTR_ERR(cq));
    if (IS_ERR(cq))
        return;
    init.send_cq = init.recv_cq = cq;
    atomic_set(&stress_ok, 0);
    atomic_set(&stress_bad, 0);
    for (i = 0; i < 2; i++) {
        init_completion(&st[i].done);
        st[i].qp = ib_create_qp(pd, &init);
        st[i].mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, 1);
        if (IS_ERR(st[i].qp) || IS_ERR(st[i].mr) || to_state(st[i].qp, IB_QPS_INIT, 0, 0) ||
            ib_map_mr_sg(st[i].mr, sg, 1, NULL, PAGE_SIZE) != 1)
            goto out;
    }
    for (i = 0; i < 2; i++) {
        struct task_struct *t = kthread_run(stress_fn, &st[i], "uiw_ktest%d", i);

        if (IS_ERR(t)) {
            st[i].post_errors = -1;
            complete(&st[i].done);
        }
    }
    for (i = 0; i < 2; i++)
        wait_for_completion(&st[i].done);
    for (n = 0; n < 500 && atomic_read(&stress_ok) + atomic_read(&stress_bad) < want; n++)
        msleep(10);
    CHECK(st[0].post_errors == 0 && st[1].post_errors == 0, "post errors %d %d", st[0].post_errors,
          st[1].post_errors);
    CHECK(atomic_read(&stress_ok) == want && atomic_read(&stress_bad) == 0,
          "%d of %d completions successful, %d failed", atomic_read(&stress_ok), want,
          atomic_read(&stress_bad));
out:
    CHECK(i == 2, "stress setup failed at QP/MR %d", i);
    for (i = 0; i < 2; i++) {
        if (!IS_ERR_OR_NULL(st[i].qp))
            ib_destroy_qp(st[i].qp);
        if (!IS_ERR_OR_NULL(st[i].mr))
            ib_dereg_mr(st[i].mr);
    }
    ib_free_cq(cq);
}

static void run(struct ib_device *ib)
{
    struct ib_cq_init_attr cqa = {.cqe = 16};
    struct ib_qp_init_attr init = {
        .event_handler = qp_event,
        .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };
    const int rw = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
    struct ib_pd *pd = NULL, *pd2 = NULL;
    struct ib_mr *mr = NULL, *mr2 = NULL, *bad_mr;
    struct ib_qp *qp = NULL, *bad_qp;
    struct ib_cq *cq = NULL, *bad_cq;
    const struct ib_send_wr *bad_s;
    const struct ib_recv_wr *bad_r;
    struct scatterlist sg[5];
    struct page *pages = NULL;
    struct ib_wc wc[8];
    u32 key;
    int n, i, mapped = 0;

    test_port_events(ib);
    CHECK(ib->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS, "no MEM_MGT_EXTENSIONS");
    CHECK(ib->attrs.max_fast_reg_page_list_len >= 4, "%u", ib->attrs.max_fast_reg_page_list_len);
    CHECK(ib->attrs.max_srq > 0 && ib->attrs.max_srq_wr >= 8, "max_srq %d", ib->attrs.max_srq);

    pd = ib_alloc_pd(ib, 0);
    CHECK(!IS_ERR(pd), "ib_alloc_pd: %ld", PTR_ERR(pd));
    if (IS_ERR(pd))
        return;
    /* no local DMA lkey: the core registered a DMA MR through get_dma_mr */
    CHECK(pd->__internal_mr && pd->local_dma_lkey == pd->__internal_mr->lkey &&
              (pd->local_dma_lkey >> 8) != 0,
          "local_dma_lkey 0x%x", pd->local_dma_lkey);
    pd2 = ib_alloc_pd(ib, 0);
    CHECK(!IS_ERR(pd2), "second PD: %ld", PTR_ERR(pd2));
    if (IS_ERR(pd2)) {
        pd2 = NULL;
        goto out;
    }

    /* CQ */
    cqa.cqe = 0;
    bad_cq = ib_create_cq(ib, comp_handler, NULL, NULL, &cqa);
    CHECK(PTR_ERR(bad_cq) == -EINVAL, "CQ of 0 entries: %ld", PTR_ERR(bad_cq));
    cqa.cqe = ib->attrs.max_cqe + 1;
    bad_cq = ib_create_cq(ib, comp_handler, NULL, NULL, &cqa);
    CHECK(PTR_ERR(bad_cq) == -EINVAL, "CQ above max_cqe: %ld", PTR_ERR(bad_cq));
    cqa.cqe = 16;
    cq = ib_create_cq(ib, comp_handler, NULL, NULL, &cqa);
    CHECK(!IS_ERR(cq), "ib_create_cq: %ld", PTR_ERR(cq));
    if (IS_ERR(cq)) {
        cq = NULL;
        goto out;
    }
    CHECK(ib_poll_cq(cq, 8, wc) == 0, "new CQ not empty");

    /* QP: creation errors, then one in RESET */
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IB_QPT_UD;
    bad_qp = ib_create_qp(pd, &init);
    CHECK(IS_ERR(bad_qp), "a UD QP was created");
    init.qp_type = IB_QPT_RC;
    init.cap.max_send_wr = ib->attrs.max_qp_wr + 1;
    bad_qp = ib_create_qp(pd, &init);
    CHECK(PTR_ERR(bad_qp) == -EINVAL, "max_send_wr above max_qp_wr: %ld", PTR_ERR(bad_qp));
    init.cap.max_send_wr = 8;
    qp = ib_create_qp(pd, &init);
    CHECK(!IS_ERR(qp), "ib_create_qp: %ld", PTR_ERR(qp));
    if (IS_ERR(qp)) {
        qp = NULL;
        goto out;
    }
    CHECK(qp->qp_num >= 16, "qp_num %u", qp->qp_num);
    CHECK(init.cap.max_send_wr == 8 && init.cap.max_recv_wr == 8, "caps %u %u",
          init.cap.max_send_wr, init.cap.max_recv_wr);
    CHECK(qp_state(qp) == IB_QPS_RESET, "new QP in %d", qp_state(qp));

    /* RESET: no posting; the state machine */
    {
        struct ib_send_wr w = {.opcode = IB_WR_LOCAL_INV};
        struct ib_recv_wr r = {};

        CHECK(ib_post_send(qp, &w, &bad_s) == -EINVAL && bad_s == &w, "post_send in RESET");
        CHECK(ib_post_recv(qp, &r, &bad_r) == -EINVAL && bad_r == &r, "post_recv in RESET");
    }
    CHECK(to_state(qp, IB_QPS_RTR, 0, 0) == -EINVAL, "RESET -> RTR accepted");
    CHECK(to_state(qp, IB_QPS_ERR, 0, 0) == -EINVAL, "RESET -> ERR accepted");
    CHECK(to_state(qp, IB_QPS_RESET, 0, 0) == 0 && qp_state(qp) == IB_QPS_RESET, "RESET -> RESET");
    CHECK(to_state(qp, IB_QPS_INIT, IB_QP_ACCESS_FLAGS | IB_QP_PORT, 0x4000) == -EINVAL,
          "bad access flags accepted");
    CHECK(to_state(qp, IB_QPS_INIT, IB_QP_ACCESS_FLAGS | IB_QP_PORT,
                   IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ) == 0,
          "RESET -> INIT");
    CHECK(qp_state(qp) == IB_QPS_INIT, "state %d", qp_state(qp));
    {
        struct ib_qp_attr a = {};

        CHECK(ib_modify_qp(qp, &a, 0) == 0, "empty mask (iw_cm's RTR/RTS)");
    }
    CHECK(to_state(qp, IB_QPS_RTS, 0, 0) == -ENOTCONN, "INIT -> RTS without a connection");
    CHECK(to_state(qp, IB_QPS_RTR, 0, 0) == 0, "INIT -> RTR");
    CHECK(qp_state(qp) == IB_QPS_RTR, "state %d", qp_state(qp));

    /* receives queue; sends need a connection */
    {
        struct ib_recv_wr r2 = {.wr_id = 102}, r1 = {.wr_id = 101, .next = &r2};
        struct ib_recv_wr rbad = {.wr_id = 103, .num_sge = 2};
        struct ib_send_wr w = {.opcode = IB_WR_RDMA_WRITE};

        CHECK(ib_post_recv(qp, &r1, NULL) == 0, "post_recv");
        CHECK(ib_post_recv(qp, &rbad, &bad_r) == -EINVAL && bad_r == &rbad, "2 SGEs on 1");
        CHECK(ib_post_send(qp, &w, &bad_s) == -ENOTCONN && bad_s == &w, "Write in RTR");
        w.opcode = 0x7f;
        CHECK(ib_post_send(qp, &w, &bad_s) == -EINVAL, "unknown opcode");
        CHECK(ib_poll_cq(cq, 8, wc) == 0, "completions from refused posts");
    }

    /* fast-register MR */
    bad_mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, ib->attrs.max_fast_reg_page_list_len + 1);
    CHECK(IS_ERR(bad_mr), "MR above max_fast_reg_page_list_len");
    if (!IS_ERR(bad_mr))
        ib_dereg_mr(bad_mr);
    mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, 4);
    CHECK(!IS_ERR(mr), "ib_alloc_mr: %ld", PTR_ERR(mr));
    if (IS_ERR(mr)) {
        mr = NULL;
        goto out;
    }
    CHECK(mr->lkey == mr->rkey && (mr->rkey >> 8) != 0, "stag 0x%x/0x%x", mr->lkey, mr->rkey);
    mr2 = ib_alloc_mr(pd2, IB_MR_TYPE_MEM_REG, 4);
    CHECK(!IS_ERR(mr2), "ib_alloc_mr on pd2: %ld", PTR_ERR(mr2));
    if (IS_ERR(mr2)) {
        mr2 = NULL;
        goto out;
    }
    CHECK((mr2->rkey >> 8) != (mr->rkey >> 8), "two MRs, one index");

    pages = alloc_pages(GFP_KERNEL, 3); /* 8 pages */
    CHECK(pages != NULL, "alloc_pages");
    if (!pages)
        goto out;
    /* 5 one-page entries: 4 fit the MR */
    sg_init_table(sg, 5);
    for (i = 0; i < 5; i++)
        sg_set_page(&sg[i], pages + i, PAGE_SIZE, 0);
    mapped = ib_dma_map_sg(ib, sg, 5, DMA_BIDIRECTIONAL);
    CHECK(mapped == 5, "ib_dma_map_sg %d", mapped);
    n = ib_map_mr_sg(mr, sg, 5, NULL, PAGE_SIZE);
    CHECK(n == 4, "5 pages on a 4-page MR: %d mapped", n);
    n = ib_map_mr_sg(mr, sg, 2, NULL, PAGE_SIZE);
    CHECK(n == 2 && mr->length == 2 * PAGE_SIZE && mr->iova == sg_dma_address(&sg[0]),
          "map 2: %d, length %llu", n, mr->length);
    n = ib_map_mr_sg(mr2, sg, 1, NULL, PAGE_SIZE);
    CHECK(n == 1, "map mr2: %d", n);

    /* REG_MR signalled, with the completion handler armed */
    key = ib_inc_rkey(mr->rkey);
    ib_update_fast_reg_key(mr, key & 0xff);
    CHECK(mr->rkey == key, "rkey 0x%x != 0x%x", mr->rkey, key);
    CHECK(ib_req_notify_cq(cq, IB_CQ_NEXT_COMP) == 0, "arm");
    atomic_set(&comp_calls, 0);
    CHECK(post_reg(qp, mr, rw, 1, true) == 0, "post REG_MR");
    CHECK(atomic_read(&comp_calls) == 1, "completion handler called %d times",
          atomic_read(&comp_calls));
    n = poll(cq, wc, 8);
    CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].opcode == IB_WC_REG_MR &&
              wc[0].wr_id == 1 && wc[0].qp == qp,
          "REG_MR: n %d status %d opcode %d", n, wc[0].status, wc[0].opcode);
    CHECK(ib_req_notify_cq(cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS) == 0, "rearm");
    /* LOCAL_INV unsignalled: no completion; the handler stays armed */
    CHECK(post_inv(qp, mr->rkey, 2, false) == 0, "post LOCAL_INV");
    CHECK(poll(cq, wc, 8) == 0, "an unsignalled LOCAL_INV completed");
    CHECK(atomic_read(&comp_calls) == 1, "handler without a completion");
    /* invalidating an invalid STag succeeds, signalled */
    CHECK(post_inv(qp, mr->rkey, 3, true) == 0, "post LOCAL_INV again");
    n = poll(cq, wc, 8);
    CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].opcode == IB_WC_LOCAL_INV &&
              wc[0].wr_id == 3,
          "LOCAL_INV: n %d status %d opcode %d", n, wc[0].status, wc[0].opcode);
    CHECK(atomic_read(&comp_calls) == 2, "handler calls %d", atomic_read(&comp_calls));
    /* a chain: REG_MR (new key, the page list reused) + LOCAL_INV, in order */
    ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey) & 0xff);
    {
        struct ib_send_wr inv = {
            .opcode = IB_WR_LOCAL_INV,
            .wr_id = 5,
            .send_flags = IB_SEND_SIGNALED,
            .ex.invalidate_rkey = mr->rkey,
        };
        struct ib_reg_wr r = {
            .wr = {.opcode = IB_WR_REG_MR,
                   .wr_id = 4,
                   .send_flags = IB_SEND_SIGNALED,
                   .next = &inv},
            .mr = mr,
            .key = mr->rkey,
            .access = rw,
        };

        CHECK(ib_post_send(qp, &r.wr, NULL) == 0, "post REG_MR + LOCAL_INV");
        n = poll(cq, wc, 8);
        CHECK(n == 2 && wc[0].wr_id == 4 && wc[0].status == IB_WC_SUCCESS && wc[1].wr_id == 5 &&
                  wc[1].status == IB_WC_SUCCESS && wc[1].opcode == IB_WC_LOCAL_INV,
              "chain: n %d", n);
    }
    /* a REG_MR while valid, then a LOCAL_INV with the old key: both fail */
    CHECK(post_reg(qp, mr, rw, 6, false) == 0, "REG_MR unsignalled");
    CHECK(poll(cq, wc, 8) == 0, "an unsignalled REG_MR completed");
    CHECK(qp_state(qp) == IB_QPS_RTR, "state %d", qp_state(qp));

    /* misuse: REG_MR of a valid MR -> error completion (even unsignalled),
     * ERR, QP_ACCESS_ERR, the two receives flushed */
    atomic_set(&qp_events, 0);
    CHECK(post_reg(qp, mr, rw, 7, false) == 0, "REG_MR of a valid MR posted");
    n = poll(cq, wc, 8);
    CHECK(n == 3 && wc[0].wr_id == 7 && wc[0].status == IB_WC_MW_BIND_ERR &&
              wc[0].opcode == IB_WC_REG_MR,
          "REG_MR of a valid MR: n %d status %d", n, wc[0].status);
    CHECK(n == 3 && wc[1].wr_id == 101 && wc[2].wr_id == 102 &&
              wc[1].status == IB_WC_WR_FLUSH_ERR && wc[2].status == IB_WC_WR_FLUSH_ERR &&
              wc[1].opcode == IB_WC_RECV,
          "receives not flushed in order");
    CHECK(qp_state(qp) == IB_QPS_ERR, "state %d", qp_state(qp));
    CHECK(atomic_read(&qp_events) == 1 && last_qp_event == IB_EVENT_QP_ACCESS_ERR,
          "QP events %d, last %d", atomic_read(&qp_events), last_qp_event);
    /* in ERR: new WRs are flushed at once, malformed ones refused */
    {
        struct ib_send_wr w = {.opcode = IB_WR_RDMA_WRITE, .wr_id = 8};
        struct ib_recv_wr r = {.wr_id = 9};

        CHECK(ib_post_send(qp, &w, NULL) == 0, "post_send in ERR");
        CHECK(ib_post_recv(qp, &r, NULL) == 0, "post_recv in ERR");
        n = poll(cq, wc, 8);
        CHECK(n == 2 && wc[0].wr_id == 8 && wc[0].status == IB_WC_WR_FLUSH_ERR &&
                  wc[0].opcode == IB_WC_RDMA_WRITE && wc[1].wr_id == 9 &&
                  wc[1].status == IB_WC_WR_FLUSH_ERR && wc[1].opcode == IB_WC_RECV,
              "flush in ERR: n %d", n);
        w.num_sge = 5;
        CHECK(ib_post_send(qp, &w, &bad_s) == -EINVAL && bad_s == &w, "5 SGEs on 1 in ERR");
    }
    CHECK(to_state(qp, IB_QPS_INIT, 0, 0) == -EINVAL, "ERR -> INIT accepted");
    CHECK(to_state(qp, IB_QPS_RESET, 0, 0) == 0, "ERR -> RESET");
    CHECK(to_state(qp, IB_QPS_INIT, 0, 0) == 0, "RESET -> INIT");

    /* LOCAL_INV with a stale key, REG_MR of another PD's MR: each fails
     * with its status */
    CHECK(post_inv(qp, mr->rkey ^ 1, 10, true) == 0, "post LOCAL_INV, wrong key");
    n = poll(cq, wc, 8);
    CHECK(n == 1 && wc[0].status == IB_WC_LOC_PROT_ERR && wc[0].opcode == IB_WC_LOCAL_INV,
          "LOCAL_INV wrong key: n %d status %d", n, wc[0].status);
    CHECK(to_state(qp, IB_QPS_RESET, 0, 0) == 0 && to_state(qp, IB_QPS_INIT, 0, 0) == 0,
          "back to INIT");
    CHECK(post_reg(qp, mr2, rw, 11, true) == 0, "post REG_MR of pd2's MR");
    n = poll(cq, wc, 8);
    CHECK(n == 1 && wc[0].status == IB_WC_MW_BIND_ERR, "REG_MR other PD: n %d status %d", n,
          wc[0].status);
    CHECK(to_state(qp, IB_QPS_RESET, 0, 0) == 0 && to_state(qp, IB_QPS_INIT, 0, 0) == 0,
          "back to INIT");
    /* remote write without local write (IB verbs) */
    CHECK(post_inv(qp, mr->rkey, 12, true) == 0, "invalidate mr");
    CHECK(post_reg(qp, mr, IB_ACCESS_REMOTE_WRITE, 13, true) == 0, "post REG_MR");
    n = poll(cq, wc, 8);
    CHECK(n == 2 && wc[0].status == IB_WC_SUCCESS && wc[1].status == IB_WC_MW_BIND_ERR,
          "REMOTE_WRITE without LOCAL_WRITE: n %d", n);

    test_srq(ib, pd, cq);
    test_cq_full(ib, pd, mr);
    test_cq_workqueue(ib, pd, mr);
    test_stress(ib, pd, sg);

out:
    if (mapped > 0)
        ib_dma_unmap_sg(ib, sg, 5, DMA_BIDIRECTIONAL);
    if (pages)
        __free_pages(pages, 3);
    if (mr)
        CHECK(ib_dereg_mr(mr) == 0, "dereg mr");
    if (mr2)
        CHECK(ib_dereg_mr(mr2) == 0, "dereg mr2");
    if (qp)
        CHECK(ib_destroy_qp(qp) == 0, "destroy qp");
    if (cq)
        ib_destroy_cq(cq); /* void on 6.1 */
    test_drain(ib, pd);
    if (pd2)
        ib_dealloc_pd(pd2);
    ib_dealloc_pd(pd);
}

/* ------------------------------------------------------------------------
 * Connections through rdma_cm (iw_cm, the driver's MPA over kernel TCP),
 * both ends on the device, to its interface's own IPv4 address
 * ---------------------------------------------------------------------- */

static unsigned int port = 7471;
module_param(port, uint, 0444);
MODULE_PARM_DESC(port, "the TCP port of the connection test's listener");

static bool conn = true;
module_param(conn, bool, 0444);
MODULE_PARM_DESC(conn, "run the connection test (default 1)");

struct evq {
    spinlock_t lock;
    wait_queue_head_t wq;
    unsigned int in, out;
    struct {
        int ev, status;
        struct rdma_cm_id *id;
        u8 pd[64];
        u8 pd_len;
        u8 initiator_depth, responder_resources;
    } e[16];
};

static struct evq q_cli, q_srv;

static void evq_init(struct evq *q)
{
    spin_lock_init(&q->lock);
    init_waitqueue_head(&q->wq);
    q->in = q->out = 0;
}

static int cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
    struct evq *q = id->context;
    unsigned long fl;

    spin_lock_irqsave(&q->lock, fl);
    if (q->in - q->out < ARRAY_SIZE(q->e)) {
        typeof(q->e[0]) *e = &q->e[q->in % ARRAY_SIZE(q->e)];

        e->ev = ev->event;
        e->status = ev->status;
        e->id = id;
        e->pd_len = 0;
        e->initiator_depth = ev->param.conn.initiator_depth;
        e->responder_resources = ev->param.conn.responder_resources;
        if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
            e->pd_len = min_t(u8, ev->param.conn.private_data_len, sizeof(e->pd));
            memcpy(e->pd, ev->param.conn.private_data, e->pd_len);
        }
        q->in++;
    }
    spin_unlock_irqrestore(&q->lock, fl);
    wake_up(&q->wq);
    return 0;
}

/* The next event; its type must be want. Returns its index or -1. */
static int evq_wait(struct evq *q, int want, const char *what)
{
    int i;

    if (!wait_event_timeout(q->wq, READ_ONCE(q->in) != READ_ONCE(q->out), 10 * HZ)) {
        CHECK(0, "%s: no event (want %s)", what, rdma_event_msg(want));
        return -1;
    }
    i = q->out++ % ARRAY_SIZE(q->e);
    CHECK(q->e[i].ev == want, "%s: event %s (%d), status %d, want %s", what,
          rdma_event_msg(q->e[i].ev), q->e[i].ev, q->e[i].status, rdma_event_msg(want));
    return q->e[i].ev == want ? i : -1;
}

struct end {
    struct rdma_cm_id *id;
    struct ib_pd *pd;
    struct ib_cq *cq;
    struct ib_mr *mr; /* fast-register MR over buf's pages */
    u8 *buf;          /* BUF_LEN bytes, kvmalloc'd? no: pages, for the FR MR */
    struct page *pages;
    struct scatterlist sg[1];
};

static int conn_qp(struct end *e)
{
    struct ib_qp_init_attr a = {
        .event_handler = qp_event,
        .send_cq = e->cq,
        .recv_cq = e->cq,
        .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 2},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };

    return rdma_create_qp(e->id, e->pd, &a);
}

static bool end_init(struct ib_device *ib, struct end *e)
{
    e->pd = ib_alloc_pd(ib, 0);
    if (IS_ERR(e->pd)) {
        e->pd = NULL;
        return false;
    }
    e->cq = ib_alloc_cq(ib, NULL, 128, 0, IB_POLL_DIRECT);
    if (IS_ERR(e->cq)) {
        e->cq = NULL;
        return false;
    }
    return true;
}

static void end_fini(struct end *e)
{
    if (e->id && e->id->qp)
        rdma_destroy_qp(e->id);
    if (e->id)
        rdma_destroy_id(e->id);
    if (e->cq)
        ib_free_cq(e->cq);
    if (e->pd)
        ib_dealloc_pd(e->pd);
    memset(e, 0, sizeof(*e));
}

/* waits up to 10 s for n completions */
static int poll_n(struct ib_cq *cq, struct ib_wc *wc, int n)
{
    unsigned long end = jiffies + 10 * HZ;
    int got = 0;

    while (got < n && time_before(jiffies, end)) {
        int r = ib_poll_cq(cq, n - got, wc + got);

        if (r > 0)
            got += r;
        else
            usleep_range(200, 1000);
    }
    return got;
}

static void conn_data(struct end *c, struct end *s);

/* Client connects; server accepts (or rejects). 0 when established. */
/* the ORD the server accepts with (initiator_depth in rdma_accept) */
static u8 accept_ord = 3;

static int conn_up(struct ib_device *ib, struct sockaddr_in *sin, struct end *c, struct end *s,
                   bool reject)
{
    static const char hello[] = "uiwarp-ktest-hello", welcome[] = "uiwarp-ktest-accept";
    /* IRD 5, ORD 3: told apart in the server's connect request */
    struct rdma_conn_param p = {.responder_resources = 5,
                                .initiator_depth = 3,
                                .private_data = hello,
                                .private_data_len = sizeof(hello)};
    int i, rc;

    c->id = rdma_create_id(&init_net, cm_handler, &q_cli, RDMA_PS_TCP, IB_QPT_RC);
    CHECK(!IS_ERR(c->id), "rdma_create_id: %ld", PTR_ERR(c->id));
    if (IS_ERR(c->id)) {
        c->id = NULL;
        return -1;
    }
    rc = rdma_resolve_addr(c->id, NULL, (struct sockaddr *)sin, 2000);
    CHECK(rc == 0, "rdma_resolve_addr: %d", rc);
    if (rc || evq_wait(&q_cli, RDMA_CM_EVENT_ADDR_RESOLVED, "resolve_addr") < 0)
        return -1;
    CHECK(c->id->device == ib, "resolved to %s",
          c->id->device ? dev_name(&c->id->device->dev) : "none");
    rc = rdma_resolve_route(c->id, 2000);
    CHECK(rc == 0, "rdma_resolve_route: %d", rc);
    if (rc || evq_wait(&q_cli, RDMA_CM_EVENT_ROUTE_RESOLVED, "resolve_route") < 0)
        return -1;
    if (!end_init(ib, c) || conn_qp(c)) {
        CHECK(0, "client PD/CQ/QP");
        return -1;
    }
    rc = rdma_connect(c->id, &p);
    CHECK(rc == 0, "rdma_connect: %d", rc);
    if (rc)
        return -1;
    i = evq_wait(&q_srv, RDMA_CM_EVENT_CONNECT_REQUEST, "server");
    if (i < 0)
        return -1;
    s->id = q_srv.e[i].id;
    CHECK(q_srv.e[i].pd_len >= sizeof(hello) && !memcmp(q_srv.e[i].pd, hello, sizeof(hello)),
          "the Request's private data (%u bytes)", q_srv.e[i].pd_len);
    /*
     * rdma_cm's view of the Request (RFC 6581 IRD 5, ORD 3), as over siw:
     * initiator_depth is the client's IRD (the Reads the server may
     * issue), responder_resources its ORD (the Reads it will take)
     */
    CHECK(q_srv.e[i].initiator_depth == 5 && q_srv.e[i].responder_resources == 3,
          "connect request: initiator_depth %u (want the client's IRD 5), responder_resources %u "
          "(want its ORD 3)",
          q_srv.e[i].initiator_depth, q_srv.e[i].responder_resources);
    if (reject) {
        rdma_lock_handler(s->id);
        rc = rdma_reject(s->id, "no", 2, 0);
        rdma_unlock_handler(s->id);
        CHECK(rc == 0, "rdma_reject: %d", rc);
        i = evq_wait(&q_cli, RDMA_CM_EVENT_REJECTED, "client, rejected");
        CHECK(i >= 0 && q_cli.e[i].pd_len >= 2 && !memcmp(q_cli.e[i].pd, "no", 2),
              "the Reject's private data");
        return 1;
    }
    if (!end_init(ib, s) || conn_qp(s)) {
        CHECK(0, "server PD/CQ/QP");
        return -1;
    }
    p.private_data = welcome;
    p.private_data_len = sizeof(welcome);
    p.qp_num = s->id->qp->qp_num;
    p.initiator_depth = accept_ord; /* the server's ORD */
    /* the server's receives before it accepts: the client may send at once */
    conn_data(NULL, s);
    rdma_lock_handler(s->id);
    rc = rdma_accept(s->id, &p);
    rdma_unlock_handler(s->id);
    CHECK(rc == 0, "rdma_accept: %d", rc);
    if (rc)
        return -1;
    i = evq_wait(&q_cli, RDMA_CM_EVENT_ESTABLISHED, "client");
    CHECK(i >= 0 && q_cli.e[i].pd_len >= sizeof(welcome) &&
              !memcmp(q_cli.e[i].pd, welcome, sizeof(welcome)),
          "the Reply's private data");
    if (evq_wait(&q_srv, RDMA_CM_EVENT_ESTABLISHED, "server") < 0 || i < 0)
        return -1;
    CHECK(qp_state(c->id->qp) == IB_QPS_RTS, "client QP state %d", qp_state(c->id->qp));
    CHECK(qp_state(s->id->qp) == IB_QPS_RTS, "server QP state %d", qp_state(s->id->qp));
    return 0;
}

/* The data path over the connection, data checked byte for byte:
 * c == NULL: the server's buffers, MR and receives, before it accepts.
 * Sends of 1, 4109 (more than a page) and 200000 bytes (more than a
 * maximum FPDU), two SGEs; RDMA Writes into the server's fast-registered
 * MR (200000 bytes and 5 bytes at an odd offset), each followed by a Send
 * that says it arrived; RDMA Reads of 200000 bytes from it into the
 * client's DMA-MR memory and of 777 bytes into a client fast-register MR;
 * a Send from the server back to the client. */
#define DBUF_ORDER 8 /* 1 MiB per side */
#define DBUF_LEN   (PAGE_SIZE << DBUF_ORDER)
#define RSLOT      (256 * 1024)

static u8 *sbuf, *cbuf;
static struct ib_mr *smr, *cmr;
static struct scatterlist ssg, csg;

static void fill(u8 *p, size_t n, u8 seed)
{
    size_t i;

    for (i = 0; i < n; i++)
        p[i] = (u8)(i * 7 + seed + (i >> 9));
}

static bool same(const u8 *a, const u8 *b, size_t n, const char *what)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (a[i] != b[i]) {
            pr_err("%s: byte %zu of %zu differs: 0x%02x, want 0x%02x\n", what, i, n, a[i], b[i]);
            return false;
        }
    return true;
}

static int post_srecv(struct end *s, int slot)
{
    struct ib_sge sge = {.addr = (u64)(uintptr_t)(sbuf + slot * RSLOT),
                         .length = RSLOT,
                         .lkey = s->pd->local_dma_lkey};
    struct ib_recv_wr r = {.wr_id = 1000 + slot, .sg_list = &sge, .num_sge = 1};

    return ib_post_recv(s->id->qp, &r, NULL);
}

static struct ib_mr *fr_mr(struct ib_qp *qp, struct ib_pd *pd, struct scatterlist *sg, u8 *buf,
                           size_t len, int access)
{
    struct ib_reg_wr r = {.wr = {.opcode = IB_WR_REG_MR}, .access = access};
    struct ib_mr *mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, len / PAGE_SIZE);
    int n;

    if (IS_ERR(mr))
        return NULL;
    sg_init_one(sg, buf, len);
    n = ib_dma_map_sg(pd->device, sg, 1, DMA_BIDIRECTIONAL);
    if (n != 1 || ib_map_mr_sg(mr, sg, 1, NULL, PAGE_SIZE) != 1) {
        ib_dereg_mr(mr);
        return NULL;
    }
    r.mr = mr;
    r.key = mr->rkey;
    if (ib_post_send(qp, &r.wr, NULL)) {
        ib_dereg_mr(mr);
        return NULL;
    }
    return mr;
}

static int post_one(struct ib_qp *qp, enum ib_wr_opcode op, u64 id, struct ib_sge *sge, int nsge,
                    u64 raddr, u32 rkey)
{
    struct ib_rdma_wr w = {
        .wr = {.opcode = op,
               .wr_id = id,
               .sg_list = sge,
               .num_sge = nsge,
               .send_flags = IB_SEND_SIGNALED},
        .remote_addr = raddr,
        .rkey = rkey,
    };

    return ib_post_send(qp, &w.wr, NULL);
}

/* one send completion on the client and one receive on the server */
static bool xfer_done(struct end *c, struct end *s, u64 cid, u64 sid, u32 len, const char *what)
{
    struct ib_wc wc[2];
    int n = poll_n(c->cq, wc, 1);

    CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].wr_id == cid,
          "%s: client n %d status %d id %llu", what, n, n ? wc[0].status : -1, n ? wc[0].wr_id : 0);
    if (!s)
        return n == 1 && wc[0].status == IB_WC_SUCCESS;
    n = poll_n(s->cq, wc + 1, 1);
    CHECK(n == 1 && wc[1].status == IB_WC_SUCCESS && wc[1].wr_id == sid &&
              wc[1].opcode == IB_WC_RECV && wc[1].byte_len == len,
          "%s: server n %d status %d id %llu len %u (want %u)", what, n, n ? wc[1].status : -1,
          n ? wc[1].wr_id : 0, n ? wc[1].byte_len : 0, len);
    return n == 1 && wc[1].status == IB_WC_SUCCESS;
}

static void conn_data(struct end *c, struct end *s)
{
    static const u32 sizes[] = {1, 4096 + 13, 200000};
    const int rw = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
                   IB_ACCESS_REMOTE_ATOMIC;
    struct ib_sge sge[2];
    struct ib_wc wc[4];
    u8 *want;
    int i, rc, n;

    if (!c) {
        sbuf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, DBUF_ORDER);
        CHECK(sbuf, "server buffer");
        if (!sbuf)
            return;
        for (i = 0, rc = 0; i < 3 && !rc; i++)
            rc = post_srecv(s, i);
        CHECK(rc == 0, "server post_recv: %d", rc);
        /* slot 3: the Write/Read target, fast-registered */
        smr = fr_mr(s->id->qp, s->pd, &ssg, sbuf + 3 * RSLOT, RSLOT, rw);
        CHECK(smr, "server fast-register MR");
        return;
    }
    cbuf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, DBUF_ORDER);
    want = vmalloc(RSLOT);
    CHECK(cbuf && want && sbuf && smr, "buffers");
    if (!cbuf || !want || !sbuf || !smr)
        goto out;
    fill(cbuf, DBUF_LEN, 0x11);

    /* Sends (the last with two SGEs) */
    for (i = 0; i < ARRAY_SIZE(sizes); i++) {
        u32 len = sizes[i], off = 1000 * i + 3;
        int nsge = 1;

        sge[0] = (struct ib_sge){
            .addr = (u64)(uintptr_t)(cbuf + off), .length = len, .lkey = c->pd->local_dma_lkey};
        if (len > 1000) {
            sge[0].length = 999;
            sge[1] = (struct ib_sge){.addr = (u64)(uintptr_t)(cbuf + RSLOT + off),
                                     .length = len - 999,
                                     .lkey = c->pd->local_dma_lkey};
            nsge = 2;
        }
        rc = post_one(c->id->qp, IB_WR_SEND, 1 + i, sge, nsge, 0, 0);
        CHECK(rc == 0, "post Send %u: %d", len, rc);
        if (rc || !xfer_done(c, s, 1 + i, 1000 + i, len, "Send"))
            goto out;
        memcpy(want, cbuf + off, min(len, 999u));
        if (len > 999)
            memcpy(want + 999, cbuf + RSLOT + off, len - 999);
        CHECK(same(sbuf + i * RSLOT, want, len, "Send"), "Send of %u bytes: data", len);
        CHECK(sbuf[i * RSLOT + len] == 0, "Send of %u bytes: a byte past it", len);
        rc = post_srecv(s, i);
        CHECK(rc == 0, "repost: %d", rc);
    }

    /* RDMA Writes into the server's MR, each followed by a Send */
    {
        static const struct {
            u32 off, len;
        } wr[] = {{0, 200000}, {200003, 5}};

        for (i = 0; i < ARRAY_SIZE(wr); i++) {
            u8 *src = cbuf + 2 * RSLOT + 17 + i;

            sge[0] = (struct ib_sge){
                .addr = (u64)(uintptr_t)src, .length = wr[i].len, .lkey = c->pd->local_dma_lkey};
            rc = post_one(c->id->qp, IB_WR_RDMA_WRITE, 10 + i, sge, 1, smr->iova + wr[i].off,
                          smr->rkey);
            CHECK(rc == 0, "post Write: %d", rc);
            sge[0].length = 1;
            rc = rc ?: post_one(c->id->qp, IB_WR_SEND, 20 + i, sge, 1, 0, 0);
            if (rc)
                goto out;
            n = poll_n(c->cq, wc, 2);
            CHECK(n == 2 && wc[0].wr_id == 10 + i && wc[0].status == IB_WC_SUCCESS &&
                      wc[0].opcode == IB_WC_RDMA_WRITE && wc[1].wr_id == 20 + i &&
                      wc[1].status == IB_WC_SUCCESS,
                  "Write + Send completions: n %d", n);
            n = poll_n(s->cq, wc, 1);
            CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].byte_len == 1,
                  "the Send after the Write: n %d", n);
            if (n != 1)
                goto out;
            post_srecv(s, wc[0].wr_id - 1000);
            CHECK(same(sbuf + 3 * RSLOT + wr[i].off, src, wr[i].len, "Write"),
                  "Write of %u bytes at %u: data", wr[i].len, wr[i].off);
        }
        CHECK(sbuf[3 * RSLOT + 200000] == 0 && sbuf[3 * RSLOT + 200008] == 0,
              "Write: bytes next to the target");
    }

    /* RFC 7306 immediate data: a Send with Immediate (uiwarp's form, an
     * attached Immediate Data message and the Send: one receive, its
     * length and the value) and an RDMA Write with Immediate (the Write,
     * then Immediate Data: one receive, RECV_RDMA_WITH_IMM, no bytes) */
    {
        static const u32 imms[] = {0x12345678, 0xcafebabe};
        static const u32 lens[] = {3001, 5000};
        struct ib_rdma_wr w = {.wr = {.sg_list = sge, .num_sge = 1}};

        for (i = 0; i < 2; i++) {
            u8 *src = cbuf + 2 * RSLOT + 101 + i;
            bool wimm = i == 1;
            int slot;

            sge[0] = (struct ib_sge){
                .addr = (u64)(uintptr_t)src, .length = lens[i], .lkey = c->pd->local_dma_lkey};
            w.wr.opcode = wimm ? IB_WR_RDMA_WRITE_WITH_IMM : IB_WR_SEND_WITH_IMM;
            w.wr.wr_id = 25 + i;
            w.wr.send_flags = IB_SEND_SIGNALED;
            w.wr.ex.imm_data = cpu_to_be32(imms[i]);
            w.remote_addr = smr->iova + 777;
            w.rkey = smr->rkey;
            rc = ib_post_send(c->id->qp, &w.wr, NULL);
            CHECK(rc == 0, "post %s with Immediate: %d", wimm ? "Write" : "Send", rc);
            if (rc)
                goto out;
            n = poll_n(c->cq, wc, 1);
            CHECK(n == 1 && wc[0].wr_id == 25 + i && wc[0].status == IB_WC_SUCCESS &&
                      wc[0].opcode == (wimm ? IB_WC_RDMA_WRITE : IB_WC_SEND),
                  "%s with Immediate: the client's completion: n %d status %d opcode %d",
                  wimm ? "Write" : "Send", n, n ? wc[0].status : -1, n ? wc[0].opcode : -1);
            n = poll_n(s->cq, wc, 1);
            CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS &&
                      wc[0].opcode == (wimm ? IB_WC_RECV_RDMA_WITH_IMM : IB_WC_RECV) &&
                      wc[0].byte_len == (wimm ? 0 : lens[i]) && (wc[0].wc_flags & IB_WC_WITH_IMM) &&
                      wc[0].ex.imm_data == cpu_to_be32(imms[i]),
                  "%s with Immediate: the server's receive: n %d status %d opcode %d len %u "
                  "flags 0x%x imm 0x%08x",
                  wimm ? "Write" : "Send", n, n ? wc[0].status : -1, n ? wc[0].opcode : -1,
                  n ? wc[0].byte_len : 0, n ? wc[0].wc_flags : 0,
                  n ? be32_to_cpu(wc[0].ex.imm_data) : 0);
            if (n != 1)
                goto out;
            slot = wc[0].wr_id - 1000;
            if (wimm)
                CHECK(same(sbuf + 3 * RSLOT + 777, src, lens[i], "Write with Immediate"),
                      "Write with Immediate: data");
            else
                CHECK(same(sbuf + slot * RSLOT, src, lens[i], "Send with Immediate"),
                      "Send with Immediate: data");
            rc = post_srecv(s, slot);
            CHECK(rc == 0, "repost: %d", rc);
        }
        /* one receive each: nothing more on the server's CQ */
        CHECK(ib_poll_cq(s->cq, 1, wc) == 0, "immediate data: no other receive completed");
    }

    /* RFC 7306 atomics on a word of the server's MR: Fetch and Add, a
     * Compare and Swap that matches, one that does not; the original
     * value lands in the client's 8-byte SGE */
    {
        static const struct {
            enum ib_wr_opcode op;
            u64 cmp_add, swap, orig, after;
        } at[] = {
            {IB_WR_ATOMIC_FETCH_AND_ADD, 234, 0, 1000, 1234},
            {IB_WR_ATOMIC_CMP_AND_SWP, 1234, 0xdeadbeefcafef00dull, 1234, 0xdeadbeefcafef00dull},
            {IB_WR_ATOMIC_CMP_AND_SWP, 5, 7, 0xdeadbeefcafef00dull, 0xdeadbeefcafef00dull},
        };
        u64 *word = (u64 *)(sbuf + 3 * RSLOT + 4096), *res = (u64 *)(cbuf + 2 * RSLOT + 64);

        *word = 1000;
        for (i = 0; i < ARRAY_SIZE(at); i++) {
            struct ib_atomic_wr w = {
                .wr = {.opcode = at[i].op,
                       .wr_id = 50 + i,
                       .sg_list = sge,
                       .num_sge = 1,
                       .send_flags = IB_SEND_SIGNALED},
                .remote_addr = smr->iova + 4096,
                .rkey = smr->rkey,
                .compare_add = at[i].cmp_add,
                .swap = at[i].swap,
            };

            *res = 0x1111111111111111ull;
            sge[0] = (struct ib_sge){
                .addr = (u64)(uintptr_t)res, .length = 8, .lkey = c->pd->local_dma_lkey};
            rc = ib_post_send(c->id->qp, &w.wr, NULL);
            CHECK(rc == 0, "post atomic %d: %d", i, rc);
            if (rc)
                goto out;
            n = poll_n(c->cq, wc, 1);
            CHECK(n == 1 && wc[0].wr_id == 50 + i && wc[0].status == IB_WC_SUCCESS &&
                      wc[0].opcode == (at[i].op == IB_WR_ATOMIC_FETCH_AND_ADD ? IB_WC_FETCH_ADD
                                                                              : IB_WC_COMP_SWAP) &&
                      wc[0].byte_len == 8,
                  "atomic %d: completion n %d status %d opcode %d len %u", i, n,
                  n ? wc[0].status : -1, n ? wc[0].opcode : -1, n ? wc[0].byte_len : 0);
            if (n != 1)
                goto out;
            CHECK(*res == at[i].orig && READ_ONCE(*word) == at[i].after,
                  "atomic %d: original 0x%llx (want 0x%llx), word 0x%llx (want 0x%llx)", i, *res,
                  at[i].orig, READ_ONCE(*word), at[i].after);
        }
        CHECK(ib_poll_cq(s->cq, 1, wc) == 0, "atomics: no receive completed at the server");
    }

    /* RDMA Reads from the server's MR: into DMA-MR memory, then into a
     * client fast-register MR */
    fill(sbuf + 3 * RSLOT, RSLOT, 0x5a);
    memset(cbuf + 3 * RSLOT, 0, RSLOT);
    sge[0] = (struct ib_sge){.addr = (u64)(uintptr_t)(cbuf + 3 * RSLOT + 1),
                             .length = 200000,
                             .lkey = c->pd->local_dma_lkey};
    rc = post_one(c->id->qp, IB_WR_RDMA_READ, 30, sge, 1, smr->iova + 4, smr->rkey);
    CHECK(rc == 0, "post Read: %d", rc);
    if (rc || !xfer_done(c, NULL, 30, 0, 0, "Read"))
        goto out;
    CHECK(same(cbuf + 3 * RSLOT + 1, sbuf + 3 * RSLOT + 4, 200000, "Read"), "Read 200000: data");
    CHECK(cbuf[3 * RSLOT] == 0 && cbuf[3 * RSLOT + 200001] == 0, "Read: bytes next to the sink");

    memset(cbuf, 0, 4 * PAGE_SIZE);
    cmr = fr_mr(c->id->qp, c->pd, &csg, cbuf, 4 * PAGE_SIZE, rw);
    CHECK(cmr, "client fast-register MR");
    if (!cmr)
        goto out;
    sge[0] = (struct ib_sge){.addr = cmr->iova + 4000, .length = 777, .lkey = cmr->lkey};
    rc = post_one(c->id->qp, IB_WR_RDMA_READ, 31, sge, 1, smr->iova + 100001, smr->rkey);
    CHECK(rc == 0, "post Read into an FR MR: %d", rc);
    if (rc || !xfer_done(c, NULL, 31, 0, 0, "Read into an FR MR"))
        goto out;
    CHECK(same(cbuf + 4000, sbuf + 3 * RSLOT + 100001, 777, "Read FR"), "Read 777 into FR: data");

    /* Read with Invalidate (what rdma_rw posts on iWARP): the sink MR is
     * invalid once the data is there, so it can be registered again
     * without a Local Invalidate */
    {
        struct ib_rdma_wr w = {
            .wr = {.opcode = IB_WR_RDMA_READ_WITH_INV,
                   .wr_id = 32,
                   .sg_list = sge,
                   .num_sge = 1,
                   .send_flags = IB_SEND_SIGNALED,
                   .ex.invalidate_rkey = cmr->lkey},
            .remote_addr = smr->iova + 7,
            .rkey = smr->rkey,
        };
        struct ib_reg_wr r = {
            .wr = {.opcode = IB_WR_REG_MR, .wr_id = 33, .send_flags = IB_SEND_SIGNALED},
            .mr = cmr,
            .key = cmr->rkey,
            .access = rw};

        sge[0] = (struct ib_sge){.addr = cmr->iova + 100, .length = 5000, .lkey = cmr->lkey};
        rc = ib_post_send(c->id->qp, &w.wr, NULL);
        CHECK(rc == 0, "post Read with Invalidate: %d", rc);
        if (rc || !xfer_done(c, NULL, 32, 0, 0, "Read with Invalidate"))
            goto out;
        CHECK(same(cbuf + 100, sbuf + 3 * RSLOT + 7, 5000, "Read inv"),
              "Read with Invalidate: data");
        rc = ib_post_send(c->id->qp, &r.wr, NULL);
        n = rc ? 0 : poll_n(c->cq, wc, 1);
        CHECK(n == 1 && wc[0].wr_id == 33 && wc[0].status == IB_WC_SUCCESS,
              "REG_MR after Read with Invalidate: n %d status %d", n, n ? wc[0].status : -1);
    }

    /* a burst posted at once: 4 Writes of 60000 bytes, 3 Reads of 40000
     * from what they wrote, a Send; completions in order */
    {
        struct ib_send_wr *first = NULL, **link = &first;
        static struct ib_rdma_wr ws[8];
        static struct ib_sge gs[8];

        memset(cbuf + RSLOT, 0, RSLOT);
        fill(cbuf + 2 * RSLOT, RSLOT, 0x77);
        for (i = 0; i < 8; i++) {
            struct ib_rdma_wr *w = &ws[i];

            memset(w, 0, sizeof(*w));
            w->wr.wr_id = 50 + i;
            w->wr.send_flags = IB_SEND_SIGNALED;
            w->wr.sg_list = &gs[i];
            w->wr.num_sge = 1;
            w->rkey = smr->rkey;
            if (i < 4) {
                w->wr.opcode = IB_WR_RDMA_WRITE;
                gs[i] = (struct ib_sge){.addr = (u64)(uintptr_t)(cbuf + 2 * RSLOT + i * 60000),
                                        .length = 60000,
                                        .lkey = c->pd->local_dma_lkey};
                w->remote_addr = smr->iova + i * 60000;
            } else if (i < 7) {
                w->wr.opcode = IB_WR_RDMA_READ;
                gs[i] = (struct ib_sge){.addr = (u64)(uintptr_t)(cbuf + RSLOT + (i - 4) * 40000),
                                        .length = 40000,
                                        .lkey = c->pd->local_dma_lkey};
                w->remote_addr = smr->iova + 10000 + (i - 4) * 70000;
            } else {
                w->wr.opcode = IB_WR_SEND;
                gs[i] = (struct ib_sge){
                    .addr = (u64)(uintptr_t)cbuf, .length = 10, .lkey = c->pd->local_dma_lkey};
            }
            *link = &w->wr;
            link = &w->wr.next;
        }
        rc = ib_post_send(c->id->qp, first, NULL);
        CHECK(rc == 0, "post the burst: %d", rc);
        n = rc ? 0 : poll_n(c->cq, wc, 4);
        CHECK(n == 4, "burst: %d completions", n);
        {
            static struct ib_wc all[8];
            int k;

            memcpy(all, wc, 4 * sizeof(*wc));
            k = 4 + poll_n(c->cq, all + 4, 4);
            CHECK(k == 8, "burst: %d completions of 8", k);
            for (i = 0; i < k; i++)
                CHECK(all[i].wr_id == 50 + i && all[i].status == IB_WC_SUCCESS,
                      "burst completion %d: id %llu status %d", i, all[i].wr_id, all[i].status);
        }
        n = poll_n(s->cq, wc, 1);
        CHECK(n == 1 && wc[0].byte_len == 10, "burst: the server's receive");
        if (n == 1)
            post_srecv(s, wc[0].wr_id - 1000);
        CHECK(same(sbuf + 3 * RSLOT, cbuf + 2 * RSLOT, 240000, "burst Writes"),
              "burst Writes: data");
        for (i = 0; i < 3; i++)
            CHECK(same(cbuf + RSLOT + i * 40000, cbuf + 2 * RSLOT + 10000 + i * 70000, 40000,
                       "burst Reads"),
                  "burst Read %d: data", i);
    }

    /* the server sends to the client, which has no receive posted yet:
     * the Send waits for it ("receiver not ready") */
    {
        struct ib_sge rs = {.addr = cmr->iova + 8, .length = 3000, .lkey = cmr->lkey};
        struct ib_recv_wr r = {.wr_id = 40, .sg_list = &rs, .num_sge = 1};

        sge[0] = (struct ib_sge){.addr = (u64)(uintptr_t)(sbuf + 3 * RSLOT + 50),
                                 .length = 2500,
                                 .lkey = s->pd->local_dma_lkey};
        rc = post_one(s->id->qp, IB_WR_SEND, 41, sge, 1, 0, 0);
        CHECK(rc == 0, "server post Send: %d", rc);
        n = rc ? 0 : poll_n(s->cq, wc, 1);
        CHECK(n == 1 && wc[0].wr_id == 41 && wc[0].status == IB_WC_SUCCESS, "server Send: n %d", n);
        msleep(100);
        CHECK(ib_poll_cq(c->cq, 1, wc) == 0, "a completion on the client without a receive");
        rc = ib_post_recv(c->id->qp, &r, NULL);
        CHECK(rc == 0, "client post_recv: %d", rc);
        n = rc ? 0 : poll_n(c->cq, wc, 1);
        CHECK(n == 1 && wc[0].wr_id == 40 && wc[0].status == IB_WC_SUCCESS &&
                  wc[0].byte_len == 2500,
              "client receive: n %d len %u", n, n ? wc[0].byte_len : 0);
        CHECK(same(cbuf + 8, sbuf + 3 * RSLOT + 50, 2500, "server Send"), "server Send: data");
    }
out:
    vfree(want);
}

/* after the disconnect: MRs and buffers */
static void conn_data_free(struct end *c, struct end *s)
{
    if (cmr) {
        ib_dma_unmap_sg(c->pd->device, &csg, 1, DMA_BIDIRECTIONAL);
        ib_dereg_mr(cmr);
    }
    if (smr) {
        ib_dma_unmap_sg(s->pd->device, &ssg, 1, DMA_BIDIRECTIONAL);
        ib_dereg_mr(smr);
    }
    cmr = smr = NULL;
    if (cbuf)
        free_pages((unsigned long)cbuf, DBUF_ORDER);
    if (sbuf)
        free_pages((unsigned long)sbuf, DBUF_ORDER);
    cbuf = sbuf = NULL;
}

/* A connection whose server QP takes its receives from an SRQ (as
 * nvmet-rdma with use_srq=1): Sends land in the SRQ's receives in posting
 * order, completed on the QP's CQ with the QP; the limit event once when
 * fewer than the armed limit remain (then disarmed); a Send that finds the
 * SRQ empty waits until a receive is posted. */
static atomic_t srq_limit_events = ATOMIC_INIT(0);

/* A parameter of the driver (uiwarp.ko) as sysfs shows it; -1 if unread. */
static int drv_param(const char *name)
{
    char path[96], buf[24];
    struct file *f;
    loff_t pos = 0;
    ssize_t n;
    int v;

    snprintf(path, sizeof(path), "/sys/module/uiwarp/parameters/%s", name);
    f = filp_open(path, O_RDONLY, 0);
    if (IS_ERR(f))
        return -1;
    n = kernel_read(f, buf, sizeof(buf) - 1, &pos);
    filp_close(f, NULL);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return kstrtoint(buf, 10, &v) ? -1 : v;
}

static void srq_event(struct ib_event *ev, void *ctx)
{
    if (ev->event == IB_EVENT_SRQ_LIMIT_REACHED)
        atomic_inc(&srq_limit_events);
}

static int srq_post(struct ib_srq *srq, struct end *s, u8 *buf, int slot)
{
    struct ib_sge sge = {
        .addr = (u64)(uintptr_t)(buf + slot * 4096), .length = 4096, .lkey = s->pd->local_dma_lkey};
    struct ib_recv_wr r = {.wr_id = 800 + slot, .sg_list = &sge, .num_sge = 1};

    return ib_post_srq_recv(srq, &r, NULL);
}

static void test_srq_conn(struct ib_device *ib, struct sockaddr_in *sin)
{
    struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
    struct ib_srq_init_attr sa = {
        .event_handler = srq_event, .attr = {.max_wr = 8, .max_sge = 1}, .srq_type = IB_SRQT_BASIC};
    struct ib_qp_init_attr qa = {
        .event_handler = qp_event,
        .cap = {.max_send_wr = 8, .max_send_sge = 1},
        .sq_sig_type = IB_SIGNAL_REQ_WR,
        .qp_type = IB_QPT_RC,
    };
    struct ib_srq_attr a = {.srq_limit = 3};
    struct end c = {}, s = {};
    struct ib_srq *srq = NULL;
    u8 *sb = (u8 *)__get_free_pages(GFP_KERNEL, 3), *cb = (u8 *)__get_free_pages(GFP_KERNEL, 3);
    static const u32 len[5] = {1000, 3000, 1, 4096, 77};
    struct ib_wc wc[8];
    int i, k, n, rc, waits0, waits;
    unsigned long t0;

    atomic_set(&srq_limit_events, 0);
    if (!sb || !cb)
        goto out;
    c.id = rdma_create_id(&init_net, cm_handler, &q_cli, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(c.id)) {
        c.id = NULL;
        goto fail;
    }
    if (rdma_resolve_addr(c.id, NULL, (struct sockaddr *)sin, 2000) ||
        evq_wait(&q_cli, RDMA_CM_EVENT_ADDR_RESOLVED, "srq: addr") < 0 ||
        rdma_resolve_route(c.id, 2000) ||
        evq_wait(&q_cli, RDMA_CM_EVENT_ROUTE_RESOLVED, "srq: route") < 0 || !end_init(ib, &c) ||
        conn_qp(&c) || rdma_connect(c.id, &p))
        goto fail;
    i = evq_wait(&q_srv, RDMA_CM_EVENT_CONNECT_REQUEST, "srq: request");
    if (i < 0)
        goto fail;
    s.id = q_srv.e[i].id;
    if (!end_init(ib, &s))
        goto fail;
    srq = ib_create_srq(s.pd, &sa);
    if (IS_ERR(srq)) {
        srq = NULL;
        goto fail;
    }
    for (k = 0; k < 4; k++)
        CHECK(srq_post(srq, &s, sb, k) == 0, "srq: post receive %d", k);
    CHECK(ib_modify_srq(srq, &a, IB_SRQ_LIMIT) == 0, "srq: arm the limit");
    qa.send_cq = s.cq;
    qa.recv_cq = s.cq;
    qa.srq = srq;
    if (rdma_create_qp(s.id, s.pd, &qa))
        goto fail;
    p.qp_num = s.id->qp->qp_num;
    rdma_lock_handler(s.id);
    rc = rdma_accept(s.id, &p);
    rdma_unlock_handler(s.id);
    if (rc || evq_wait(&q_srv, RDMA_CM_EVENT_ESTABLISHED, "srq: server") < 0 ||
        evq_wait(&q_cli, RDMA_CM_EVENT_ESTABLISHED, "srq: client") < 0)
        goto fail;
    /* 5 Sends for 4 receives: the fifth waits for the receive posted
     * 300 ms later, without a completion, a Terminate or a QP event, and
     * its connection does nothing meanwhile: it waits once (the driver's
     * srq_waits counter: one wait, where a look every jiffy counted about
     * 75 in 300 ms), and the post wakes it */
    waits0 = drv_param("srq_waits");
    CHECK(waits0 >= 0, "srq: the driver's srq_waits not readable");
    atomic_set(&qp_events, 0);
    for (k = 0; k < 5; k++) {
        struct ib_sge sge = {.addr = (u64)(uintptr_t)(cb + k * 4096),
                             .length = len[k],
                             .lkey = c.pd->local_dma_lkey};

        fill(cb + k * 4096, len[k], 40 + k);
        CHECK(post_one(c.id->qp, IB_WR_SEND, 850 + k, &sge, 1, 0, 0) == 0, "srq: Send %d", k);
    }
    n = poll_n(s.cq, wc, 4);
    CHECK(n == 4, "srq: %d receives completed, want 4", n);
    msleep(300);
    CHECK(ib_poll_cq(s.cq, 1, &wc[4]) == 0, "srq: a fifth completion without a receive");
    CHECK(qp_state(s.id->qp) == IB_QPS_RTS && qp_state(c.id->qp) == IB_QPS_RTS &&
              atomic_read(&qp_events) == 0,
          "srq: while the Send waits: QP states %d %d, %d QP events", qp_state(s.id->qp),
          qp_state(c.id->qp), atomic_read(&qp_events));
    waits = drv_param("srq_waits");
    CHECK(waits == waits0 + 1, "srq: the driver counted %d waits in 300 ms, want 1 (no polling)",
          waits - waits0);
    t0 = jiffies;
    CHECK(srq_post(srq, &s, sb, 4) == 0, "srq: post receive 4");
    n += poll_n(s.cq, wc + n, 1);
    CHECK(n == 5, "srq: %d receives completed, want 5", n);
    pr_info("srq: the waiting Send completed %u ms after the post\n",
            jiffies_to_msecs(jiffies - t0));
    CHECK(time_before(jiffies, t0 + HZ / 5), "srq: the waiting Send completed %u ms after the post",
          jiffies_to_msecs(jiffies - t0));
    CHECK(drv_param("srq_waits") == waits, "srq: more waits after the post");
    for (k = 0; k < n; k++) {
        CHECK(wc[k].status == IB_WC_SUCCESS && wc[k].opcode == IB_WC_RECV &&
                  wc[k].wr_id == 800 + k && wc[k].byte_len == len[k] && wc[k].qp == s.id->qp,
              "srq: receive %d: status %d opcode %d wr_id %llu len %u", k, wc[k].status,
              wc[k].opcode, wc[k].wr_id, wc[k].byte_len);
        CHECK(same(sb + k * 4096, cb + k * 4096, len[k], "srq: the Send's bytes"),
              "srq: bytes of %d", k);
    }
    CHECK(atomic_read(&srq_limit_events) == 1, "srq: %d limit events, want 1",
          atomic_read(&srq_limit_events));
    CHECK(ib_query_srq(srq, &a) == 0 && a.srq_limit == 0, "srq: limit after the event %u",
          a.srq_limit);
    n = poll_n(c.cq, wc, 5);
    CHECK(n == 5, "srq: %d Send completions, want 5", n);
    /* a sixth Send finds the SRQ empty; the server's QP is destroyed while
     * it waits: the connection leaves the SRQ's waiters (no endpoint
     * left at unload, the SRQ destroyed after it), both ends hear of it */
    {
        struct ib_sge sge = {
            .addr = (u64)(uintptr_t)cb, .length = 100, .lkey = c.pd->local_dma_lkey};

        CHECK(post_one(c.id->qp, IB_WR_SEND, 860, &sge, 1, 0, 0) == 0, "srq: Send 6");
    }
    for (k = 0; k < 200 && drv_param("srq_waits") != waits + 1; k++)
        msleep(10);
    CHECK(drv_param("srq_waits") == waits + 1, "srq: the sixth Send did not wait (%d)",
          drv_param("srq_waits") - waits);
    rdma_destroy_qp(s.id);
    evq_wait(&q_srv, RDMA_CM_EVENT_DISCONNECTED, "srq: server, its QP destroyed while waiting");
    evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "srq: client, the server's QP destroyed");
    CHECK(ib_poll_cq(s.cq, 8, wc) == 0, "srq: a completion for the waiting Send");
    goto out;
fail:
    CHECK(0, "srq connection: setup");
out:
    if (s.id && s.id->qp)
        rdma_destroy_qp(s.id);
    if (srq)
        ib_destroy_srq(srq);
    end_fini(&c);
    end_fini(&s);
    if (sb)
        free_pages((unsigned long)sb, 3);
    if (cb)
        free_pages((unsigned long)cb, 3);
}

static void test_conn(struct ib_device *ib)
{
    struct end c = {}, s = {};
    struct rdma_cm_id *lid;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct net_device *nd = dev_get_by_name(&init_net, netdev);
    static struct ib_wc wc[64];
    int rc, n;

    if (!nd) {
        CHECK(0, "no interface %s", netdev);
        return;
    }
    sin.sin_addr.s_addr = inet_select_addr(nd, 0, RT_SCOPE_UNIVERSE);
    dev_put(nd);
    CHECK(sin.sin_addr.s_addr != 0, "no IPv4 address on %s", netdev);
    evq_init(&q_cli);
    evq_init(&q_srv);
    lid = rdma_create_id(&init_net, cm_handler, &q_srv, RDMA_PS_TCP, IB_QPT_RC);
    CHECK(!IS_ERR(lid), "rdma_create_id (listener): %ld", PTR_ERR(lid));
    if (IS_ERR(lid))
        return;
    rc = rdma_bind_addr(lid, (struct sockaddr *)&sin);
    CHECK(rc == 0, "rdma_bind_addr %pI4: %d", &sin.sin_addr, rc);
    rc = rc ?: rdma_listen(lid, 4);
    CHECK(rc == 0, "rdma_listen: %d", rc);
    CHECK(lid->device == ib, "listener on %s", lid->device ? dev_name(&lid->device->dev) : "none");
    if (rc)
        goto out;

    /* connect, the data path, a graceful disconnect from the client */
    if (conn_up(ib, &sin, &c, &s, false) == 0) {
        conn_data(&c, &s);
        rc = rdma_disconnect(c.id);
        CHECK(rc == 0, "rdma_disconnect: %d", rc);
        evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "client");
        evq_wait(&q_srv, RDMA_CM_EVENT_DISCONNECTED, "server");
        CHECK(qp_state(c.id->qp) == IB_QPS_ERR, "client QP after disconnect: %d",
              qp_state(c.id->qp));
        CHECK(qp_state(s.id->qp) == IB_QPS_ERR, "server QP after disconnect: %d",
              qp_state(s.id->qp));
        /* the server's receives left are flushed */
        n = ib_poll_cq(s.cq, 64, wc);
        CHECK(n == 3, "server receives flushed: %d", n);
        while (n > 0) {
            CHECK(wc[n - 1].status == IB_WC_WR_FLUSH_ERR, "server flush status %d",
                  wc[n - 1].status);
            n--;
        }
    }
    conn_data_free(&c, &s);
    end_fini(&c);
    end_fini(&s);

    /* a protocol violation: a Write to a bad STag. The server sends a
     * Terminate (DDP tagged, invalid STag), both QPs go to ERR with a
     * fatal event, the connection closes (DISCONNECTED on both sides) */
    if (conn_up(ib, &sin, &c, &s, false) == 0 && smr) {
        struct ib_sge sge = {
            .addr = (u64)(uintptr_t)sbuf, .length = 100, .lkey = s.pd->local_dma_lkey};

        atomic_set(&qp_events, 0);
        last_qp_event = -1;
        cbuf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, DBUF_ORDER);
        if (cbuf) {
            sge.addr = (u64)(uintptr_t)cbuf;
            sge.lkey = c.pd->local_dma_lkey;
            rc = post_one(c.id->qp, IB_WR_RDMA_WRITE, 60, &sge, 1, smr->iova, smr->rkey + 1);
            CHECK(rc == 0, "post a Write to a bad STag: %d", rc);
            evq_wait(&q_srv, RDMA_CM_EVENT_DISCONNECTED, "server after the Terminate");
            evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "client after the Terminate");
            CHECK(qp_state(c.id->qp) == IB_QPS_ERR && qp_state(s.id->qp) == IB_QPS_ERR,
                  "QP states after the Terminate: %d %d", qp_state(c.id->qp), qp_state(s.id->qp));
            CHECK(atomic_read(&qp_events) == 2 && last_qp_event == IB_EVENT_QP_FATAL,
                  "QP events %d, last %d", atomic_read(&qp_events), last_qp_event);
            CHECK(sbuf[0] == 0, "the bad Write placed nothing");
            n = ib_poll_cq(s.cq, 64, wc);
            CHECK(n == 3 && wc[0].status == IB_WC_WR_FLUSH_ERR, "server receives flushed: %d", n);
            n = ib_poll_cq(c.cq, 64, wc);
            CHECK(n == 1 && wc[0].wr_id == 60, "client Write completion: %d", n);
        }
    }
    conn_data_free(&c, &s);
    end_fini(&c);
    end_fini(&s);

    /* ORD 0: the server accepts with initiator_depth 0, so it has no Read
     * credit. Its Read fails locally (IB_WC_LOC_QP_OP_ERR, as the
     * library's) without going out (the client's STag here is made up:
     * sent, it would come back as a remote error), the server's QP goes to
     * ERR with a fatal event and its receives are flushed */
    accept_ord = 0;
    cbuf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, DBUF_ORDER);
    if (conn_up(ib, &sin, &c, &s, false) == 0 && sbuf && cbuf) {
        struct ib_sge sge = {
            .addr = (u64)(uintptr_t)cbuf, .length = 8, .lkey = c.pd->local_dma_lkey};
        int k, read_at = -1;

        /* the client's Send first: a responder sends nothing before it has
         * a valid FPDU from the initiator (RFC 5044 §7.1.2) */
        rc = post_one(c.id->qp, IB_WR_SEND, 80, &sge, 1, 0, 0);
        CHECK(rc == 0, "the client's Send before the Read at ORD 0: %d", rc);
        if (!rc)
            xfer_done(&c, &s, 80, 1000, 8, "the client's Send before the Read at ORD 0");
        atomic_set(&qp_events, 0);
        last_qp_event = -1;
        sge.addr = (u64)(uintptr_t)sbuf;
        sge.length = 64;
        sge.lkey = s.pd->local_dma_lkey;
        rc = post_one(s.id->qp, IB_WR_RDMA_READ, 70, &sge, 1, 0x10000, 0x1234);
        CHECK(rc == 0, "post a Read at ORD 0: %d", rc);
        n = rc ? 0 : poll_n(s.cq, wc, 3);
        for (k = 0; k < n; k++)
            if (wc[k].wr_id == 70)
                read_at = k;
        CHECK(read_at >= 0 && wc[read_at].status == IB_WC_LOC_QP_OP_ERR,
              "the Read at ORD 0: %d completions, its status %d (want %d)", n,
              read_at >= 0 ? wc[read_at].status : -1, IB_WC_LOC_QP_OP_ERR);
        CHECK(n == 3, "the Read and the 2 receives left complete: %d", n);
        CHECK(qp_state(s.id->qp) == IB_QPS_ERR, "server QP after the Read at ORD 0: %d",
              qp_state(s.id->qp));
        /* the event handler runs beside the completions: up to a second */
        for (k = 0; k < 100 && READ_ONCE(last_qp_event) != IB_EVENT_QP_FATAL; k++)
            msleep(10);
        CHECK(last_qp_event == IB_EVENT_QP_FATAL, "QP event %d", last_qp_event);
        evq_wait(&q_srv, RDMA_CM_EVENT_DISCONNECTED, "server after the Read at ORD 0");
        evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "client after the Read at ORD 0");
    }
    accept_ord = 3;
    conn_data_free(&c, &s);
    end_fini(&c);
    end_fini(&s);

    test_srq_conn(ib, &sin);

    /* a rejected connection */
    conn_up(ib, &sin, &c, &s, true);
    end_fini(&c);
    end_fini(&s);

    /* nobody listens on the port: connection refused (REJECTED,
     * -ECONNREFUSED), the QP left as it was */
    c.id = rdma_create_id(&init_net, cm_handler, &q_cli, RDMA_PS_TCP, IB_QPT_RC);
    if (!IS_ERR(c.id)) {
        struct sockaddr_in none = sin;
        struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};

        none.sin_port = htons(port + 1);
        rc = rdma_resolve_addr(c.id, NULL, (struct sockaddr *)&none, 2000);
        if (!rc && evq_wait(&q_cli, RDMA_CM_EVENT_ADDR_RESOLVED, "refused: addr") >= 0 &&
            !rdma_resolve_route(c.id, 2000) &&
            evq_wait(&q_cli, RDMA_CM_EVENT_ROUTE_RESOLVED, "refused: route") >= 0 &&
            end_init(ib, &c) && !conn_qp(&c)) {
            rc = rdma_connect(c.id, &p);
            CHECK(rc == 0, "rdma_connect to a closed port: %d", rc);
            n = rc ? -1 : evq_wait(&q_cli, RDMA_CM_EVENT_REJECTED, "a closed port");
            CHECK(n >= 0 && q_cli.e[n].status == -ECONNREFUSED, "a closed port: status %d",
                  n >= 0 ? q_cli.e[n].status : 0);
            CHECK(qp_state(c.id->qp) != IB_QPS_ERR && qp_state(c.id->qp) != IB_QPS_RTS,
                  "QP after a refused connect: %d", qp_state(c.id->qp));
        } else {
            CHECK(0, "refused connect: setup");
        }
    } else {
        c.id = NULL;
    }
    end_fini(&c);
out:
    rdma_destroy_id(lid);
}

/* ------------------------------------------------------------------------
 * Interop: an rping client (rdma-core's rping protocol) against `rping -s`
 * on another device (siw), rping_dst= its address, rping_src= ours
 * ---------------------------------------------------------------------- */

static char *rping_dst, *rping_src;
module_param(rping_dst, charp, 0444);
MODULE_PARM_DESC(rping_dst, "run only the rping client test, to this IPv4 address");
module_param(rping_src, charp, 0444);
MODULE_PARM_DESC(rping_src, "the rping client's source IPv4 address (picks the device)");
static unsigned int rping_port = 7174, rping_size = 100000, rping_count = 3;
module_param(rping_port, uint, 0444);
module_param(rping_size, uint, 0444);
module_param(rping_count, uint, 0444);
/* rping_term=1: the server breaks a rule after the last round (the RNIC
 * personalities' Write to a bad STag): wait for our Terminate, the posted
 * receive flushed, before the disconnect, which could otherwise close the
 * connection before the peer's Write arrives */
static bool rping_term;
module_param(rping_term, bool, 0444);
MODULE_PARM_DESC(rping_term,
                 "after the rping rounds, wait for the QP's error (the peer's violation)");

/* rping_deadpeer=1 or 2: no rounds. The connection stays idle for 1.5
 * times the module's peer_timeout_ms with the peer alive (its TCP answers
 * the keepalive probes: nothing may end), then the ktest logs "silence
 * the peer now", kernel.sh makes the peer's TCP silent (a blackhole route
 * in its namespace: nothing of it comes back, no reset, no ICMP) and
 * creates DEADPEER_CUT, from which the ktest counts. 1: the connection
 * stays idle (keepalive finds the peer dead); 2: a Send goes out first,
 * never acknowledged (TCP_USER_TIMEOUT ends its retransmissions). The
 * module must find the peer dead within peer_timeout_ms plus a margin:
 * DISCONNECTED, the QP in ERR with IB_EVENT_QP_FATAL, the posted receive
 * flushed. */
static unsigned int rping_deadpeer;
module_param(rping_deadpeer, uint, 0444);
MODULE_PARM_DESC(rping_deadpeer, "after the connect, idle, then wait for the dead-peer detection "
                                 "(1 idle, 2 with a Send unacknowledged)");
#define DEADPEER_CUT "/tmp/uiw-deadpeer-cut"

struct rping_info {
    __be64 buf;
    __be32 rkey;
    __be32 size;
};

static bool file_exists(const char *path)
{
    struct file *f = filp_open(path, O_RDONLY, 0);

    if (IS_ERR(f))
        return false;
    filp_close(f, NULL);
    return true;
}

static void rping_dead(struct end *c, struct ib_sge *ts)
{
    int t = drv_param("peer_timeout_ms"), ev0 = atomic_read(&qp_events), k, n;
    unsigned long t0;
    unsigned int ms;
    struct ib_wc wc;

    CHECK(t >= 1000 && t <= 10000, "dead peer: the module's peer_timeout_ms %d (1000..10000)", t);
    if (t < 1000 || t > 10000)
        return;
    /* alive: keepalive probes go out after 1 s of silence and are
     * answered; 1.5 T later the connection is as it was */
    msleep(t * 3 / 2);
    CHECK(READ_ONCE(q_cli.in) == READ_ONCE(q_cli.out),
          "dead peer: a CM event while the peer was alive and idle");
    CHECK(qp_state(c->id->qp) == IB_QPS_RTS, "dead peer: the QP not in RTS with the peer alive");
    CHECK(atomic_read(&qp_events) == ev0, "dead peer: a QP event with the peer alive");
    CHECK(ib_poll_cq(c->cq, 1, &wc) == 0, "dead peer: a completion with the peer alive");
    pr_info(
        "rping: dead peer: idle %d ms with the peer alive, connection up; silence the peer now\n",
        t * 3 / 2);
    for (k = 0; k < 200 && !file_exists(DEADPEER_CUT); k++)
        msleep(50);
    CHECK(k < 200, "dead peer: no %s from kernel.sh in 10 s", DEADPEER_CUT);
    t0 = jiffies;
    if (rping_deadpeer == 2) {
        k = post_one(c->id->qp, IB_WR_SEND, 10, ts, 1, 0, 0);
        CHECK(k == 0, "dead peer: post Send: %d", k);
    }
    wait_event_timeout(q_cli.wq, READ_ONCE(q_cli.in) != READ_ONCE(q_cli.out),
                       msecs_to_jiffies(t + 8000));
    ms = jiffies_to_msecs(jiffies - t0);
    k = evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "dead peer");
    /* the last answered probe came at most 1 s before the cut: the
     * abort comes T after it, give or take the 1 s probe interval */
    CHECK(k >= 0 && ms >= (unsigned int)t / 2 && ms <= (unsigned int)t + 3000,
          "dead peer: DISCONNECTED after %u ms (want %d..%d)", ms, t / 2, t + 3000);
    if (k >= 0)
        pr_info("rping: dead peer: DISCONNECTED %u ms after the cut (peer_timeout_ms %d)\n", ms, t);
    CHECK(qp_state(c->id->qp) == IB_QPS_ERR, "dead peer: the QP in %d, not ERR",
          qp_state(c->id->qp));
    CHECK(atomic_read(&qp_events) == ev0 + 1 && last_qp_event == IB_EVENT_QP_FATAL,
          "dead peer: QP events %d, last %d (want one IB_EVENT_QP_FATAL)",
          atomic_read(&qp_events) - ev0, last_qp_event);
    if (rping_deadpeer == 2) {
        /* handed to TCP, so complete (RFC 5041 §5.4: at the Data
         * Source once the LLP has it; RFC 5040 §5.5 rule 9: not a sign
         * that it arrived) */
        n = poll_n(c->cq, &wc, 1);
        CHECK(n == 1 && wc.wr_id == 10 && wc.status == IB_WC_SUCCESS,
              "dead peer: the Send: n %d id %llu status %d", n, n ? wc.wr_id : 0,
              n ? wc.status : -1);
    }
    n = poll_n(c->cq, &wc, 1);
    CHECK(n == 1 && wc.wr_id == 1 && wc.status == IB_WC_WR_FLUSH_ERR,
          "dead peer: the posted receive: n %d id %llu status %d", n, n ? wc.wr_id : 0,
          n ? wc.status : -1);
    msleep(200);
    CHECK(ib_poll_cq(c->cq, 1, &wc) == 0 && READ_ONCE(q_cli.in) == READ_ONCE(q_cli.out),
          "dead peer: a completion or an event more");
}

static void test_rping(struct ib_device *ib)
{
    struct sockaddr_in src = {.sin_family = AF_INET},
                       dst = {.sin_family = AF_INET, .sin_port = htons(rping_port)};
    struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
    size_t rlen = PAGE_ALIGN(rping_size);
    struct end c = {};
    struct ib_mr *mr = NULL;
    struct scatterlist sg;
    struct rping_info *rx = NULL, *tx = NULL;
    u8 *buf = NULL;
    struct ib_wc wc[2];
    int order = get_order(2 * rlen), rc, i, n;
    ktime_t t_conn = 0, t_est = 0;

    evq_init(&q_cli);
    CHECK(in4_pton(rping_dst, -1, (u8 *)&dst.sin_addr, -1, NULL) &&
              (!rping_src || in4_pton(rping_src, -1, (u8 *)&src.sin_addr, -1, NULL)),
          "rping addresses");
    c.id = rdma_create_id(&init_net, cm_handler, &q_cli, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(c.id)) {
        c.id = NULL;
        CHECK(0, "rdma_create_id");
        return;
    }
    rc = rdma_resolve_addr(c.id, rping_src ? (struct sockaddr *)&src : NULL,
                           (struct sockaddr *)&dst, 2000);
    CHECK(rc == 0, "rdma_resolve_addr: %d", rc);
    if (rc || evq_wait(&q_cli, RDMA_CM_EVENT_ADDR_RESOLVED, "rping resolve_addr") < 0)
        goto out;
    CHECK(c.id->device == ib, "resolved to %s, not %s",
          c.id->device ? dev_name(&c.id->device->dev) : "none", dev_name(&ib->dev));
    rc = rdma_resolve_route(c.id, 2000);
    if (rc || evq_wait(&q_cli, RDMA_CM_EVENT_ROUTE_RESOLVED, "rping resolve_route") < 0)
        goto out;
    if (!end_init(ib, &c) || conn_qp(&c)) {
        CHECK(0, "rping PD/CQ/QP");
        goto out;
    }
    buf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, order);
    rx = kzalloc(sizeof(*rx), GFP_KERNEL);
    tx = kzalloc(sizeof(*tx), GFP_KERNEL);
    CHECK(buf && rx && tx, "rping buffers");
    if (!buf || !rx || !tx)
        goto out;
    /* start_buf at buf, rdma_buf at buf + rlen: one fast-register MR */
    mr = fr_mr(c.id->qp, c.pd, &sg, buf, 2 * rlen,
               IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ);
    CHECK(mr, "rping MR");
    if (!mr)
        goto out;
    {
        struct ib_sge rs = {
            .addr = (u64)(uintptr_t)rx, .length = sizeof(*rx), .lkey = c.pd->local_dma_lkey};
        struct ib_recv_wr r = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};

        rc = ib_post_recv(c.id->qp, &r, NULL);
        CHECK(rc == 0, "rping post_recv: %d", rc);
    }
    t_conn = ktime_get();
    rc = rdma_connect(c.id, &p);
    CHECK(rc == 0, "rping rdma_connect: %d", rc);
    if (rc || evq_wait(&q_cli, RDMA_CM_EVENT_ESTABLISHED, "rping connect") < 0)
        goto out;
    t_est = ktime_get();
    if (rping_deadpeer) {
        struct ib_sge ts = {
            .addr = (u64)(uintptr_t)tx, .length = sizeof(*tx), .lkey = c.pd->local_dma_lkey};

        rping_dead(&c, &ts);
        goto out; /* disconnected: nothing to disconnect */
    }
    for (i = 0; i < rping_count; i++) {
        struct ib_sge ts = {
            .addr = (u64)(uintptr_t)tx, .length = sizeof(*tx), .lkey = c.pd->local_dma_lkey};
        struct ib_sge rs = {
            .addr = (u64)(uintptr_t)rx, .length = sizeof(*rx), .lkey = c.pd->local_dma_lkey};
        struct ib_recv_wr r = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};
        int k, step;
        size_t j;

        /* start_buf: rping's pattern, NUL-terminated */
        for (j = 0; j < rping_size - 1; j++)
            buf[j] = 0x21 + (j + i) % 94;
        buf[rping_size - 1] = 0;
        memset(buf + rlen, 0, rping_size);
        /* advertise start_buf (the server Reads it), then rdma_buf (it
         * Writes there); each answered by the server's Send */
        for (step = 0; step < 2; step++) {
            tx->buf = cpu_to_be64(mr->iova + step * rlen);
            tx->rkey = cpu_to_be32(mr->rkey);
            tx->size = cpu_to_be32(rping_size);
            rc = post_one(c.id->qp, IB_WR_SEND, 10 + step, &ts, 1, 0, 0);
            CHECK(rc == 0, "rping post Send: %d", rc);
            if (rc)
                goto disc;
            /* the Send's completion and the server's answer, any order */
            for (k = 0; k < 2;) {
                n = poll_n(c.cq, wc, 1);
                CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS, "rping %d.%d: n %d status %d", i,
                      step, n, n ? wc[0].status : -1);
                if (n != 1 || wc[0].status != IB_WC_SUCCESS)
                    goto disc;
                k++;
                if (wc[0].opcode == IB_WC_RECV && !i && !step)
                    /* the first-FPDU guard's cost (docs/KERNEL.md): the
                     * server answers our first Send after its Read */
                    pr_info("rping client: ESTABLISHED %lld us after rdma_connect, the server's "
                            "first answer %lld us after ESTABLISHED\n",
                            ktime_us_delta(t_est, t_conn), ktime_us_delta(ktime_get(), t_est));
                if (wc[0].opcode == IB_WC_RECV) {
                    rc = ib_post_recv(c.id->qp, &r, NULL);
                    if (rc)
                        goto disc;
                }
            }
        }
        CHECK(!memcmp(buf, buf + rlen, rping_size), "rping %d: the data siw Read and Wrote back",
              i);
    }
    if (rping_term && i == rping_count) {
        /* the receive posted after the last answer completes flushed
         * once the QP is in ERR: the peer's violation, our Terminate */
        n = poll_n(c.cq, wc, 1);
        CHECK(n == 1 && wc[0].status == IB_WC_WR_FLUSH_ERR,
              "rping: the receive flushed after the peer's violation: n %d status %d", n,
              n ? wc[0].status : -1);
    }
disc:
    rdma_disconnect(c.id);
    evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "rping disconnect");
out:
    if (mr) {
        ib_dma_unmap_sg(ib, &sg, 1, DMA_BIDIRECTIONAL);
        ib_dereg_mr(mr);
    }
    end_fini(&c);
    if (buf)
        free_pages((unsigned long)buf, order);
    kfree(rx);
    kfree(tx);
}

/* Immediate data against uiwarp's library on the host (imm_dst= its
 * address, imm_port=; the host runs tests/siw/kimm_peer.c): our Request
 * advertises a buffer the peer may Write ({be64 addr, be32 rkey, be32
 * len}), its accept one of its own; we post a Send with Immediate (3001
 * bytes of pattern 1, 0x11223344) and an RDMA Write with Immediate (5000
 * bytes of pattern 2, 0x55667788), the peer checks them and answers with
 * the same (2000 bytes of pattern 3, 0x99aabbcc; 4000 bytes of pattern 4
 * into our buffer, 0xddeeff00), which we check; then we disconnect. */
static char *imm_dst;
module_param(imm_dst, charp, 0444);
MODULE_PARM_DESC(imm_dst, "run only the immediate-data client test against this IPv4 address");
static unsigned int imm_port = 7179;
module_param(imm_port, uint, 0444);

struct imm_adv {
    __be64 addr;
    __be32 rkey;
    __be32 len;
} __packed;

/* kimm_peer.c's pat(): the same formula */
static u8 imm_pat(size_t i, unsigned int k)
{
    return (u8)(i * 7 + k * 31 + (i >> 9));
}

static bool imm_pat_ok(const u8 *p, size_t n, unsigned int k)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (p[i] != imm_pat(i, k)) {
            pr_err("imm: byte %zu of %zu: 0x%02x, want 0x%02x\n", i, n, p[i], imm_pat(i, k));
            return false;
        }
    return true;
}

#define IMM_RECV_A 0
#define IMM_RECV_B 16384
#define IMM_TARGET 32768
#define IMM_SRC    49152
#define IMM_LEN    65536
#define IMM_WORD   8192 /* past IMM_TARGET, in both buffers */

static void test_imm(struct ib_device *ib)
{
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(imm_port)};
    struct imm_adv mine, peer = {};
    struct rdma_conn_param p = {.responder_resources = 1,
                                .initiator_depth = 1,
                                .private_data = &mine,
                                .private_data_len = sizeof(mine)};
    struct end c = {};
    struct ib_mr *mr = NULL;
    struct scatterlist sg;
    u8 *buf = NULL;
    struct ib_wc wc[2];
    int order = get_order(IMM_LEN), rc, i, n, k;
    bool got_done;

    evq_init(&q_cli);
    CHECK(in4_pton(imm_dst, -1, (u8 *)&dst.sin_addr, -1, NULL), "imm address");
    c.id = rdma_create_id(&init_net, cm_handler, &q_cli, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(c.id)) {
        c.id = NULL;
        CHECK(0, "rdma_create_id");
        return;
    }
    rc = rdma_resolve_addr(c.id, NULL, (struct sockaddr *)&dst, 2000);
    CHECK(rc == 0, "rdma_resolve_addr: %d", rc);
    if (rc || evq_wait(&q_cli, RDMA_CM_EVENT_ADDR_RESOLVED, "imm resolve_addr") < 0)
        goto out;
    rc = rdma_resolve_route(c.id, 2000);
    if (rc || evq_wait(&q_cli, RDMA_CM_EVENT_ROUTE_RESOLVED, "imm resolve_route") < 0)
        goto out;
    if (!end_init(ib, &c) || conn_qp(&c)) {
        CHECK(0, "imm PD/CQ/QP");
        goto out;
    }
    buf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, order);
    CHECK(buf, "imm buffer");
    if (!buf)
        goto out;
    mr = fr_mr(c.id->qp, c.pd, &sg, buf, IMM_LEN,
               IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
                   IB_ACCESS_REMOTE_ATOMIC);
    CHECK(mr, "imm MR");
    if (!mr)
        goto out;
    *(u64 *)(buf + IMM_TARGET + IMM_WORD) = 2000;
    /* A and B for the peer's Send and Write with Immediate, the third
     * (in the source area's end) for its Send after its atomics */
    for (i = 0; i < 3; i++) {
        struct ib_sge rs = {.addr = (u64)(uintptr_t)(buf + (i == 2   ? IMM_SRC + 12288
                                                            : i == 1 ? IMM_RECV_B
                                                                     : IMM_RECV_A)),
                            .length = i == 2 ? 4096 : 16384,
                            .lkey = c.pd->local_dma_lkey};
        struct ib_recv_wr r = {.wr_id = 1 + i, .sg_list = &rs, .num_sge = 1};

        rc = ib_post_recv(c.id->qp, &r, NULL);
        CHECK(rc == 0, "imm post_recv: %d", rc);
    }
    mine.addr = cpu_to_be64(mr->iova + IMM_TARGET);
    mine.rkey = cpu_to_be32(mr->rkey);
    mine.len = cpu_to_be32(16384);
    rc = rdma_connect(c.id, &p);
    CHECK(rc == 0, "imm rdma_connect: %d", rc);
    if (rc)
        goto out;
    i = evq_wait(&q_cli, RDMA_CM_EVENT_ESTABLISHED, "imm connect");
    if (i < 0)
        goto out;
    CHECK(q_cli.e[i].pd_len >= sizeof(peer), "imm: the peer's buffer in its Reply (%u bytes)",
          q_cli.e[i].pd_len);
    if (q_cli.e[i].pd_len < sizeof(peer))
        goto disc;
    memcpy(&peer, q_cli.e[i].pd, sizeof(peer));

    for (k = 0; k < 2; k++) {
        static const u32 lens[] = {3001, 5000}, imms[] = {0x11223344, 0x55667788};
        u8 *src = buf + IMM_SRC + k * 4096;
        struct ib_sge ts = {
            .addr = (u64)(uintptr_t)src, .length = lens[k], .lkey = c.pd->local_dma_lkey};
        struct ib_rdma_wr w = {
            .wr = {.opcode = k ? IB_WR_RDMA_WRITE_WITH_IMM : IB_WR_SEND_WITH_IMM,
                   .wr_id = 10 + k,
                   .sg_list = &ts,
                   .num_sge = 1,
                   .send_flags = IB_SEND_SIGNALED,
                   .ex.imm_data = cpu_to_be32(imms[k])},
            .remote_addr = be64_to_cpu(peer.addr),
            .rkey = be32_to_cpu(peer.rkey),
        };
        size_t j;

        for (j = 0; j < lens[k]; j++)
            src[j] = imm_pat(j, 1 + k);
        rc = ib_post_send(c.id->qp, &w.wr, NULL);
        CHECK(rc == 0, "imm: post %s with Immediate: %d", k ? "Write" : "Send", rc);
        if (rc)
            goto disc;
        n = poll_n(c.cq, wc, 1);
        CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].wr_id == 10 + k &&
                  wc[0].opcode == (k ? IB_WC_RDMA_WRITE : IB_WC_SEND),
              "imm: our %s with Immediate completes: n %d status %d", k ? "Write" : "Send", n,
              n ? wc[0].status : -1);
        if (n != 1)
            goto disc;
    }
    /* the peer's Send with Immediate, then its Write with Immediate */
    for (k = 0; k < 2; k++) {
        n = poll_n(c.cq, wc, 1);
        CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].wr_id == 1 + k &&
                  wc[0].opcode == (k ? IB_WC_RECV_RDMA_WITH_IMM : IB_WC_RECV) &&
                  (wc[0].wc_flags & IB_WC_WITH_IMM) &&
                  wc[0].ex.imm_data == cpu_to_be32(k ? 0xddeeff00 : 0x99aabbcc) &&
                  wc[0].byte_len == (k ? 0 : 2000),
              "imm: the peer's %s with Immediate: n %d status %d opcode %d flags 0x%x imm 0x%08x "
              "len %u",
              k ? "Write" : "Send", n, n ? wc[0].status : -1, n ? wc[0].opcode : -1,
              n ? wc[0].wc_flags : 0, n ? be32_to_cpu(wc[0].ex.imm_data) : 0,
              n ? wc[0].byte_len : 0);
        if (n != 1)
            goto disc;
    }
    CHECK(imm_pat_ok(buf + IMM_RECV_A, 2000, 3) && buf[IMM_RECV_A + 2000] == 0,
          "imm: the peer's Send with Immediate: 2000 bytes, nothing past them");
    CHECK(imm_pat_ok(buf + IMM_TARGET, 4000, 4) && buf[IMM_TARGET + 4000] == 0,
          "imm: the peer's Write with Immediate: 4000 bytes, nothing past them");
    /* RFC 7306 atomics on the peer's word (1000: add 234, then 1234 ->
     * 0xdeadbeefcafef00d), the originals into our 8-byte SGE; the peer
     * does its atomics on our word meanwhile and then Sends: that
     * receive may complete on the shared CQ between ours */
    got_done = false;
    for (k = 0; k < 2; k++) {
        u64 *res = (u64 *)(buf + IMM_SRC + 8192);
        struct ib_sge ts = {.addr = (u64)(uintptr_t)res, .length = 8, .lkey = c.pd->local_dma_lkey};
        struct ib_atomic_wr w = {
            .wr = {.opcode = k ? IB_WR_ATOMIC_CMP_AND_SWP : IB_WR_ATOMIC_FETCH_AND_ADD,
                   .wr_id = 20 + k,
                   .sg_list = &ts,
                   .num_sge = 1,
                   .send_flags = IB_SEND_SIGNALED},
            .remote_addr = be64_to_cpu(peer.addr) + IMM_WORD,
            .rkey = be32_to_cpu(peer.rkey),
            .compare_add = k ? 1234 : 234,
            .swap = k ? 0xdeadbeefcafef00dull : 0,
        };

        *res = 0;
        rc = ib_post_send(c.id->qp, &w.wr, NULL);
        CHECK(rc == 0, "imm: post atomic %d: %d", k, rc);
        if (rc)
            goto disc;
        for (;;) {
            n = poll_n(c.cq, wc, 1);
            if (n == 1 && !got_done && wc[0].wr_id == 3 && wc[0].opcode == IB_WC_RECV &&
                wc[0].status == IB_WC_SUCCESS) {
                got_done = true;
                continue;
            }
            break;
        }
        CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].wr_id == 20 + k &&
                  wc[0].opcode == (k ? IB_WC_COMP_SWAP : IB_WC_FETCH_ADD) && wc[0].byte_len == 8 &&
                  *res == (k ? 1234 : 1000),
              "imm: our atomic %d on the peer's word: n %d status %d id %llu opcode %d original "
              "%llu",
              k, n, n ? wc[0].status : -1, n ? wc[0].wr_id : 0, n ? wc[0].opcode : -1, *res);
        if (n != 1)
            goto disc;
    }
    /* the peer's atomics on our word, then its Send */
    if (!got_done) {
        n = poll_n(c.cq, wc, 1);
        got_done = n == 1 && wc[0].status == IB_WC_SUCCESS && wc[0].wr_id == 3 &&
                   wc[0].opcode == IB_WC_RECV;
    }
    CHECK(got_done, "imm: the peer's Send after its atomics");
    CHECK(READ_ONCE(*(u64 *)(buf + IMM_TARGET + IMM_WORD)) == 0x0123456789abcdefull,
          "imm: the peer's atomics on our word: 0x%llx",
          READ_ONCE(*(u64 *)(buf + IMM_TARGET + IMM_WORD)));
disc:
    rdma_disconnect(c.id);
    evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "imm disconnect");
out:
    if (mr) {
        ib_dma_unmap_sg(ib, &sg, 1, DMA_BIDIRECTIONAL);
        ib_dereg_mr(mr);
    }
    end_fini(&c);
    if (buf)
        free_pages((unsigned long)buf, order);
}

/* The server side of rping (rping_listen= our address): accepts one
 * client (`rping -c -V` on siw), then per round Reads the client's
 * start_buf into our MR, acknowledges, and Writes it back into the
 * client's rdma_buf; the client validates the data itself. */
static char *rping_listen;
module_param(rping_listen, charp, 0444);
MODULE_PARM_DESC(rping_listen, "run only the rping server test, listening on this IPv4 address");

static int rsrv_recvs;

/* polls until the completion of wr_id (or, wr_id 0, a receive) */
static bool rsrv_wait(struct end *s, u64 wr_id, struct ib_wc *out)
{
    struct ib_wc wc;

    if (!wr_id && rsrv_recvs) {
        rsrv_recvs--;
        return true;
    }
    for (;;) {
        int n = poll_n(s->cq, &wc, 1);

        CHECK(n == 1 && wc.status == IB_WC_SUCCESS, "rping server: n %d status %d id %llu", n,
              n ? wc.status : -1, n ? wc.wr_id : 0);
        if (n != 1 || wc.status != IB_WC_SUCCESS)
            return false;
        if (out)
            *out = wc;
        if (wc.opcode == IB_WC_RECV) {
            if (!wr_id)
                return true;
            rsrv_recvs++;
            continue;
        }
        if (wc.wr_id == wr_id)
            return true;
    }
}

static void test_rping_server(struct ib_device *ib)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(rping_port)};
    struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
    size_t rlen = PAGE_ALIGN(65536);
    struct rdma_cm_id *lid;
    struct end s = {};
    struct ib_mr *mr = NULL;
    struct scatterlist sg;
    struct rping_info *rx = NULL, *tx = NULL;
    u8 *buf = NULL;
    int order = get_order(rlen), rc, i;

    evq_init(&q_srv);
    CHECK(in4_pton(rping_listen, -1, (u8 *)&sin.sin_addr, -1, NULL), "rping_listen address");
    lid = rdma_create_id(&init_net, cm_handler, &q_srv, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(lid)) {
        CHECK(0, "rdma_create_id");
        return;
    }
    rc = rdma_bind_addr(lid, (struct sockaddr *)&sin);
    rc = rc ?: rdma_listen(lid, 4);
    CHECK(rc == 0 && lid->device == ib, "rping server listen: %d", rc);
    if (rc)
        goto out;
    pr_info("rping server: listening on %pI4:%u\n", &sin.sin_addr, rping_port);
    {
        int k;

        /* the client comes when the VM script starts it: up to 30 s */
        for (k = 0; k < 3 && READ_ONCE(q_srv.in) == READ_ONCE(q_srv.out); k++)
            wait_event_timeout(q_srv.wq, READ_ONCE(q_srv.in) != READ_ONCE(q_srv.out), 10 * HZ);
        k = evq_wait(&q_srv, RDMA_CM_EVENT_CONNECT_REQUEST, "rping server");
        if (k < 0)
            goto out;
        s.id = q_srv.e[k].id;
    }
    buf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, order);
    rx = kzalloc(sizeof(*rx), GFP_KERNEL);
    tx = kzalloc(sizeof(*tx), GFP_KERNEL);
    if (!buf || !rx || !tx || !end_init(ib, &s) || conn_qp(&s)) {
        CHECK(0, "rping server resources");
        goto out;
    }
    mr = fr_mr(s.id->qp, s.pd, &sg, buf, rlen,
               IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ);
    CHECK(mr, "rping server MR");
    if (!mr)
        goto out;
    {
        struct ib_sge rs = {
            .addr = (u64)(uintptr_t)rx, .length = sizeof(*rx), .lkey = s.pd->local_dma_lkey};
        struct ib_sge ts = {
            .addr = (u64)(uintptr_t)tx, .length = sizeof(*tx), .lkey = s.pd->local_dma_lkey};
        struct ib_recv_wr r = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};

        rsrv_recvs = 0;
        rc = ib_post_recv(s.id->qp, &r, NULL);
        rdma_lock_handler(s.id);
        rc = rc ?: rdma_accept(s.id, &p);
        rdma_unlock_handler(s.id);
        CHECK(rc == 0, "rping server accept: %d", rc);
        if (rc || evq_wait(&q_srv, RDMA_CM_EVENT_ESTABLISHED, "rping server") < 0)
            goto out;
        for (i = 0; i < rping_count; i++) {
            struct ib_sge ls;
            u32 len;
            int step;

            for (step = 0; step < 2; step++) {
                u64 raddr;
                u32 rkey;

                if (!rsrv_wait(&s, 0, NULL))
                    goto out;
                raddr = be64_to_cpu(rx->buf);
                rkey = be32_to_cpu(rx->rkey);
                len = be32_to_cpu(rx->size);
                rc = ib_post_recv(s.id->qp, &r, NULL);
                CHECK(rc == 0 && len <= rlen, "rping server: round %d: len %u", i, len);
                if (rc || len > rlen)
                    goto out;
                ls = (struct ib_sge){.addr = mr->iova, .length = len, .lkey = mr->lkey};
                /* step 0: Read the client's start_buf; step 1: Write it
                 * back into its rdma_buf */
                if (step == 0)
                    memset(buf, 0, len);
                rc = post_one(s.id->qp, step ? IB_WR_RDMA_WRITE : IB_WR_RDMA_READ, 20 + step, &ls,
                              1, raddr, rkey);
                CHECK(rc == 0, "rping server: post %s: %d", step ? "Write" : "Read", rc);
                if (rc || !rsrv_wait(&s, 20 + step, NULL))
                    goto out;
                if (step == 0)
                    CHECK(!memcmp(buf, "rdma-ping-", 10), "rping server: what it Read: %.16s", buf);
                tx->buf = cpu_to_be64(mr->iova);
                tx->rkey = cpu_to_be32(mr->rkey);
                tx->size = cpu_to_be32(len);
                rc = post_one(s.id->qp, IB_WR_SEND, 30 + step, &ts, 1, 0, 0);
                if (rc || !rsrv_wait(&s, 30 + step, NULL))
                    goto out;
            }
        }
        evq_wait(&q_srv, RDMA_CM_EVENT_DISCONNECTED, "rping server: the client's disconnect");
    }
out:
    if (mr) {
        ib_dma_unmap_sg(ib, &sg, 1, DMA_BIDIRECTIONAL);
        ib_dereg_mr(mr);
    }
    end_fini(&s);
    rdma_destroy_id(lid);
    if (buf)
        free_pages((unsigned long)buf, order);
    kfree(rx);
    kfree(tx);
}

/* ------------------------------------------------------------------------
 * A hostile peer (hostile=1): a plain kernel TCP socket that speaks MPA to
 * a QP of the device (an rdma_cm listener on port+2) and then writes
 * hand-built FPDUs, one malformed or forbidden message per connection.
 * The FPDUs and the checks of the Terminate are written here from the
 * RFCs, not with the wire core the driver uses: RFC 5044 §4 (FPDU: the
 * ULPDU_Length, the ULPDU, pad, CRC32C), RFC 5041 §4 (the DDP headers),
 * RFC 5040 §4 (RDMAP), §4.8 (the Terminate), RFC 6581 (IRD/ORD).
 * For each class: the Terminate's layer / type / code and the headers it
 * carries (bytes compared with what was sent), EOF after it, the QP in
 * ERR with an async event, every posted receive completed with an error,
 * no byte of the registered region nor of the guard pages around it
 * changed (unless the class places data), and a second connection on the
 * device (rdma_cm, both ends ours) still carrying a Send.
 * ---------------------------------------------------------------------- */

static bool hostile;
module_param(hostile, bool, 0444);
MODULE_PARM_DESC(hostile, "run the hostile-peer test only (default 0)");

/* RFC 5040 §7.1 / RFC 5041 §7.2 / RFC 5044 §8: Terminate layers, types, codes */
#define T_RDMAP 0
#define T_DDP   1
#define T_LLP   2
#define H_PAGES 4 /* guard page | two region pages | guard page */
#define H_RLEN  (2 * PAGE_SIZE)
#define H_GUARD 0xA5
#define H_ANY   (-2) /* h_down: receives may complete with any status */

static struct evq q_hs;
static u8 *hmem;          /* H_PAGES pages */
static struct ib_mr *hmr; /* the region, every right */
static struct scatterlist hsg;

static void be16(u8 *p, u32 v)
{
    p[0] = v >> 8;
    p[1] = v;
}

static void be32(u8 *p, u32 v)
{
    be16(p, v >> 16);
    be16(p + 2, v);
}

static void be64(u8 *p, u64 v)
{
    be32(p, v >> 32);
    be32(p + 4, v);
}

static u32 get_be32(const u8 *p)
{
    return (u32)p[0] << 24 | (u32)p[1] << 16 | (u32)p[2] << 8 | p[3];
}

/* RFC 5041 §4.2 untagged header + RFC 5040 §4.3 RDMAP control (18 bytes):
 * L set, DDP version 1, RDMAP version 1 */
static unsigned int hdr_u(u8 *h, unsigned int op, u32 qn, u32 msn, u32 mo)
{
    memset(h, 0, 18);
    h[0] = 0x40 | 0x01;
    h[1] = 0x40 | op;
    be32(h + 6, qn);
    be32(h + 10, msn);
    be32(h + 14, mo);
    return 18;
}

/* RFC 5041 §4.1 tagged header (14 bytes) */
static unsigned int hdr_t(u8 *h, unsigned int op, u32 stag, u64 to)
{
    h[0] = 0x80 | 0x40 | 0x01;
    h[1] = 0x40 | op;
    be32(h + 2, stag);
    be64(h + 6, to);
    return 14;
}

/* RFC 5040 §4.4: a Read Request (untagged header on QN 1 and its RDMA
 * header, 46 bytes) */
static unsigned int hdr_rreq(u8 *h, u32 msn, u32 sink, u64 sink_to, u32 size, u32 src, u64 src_to)
{
    unsigned int n = hdr_u(h, 1, 1, msn, 0);

    be32(h + n, sink);
    be64(h + n + 4, sink_to);
    be32(h + n + 12, size);
    be32(h + n + 16, src);
    be64(h + n + 20, src_to);
    return n + 28;
}

/* RFC 5044 §4.1: ULPDU_Length, ULPDU (hdr, payload), pad to 4, CRC32C of
 * all of it or zero without CRC (§4.4: the standard reflected CRC, complemented, least
 * significant byte first as the kernel's crc32c users send it). Returns
 * the FPDU's length. */
static unsigned int fpdu(u8 *out, bool crc, const u8 *h, unsigned int hl, const u8 *pay,
                         unsigned int pl)
{
    unsigned int n = 2 + hl + pl;

    be16(out, hl + pl);
    memcpy(out + 2, h, hl);
    if (pl)
        memcpy(out + 2 + hl, pay, pl);
    while (n % 4)
        out[n++] = 0;
    {
        /* the CRC field is there without CRC too, zero (RFC 5044 §4.1) */
        u32 c = crc ? ~crc32c(~0u, out, n) : 0;

        out[n++] = c;
        out[n++] = c >> 8;
        out[n++] = c >> 16;
        out[n++] = c >> 24;
    }
    return n;
}

static int raw_send(struct socket *s, const void *b, size_t n)
{
    struct kvec v = {.iov_base = (void *)b, .iov_len = n};
    struct msghdr m = {};
    int r = kernel_sendmsg(s, &m, &v, 1, n);

    return r == (int)n ? 0 : (r < 0 ? r : -EIO);
}

/* exactly n bytes; 0, -ETIMEDOUT / -EAGAIN (5 s) or -EPIPE at EOF */
static int raw_recv(struct socket *s, void *b, size_t n)
{
    while (n) {
        struct kvec v = {.iov_base = b, .iov_len = n};
        struct msghdr m = {};
        int r = kernel_recvmsg(s, &m, &v, 1, n, MSG_WAITALL);

        if (r == 0)
            return -EPIPE;
        if (r < 0)
            return r;
        b = (u8 *)b + r;
        n -= r;
    }
    return 0;
}

/* the raw end and the QP it talks to */
struct hconn {
    struct socket *sock;
    bool crc;
    struct end s;
    int nrecv;              /* receives posted on the server QP and not completed */
    int rbase;              /* of those posted, completed (and checked) by the test itself */
    int sends, send_status; /* completions of the Send posted at h_up, the last status */
};

/* The next completion of a receive (1, in *wc; 0 after 10 s); the
 * completion of the Send h_up posted is counted aside. */
static int h_wc(struct hconn *h, struct ib_wc *wc, unsigned int ms)
{
    unsigned long end = jiffies + msecs_to_jiffies(ms);

    do {
        while (ib_poll_cq(h->s.cq, 1, wc) == 1) {
            if (wc->wr_id != 900)
                return 1;
            h->sends++;
            h->send_status = wc->status;
        }
        usleep_range(200, 1000);
    } while (time_before(jiffies, end));
    return 0;
}

/* The raw client connects and sends an MPA Request (RFC 5044 §7.1,
 * revision 2 with RFC 6581's IRD/ORD, CRC when asked, no markers); the
 * server accepts with IRD ird and posts nrecv receives of rlen bytes
 * into the region first; the raw end reads the Reply. */
static bool h_up(struct ib_device *ib, struct sockaddr_in *sin, struct hconn *h, bool crc, int ird,
                 int nrecv, u32 rlen)
{
    struct rdma_conn_param p = {.responder_resources = ird, .initiator_depth = ird};
    const int rw = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
    u8 req[24] = "MPA ID Req Frame", rep[20 + 64];
    int i, rc;
    u32 pl;

    memset(h, 0, sizeof(*h));
    h->crc = crc;
    memset(hmem, H_GUARD, H_PAGES * PAGE_SIZE);
    rc = sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &h->sock);
    CHECK(rc == 0, "raw socket: %d", rc);
    if (rc) {
        h->sock = NULL;
        return false;
    }
    /* its port in TIME_WAIT later must not keep the driver's sockets
     * (SO_REUSEADDR, bound to the port rdma_cm picks) from binding it */
    sock_set_reuseaddr(h->sock->sk);
    h->sock->sk->sk_rcvtimeo = 5 * HZ;
    h->sock->sk->sk_sndtimeo = 5 * HZ;
    rc = kernel_connect(h->sock, (struct sockaddr *)sin, sizeof(*sin), 0);
    CHECK(rc == 0, "raw connect: %d", rc);
    if (rc)
        return false;
    req[16] = (crc ? 0x40 : 0) | 0x10; /* C, and S: IRD/ORD words (RFC 6581 §7.1) */
    req[17] = 2;
    be16(req + 18, 4);
    be16(req + 20, 4); /* IRD 4 */
    be16(req + 22, 1); /* ORD 1: the responder's IRD is then its own (at least 1) */
    CHECK(raw_send(h->sock, req, sizeof(req)) == 0, "MPA Request");
    i = evq_wait(&q_hs, RDMA_CM_EVENT_CONNECT_REQUEST, "hostile: request");
    if (i < 0)
        return false;
    h->s.id = q_hs.e[i].id;
    if (!end_init(ib, &h->s) || conn_qp(&h->s)) {
        CHECK(0, "hostile: server PD/CQ/QP");
        return false;
    }
    hmr = fr_mr(h->s.id->qp, h->s.pd, &hsg, hmem + PAGE_SIZE, H_RLEN, rw);
    CHECK(hmr, "hostile: fast-register MR");
    if (!hmr)
        return false;
    for (i = 0; i < nrecv; i++) {
        struct ib_sge sge = {.addr = hmr->iova + i * rlen, .length = rlen, .lkey = hmr->lkey};
        struct ib_recv_wr r = {.wr_id = 500 + i, .sg_list = &sge, .num_sge = 1};

        rc = ib_post_recv(h->s.id->qp, &r, NULL);
        CHECK(rc == 0, "hostile: post_recv %d: %d", i, rc);
    }
    h->nrecv = nrecv;
    p.qp_num = h->s.id->qp->qp_num;
    atomic_set(&qp_events, 0);
    last_qp_event = -1;
    rdma_lock_handler(h->s.id);
    rc = rdma_accept(h->s.id, &p);
    rdma_unlock_handler(h->s.id);
    CHECK(rc == 0, "hostile: rdma_accept: %d", rc);
    if (rc)
        return false;
    rc = raw_recv(h->sock, rep, 20);
    CHECK(rc == 0 && !memcmp(rep, "MPA ID Rep Frame", 16) && !(rep[16] & 0x20) &&
              !!(rep[16] & 0x40) == crc && rep[17] == 2,
          "MPA Reply: rc %d, flags 0x%02x rev %u", rc, rep[16], rep[17]);
    if (rc)
        return false;
    pl = (u32)rep[18] << 8 | rep[19];
    CHECK(pl >= 4 && pl <= 64, "MPA Reply private data: %u bytes", pl);
    if (pl < 4 || pl > 64 || raw_recv(h->sock, rep + 20, pl))
        return false;
    /* RFC 6581 §7.1: the responder's IRD, at most what was asked */
    CHECK(((u32)rep[20] << 8 | rep[21]) == (u32)ird, "the Reply's IRD %u, want %d",
          (u32)rep[20] << 8 | rep[21], ird);
    if (evq_wait(&q_hs, RDMA_CM_EVENT_ESTABLISHED, "hostile: established") < 0)
        return false;
    /* a Send of the QP's own, held until the peer's first FPDU (RFC 5044
     * §7.1.2): it completes once, sent before the error or flushed */
    {
        /* from the second connection's client buffer through the DMA MR
         * (not the region: class 19 invalidates it remotely) */
        struct ib_sge sge = {
            .addr = (u64)(uintptr_t)cbuf, .length = 32, .lkey = h->s.pd->local_dma_lkey};

        rc = post_one(h->s.id->qp, IB_WR_SEND, 900, &sge, 1, 0, 0);
        CHECK(rc == 0, "hostile: post a Send: %d", rc);
        h->sends = rc ? -1 : 0;
    }
    return true;
}

/* The next FPDU from the QP: its ULPDU in u (up to cap bytes), its length. */
static int h_fpdu(struct hconn *h, u8 *u, unsigned int cap)
{
    u8 b[8]; /* pad (up to 3) and CRC */
    unsigned int n, pad;
    int rc = raw_recv(h->sock, b, 2);

    if (rc)
        return rc;
    n = (u32)b[0] << 8 | b[1];
    if (n > cap)
        return -E2BIG;
    rc = raw_recv(h->sock, u, n);
    pad = (4 - (2 + n) % 4) % 4 + 4; /* and the CRC field */
    if (!rc)
        rc = raw_recv(h->sock, b, pad);
    return rc ? rc : (int)n;
}

/* The Terminate (skipping other messages, such as Read Responses): RFC
 * 5040 §4.8 and §5.4: untagged, opcode 7, QN 2, MSN 1, MO 0, L; then the
 * Terminate Control (layer, type, code; M, D, R) and the DDP Segment
 * Length, the DDP header (img, img_len bytes: 2 + 14 or 18 as it came
 * from us) and the RDMA header (rdma, 28 bytes) when flagged. img NULL:
 * M, D and R must be clear. Then EOF. */
static void h_term(struct hconn *h, const char *what, int layer, int etype, int ecode,
                   const u8 *img, unsigned int img_len, const u8 *rdma)
{
    static u8 u[65536];
    int n;

    for (;;) {
        n = h_fpdu(h, u, sizeof(u));
        if (n < 0 || (n >= 2 && !(u[0] & 0x80) && (u[1] & 0x0F) == 7))
            break;
    }
    CHECK(n >= 22, "%s: no Terminate (%d)", what, n);
    if (n < 22)
        return;
    CHECK(u[0] == 0x41 && u[1] == 0x47 && get_be32(u + 6) == 2 && get_be32(u + 10) == 1 &&
              get_be32(u + 14) == 0,
          "%s: Terminate header %*ph", what, 18, u);
    CHECK(u[18] >> 4 == layer && (u[18] & 0x0F) == etype && u[19] == ecode,
          "%s: Terminate %x/%x/%02x, want %x/%x/%02x", what, u[18] >> 4, u[18] & 0x0F, u[19], layer,
          etype, ecode);
    if (!img) {
        CHECK((u[20] & 0xE0) == 0 && n == 22, "%s: headers attached (0x%02x, %d bytes)", what,
              u[20], n);
    } else {
        CHECK((u[20] & 0xC0) == 0xC0, "%s: M and D (0x%02x)", what, u[20]);
        CHECK(!!(u[20] & 0x20) == !!rdma, "%s: R 0x%02x", what, u[20]);
        CHECK(n >= 22 + (int)img_len && !memcmp(u + 22, img, img_len),
              "%s: the attached DDP header %*ph, want %*ph", what, min_t(int, img_len, n - 22),
              u + 22, img_len, img);
        if (rdma)
            CHECK(n >= 22 + (int)img_len + 28 && !memcmp(u + 22 + img_len, rdma, 28),
                  "%s: the attached RDMA header", what);
    }
    n = h_fpdu(h, u, sizeof(u));
    CHECK(n == -EPIPE, "%s: EOF after the Terminate (%d)", what, n);
}

/* After the Terminate: the QP in ERR with an async event, each receive
 * completed once with an error (rstatus for the first, or any error when
 * rstatus is -1; any status and no event required when it is H_ANY), the region and guards as
 * expected (placed: bytes of the region that may have changed from its start), the server's
 * DISCONNECTED, then everything destroyed. */
static void h_down(struct hconn *h, const char *what, int rstatus, unsigned int placed)
{
    struct ib_wc wc[16];
    int i, n;
    bool g = true;

    if (!h->s.cq) { /* h_up failed before the QP (checked there) */
        if (h->sock)
            sock_release(h->sock);
        if (h->s.id)
            rdma_destroy_id(h->s.id);
        memset(h, 0, sizeof(*h));
        return;
    }
    for (n = 0; n < h->nrecv && h_wc(h, &wc[n], 10000);)
        n++;
    /* nothing more may come (a receive twice, the Send twice) */
    while (n < 16 && h_wc(h, &wc[n], 3))
        n++;
    CHECK(n == h->nrecv, "%s: %d receive completions, want %d", what, n, h->nrecv);
    CHECK(h->sends == 1 &&
              (h->send_status == IB_WC_SUCCESS || h->send_status == IB_WC_WR_FLUSH_ERR),
          "%s: the QP's Send completed %d times, status %d", what, h->sends, h->send_status);
    for (i = 0; i < n; i++)
        CHECK(wc[i].wr_id == 500 + h->rbase + i &&
                  (rstatus == H_ANY || (wc[i].status != IB_WC_SUCCESS &&
                                        (i || rstatus < 0 || wc[i].status == rstatus))),
              "%s: receive %d: id %llu status %d", what, i, wc[i].wr_id, wc[i].status);
    CHECK(qp_state(h->s.id->qp) == IB_QPS_ERR, "%s: QP state %d", what, qp_state(h->s.id->qp));
    CHECK(rstatus == H_ANY || atomic_read(&qp_events) >= 1, "%s: no QP event", what);
    evq_wait(&q_hs, RDMA_CM_EVENT_DISCONNECTED, what);
    for (i = 0; i < H_PAGES * PAGE_SIZE; i++)
        if ((i < PAGE_SIZE || i >= PAGE_SIZE + placed) && hmem[i] != H_GUARD) {
            pr_err("%s: byte %d of the region's pages changed: 0x%02x\n", what,
                   (int)(i - PAGE_SIZE), hmem[i]);
            g = false;
            break;
        }
    CHECK(g, "%s: memory outside what may be placed untouched", what);
    if (h->sock)
        sock_release(h->sock);
    if (hmr) {
        ib_dma_unmap_sg(h->s.pd->device, &hsg, 1, DMA_BIDIRECTIONAL);
        ib_dereg_mr(hmr);
        hmr = NULL;
    }
    end_fini(&h->s);
}

/* a Send on the other connection: the device still works */
static void h_alive(struct end *c, struct end *s, const char *what)
{
    static int slot;
    struct ib_sge sge = {.addr = (u64)(uintptr_t)cbuf, .length = 64, .lkey = c->pd->local_dma_lkey};
    int rc = post_one(c->id->qp, IB_WR_SEND, 70, &sge, 1, 0, 0);

    CHECK(rc == 0, "%s: a Send on the second QP: %d", what, rc);
    if (!rc && xfer_done(c, s, 70, 1000 + slot, 64, what)) {
        CHECK(post_srecv(s, slot) == 0, "%s: repost", what);
        slot = (slot + 1) % 3;
    }
    CHECK(qp_state(c->id->qp) == IB_QPS_RTS && qp_state(s->id->qp) == IB_QPS_RTS,
          "%s: the second QP's states %d %d", what, qp_state(c->id->qp), qp_state(s->id->qp));
}

/* Random damage to valid streams (CRC off, so damaged headers are acted
 * upon): per stream four rounds of a Write, a Send and a Read Request
 * into or from the region, one to three bits flipped anywhere, then our
 * FIN. Whatever the QP makes of it: it ends in ERR, each receive
 * completes exactly once, nothing outside the region changes, and the
 * kernel stays quiet (the VM test greps dmesg). */
static unsigned int mutations = 500;
module_param(mutations, uint, 0444);
MODULE_PARM_DESC(mutations, "hostile=1: the number of randomly damaged streams (default 500)");

static void h_mutations(struct ib_device *ib, struct sockaddr_in *hin)
{
    static u8 f[4 * (3 * 64 + 1200)], u[65536];
    unsigned int it, terms = 0, k, n, len;
    struct hconn h;
    u8 hd[64], pay[600];

    for (k = 0; k < sizeof(pay); k++)
        pay[k] = k * 5 + 3;
    for (it = 0; it < mutations; it++) {
        if (!h_up(ib, hin, &h, false, 4, 4, 1000)) {
            h_down(&h, "mutation", H_ANY, H_RLEN);
            break;
        }
        for (k = 1, n = 0; k <= 4; k++) {
            len = get_random_u32() % 600;
            n += fpdu(f + n, false, hd,
                      hdr_t(hd, 0, hmr->rkey, hmr->iova + get_random_u32() % (H_RLEN - 600)), pay,
                      len);
            n += fpdu(f + n, false, hd, hdr_u(hd, k & 1 ? 3 : 5, 0, k, 0), pay,
                      get_random_u32() % 600);
            n += fpdu(f + n, false, hd,
                      hdr_rreq(hd, k, 0x100 + k, 0, get_random_u32() % 512, hmr->rkey,
                               hmr->iova + get_random_u32() % (H_RLEN - 512)),
                      NULL, 0);
        }
        for (k = 0, len = 1 + get_random_u32() % 3; k < len; k++)
            f[get_random_u32() % n] ^= 1u << (get_random_u32() % 8);
        raw_send(h.sock, f, n);
        kernel_sock_shutdown(h.sock, SHUT_WR);
        /* everything the QP sends until it closes */
        for (;;) {
            int r = h_fpdu(&h, u, sizeof(u));

            if (r < 0)
                break;
            if (r >= 2 && !(u[0] & 0x80) && (u[1] & 0x0F) == 7)
                terms++;
        }
        for (k = 0; k < 500 && qp_state(h.s.id->qp) != IB_QPS_ERR; k++)
            usleep_range(1000, 2000);
        h_down(&h, "mutation", H_ANY, H_RLEN);
    }
    pr_info("hostile peer: %u damaged streams, %u answered with a Terminate\n", it, terms);
    CHECK(it == mutations, "mutations: %u of %u streams", it, mutations);
}

/* A bad MPA Request (RFC 5044 §7.1): the connection closes (after a
 * Reject, with R, if anything is sent), the ULP hears nothing of it, the
 * listener stays (the next class connects through it). */
static void h_bad_mpa(struct sockaddr_in *hin, const u8 *req, unsigned int len, const char *what)
{
    static u8 b[1024];
    struct socket *sk;
    unsigned int got = 0;
    int rc = sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &sk);

    CHECK(rc == 0, "%s: socket: %d", what, rc);
    if (rc)
        return;
    sock_set_reuseaddr(sk->sk);
    sk->sk->sk_rcvtimeo = 5 * HZ;
    rc = kernel_connect(sk, (struct sockaddr *)hin, sizeof(*hin), 0);
    CHECK(rc == 0, "%s: connect: %d", what, rc);
    if (!rc)
        rc = raw_send(sk, req, len);
    while (!rc) {
        struct kvec v = {.iov_base = b + min_t(unsigned int, got, 512), .iov_len = 512};
        struct msghdr m = {};
        int r = kernel_recvmsg(sk, &m, &v, 1, v.iov_len, 0);

        if (r <= 0) {
            rc = r ? r : 1;
            break;
        }
        got += r;
    }
    CHECK(rc == 1, "%s: no EOF (%d)", what, rc);
    CHECK(got == 0 || (got >= 20 && !memcmp(b, "MPA ID Rep Frame", 16) && (b[16] & 0x20)),
          "%s: %u bytes back, not a Reject", what, got);
    sock_release(sk);
    usleep_range(20000, 30000);
    CHECK(READ_ONCE(q_hs.in) == q_hs.out, "%s: an event reached the ULP", what);
}

/* ------------------------------------------------------------------------
 * The driver as MPA initiator against a hostile responder, and its MPA
 * timers (hostile=1). A raw listener on port+3 reads the driver's Request
 * and answers with a Reply written here by hand (RFC 5044 §7.1, RFC 6581
 * §9: A, B over IRD, C, D over ORD), or not at all.
 * ---------------------------------------------------------------------- */

static unsigned int mpa_timeout_ms = 2000;
module_param(mpa_timeout_ms, uint, 0444);
MODULE_PARM_DESC(mpa_timeout_ms, "hostile=1: the driver's mpa_timeout_ms (default 2000)");

static struct evq q_hc; /* the driver's initiator against the raw listener */

/* A client on the device connects to the raw listener ls (at lin); the
 * raw end accepts and reads the Request (checked: revision 2, S, P2P with
 * the Write and Read RTRs offered). Returns the accepted socket or NULL. */
static struct socket *hr_up(struct ib_device *ib, struct socket *ls, struct sockaddr_in *lin,
                            struct end *c, const char *what)
{
    struct rdma_conn_param p = {.responder_resources = 4, .initiator_depth = 4};
    struct socket *ns = NULL;
    u8 req[20 + 512];
    u32 pl;
    int rc;

    memset(c, 0, sizeof(*c));
    c->id = rdma_create_id(&init_net, cm_handler, &q_hc, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(c->id)) {
        c->id = NULL;
        CHECK(0, "%s: rdma_create_id", what);
        return NULL;
    }
    rc = rdma_resolve_addr(c->id, NULL, (struct sockaddr *)lin, 2000);
    if (rc || evq_wait(&q_hc, RDMA_CM_EVENT_ADDR_RESOLVED, what) < 0 ||
        rdma_resolve_route(c->id, 2000) ||
        evq_wait(&q_hc, RDMA_CM_EVENT_ROUTE_RESOLVED, what) < 0 || !end_init(ib, c) || conn_qp(c)) {
        CHECK(0, "%s: client setup (%d)", what, rc);
        return NULL;
    }
    rc = rdma_connect(c->id, &p);
    CHECK(rc == 0, "%s: rdma_connect: %d", what, rc);
    if (rc)
        return NULL;
    rc = kernel_accept(ls, &ns, 0);
    CHECK(rc == 0, "%s: raw accept: %d", what, rc);
    if (rc)
        return NULL;
    ns->sk->sk_rcvtimeo = 5 * HZ;
    ns->sk->sk_sndtimeo = 5 * HZ;
    rc = raw_recv(ns, req, 20);
    pl = rc ? 0 : (u32)req[18] << 8 | req[19];
    if (!rc && pl >= 4 && pl <= 512)
        rc = raw_recv(ns, req + 20, pl);
    CHECK(rc == 0 && !memcmp(req, "MPA ID Req Frame", 16) && req[17] == 2 && (req[16] & 0x10) &&
              pl >= 4 && (req[20] & 0x80) && (req[22] & 0xC0) == 0xC0,
          "%s: the driver's Request (%d) %*ph", what, rc, 24, req);
    return ns;
}

/* The client's connect ends with event want (status st when st != 0),
 * then it is destroyed: iw_cm waits for the driver's reply to a connect,
 * so the destruction returning says no endpoint holds it. */
static void hr_down(struct end *c, struct socket *ns, int want, int st, const char *what)
{
    int i = evq_wait(&q_hc, want, what);

    if (i >= 0 && st)
        CHECK(q_hc.e[i].status == st, "%s: status %d, want %d", what, q_hc.e[i].status, st);
    if (c->id && c->id->qp)
        CHECK(qp_state(c->id->qp) != IB_QPS_RTS, "%s: the QP in RTS", what);
    end_fini(c);
    if (ns)
        sock_release(ns);
    usleep_range(20000, 30000);
    CHECK(READ_ONCE(q_hc.in) == q_hc.out, "%s: a second event", what);
}

/* A Reply that fails the initiator's checks: a Terminate LLP / MPA /
 * ecode, no headers (RFC 6581 §9.1, §9.2; ecode < 0: none, the stream
 * just closes, RFC 5044 §8 code 4), then EOF; the connect fails with
 * RDMA_CM_EVENT_CONNECT_ERROR. */
static void h_bad_reply(struct ib_device *ib, struct socket *ls, struct sockaddr_in *lin,
                        const u8 *rep, unsigned int len, int ecode, const char *what)
{
    struct end c;
    struct hconn h = {};
    u8 b[64];
    int rc;

    h.sock = hr_up(ib, ls, lin, &c, what);
    if (h.sock) {
        CHECK(raw_send(h.sock, rep, len) == 0, "%s: the Reply", what);
        if (ecode >= 0) {
            h_term(&h, what, T_LLP, 0, ecode, NULL, 0, NULL);
        } else {
            rc = raw_recv(h.sock, b, 1);
            CHECK(rc == -EPIPE, "%s: %d, want EOF and nothing before it", what, rc);
        }
    }
    hr_down(&c, h.sock, RDMA_CM_EVENT_CONNECT_ERROR, 0, what);
}

/* A responder that never replies (the driver's initiator gives up after
 * mpa_timeout_ms: UNREACHABLE, -ETIMEDOUT, EOF at the raw end), while an
 * initiator that never sends its Request sits on the driver's listener
 * (hin): its connection closed within the same bound, the ULP told
 * nothing. */
static void h_silent(struct ib_device *ib, struct socket *ls, struct sockaddr_in *lin,
                     struct sockaddr_in *hin)
{
    unsigned long t0, bound = msecs_to_jiffies(mpa_timeout_ms);
    struct socket *si = NULL, *ns;
    struct end c;
    u8 b;
    int rc;

    /* the silent initiator */
    rc = sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &si);
    CHECK(rc == 0, "silent initiator: socket: %d", rc);
    if (rc)
        si = NULL;
    if (si) {
        sock_set_reuseaddr(si->sk);
        rc = kernel_connect(si, (struct sockaddr *)hin, sizeof(*hin), 0);
        CHECK(rc == 0, "silent initiator: connect: %d", rc);
    }
    t0 = jiffies;
    /* the silent responder */
    ns = hr_up(ib, ls, lin, &c, "silent responder");
    if (ns) {
        unsigned long t1 = jiffies;

        ns->sk->sk_rcvtimeo = bound + 5 * HZ;
        rc = raw_recv(ns, &b, 1);
        CHECK(rc == -EPIPE, "silent responder: %d, want EOF", rc);
        CHECK(time_after_eq(jiffies, t1 + bound * 9 / 10) &&
                  time_before(jiffies, t1 + bound + 3 * HZ),
              "silent responder: closed after %u ms, want %u", jiffies_to_msecs(jiffies - t1),
              mpa_timeout_ms);
    }
    hr_down(&c, ns, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, "silent responder");
    if (si) {
        si->sk->sk_rcvtimeo = bound + 5 * HZ;
        rc = raw_recv(si, &b, 1);
        CHECK(rc == -EPIPE, "silent initiator: %d, want EOF", rc);
        CHECK(time_before(jiffies, t0 + bound + 3 * HZ),
              "silent initiator: closed after %u ms, want %u", jiffies_to_msecs(jiffies - t0),
              mpa_timeout_ms);
        sock_release(si);
        CHECK(READ_ONCE(q_hs.in) == q_hs.out, "silent initiator: an event reached the ULP");
    }
}

/* MPA revision 1 fallback: the raw responder resets the driver's
 * revision 2 Request (as an RNIC running revision 1 does); the driver
 * connects once more, a revision 1 Request (RFC 5044 §7.1: no S, no IRD/ORD
 * words, no peer-to-peer mode), which a revision 1 Reply accepts: the
 * connection is established and carries a Send (the client's first FPDU,
 * no RTR before it), read here at the raw end. */
static void h_rev1(struct ib_device *ib, struct socket *ls, struct sockaddr_in *lin)
{
    static const char what[] = "revision 1 fallback";
    struct end c;
    struct hconn h = {};
    struct socket *ns = hr_up(ib, ls, lin, &c, what);
    u8 req[20 + 64], rep[20] = "MPA ID Rep Frame", *buf = kzalloc(64, GFP_KERNEL);
    static u8 u[256];
    struct ib_wc wc;
    int i, rc;

    if (!ns || !buf)
        goto out;
    sock_no_linger(ns->sk);
    sock_release(ns); /* a reset */
    ns = NULL;
    rc = kernel_accept(ls, &ns, 0);
    CHECK(rc == 0, "%s: no second connection: %d", what, rc);
    if (rc) {
        ns = NULL;
        goto out;
    }
    ns->sk->sk_rcvtimeo = 5 * HZ;
    rc = raw_recv(ns, req, 20);
    CHECK(rc == 0 && !memcmp(req, "MPA ID Req Frame", 16) && req[17] == 1 && !(req[16] & 0x90) &&
              req[18] == 0 && req[19] == 0,
          "%s: the second Request (%d) %*ph", what, rc, 20, req);
    if (rc)
        goto out;
    rep[16] = 0;
    rep[17] = 1;
    rep[18] = rep[19] = 0;
    CHECK(raw_send(ns, rep, sizeof(rep)) == 0, "%s: the Reply", what);
    i = evq_wait(&q_hc, RDMA_CM_EVENT_ESTABLISHED, what);
    if (i < 0)
        goto out;
    CHECK(qp_state(c.id->qp) == IB_QPS_RTS, "%s: QP state %d", what, qp_state(c.id->qp));
    memcpy(buf, "revision one", 12);
    {
        struct ib_sge sge = {
            .addr = (u64)(uintptr_t)buf, .length = 12, .lkey = c.pd->local_dma_lkey};

        rc = post_one(c.id->qp, IB_WR_SEND, 71, &sge, 1, 0, 0);
    }
    CHECK(rc == 0, "%s: post a Send: %d", what, rc);
    h.sock = ns;
    rc = h_fpdu(&h, u, sizeof(u));
    /* untagged, L, Send (RFC 5040 §4.3: opcode 3), QN 0, MSN 1, MO 0 */
    CHECK(rc == 18 + 12 && u[0] == 0x41 && u[1] == 0x43 && get_be32(u + 6) == 0 &&
              get_be32(u + 10) == 1 && get_be32(u + 14) == 0 && !memcmp(u + 18, buf, 12),
          "%s: the first FPDU (%d) %*ph", what, rc, rc > 0 ? min_t(int, rc, 30) : 0, u);
    rc = poll_n(c.cq, &wc, 1);
    CHECK(rc == 1 && wc.status == IB_WC_SUCCESS && wc.wr_id == 71, "%s: the Send's completion",
          what);
    sock_release(ns); /* FIN: the client hears DISCONNECTED */
    ns = NULL;
    hr_down(&c, NULL, RDMA_CM_EVENT_DISCONNECTED, 0, what);
    kfree(buf);
    return;
out:
    if (ns)
        sock_release(ns);
    end_fini(&c);
    kfree(buf);
}

/* RFC 6581 §9 Reply checks, the revision 1 fallback and the MPA timers: 6 classes. */
static unsigned int h_initiator(struct ib_device *ib, struct sockaddr_in *hin)
{
    struct sockaddr_in lin = *hin;
    struct socket *ls;
    u8 rep[24] = "MPA ID Rep Frame";
    unsigned int cases = 0;
    int rc;

    evq_init(&q_hc);
    lin.sin_port = htons(port + 3);
    rc = sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &ls);
    CHECK(rc == 0, "raw listener: %d", rc);
    if (rc)
        return 0;
    sock_set_reuseaddr(ls->sk);
    ls->sk->sk_rcvtimeo = 5 * HZ; /* kernel_accept's wait */
    rc = kernel_bind(ls, (struct sockaddr *)&lin, sizeof(lin)) ?: kernel_listen(ls, 4);
    CHECK(rc == 0, "raw listener: bind/listen: %d", rc);
    if (rc)
        goto out;

    /* 27. A not mirrored (RFC 6581 §9.2: "MUST ... send a TERM message"
     * LLP, MPA, code 7 "no matching RTR model") */
    rep[16] = 0x10; /* S, no C: no CRC */
    rep[17] = 2;
    be16(rep + 18, 4);
    be16(rep + 20, 4);          /* A = 0, IRD 4 */
    be16(rep + 22, 0x8000 | 4); /* C (Write RTR), ORD 4 */
    h_bad_reply(ib, ls, &lin, rep, sizeof(rep), 7, "Reply without A");
    cases++;

    /* 28. the responder's ORD 200 beyond the IRD the driver can have (16):
     * RFC 6581 §9.1, LLP, MPA, code 6 "insufficient IRD resources" */
    be16(rep + 20, 0x8000 | 4);   /* A, IRD 4 */
    be16(rep + 22, 0x8000 | 200); /* C, ORD 200 */
    h_bad_reply(ib, ls, &lin, rep, sizeof(rep), 6, "Reply ORD 200");
    cases++;

    /* 29. a bad key: not a Reply (RFC 5044 §7.1.2 rule 5, §8 code 4:
     * closed at once, no Terminate) */
    be16(rep + 22, 0x8000 | 4);
    memcpy(rep, "MPA ID Rep Frxme", 16);
    h_bad_reply(ib, ls, &lin, rep, sizeof(rep), -1, "Reply key");
    cases++;

    /* 30. the revision 1 fallback */
    h_rev1(ib, ls, &lin);
    cases++;

    /* 31, 32. the MPA timers */
    h_silent(ib, ls, &lin, hin);
    cases += 2;
out:
    sock_release(ls);
    return cases;
}

/* ------------------------------------------------------------------------
 * The initiator's guard against siw's first-FPDU race (wake=1; the driver
 * loaded with first_hold_ms=wake_hold_ms, docs/KERNEL.md "The first FPDU
 * and siw"): a raw responder on port+3 answers the driver's Request. With
 * the Write RTR or the Read RTR the RTR and the ULP's first Send come at
 * once; a silent responder then gets a wake-up (a zero-length Write, STag
 * 1, TO 0) first_hold_ms after the Reply and a second one 10 times as
 * late, then nothing; one that sent an FPDU (with the Read RTR: its Read
 * Response) gets none. A client-server (revision 1) connection is not
 * held either, and its silent responder gets the two wake-ups after our
 * first Send.
 * ---------------------------------------------------------------------- */

static bool wake;
module_param(wake, bool, 0444);
MODULE_PARM_DESC(wake, "run the first-FPDU guard test only (default 0)");
static unsigned int wake_hold_ms = 500;
module_param(wake_hold_ms, uint, 0444);
MODULE_PARM_DESC(wake_hold_ms, "wake=1: the driver's first_hold_ms (default 500)");

/* the driver's Reply at revision 2 with the RTR rtr (0x8000 Write, 0x4000 Read) */
static void w_reply(u8 *rep, u16 rtr)
{
    memcpy(rep, "MPA ID Rep Frame", 16);
    rep[16] = 0x10; /* S, no CRC */
    rep[17] = 2;
    be16(rep + 18, 4);
    be16(rep + 20, 0x8000 | 4); /* A, IRD 4 */
    be16(rep + 22, rtr | 4);    /* the RTR, ORD 4 */
}

/* a zero-length tagged Write to STag 1, TO 0 (the RTR's and a wake-up's form) */
static bool w_is_wake(const u8 *u, int n)
{
    return n == 14 && u[0] == 0xC1 && u[1] == 0x40 && get_be32(u + 2) == 1 &&
           get_be32(u + 6) == 0 && get_be32(u + 10) == 0;
}

/* a Send of 12 bytes of buf on c's QP */
static int w_send(struct end *c, u8 *buf, u64 id)
{
    struct ib_sge sge = {.addr = (u64)(uintptr_t)buf, .length = 12, .lkey = c->pd->local_dma_lkey};

    return post_one(c->id->qp, IB_WR_SEND, id, &sge, 1, 0, 0);
}

static bool w_is_send(const u8 *u, int n, u32 msn, const u8 *buf)
{
    return n == 18 + 12 && u[0] == 0x41 && u[1] == 0x43 && get_be32(u + 10) == msn &&
           !memcmp(u + 18, buf, 12);
}

/* the Read RTR: a zero-length Read Request, untagged QN 1, MSN 1, from
 * source STag 1 (RFC 6581 §9.2) */
static bool w_is_rrtr(const u8 *u, int n)
{
    return n == 46 && u[0] == 0x41 && u[1] == 0x41 && get_be32(u + 6) == 1 && get_be32(u + 30) == 0;
}

/* a silent raw end: the two wake-ups, first_hold_ms after the Reply (t0)
 * and 10 times as late, then none; the QP in RTS */
static void w_two_wakes(struct hconn *h, struct end *c, u8 *u, unsigned int cap, unsigned long t0,
                        const char *what)
{
    unsigned long hold = msecs_to_jiffies(wake_hold_ms), t1, t;
    int n;

    n = h_fpdu(h, u, cap);
    t1 = jiffies;
    CHECK(w_is_wake(u, n), "%s: the first wake-up (%d) %*ph", what, n,
          n > 0 ? min_t(int, n, 20) : 0, u);
    CHECK(time_after_eq(t1, t0 + hold * 9 / 10) && time_before(t1, t0 + hold + HZ),
          "%s: the first wake-up %u ms after the Reply, want %u", what, jiffies_to_msecs(t1 - t0),
          wake_hold_ms);
    n = h_fpdu(h, u, cap);
    t = jiffies;
    CHECK(w_is_wake(u, n), "%s: the second wake-up (%d) %*ph", what, n,
          n > 0 ? min_t(int, n, 20) : 0, u);
    CHECK(time_after_eq(t, t1 + hold * 9) && time_before(t, t1 + hold * 10 + HZ),
          "%s: the second wake-up %u ms after the first, want %u", what, jiffies_to_msecs(t - t1),
          wake_hold_ms * 10);
    pr_info("first FPDU guard: %s: wake-ups %u and %u ms after the Reply\n", what,
            jiffies_to_msecs(t1 - t0), jiffies_to_msecs(t - t0));
    h->sock->sk->sk_rcvtimeo = hold * 2;
    n = raw_recv(h->sock, u, 1);
    CHECK(n == -EAGAIN, "%s: %d, want no third wake-up", what, n);
    CHECK(qp_state(c->id->qp) == IB_QPS_RTS, "%s: QP state %d", what, qp_state(c->id->qp));
}

/* P2P, the Write RTR or the Read RTR (read); silent: whether the raw end
 * stays silent (wake-ups) or speaks (none): a zero-length Write after the
 * first Send, or with the Read RTR the RTR's zero-length Read Response at
 * once */
static void w_p2p(struct ib_device *ib, struct socket *ls, struct sockaddr_in *lin, u8 *buf,
                  bool read, bool silent)
{
    const char *what = read ? (silent ? "Read RTR, silent peer" : "Read RTR, the peer answers")
                            : (silent ? "Write RTR, silent peer" : "Write RTR, the peer sends");
    unsigned long hold = msecs_to_jiffies(wake_hold_ms), t0, t;
    struct hconn h = {};
    static u8 u[256];
    struct end c;
    struct ib_wc wc;
    u8 rep[24];
    int rc, n;

    h.sock = hr_up(ib, ls, lin, &c, what);
    if (!h.sock)
        goto out;
    h.sock->sk->sk_rcvtimeo = hold * 12 + 5 * HZ;
    w_reply(rep, read ? 0x4000 : 0x8000);
    t0 = jiffies;
    CHECK(raw_send(h.sock, rep, sizeof(rep)) == 0, "%s: the Reply", what);
    if (evq_wait(&q_hc, RDMA_CM_EVENT_ESTABLISHED, what) < 0)
        goto out;
    memcpy(buf, "first at once", 12);
    CHECK(w_send(&c, buf, 81) == 0, "%s: post a Send", what);
    n = h_fpdu(&h, u, sizeof(u));
    CHECK(read ? w_is_rrtr(u, n) : w_is_wake(u, n), "%s: the RTR (%d) %*ph", what, n,
          n > 0 ? min_t(int, n, 46) : 0, u);
    if (read && !silent) {
        u8 f[64], hd[16];
        /* the RTR's answer: a zero-length Read Response (RFC 5040 §4.2:
         * opcode 0010b) to the Read Request's sink STag (0), as a
         * responder sends it */
        unsigned int fl = fpdu(f, false, hd, hdr_t(hd, 2, 0, 0), NULL, 0);

        CHECK(raw_send(h.sock, f, fl) == 0, "%s: our zero-length Read Response", what);
    }
    n = h_fpdu(&h, u, sizeof(u));
    t = jiffies;
    CHECK(w_is_send(u, n, 1, buf), "%s: the Send (%d) %*ph", what, n, n > 0 ? min_t(int, n, 30) : 0,
          u);
    /* not held: well before first_hold_ms */
    CHECK(time_before(t, t0 + hold / 4), "%s: the first Send after %u ms, first_hold_ms %u", what,
          jiffies_to_msecs(t - t0), wake_hold_ms);
    pr_info("first FPDU guard: %s: RTR and first Send %u ms after the Reply (first_hold_ms %u)\n",
            what, jiffies_to_msecs(t - t0), wake_hold_ms);
    rc = poll_n(c.cq, &wc, 1);
    CHECK(rc == 1 && wc.status == IB_WC_SUCCESS && wc.wr_id == 81, "%s: the Send's completion",
          what);
    if (!silent && !read) {
        u8 f[64], hd[16];
        unsigned int fl = fpdu(f, false, hd, hdr_t(hd, 0, 1, 0), NULL, 0);

        /* taken on a QP without remote write too (RFC 5041 §7.1: a
         * zero-length tagged segment is not validated), as a wake-up
         * would be by the driver's responder */
        CHECK(to_state(c.id->qp, IB_QPS_RTS, IB_QP_ACCESS_FLAGS, IB_ACCESS_REMOTE_READ) == 0,
              "%s: RTS -> RTS without remote write", what);
        CHECK(raw_send(h.sock, f, fl) == 0, "%s: our zero-length Write", what);
        /* nothing: no wake-up at first_hold_ms (nor the second after it) */
        h.sock->sk->sk_rcvtimeo = hold * 2 + HZ / 2;
        rc = raw_recv(h.sock, u, 1);
        CHECK(rc == -EAGAIN, "%s: %d, want nothing within %u ms", what, rc,
              jiffies_to_msecs(hold * 2 + HZ / 2));
        CHECK(qp_state(c.id->qp) == IB_QPS_RTS, "%s: QP state %d", what, qp_state(c.id->qp));
        /* the stream intact: the next Send is MSN 2 */
        h.sock->sk->sk_rcvtimeo = 5 * HZ;
        memcpy(buf, "second frame", 12);
        CHECK(w_send(&c, buf, 82) == 0, "%s: post a second Send", what);
        n = h_fpdu(&h, u, sizeof(u));
        CHECK(w_is_send(u, n, 2, buf), "%s: the second Send (%d) %*ph", what, n,
              n > 0 ? min_t(int, n, 30) : 0, u);
        goto down;
    }
    if (!silent) {
        /* the Read RTR answered: no wake-up at first_hold_ms (nor after) */
        h.sock->sk->sk_rcvtimeo = hold * 2 + HZ / 2;
        rc = raw_recv(h.sock, u, 1);
        CHECK(rc == -EAGAIN, "%s: %d, want nothing within %u ms", what, rc,
              jiffies_to_msecs(hold * 2 + HZ / 2));
        CHECK(qp_state(c.id->qp) == IB_QPS_RTS, "%s: QP state %d", what, qp_state(c.id->qp));
        goto down;
    }
    w_two_wakes(&h, &c, u, sizeof(u), t0, what);
down:
    sock_release(h.sock); /* FIN: the client hears DISCONNECTED */
    hr_down(&c, NULL, RDMA_CM_EVENT_DISCONNECTED, 0, what);
    return;
out:
    if (h.sock)
        sock_release(h.sock);
    end_fini(&c);
}

/* a client-server connection at revision 1 (the raw end resets the
 * revision 2 Request, as h_rev1): the first FPDU, the Send, comes at once;
 * the silent raw end gets two wake-ups, first_hold_ms after the Reply and
 * 10 times as late */
static void w_held(struct ib_device *ib, struct socket *ls, struct sockaddr_in *lin, u8 *buf)
{
    const char *what = "client-server (revision 1)";
    unsigned long hold = msecs_to_jiffies(wake_hold_ms), t0, t;
    struct hconn h = {};
    static u8 u[256];
    struct end c;
    struct ib_wc wc;
    u8 rep[24], req[20];
    int rc;

    h.sock = hr_up(ib, ls, lin, &c, what);
    if (!h.sock)
        goto out;
    sock_no_linger(h.sock->sk);
    sock_release(h.sock); /* a reset: the driver retries at revision 1 */
    h.sock = NULL;
    rc = kernel_accept(ls, &h.sock, 0);
    CHECK(rc == 0, "%s: no second connection: %d", what, rc);
    if (rc) {
        h.sock = NULL;
        goto out;
    }
    h.sock->sk->sk_rcvtimeo = 5 * HZ;
    rc = raw_recv(h.sock, req, 20);
    CHECK(rc == 0 && req[17] == 1, "%s: the second Request (%d) %*ph", what, rc, 20, req);
    memcpy(rep, "MPA ID Rep Frame", 16);
    rep[16] = rep[18] = rep[19] = 0;
    rep[17] = 1;
    h.sock->sk->sk_rcvtimeo = hold * 12 + 5 * HZ;
    t0 = jiffies;
    CHECK(raw_send(h.sock, rep, 20) == 0, "%s: the Reply", what);
    if (evq_wait(&q_hc, RDMA_CM_EVENT_ESTABLISHED, what) < 0)
        goto out;
    memcpy(buf, "first at once", 12);
    CHECK(w_send(&c, buf, 83) == 0, "%s: post a Send", what);
    rc = h_fpdu(&h, u, sizeof(u));
    t = jiffies;
    CHECK(w_is_send(u, rc, 1, buf), "%s: the Send (%d) %*ph", what, rc,
          rc > 0 ? min_t(int, rc, 30) : 0, u);
    CHECK(time_before(t, t0 + hold / 4), "%s: the first Send after %u ms, first_hold_ms %u", what,
          jiffies_to_msecs(t - t0), wake_hold_ms);
    pr_info("first FPDU guard: %s: first Send %u ms after the Reply (first_hold_ms %u)\n", what,
            jiffies_to_msecs(t - t0), wake_hold_ms);
    rc = poll_n(c.cq, &wc, 1);
    CHECK(rc == 1 && wc.status == IB_WC_SUCCESS && wc.wr_id == 83, "%s: the Send's completion",
          what);
    w_two_wakes(&h, &c, u, sizeof(u), t0, what); /* the raw end stays silent */
    sock_release(h.sock);
    hr_down(&c, NULL, RDMA_CM_EVENT_DISCONNECTED, 0, what);
    return;
out:
    if (h.sock)
        sock_release(h.sock);
    end_fini(&c);
}

static void test_wake(struct ib_device *ib)
{
    struct net_device *nd = dev_get_by_name(&init_net, netdev);
    struct sockaddr_in lin = {.sin_family = AF_INET, .sin_port = htons(port + 3)};
    u8 *buf = kzalloc(64, GFP_KERNEL);
    struct socket *ls;
    int rc;

    if (!nd || !buf) {
        CHECK(0, "wake: no interface %s", netdev);
        if (nd)
            dev_put(nd);
        kfree(buf);
        return;
    }
    lin.sin_addr.s_addr = inet_select_addr(nd, 0, RT_SCOPE_UNIVERSE);
    dev_put(nd);
    evq_init(&q_hc);
    rc = sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &ls);
    CHECK(rc == 0, "wake: raw listener: %d", rc);
    if (rc) {
        kfree(buf);
        return;
    }
    sock_set_reuseaddr(ls->sk);
    ls->sk->sk_rcvtimeo = 5 * HZ;
    rc = kernel_bind(ls, (struct sockaddr *)&lin, sizeof(lin)) ?: kernel_listen(ls, 4);
    CHECK(rc == 0, "wake: raw listener: bind/listen: %d", rc);
    if (!rc) {
        w_p2p(ib, ls, &lin, buf, false, true);
        w_p2p(ib, ls, &lin, buf, false, false);
        w_p2p(ib, ls, &lin, buf, true, true);
        w_p2p(ib, ls, &lin, buf, true, false);
        w_held(ib, ls, &lin, buf);
    }
    sock_release(ls);
    kfree(buf);
}

/* ------------------------------------------------------------------------
 * Bounds on connection setup and on the close (hostile=1): the driver
 * loaded with connect_timeout_ms, accept_timeout_ms and close_timeout_ms
 * (the same values given to this module).
 * ---------------------------------------------------------------------- */

static unsigned int connect_timeout_ms = 2000, accept_timeout_ms = 1000, close_timeout_ms = 2000;
module_param(connect_timeout_ms, uint, 0444);
MODULE_PARM_DESC(connect_timeout_ms, "hostile=1: the driver's connect_timeout_ms (default 2000)");
module_param(accept_timeout_ms, uint, 0444);
MODULE_PARM_DESC(accept_timeout_ms,
                 "hostile=1: the driver's accept_timeout_ms (default 1000, below mpa_timeout_ms)");
module_param(close_timeout_ms, uint, 0444);
MODULE_PARM_DESC(close_timeout_ms, "hostile=1: the driver's close_timeout_ms (default 2000)");

static struct evq q_ta; /* the listener of the unanswered connect requests */

/* elapsed since t0 within [0.9, 1] x ms plus 3 s */
static bool took(unsigned long t0, unsigned int ms)
{
    unsigned long b = msecs_to_jiffies(ms);

    return time_after_eq(jiffies, t0 + b * 9 / 10) && time_before(jiffies, t0 + b + 3 * HZ);
}

/* A TCP connect whose SYNs are dropped: a raw listener with a backlog of
 * 0 whose one accept queue slot a raw connection fills (Linux drops a
 * SYN to a listener whose accept queue is full). The driver's connect
 * ends after connect_timeout_ms: UNREACHABLE, -ETIMEDOUT, the QP neither
 * in RTS nor in ERR; destroying the id then returns (no endpoint holds
 * it). Then the slot is freed and the same port connects at once. */
static void t_connect(struct ib_device *ib, struct sockaddr_in *hin)
{
    static const char what[] = "connect to a port that drops SYNs";
    struct sockaddr_in lin = *hin;
    struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
    struct socket *ls = NULL, *fill = NULL;
    struct end c = {};
    unsigned long t0;
    int i, rc;

    lin.sin_port = htons(port + 6);
    rc = sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &ls);
    if (rc) {
        CHECK(0, "%s: listener socket: %d", what, rc);
        return;
    }
    sock_set_reuseaddr(ls->sk);
    rc = kernel_bind(ls, (struct sockaddr *)&lin, sizeof(lin)) ?: kernel_listen(ls, 0);
    rc = rc ?: sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &fill);
    if (!rc) {
        sock_set_reuseaddr(fill->sk);
        rc = kernel_connect(fill, (struct sockaddr *)&lin, sizeof(lin), 0);
    } else {
        fill = NULL;
    }
    CHECK(rc == 0, "%s: the raw listener and its one connection: %d", what, rc);
    if (rc)
        goto out;
    c.id = rdma_create_id(&init_net, cm_handler, &q_hc, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(c.id)) {
        c.id = NULL;
        CHECK(0, "%s: rdma_create_id", what);
        goto out;
    }
    if (rdma_resolve_addr(c.id, NULL, (struct sockaddr *)&lin, 2000) ||
        evq_wait(&q_hc, RDMA_CM_EVENT_ADDR_RESOLVED, what) < 0 || rdma_resolve_route(c.id, 2000) ||
        evq_wait(&q_hc, RDMA_CM_EVENT_ROUTE_RESOLVED, what) < 0 || !end_init(ib, &c) ||
        conn_qp(&c)) {
        CHECK(0, "%s: client setup", what);
        goto out;
    }
    t0 = jiffies;
    rc = rdma_connect(c.id, &p);
    CHECK(rc == 0, "%s: rdma_connect: %d", what, rc);
    if (rc)
        goto out;
    i = evq_wait(&q_hc, RDMA_CM_EVENT_UNREACHABLE, what);
    CHECK(i >= 0 && q_hc.e[i].status == -ETIMEDOUT, "%s: status %d, want %d", what,
          i >= 0 ? q_hc.e[i].status : 0, -ETIMEDOUT);
    CHECK(took(t0, connect_timeout_ms), "%s: failed after %u ms, want %u", what,
          jiffies_to_msecs(jiffies - t0), connect_timeout_ms);
    pr_info("timers: the connect failed after %u ms (connect_timeout_ms %u)\n",
            jiffies_to_msecs(jiffies - t0), connect_timeout_ms);
    CHECK(qp_state(c.id->qp) != IB_QPS_RTS && qp_state(c.id->qp) != IB_QPS_ERR, "%s: QP state %d",
          what, qp_state(c.id->qp));
    end_fini(&c);
    usleep_range(20000, 30000);
    CHECK(READ_ONCE(q_hc.in) == q_hc.out, "%s: a second event", what);
    /* the listener takes connections again: TCP through at once */
    {
        struct socket *ns = NULL;

        ls->sk->sk_rcvtimeo = 5 * HZ;
        rc = kernel_accept(ls, &ns, 0);
        if (!rc)
            sock_release(ns);
        CHECK(rc == 0, "%s: raw accept of the filler: %d", what, rc);
    }
out:
    end_fini(&c);
    if (fill)
        sock_release(fill);
    if (ls)
        sock_release(ls);
}

/* A connect request the ULP never answers: after accept_timeout_ms the
 * driver rejects it (the client: REJECTED, -ECONNREFUSED, no private
 * data), then the ULP's late answer fails with -ETIMEDOUT: rdma_accept
 * (late == 0) or rdma_reject (late == 1); its id is destroyed cleanly
 * (the endpoint is let go of: none left at unload). */
static void t_accept(struct ib_device *ib, struct sockaddr_in *tin, int late)
{
    const char *what = late ? "an unanswered connect request, rejected late"
                            : "an unanswered connect request, accepted late";
    struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
    struct end c = {}, s = {};
    unsigned long t0;
    int i, rc;

    c.id = rdma_create_id(&init_net, cm_handler, &q_hc, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(c.id)) {
        c.id = NULL;
        CHECK(0, "%s: rdma_create_id", what);
        return;
    }
    if (rdma_resolve_addr(c.id, NULL, (struct sockaddr *)tin, 2000) ||
        evq_wait(&q_hc, RDMA_CM_EVENT_ADDR_RESOLVED, what) < 0 || rdma_resolve_route(c.id, 2000) ||
        evq_wait(&q_hc, RDMA_CM_EVENT_ROUTE_RESOLVED, what) < 0 || !end_init(ib, &c) ||
        conn_qp(&c) || rdma_connect(c.id, &p)) {
        CHECK(0, "%s: client setup", what);
        goto out;
    }
    i = evq_wait(&q_ta, RDMA_CM_EVENT_CONNECT_REQUEST, what);
    if (i < 0)
        goto out;
    t0 = jiffies;
    s.id = q_ta.e[i].id;
    if (!end_init(ib, &s) || conn_qp(&s)) {
        CHECK(0, "%s: server setup", what);
        goto out;
    }
    i = evq_wait(&q_hc, RDMA_CM_EVENT_REJECTED, what);
    CHECK(i >= 0 && q_hc.e[i].status == -ECONNREFUSED && q_hc.e[i].pd_len == 0,
          "%s: the client: status %d, %u bytes of private data", what,
          i >= 0 ? q_hc.e[i].status : 0, i >= 0 ? q_hc.e[i].pd_len : 0);
    CHECK(took(t0, accept_timeout_ms), "%s: rejected after %u ms, want %u", what,
          jiffies_to_msecs(jiffies - t0), accept_timeout_ms);
    pr_info("timers: the connect request was rejected after %u ms (accept_timeout_ms %u)\n",
            jiffies_to_msecs(jiffies - t0), accept_timeout_ms);
    msleep(100);
    rdma_lock_handler(s.id);
    if (late) {
        rc = rdma_reject(s.id, "late", 4, 0);
    } else {
        p.qp_num = s.id->qp->qp_num;
        rc = rdma_accept(s.id, &p);
    }
    rdma_unlock_handler(s.id);
    CHECK(rc == -ETIMEDOUT, "%s: the late answer: %d, want %d", what, rc, -ETIMEDOUT);
    CHECK(qp_state(s.id->qp) != IB_QPS_RTS, "%s: the server's QP in RTS", what);
    usleep_range(20000, 30000);
    CHECK(READ_ONCE(q_ta.in) == q_ta.out && READ_ONCE(q_hc.in) == q_hc.out, "%s: a second event",
          what);
out:
    end_fini(&s);
    end_fini(&c);
}

/* An orderly close toward a peer that never closes: the driver's
 * initiator connects to a raw responder (a revision 2 Reply by hand, P2P
 * with the Write RTR), rdma_disconnect sends the FIN (EOF at the raw end
 * at once), the raw end never closes: after close_timeout_ms the client
 * hears DISCONNECTED, its QP in ERR, the socket released (bytes the raw
 * end sends then are answered with a reset). */
static void t_close(struct ib_device *ib, struct sockaddr_in *hin)
{
    static const char what[] = "a peer that never closes";
    struct sockaddr_in lin = *hin;
    u8 rep[24] = "MPA ID Rep Frame", b[64];
    struct socket *ls = NULL, *ns = NULL;
    unsigned long t0;
    struct end c = {};
    int i, rc;

    lin.sin_port = htons(port + 7);
    rc = sock_create_kern(&init_net, PF_INET, SOCK_STREAM, IPPROTO_TCP, &ls);
    if (rc) {
        CHECK(0, "%s: listener socket: %d", what, rc);
        return;
    }
    sock_set_reuseaddr(ls->sk);
    ls->sk->sk_rcvtimeo = 5 * HZ;
    rc = kernel_bind(ls, (struct sockaddr *)&lin, sizeof(lin)) ?: kernel_listen(ls, 4);
    CHECK(rc == 0, "%s: raw listener: %d", what, rc);
    if (rc)
        goto out;
    ns = hr_up(ib, ls, &lin, &c, what);
    if (!ns)
        goto out;
    rep[16] = 0x10; /* S (RFC 6581), no CRC */
    rep[17] = 2;
    be16(rep + 18, 4);
    be16(rep + 20, 0x8000 | 4); /* A, IRD 4 */
    be16(rep + 22, 0x8000 | 4); /* C (Write RTR), ORD 4 */
    CHECK(raw_send(ns, rep, sizeof(rep)) == 0, "%s: the Reply", what);
    i = evq_wait(&q_hc, RDMA_CM_EVENT_ESTABLISHED, what);
    if (i < 0)
        goto out;
    msleep(100); /* the RTR out (first_hold_ms) */
    t0 = jiffies;
    rc = rdma_disconnect(c.id);
    CHECK(rc == 0, "%s: rdma_disconnect: %d", what, rc);
    /* the RTR, then our FIN */
    ns->sk->sk_rcvtimeo = 3 * HZ;
    do {
        struct kvec v = {.iov_base = b, .iov_len = sizeof(b)};
        struct msghdr m = {};

        rc = kernel_recvmsg(ns, &m, &v, 1, sizeof(b), 0);
    } while (rc > 0);
    CHECK(rc == 0 && time_before(jiffies, t0 + 2 * HZ), "%s: no FIN at the raw end (%d, %u ms)",
          what, rc, jiffies_to_msecs(jiffies - t0));
    i = evq_wait(&q_hc, RDMA_CM_EVENT_DISCONNECTED, what);
    CHECK(i >= 0 && took(t0, close_timeout_ms), "%s: DISCONNECTED after %u ms, want %u", what,
          jiffies_to_msecs(jiffies - t0), close_timeout_ms);
    pr_info("timers: closed %u ms after our FIN (close_timeout_ms %u)\n",
            jiffies_to_msecs(jiffies - t0), close_timeout_ms);
    CHECK(qp_state(c.id->qp) == IB_QPS_ERR, "%s: QP state %d", what, qp_state(c.id->qp));
    /* the driver's socket is released: bytes the raw end sends now are
     * answered with a reset (the kernel's, for data after a close), so
     * its next send fails (no SIGPIPE: it would go to insmod) */
    for (i = 0; i < 2; i++) {
        struct kvec v = {.iov_base = (void *)"late", .iov_len = 4};
        struct msghdr m = {.msg_flags = MSG_NOSIGNAL};

        rc = kernel_sendmsg(ns, &m, &v, 1, 4);
        if (rc < 0)
            break;
        msleep(200);
    }
    CHECK(rc == -EPIPE || rc == -ECONNRESET, "%s: bytes after the close: %d, want a reset", what,
          rc);
    end_fini(&c);
    usleep_range(20000, 30000);
    CHECK(READ_ONCE(q_hc.in) == q_hc.out, "%s: a second event", what);
out:
    end_fini(&c);
    if (ns)
        sock_release(ns);
    if (ls)
        sock_release(ls);
}

/* connect_timeout_ms, accept_timeout_ms (accepted and rejected late),
 * close_timeout_ms */
static void t_timers(struct ib_device *ib, struct sockaddr_in *hin)
{
    struct sockaddr_in tin = *hin;
    struct rdma_cm_id *lid;
    int rc;

    evq_init(&q_hc);
    evq_init(&q_ta);
    t_connect(ib, hin);
    tin.sin_port = htons(port + 5);
    lid = rdma_create_id(&init_net, cm_handler, &q_ta, RDMA_PS_TCP, IB_QPT_RC);
    if (IS_ERR(lid)) {
        CHECK(0, "timers: rdma_create_id (listener): %ld", PTR_ERR(lid));
    } else {
        rc = rdma_bind_addr(lid, (struct sockaddr *)&tin) ?: rdma_listen(lid, 4);
        CHECK(rc == 0, "timers: listener: %d", rc);
        if (!rc) {
            t_accept(ib, &tin, 0);
            t_accept(ib, &tin, 1);
        }
        rdma_destroy_id(lid);
    }
    t_close(ib, hin);
    pr_info("timers: done\n");
}

/* RFC 7306 §5.2.1 Figure 4: an Atomic Request (untagged header, opcode
 * 0xA on QN 1, and its 52-byte RDMA header: 28 reserved bits and the
 * AOpCode, Request Identifier, Remote STag, Remote Tagged Offset, Add or
 * Swap Data and Mask, Compare Data and Mask; 70 bytes) */
static unsigned int hdr_areq(u8 *h, u32 msn, unsigned int aop, u32 id, u32 stag, u64 to,
                             u64 add_swap, u64 add_swap_mask, u64 cmp, u64 cmp_mask)
{
    unsigned int n = hdr_u(h, 0xA, 1, msn, 0);

    be32(h + n, aop & 0xF);
    be32(h + n + 4, id);
    be32(h + n + 8, stag);
    be64(h + n + 12, to);
    be64(h + n + 20, add_swap);
    be64(h + n + 28, add_swap_mask);
    be64(h + n + 36, cmp);
    be64(h + n + 44, cmp_mask);
    return n + 52;
}

/* RFC 7306 atomics and immediate data (classes 33-37). RFC 7306 §8.1
 * item 2: an error on an incoming Atomic Request or Immediate Data sends
 * the Terminate with its DDP header (M, D) and no RDMA header (R clear),
 * so the attached image is the DDP Segment Length and the 18-byte
 * untagged header. */
static noinline unsigned int h_atomic_classes(struct ib_device *ib, struct sockaddr_in *hin)
{
    static struct scatterlist sg3;
    struct hconn h;
    u8 hd[96], f[256];
    unsigned int hl, n, cases = 0;

    /* 33. a FetchAdd to the region, registered without remote atomic
     * rights (local write, remote read and write): RDMAP, Remote
     * Protection, code 2 "access rights violation" (RFC 5040 §7.2, as the
     * library), M and D without R (RFC 7306 §8.1), nothing changed */
    if (h_up(ib, hin, &h, true, 2, 1, 512)) {
        hl = hdr_areq(hd, 1, 0x0, 9, hmr->rkey, hmr->iova, 1, 0, 0, 0);
        n = fpdu(f, true, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "Atomic without remote atomic", T_RDMAP, 1, 2, f, 2 + 18, NULL);
    }
    h_down(&h, "Atomic without remote atomic", -1, 0);
    cases++;

    /* 34. a CmpSwap (all-ones masks, compare equal to the word there) on
     * an MR with remote atomic rights, at a target 4 bytes off 64-bit
     * alignment: RDMAP, Remote Operation, code 7 "catastrophic error,
     * localized to RDMAP stream" (RFC 7306 §8.2), the target not modified */
    if (h_up(ib, hin, &h, false, 2, 1, 512)) {
        struct ib_mr *am = fr_mr(h.s.id->qp, h.s.pd, &sg3, hmem + PAGE_SIZE, H_RLEN,
                                 IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
                                     IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC);

        CHECK(am, "an MR with remote atomic rights");
        if (am) {
            hl = hdr_areq(hd, 1, 0x2, 77, am->rkey, am->iova + 4, 0, U64_MAX, 0xA5A5A5A5A5A5A5A5ull,
                          U64_MAX);
            n = fpdu(f, false, hd, hl, NULL, 0);
            raw_send(h.sock, f, n);
            h_term(&h, "Atomic misaligned", T_RDMAP, 2, 7, f, 2 + 18, NULL);
            ib_dma_unmap_sg(h.s.pd->device, &sg3, 1, DMA_BIDIRECTIONAL);
            ib_dereg_mr(am);
        }
    }
    h_down(&h, "Atomic misaligned", -1, 0);
    cases++;

    /* 35. a FetchAdd naming an STag nobody registered: RDMAP, Remote
     * Protection, code 0 "invalid STag" (RFC 5040 §7.2 for the tagged
     * buffer an RDMAP message names; RFC 7306 §8.1: M and D, no R) */
    if (h_up(ib, hin, &h, true, 2, 1, 512)) {
        hl = hdr_areq(hd, 1, 0x0, 3, hmr->rkey ^ 0x00800000, hmr->iova, 1, 0, 0, 0);
        n = fpdu(f, true, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "Atomic invalid STag", T_RDMAP, 1, 0, f, 2 + 18, NULL);
    }
    h_down(&h, "Atomic invalid STag", -1, 0);
    cases++;

    /* 36. Immediate Data (opcode 8, QN 0) with 12 bytes after its header:
     * its ULPDU is exactly 8 bytes of immediate data (RFC 7306 §6.2, §6.3),
     * so DDP, untagged, code 5 "DDP message too long" (as the library), the
     * receive flushed, nothing placed */
    if (h_up(ib, hin, &h, false, 2, 2, 512)) {
        static const u8 imm[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

        hl = hdr_u(hd, 8, 0, 1, 0);
        n = fpdu(f, false, hd, hl, imm, sizeof(imm));
        raw_send(h.sock, f, n);
        h_term(&h, "Immediate Data of 12 bytes", T_DDP, 2, 5, f, 2 + 18, NULL);
    }
    h_down(&h, "Immediate Data of 12 bytes", IB_WC_WR_FLUSH_ERR, 0);
    cases++;

    /* 37. an Atomic Request with the reserved AOpCode 0x1 (RFC 7306 §10.1;
     * masked FetchAdd and CmpSwap are carried by the masks of opcodes 0x0
     * and 0x2, §5.1, which the module executes; there is no separate
     * masked opcode): the responder does not support it, so RDMAP, Remote
     * Operation (RFC 7306 §2: "A Remote Operation Error or Unexpected
     * OpCode error"), code 0xFF "unspecified" (no code is defined for an
     * unsupported AOpCode, RFC 7306 §5.2.1, §8), nothing changed */
    if (h_up(ib, hin, &h, true, 2, 1, 512)) {
        hl = hdr_areq(hd, 1, 0x1, 5, hmr->rkey, hmr->iova, 1, 0, 0, 0);
        n = fpdu(f, true, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "reserved AOpCode", T_RDMAP, 2, 0xFF, f, 2 + 18, NULL);
    }
    h_down(&h, "reserved AOpCode", -1, 0);
    cases++;
    return cases;
}

/* The library's Terminate classes the module lacked (tests/engine/
 * test_dp_term.c t_untagged, t_read_requests, t_invalidated, the EOF
 * checks, t_access, t_bounds): classes 38-44. */
static noinline unsigned int h_lib_classes(struct ib_device *ib, struct sockaddr_in *hin)
{
    static u8 u[256];
    struct hconn h;
    struct ib_wc wc;
    u8 hd[64], f[512], pay[128];
    unsigned int hl, n, n1, i, cases = 0;
    int rc;

    for (i = 0; i < sizeof(pay); i++)
        pay[i] = i * 5 + 2;

    /* 38. a Send with no receive posted: RFC 5041 §7.2 allows "invalid
     * MSN - no buffer available", but the module waits for a receive
     * (documented, as the library's receiver-not-ready hold): nothing
     * comes back (not even the QP's held Send: the FPDU is not through),
     * a receive posted then completes with the Send's 40 bytes, the held
     * Send follows; then our FIN between FPDUs: a clean close, a second
     * receive flushed, no QP event */
    if (h_up(ib, hin, &h, true, 2, 0, 512)) {
        struct ib_sge sge = {.addr = hmr->iova, .length = 512, .lkey = hmr->lkey};
        struct ib_recv_wr r = {.wr_id = 500, .sg_list = &sge, .num_sge = 1};
        u8 b = 0;

        n = fpdu(f, true, hd, hdr_u(hd, 3, 0, 1, 0), pay, 40);
        raw_send(h.sock, f, n);
        h.sock->sk->sk_rcvtimeo = HZ / 3;
        rc = raw_recv(h.sock, &b, 1);
        h.sock->sk->sk_rcvtimeo = 5 * HZ;
        CHECK(rc == -EAGAIN || rc == -ETIMEDOUT,
              "Send without a receive: the QP answered (%d, 0x%02x)", rc, b);
        CHECK(qp_state(h.s.id->qp) == IB_QPS_RTS, "Send without a receive: QP state %d",
              qp_state(h.s.id->qp));
        rc = ib_post_recv(h.s.id->qp, &r, NULL);
        CHECK(rc == 0, "Send without a receive: post_recv: %d", rc);
        n = h_wc(&h, &wc, 10000);
        CHECK(n == 1 && wc.wr_id == 500 && wc.status == IB_WC_SUCCESS && wc.byte_len == 40,
              "Send without a receive, then one posted: n %d id %llu status %d len %u", n,
              n ? wc.wr_id : 0, n ? wc.status : -1, n ? wc.byte_len : 0);
        CHECK(!memcmp(hmem + PAGE_SIZE, pay, 40), "Send without a receive: the Send placed");
        rc = h_fpdu(&h, u, sizeof(u));
        CHECK(rc == 18 + 32 && !(u[0] & 0x80) && (u[1] & 0x0F) == 3,
              "Send without a receive: the QP's held Send (%d, %*ph)", rc,
              rc > 0 ? min_t(int, rc, 2) : 0, u);
        r.wr_id = 501;
        sge.addr = hmr->iova + 512;
        rc = ib_post_recv(h.s.id->qp, &r, NULL);
        CHECK(rc == 0, "clean close: post_recv: %d", rc);
        h.nrecv = 1;
        h.rbase = 1;
        kernel_sock_shutdown(h.sock, SHUT_WR);
        rc = h_fpdu(&h, u, sizeof(u));
        CHECK(rc == -EPIPE, "clean close: EOF, no Terminate (%d)", rc);
    }
    h_down(&h, "Send without a receive; clean close", H_ANY, 40);
    CHECK(atomic_read(&qp_events) == 0, "clean close: %d QP events (last %d)",
          atomic_read(&qp_events), last_qp_event);
    cases++;

    /* 39. a second segment that does not continue its message (MO 44
     * after 40 bytes at MO 0, L clear on the first): DDP, untagged, code
     * 4 "invalid MO" (RFC 5041 §7.2) with the second's header, the
     * receive flushed, only the first segment's 40 bytes placed */
    if (h_up(ib, hin, &h, false, 2, 1, 512)) {
        hdr_u(hd, 3, 0, 1, 0);
        hd[0] &= ~0x40; /* not the last segment */
        n1 = fpdu(f, false, hd, 18, pay, 40);
        hl = hdr_u(hd, 3, 0, 1, 44);
        n = fpdu(f + n1, false, hd, hl, pay + 40, 40);
        raw_send(h.sock, f, n1 + n);
        h_term(&h, "MO jump", T_DDP, 2, 4, f + n1, 2 + 18, NULL);
    }
    h_down(&h, "MO jump", IB_WC_WR_FLUSH_ERR, 40);
    cases++;

    /* 40. a Read Request with MSN 3 where 1 is expected on QN 1: DDP,
     * untagged, code 3 "invalid MSN - MSN range" (RFC 5041 §7.2); a DDP
     * error attaches no RDMA header (RFC 5040 §4.8 Figure 10; as the
     * library's t_read_requests), nothing read */
    if (h_up(ib, hin, &h, true, 4, 1, 512)) {
        hl = hdr_rreq(hd, 3, 0x4321, 0, 16, hmr->rkey, hmr->iova);
        n = fpdu(f, true, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "Read Request MSN range", T_DDP, 2, 3, f, 2 + 18, NULL);
    }
    h_down(&h, "Read Request MSN range", -1, 0);
    cases++;

    /* 41. our FIN 30 bytes into a 100-byte Send's FPDU: the stream ends
     * inside an FPDU, no clean close: the QP in ERR with a fatal event
     * (as the library), both receives flushed, no Terminate (the peer is
     * gone), nothing placed beyond what arrived */
    if (h_up(ib, hin, &h, false, 2, 2, 512)) {
        n = fpdu(f, false, hd, hdr_u(hd, 3, 0, 1, 0), pay, 100);
        raw_send(h.sock, f, 30);
        kernel_sock_shutdown(h.sock, SHUT_WR);
        rc = h_fpdu(&h, u, sizeof(u));
        CHECK(rc == -EPIPE, "EOF mid-FPDU: EOF back (%d)", rc);
    }
    h_down(&h, "EOF mid-FPDU", IB_WC_WR_FLUSH_ERR, 512);
    CHECK(last_qp_event == IB_EVENT_QP_FATAL, "EOF mid-FPDU: QP event %d, want fatal",
          last_qp_event);
    cases++;

    /* 42. a Write (placed; the QP's held Send released), a Local
     * Invalidate of the region's STag by the QP's owner (completes), then
     * a Read Request of it: RDMAP, Remote Protection, code 0 "invalid
     * STag" (RFC 5040 §7.2) with D and R, nothing read */
    if (h_up(ib, hin, &h, true, 4, 1, 512)) {
        n = fpdu(f, true, hd, hdr_t(hd, 0, hmr->rkey, hmr->iova), pay, 8);
        raw_send(h.sock, f, n);
        rc = h_fpdu(&h, u, sizeof(u)); /* the held Send: the Write is through */
        CHECK(rc == 18 + 32, "Read after Local Invalidate: the held Send (%d)", rc);
        CHECK(!memcmp(hmem + PAGE_SIZE, pay, 8), "Read after Local Invalidate: the Write placed");
        rc = post_inv(h.s.id->qp, hmr->rkey, 77, true);
        CHECK(rc == 0, "Local Invalidate: %d", rc);
        n = h_wc(&h, &wc, 10000);
        CHECK(n == 1 && wc.wr_id == 77 && wc.status == IB_WC_SUCCESS,
              "Local Invalidate: n %d id %llu status %d", n, n ? wc.wr_id : 0, n ? wc.status : -1);
        hl = hdr_rreq(hd, 1, 0x4321, 0, 16, hmr->rkey, hmr->iova);
        n = fpdu(f, true, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "Read after Local Invalidate", T_RDMAP, 1, 0, f, 2 + 18, f + 20);
    }
    h_down(&h, "Read after Local Invalidate", -1, 8);
    cases++;

    /* 43. a Read Request of an MR registered without remote read (local
     * and remote write): RDMAP, Remote Protection, code 2 "access rights
     * violation" with D and R (RFC 5040 §7.2; as the library), nothing
     * read */
    if (h_up(ib, hin, &h, false, 4, 1, 512)) {
        static struct scatterlist sg4;
        struct ib_mr *wo = fr_mr(h.s.id->qp, h.s.pd, &sg4, hmem + PAGE_SIZE, H_RLEN,
                                 IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE);

        CHECK(wo, "a write-only MR");
        if (wo) {
            hl = hdr_rreq(hd, 1, 0x1234, 0x10000, 100, wo->rkey, wo->iova);
            n = fpdu(f, false, hd, hl, NULL, 0);
            raw_send(h.sock, f, n);
            h_term(&h, "Read without remote read", T_RDMAP, 1, 2, f, 2 + 18, f + 20);
            ib_dma_unmap_sg(h.s.pd->device, &sg4, 1, DMA_BIDIRECTIONAL);
            ib_dereg_mr(wo);
        }
    }
    h_down(&h, "Read without remote read", -1, 0);
    cases++;

    /* 44. a Write in two segments, 100 bytes each from 150 before the
     * region's end (L clear on the first): the first placed, the second
     * crosses the end: DDP, tagged, code 1 "base or bounds violation" with
     * the second's header, the region's last 50 bytes and the guard page
     * after it untouched */
    if (h_up(ib, hin, &h, true, 2, 1, 512)) {
        hdr_t(hd, 0, hmr->rkey, hmr->iova + H_RLEN - 150);
        hd[0] &= ~0x40; /* not the last segment */
        n1 = fpdu(f, true, hd, 14, pay, 100);
        n = fpdu(f + n1, true, hd, hdr_t(hd, 0, hmr->rkey, hmr->iova + H_RLEN - 50), pay + 28, 100);
        raw_send(h.sock, f, n1 + n);
        h_term(&h, "second segment past the end", T_DDP, 1, 1, f + n1, 2 + 14, NULL);
        CHECK(!memcmp(hmem + PAGE_SIZE + H_RLEN - 150, pay, 100) &&
                  !memchr_inv(hmem + PAGE_SIZE + H_RLEN - 50, H_GUARD, 50),
              "second segment past the end: the first placed, nothing of the second");
    }
    h_down(&h, "second segment past the end", -1, H_RLEN);
    cases++;
    return cases;
}

static void test_hostile(struct ib_device *ib)
{
    struct end c = {}, s = {};
    struct rdma_cm_id *lid = NULL, *hid = NULL;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct sockaddr_in hin;
    struct net_device *nd = dev_get_by_name(&init_net, netdev);
    struct hconn h;
    u8 hd[64], f[512], pay[256], rr[3][64];
    unsigned int hl, n, i, cases = 0;
    int rc;

    if (!nd) {
        CHECK(0, "no interface %s", netdev);
        return;
    }
    sin.sin_addr.s_addr = inet_select_addr(nd, 0, RT_SCOPE_UNIVERSE);
    dev_put(nd);
    hin = sin;
    hin.sin_port = htons(port + 2);
    evq_init(&q_cli);
    evq_init(&q_srv);
    evq_init(&q_hs);
    hmem = (u8 *)__get_free_pages(GFP_KERNEL, 2);
    lid = rdma_create_id(&init_net, cm_handler, &q_srv, RDMA_PS_TCP, IB_QPT_RC);
    hid = rdma_create_id(&init_net, cm_handler, &q_hs, RDMA_PS_TCP, IB_QPT_RC);
    if (!hmem || IS_ERR(lid) || IS_ERR(hid)) {
        CHECK(0, "hostile: setup");
        goto out;
    }
    rc = rdma_bind_addr(lid, (struct sockaddr *)&sin) ?: rdma_listen(lid, 4) ?:
         rdma_bind_addr(hid, (struct sockaddr *)&hin) ?: rdma_listen(hid, 4);
    CHECK(rc == 0, "hostile: listeners: %d", rc);
    if (rc)
        goto out;
    /* the second connection, both ends ours, kept up all along */
    if (conn_up(ib, &sin, &c, &s, false))
        goto out;
    cbuf = (u8 *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, DBUF_ORDER);
    if (!cbuf)
        goto out;
    h_alive(&c, &s, "before");
    for (i = 0; i < sizeof(pay); i++)
        pay[i] = i * 3 + 1;

    /* 1. bad CRC on a Send (RFC 5044 §8: LLP, MPA, code 2 "CRC error";
     * LLP errors carry no headers, RFC 5040 §4.8 Figure 10) */
    if (h_up(ib, &hin, &h, true, 2, 2, 512)) {
        n = fpdu(f, true, hd, hdr_u(hd, 3, 0, 1, 0), pay, 100);
        f[n - 1] ^= 0x40;
        raw_send(h.sock, f, n);
        h_term(&h, "bad CRC", T_LLP, 0, 2, NULL, 0, NULL);
    }
    h_down(&h, "bad CRC", IB_WC_WR_FLUSH_ERR, 512); /* placed before the CRC was seen */
    h_alive(&c, &s, "after bad CRC");
    cases++;

    /* 2. DDP version 2 on a Send: DDP, untagged, code 6 (RFC 5041 §7.2) */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        hl = hdr_u(hd, 3, 0, 1, 0);
        hd[0] = (hd[0] & ~3) | 2;
        n = fpdu(f, false, hd, hl, pay, 40);
        raw_send(h.sock, f, n);
        h_term(&h, "DDP version (untagged)", T_DDP, 2, 6, f, 2 + 18, NULL);
    }
    h_down(&h, "DDP version (untagged)", -1, 0);
    cases++;

    /* 3. DDP version 0 on a Write: DDP, tagged, code 4 */
    if (h_up(ib, &hin, &h, true, 2, 1, 512)) {
        hl = hdr_t(hd, 0, hmr->rkey, hmr->iova);
        hd[0] &= ~3;
        n = fpdu(f, true, hd, hl, pay, 40);
        raw_send(h.sock, f, n);
        h_term(&h, "DDP version (tagged)", T_DDP, 1, 4, f, 2 + 14, NULL);
    }
    h_down(&h, "DDP version (tagged)", -1, 0);
    cases++;

    /* 4. RDMAP version 2 on a Send: RDMAP, Remote Operation, code 5
     * "invalid RDMAP version" (RFC 5040 §7.2) */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        hl = hdr_u(hd, 3, 0, 1, 0);
        hd[1] = 0x80 | 3;
        n = fpdu(f, false, hd, hl, pay, 40);
        raw_send(h.sock, f, n);
        h_term(&h, "RDMAP version", T_RDMAP, 2, 5, f, 2 + 18, NULL);
    }
    h_down(&h, "RDMAP version", -1, 0);
    h_alive(&c, &s, "after the version errors");
    cases++;

    /* 5. a Write to an STag nobody registered: DDP, tagged, code 0
     * "invalid STag" (RFC 5041 §7.2), nothing placed */
    if (h_up(ib, &hin, &h, true, 2, 1, 512)) {
        n = fpdu(f, true, hd, hdr_t(hd, 0, hmr->rkey ^ 0x00800000, hmr->iova), pay, 64);
        raw_send(h.sock, f, n);
        h_term(&h, "invalid STag", T_DDP, 1, 0, f, 2 + 14, NULL);
    }
    h_down(&h, "invalid STag", -1, 0);
    cases++;

    /* 6. a Write crossing the region's end: DDP, tagged, code 1 "base or
     * bounds violation", nothing of it placed (the guard page after it
     * intact) */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        n = fpdu(f, false, hd, hdr_t(hd, 0, hmr->rkey, hmr->iova + H_RLEN - 100), pay, 200);
        raw_send(h.sock, f, n);
        h_term(&h, "bounds (end)", T_DDP, 1, 1, f, 2 + 14, NULL);
    }
    h_down(&h, "bounds (end)", -1, 0);
    cases++;

    /* 7. ... and one starting below the region's base */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        n = fpdu(f, false, hd, hdr_t(hd, 0, hmr->rkey, hmr->iova - 8), pay, 16);
        raw_send(h.sock, f, n);
        h_term(&h, "bounds (base)", T_DDP, 1, 1, f, 2 + 14, NULL);
    }
    h_down(&h, "bounds (base)", -1, 0);
    cases++;

    /* 8. TO + length past 2^64: DDP, tagged, code 3 "TO wrap" (RFC 5041
     * §7.1 check 5, §7.2) */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        n = fpdu(f, false, hd, hdr_t(hd, 0, hmr->rkey, U64_MAX - 3), pay, 8);
        raw_send(h.sock, f, n);
        h_term(&h, "TO wrap", T_DDP, 1, 3, f, 2 + 14, NULL);
    }
    h_down(&h, "TO wrap", -1, 0);
    h_alive(&c, &s, "after the tagged errors");
    cases++;

    /* 9. a Send with MSN 3 where 1 is expected: DDP, untagged, code 3
     * "invalid MSN - MSN range" (RFC 5041 §7.2), the receive flushed */
    if (h_up(ib, &hin, &h, true, 2, 2, 512)) {
        n = fpdu(f, true, hd, hdr_u(hd, 3, 0, 3, 0), pay, 10);
        raw_send(h.sock, f, n);
        h_term(&h, "MSN range", T_DDP, 2, 3, f, 2 + 18, NULL);
    }
    h_down(&h, "MSN range", IB_WC_WR_FLUSH_ERR, 0);
    cases++;

    /* 10. QN 5 (only 0-2 are RDMAP's, RFC 5040 §5.1): DDP, untagged, code
     * 1 "invalid QN" */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        n = fpdu(f, false, hd, hdr_u(hd, 3, 5, 1, 0), pay, 10);
        raw_send(h.sock, f, n);
        h_term(&h, "invalid QN", T_DDP, 2, 1, f, 2 + 18, NULL);
    }
    h_down(&h, "invalid QN", -1, 0);
    cases++;

    /* 11. MO 8 on a new message: DDP, untagged, code 4 "invalid MO" */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        n = fpdu(f, false, hd, hdr_u(hd, 3, 0, 1, 8), pay, 10);
        raw_send(h.sock, f, n);
        h_term(&h, "invalid MO", T_DDP, 2, 4, f, 2 + 18, NULL);
    }
    h_down(&h, "invalid MO", -1, 0);
    cases++;

    /* 12. an oversize Send: ULPDU_Length 65535 (only the header sent) for
     * a 512-byte receive: DDP, untagged, code 5 "DDP message too long",
     * the receive completed with a length error, nothing placed */
    if (h_up(ib, &hin, &h, false, 2, 2, 512)) {
        n = fpdu(f, false, hd, hdr_u(hd, 3, 0, 1, 0), pay, 0);
        be16(f, 65535);
        raw_send(h.sock, f, 2 + 18);
        h_term(&h, "message too long", T_DDP, 2, 5, f, 2 + 18, NULL);
    }
    h_down(&h, "message too long", IB_WC_LOC_LEN_ERR, 0);
    h_alive(&c, &s, "after the untagged errors");
    cases++;

    /* 13. ULPDU_Length 1, too short for any DDP header: LLP, MPA, code 3
     * (RFC 5044 §8), no headers */
    if (h_up(ib, &hin, &h, true, 2, 1, 512)) {
        u8 bad[8] = {0, 1, 0x41, 0x43};

        raw_send(h.sock, bad, sizeof(bad));
        h_term(&h, "ULPDU_Length 1", T_LLP, 0, 3, NULL, 0, NULL);
    }
    h_down(&h, "ULPDU_Length 1", -1, 0);
    cases++;

    /* 14. reserved opcode 0xC on QN 0: RDMAP, Remote Operation, code 6
     * "unexpected opcode" (RFC 5040 §7.2) */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        hl = hdr_u(hd, 0xC, 0, 1, 0);
        n = fpdu(f, false, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "reserved opcode", T_RDMAP, 2, 6, f, 2 + 18, NULL);
    }
    h_down(&h, "reserved opcode", -1, 0);
    cases++;

    /* 15. three Read Requests at once with IRD 2 (RFC 5040 §6.1: the peer
     * may not exceed the responder's IRD; RFC 6581 §7.1 negotiated it):
     * RDMAP, Remote Operation, code 7 "catastrophic error, localized to
     * RDMAP stream", with the third request's DDP and RDMA headers (R) */
    if (h_up(ib, &hin, &h, true, 2, 1, 512)) {
        memset(hmem + PAGE_SIZE, 0x3C, H_RLEN);
        for (i = 0, n = 0; i < 3; i++) {
            hl = hdr_rreq(hd, i + 1, 0x100 + i, 0, 64, hmr->rkey, hmr->iova);
            rc = fpdu(rr[i], true, hd, hl, NULL, 0);
            memcpy(f + n, rr[i], rc);
            n += rc;
        }
        raw_send(h.sock, f, n); /* one write: the QP sees all three at once */
        h_term(&h, "IRD exceeded", T_RDMAP, 2, 7, rr[2], 2 + 18, rr[2] + 20);
        memset(hmem + PAGE_SIZE, H_GUARD, H_RLEN);
    }
    h_down(&h, "IRD exceeded", -1, 0);
    cases++;

    /* 16. a Read Request whose source leaves the region: RDMAP, Remote
     * Protection, code 1 "base or bounds violation" with D and R (RFC
     * 5040 §7.2: the source STag is the RDMA header's) */
    if (h_up(ib, &hin, &h, false, 4, 1, 512)) {
        hl = hdr_rreq(hd, 1, 0x4321, 0, 11, hmr->rkey, hmr->iova + H_RLEN - 10);
        n = fpdu(f, false, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "Read source bounds", T_RDMAP, 1, 1, f, 2 + 18, f + 20);
    }
    h_down(&h, "Read source bounds", -1, 0);
    cases++;

    /* 17. ... and one naming an STag nobody registered: RDMAP, Remote
     * Protection, code 0 "invalid STag" */
    if (h_up(ib, &hin, &h, false, 4, 1, 512)) {
        hl = hdr_rreq(hd, 1, 0x4321, 0, 16, hmr->rkey ^ 0x00800000, hmr->iova);
        n = fpdu(f, false, hd, hl, NULL, 0);
        raw_send(h.sock, f, n);
        h_term(&h, "Read source STag", T_RDMAP, 1, 0, f, 2 + 18, f + 20);
    }
    h_down(&h, "Read source STag", -1, 0);
    cases++;

    /* 18. a Write that is fine, then one past the end in the same stream:
     * the first placed (its bytes checked), the second not */
    if (h_up(ib, &hin, &h, true, 2, 1, 512)) {
        n = fpdu(f, true, hd, hdr_t(hd, 0, hmr->rkey, hmr->iova), pay, 200);
        hl = fpdu(f + n, true, hd, hdr_t(hd, 0, hmr->rkey, hmr->iova + H_RLEN - 4), pay, 8);
        raw_send(h.sock, f, n + hl);
        h_term(&h, "good Write, then bounds", T_DDP, 1, 1, f + n, 2 + 14, NULL);
        CHECK(!memcmp(hmem + PAGE_SIZE, pay, 200), "the good Write placed");
    }
    h_down(&h, "good Write, then bounds", -1, 200);
    h_alive(&c, &s, "after the Read Requests");
    cases++;
    /* 19. a Send with Invalidate of the region's STag (it completes with
     * the invalidated key), then a Write to it: DDP, tagged, code 0
     * "invalid STag", nothing of the Write placed */
    if (h_up(ib, &hin, &h, true, 2, 2, 512)) {
        struct ib_wc wc;

        hl = hdr_u(hd, 4, 0, 1, 0);
        be32(hd + 2, hmr->rkey); /* RFC 5040 §4.1: the Invalidate STag */
        n = fpdu(f, true, hd, hl, pay, 16);
        raw_send(h.sock, f, n);
        n = h_wc(&h, &wc, 10000);
        CHECK(n == 1 && wc.status == IB_WC_SUCCESS && wc.wr_id == 500 && wc.byte_len == 16 &&
                  (wc.wc_flags & IB_WC_WITH_INVALIDATE) && wc.ex.invalidate_rkey == hmr->rkey,
              "Send with Invalidate: n %d status %d flags 0x%x", n, n ? wc.status : -1,
              n ? wc.wc_flags : 0);
        h.nrecv = 1;
        h.rbase = 1;
        n = fpdu(f, true, hd, hdr_t(hd, 0, hmr->rkey, hmr->iova + 100), pay, 16);
        raw_send(h.sock, f, n);
        h_term(&h, "Write after remote invalidate", T_DDP, 1, 0, f, 2 + 14, NULL);
        CHECK(!memcmp(hmem + PAGE_SIZE, pay, 16), "the Send placed");
    }
    h_down(&h, "Write after remote invalidate", -1, 16);
    cases++;

    /* 20. a Send with SE and Invalidate naming an STag nobody registered
     * (RFC 5040 §7.2 item 4): RDMAP, Remote Protection, code 0 "invalid
     * STag", its receive completed with a remote invalidate error */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        hl = hdr_u(hd, 6, 0, 1, 0);
        be32(hd + 2, hmr->rkey ^ 0x00800000);
        n = fpdu(f, false, hd, hl, pay, 4);
        raw_send(h.sock, f, n);
        h_term(&h, "Send with Invalidate, bad STag", T_RDMAP, 1, 0, f, 2 + 18, NULL);
    }
    h_down(&h, "Send with Invalidate, bad STag", IB_WC_REM_INV_REQ_ERR, 512);
    cases++;

    /* 21. a Write to an MR without remote write (registered for local
     * write and remote read): RDMAP, Remote Protection, code 2 "access
     * rights violation" (as siw; the userspace engine answers DDP invalid
     * STag), nothing placed */
    if (h_up(ib, &hin, &h, true, 2, 1, 512)) {
        static struct scatterlist sg2;
        struct ib_mr *ro = fr_mr(h.s.id->qp, h.s.pd, &sg2, hmem + PAGE_SIZE, H_RLEN,
                                 IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ);

        CHECK(ro, "a read-only MR");
        if (ro) {
            n = fpdu(f, true, hd, hdr_t(hd, 0, ro->rkey, ro->iova), pay, 32);
            raw_send(h.sock, f, n);
            h_term(&h, "Write without remote write", T_RDMAP, 1, 2, f, 2 + 14, NULL);
            ib_dma_unmap_sg(h.s.pd->device, &sg2, 1, DMA_BIDIRECTIONAL);
            ib_dereg_mr(ro);
        }
    }
    h_down(&h, "Write without remote write", -1, 0);
    cases++;

    /* 22. a Read Response nobody asked for: RDMAP, Remote Operation, code
     * 6 "unexpected opcode" (the userspace engine: DDP invalid STag),
     * nothing placed */
    if (h_up(ib, &hin, &h, false, 2, 1, 512)) {
        n = fpdu(f, false, hd, hdr_t(hd, 2, hmr->rkey, hmr->iova), pay, 8);
        raw_send(h.sock, f, n);
        h_term(&h, "unsolicited Read Response", T_RDMAP, 2, 6, f, 2 + 14, NULL);
    }
    h_down(&h, "unsolicited Read Response", -1, 0);
    cases++;

    /* 23. a first FPDU, a Read Request of the region, that stops short of
     * its CRC field: nothing may come back, neither the Read Response nor
     * the QP's held Send (RFC 5044 §7.1.2 item 4: the responder receives
     * and validates a whole FPDU before it sends; §8: an FPDU whose CRC
     * fails is not passed on), then the CRC field, wrong: LLP, MPA, code
     * 2 "CRC error" and the Terminate is the first FPDU that comes (no
     * region byte sent) */
    if (h_up(ib, &hin, &h, true, 2, 1, 512)) {
        u8 b = 0;

        hl = hdr_rreq(hd, 1, 0x4321, 0, 64, hmr->rkey, hmr->iova);
        n = fpdu(f, true, hd, hl, NULL, 0);
        f[n - 1] ^= 0x40;
        raw_send(h.sock, f, n - 4);
        h.sock->sk->sk_rcvtimeo = HZ / 3;
        rc = raw_recv(h.sock, &b, 1);
        h.sock->sk->sk_rcvtimeo = 5 * HZ;
        CHECK(rc == -EAGAIN || rc == -ETIMEDOUT,
              "Read Request without its CRC field: the QP sent before it (%d, 0x%02x)", rc, b);
        if (rc == -EAGAIN || rc == -ETIMEDOUT) {
            static u8 u[256];

            raw_send(h.sock, f + n - 4, 4);
            rc = h_fpdu(&h, u, sizeof(u));
            CHECK(rc >= 22 && !(u[0] & 0x80) && (u[1] & 0x0F) == 7 && u[18] >> 4 == T_LLP &&
                      u[19] == 2,
                  "Read Request with a bad CRC: the first FPDU back %d: %*ph", rc,
                  rc > 0 ? min_t(int, rc, 24) : 0, u);
            rc = h_fpdu(&h, u, sizeof(u));
            CHECK(rc == -EPIPE, "Read Request with a bad CRC: EOF after the Terminate (%d)", rc);
        }
    }
    h_down(&h, "Read Request with a bad CRC", IB_WC_WR_FLUSH_ERR, 0);
    cases++;
    /* 24-26. MPA: not MPA at all; a Request with PD_Length 65535 (at
     * most 512, RFC 5044 §7.1); one that asks for markers (refused by
     * the negotiation) */
    h_bad_mpa(&hin, (const u8 *)"GET / HTTP/1.1\r\nHost: uiw0\r\n\r\n", 30, "not MPA");
    cases++;
    {
        static u8 big[20 + 512];

        memcpy(big, "MPA ID Req Frame", 16);
        big[16] = 0x10;
        big[17] = 2;
        be16(big + 18, 65535);
        h_bad_mpa(&hin, big, sizeof(big), "PD_Length 65535");
        cases++;
    }
    {
        u8 mk[24] = "MPA ID Req Frame";

        mk[16] = 0x80 | 0x10; /* M */
        mk[17] = 2;
        be16(mk + 18, 4);
        be16(mk + 20, 4);
        be16(mk + 22, 1);
        h_bad_mpa(&hin, mk, sizeof(mk), "markers asked for");
        cases++;
    }
    cases += h_initiator(ib, &hin);
    h_alive(&c, &s, "after the MPA classes");
    cases += h_atomic_classes(ib, &hin);
    h_alive(&c, &s, "after the atomic and immediate data classes");
    cases += h_lib_classes(ib, &hin);
    h_alive(&c, &s, "after the library's Terminate classes");
    t_timers(ib, &hin);
    h_alive(&c, &s, "after the connection timers");
    pr_info("hostile peer: %u classes\n", cases);
    h_mutations(ib, &hin);
    h_alive(&c, &s, "after the damaged streams");

    rc = rdma_disconnect(c.id);
    CHECK(rc == 0, "rdma_disconnect: %d", rc);
    evq_wait(&q_cli, RDMA_CM_EVENT_DISCONNECTED, "client");
    evq_wait(&q_srv, RDMA_CM_EVENT_DISCONNECTED, "server");
out:
    conn_data_free(&c, &s);
    end_fini(&c);
    end_fini(&s);
    /* after a failure: connections the test did not take (their ids
     * would call this module's handler after it is gone) */
    while (q_hs.in != q_hs.out) {
        i = q_hs.out++ % ARRAY_SIZE(q_hs.e);
        if (q_hs.e[i].ev == RDMA_CM_EVENT_CONNECT_REQUEST)
            rdma_destroy_id(q_hs.e[i].id);
    }
    if (hid && !IS_ERR(hid))
        rdma_destroy_id(hid);
    if (lid && !IS_ERR(lid))
        rdma_destroy_id(lid);
    if (hmem)
        free_pages((unsigned long)hmem, 2);
    hmem = NULL;
}

static int __init uiw_ktest_init(void)
{
    struct ib_device *ib = ib_device_get_by_name(dev, RDMA_DRIVER_UNKNOWN);

    if (!ib) {
        pr_err("verbs test: FAIL (no device %s)\n", dev);
        return 0;
    }
    if (hostile) {
        test_hostile(ib);
    } else if (wake) {
        test_wake(ib);
    } else if (imm_dst) {
        test_imm(ib);
    } else if (rping_dst) {
        test_rping(ib);
    } else if (rping_listen) {
        test_rping_server(ib);
    } else {
        if (verbs)
            run(ib);
        if (conn)
            test_conn(ib);
    }
    ib_device_put(ib);
    if (failed)
        pr_err("verbs test: FAIL (%u of %u checks failed)\n", failed, passed + failed);
    else
        pr_info("verbs test: PASS (%u checks)\n", passed);
    return 0;
}

static void __exit uiw_ktest_exit(void) {}

module_init(uiw_ktest_init);
module_exit(uiw_ktest_exit);

MODULE_DESCRIPTION("uiwarp: the VM test's kernel verbs consumer");
MODULE_AUTHOR("uiwarp");
MODULE_LICENSE("Dual BSD/GPL");
