/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * librdmacm misuse (issue 12 item 8): the entry points of our librdmacm
 * called with NULL and invalid arguments and in wrong states. Each gives
 * an errno (rdma-core style: -1 with errno, or NULL with errno), never a
 * crash (run under ASan/UBSan and TSan builds too). A table: one row per
 * misuse, the call and the errno it must give.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/eng_test.h"
#include "misuse.h"
#include "testutil.h"

static struct rdma_event_channel *ch;
static struct rdma_cm_id *id, *id_unbound;

#define RET(name, expr)                                                                            \
    static intptr_t name(void)                                                                     \
    {                                                                                              \
        return (intptr_t)(expr);                                                                   \
    }

static int bad_family(void)
{
    struct sockaddr_in a = eng_loop4(0);
    a.sin_family = 77;
    return rdma_bind_addr(id_unbound, (struct sockaddr *)&a);
}

static int get_event_nonblock(void)
{
    struct rdma_cm_event *ev;
    int fl = fcntl(ch->fd, F_GETFL);
    int r;
    fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
    r = rdma_get_cm_event(ch, &ev);
    fcntl(ch->fd, F_SETFL, fl);
    return r;
}

RET(create_id_null_out, rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP))
RET(create_id_bad_ps, ({
        struct rdma_cm_id *x = NULL;
        rdma_create_id(ch, &x, NULL, (enum rdma_port_space)0x7777);
    }))
RET(destroy_id_null, rdma_destroy_id(NULL))
RET(destroy_channel_null, (rdma_destroy_event_channel(NULL), 0))
RET(bind_null_id, ({
        struct sockaddr_in a = eng_loop4(0);
        rdma_bind_addr(NULL, (struct sockaddr *)&a);
    }))
RET(bind_null_addr, rdma_bind_addr(id_unbound, NULL))
RET(bind_bad_family, bad_family())
RET(listen_null, rdma_listen(NULL, 4))
RET(listen_unbound, rdma_listen(id_unbound, 4))
RET(resolve_addr_null_id, ({
        struct sockaddr_in a = eng_loop4(1);
        rdma_resolve_addr(NULL, NULL, (struct sockaddr *)&a, 100);
    }))
RET(resolve_addr_null_dst, rdma_resolve_addr(id, NULL, NULL, 100))
RET(resolve_route_null, rdma_resolve_route(NULL, 100))
RET(resolve_route_unresolved, rdma_resolve_route(id_unbound, 100))
RET(connect_null, rdma_connect(NULL, NULL))
RET(connect_unresolved, rdma_connect(id_unbound, NULL))
RET(accept_null, rdma_accept(NULL, NULL))
RET(accept_not_request, rdma_accept(id_unbound, NULL))
RET(reject_null, rdma_reject(NULL, NULL, 0))
RET(reject_not_request, rdma_reject(id_unbound, NULL, 0))
RET(disconnect_null, rdma_disconnect(NULL))
RET(disconnect_unconnected, rdma_disconnect(id_unbound))
RET(create_qp_null_id, rdma_create_qp(NULL, NULL, NULL))
RET(create_qp_null_attr, rdma_create_qp(id_unbound, NULL, NULL))
RET(create_qp_no_device, ({
        struct ibv_qp_init_attr a;
        memset(&a, 0, sizeof(a));
        a.qp_type = IBV_QPT_RC;
        rdma_create_qp(id_unbound, NULL, &a);
    }))
RET(destroy_qp_null, (rdma_destroy_qp(NULL), 0))
RET(get_event_null_ch, ({
        struct rdma_cm_event *e;
        rdma_get_cm_event(NULL, &e);
    }))
RET(get_event_null_out, rdma_get_cm_event(ch, NULL))
RET(get_event_empty, get_event_nonblock())
RET(ack_null, rdma_ack_cm_event(NULL))
RET(set_option_null, rdma_set_option(NULL, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, NULL, 0))
RET(set_option_bad, ({
        int v = 1;
        rdma_set_option(id, 0x7777, 0x7777, &v, sizeof(v));
    }))
RET(set_option_short, ({
        uint8_t v = 1;
        rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &v, 0);
    }))
RET(migrate_null, rdma_migrate_id(NULL, ch))
RET(init_qp_attr_null, rdma_init_qp_attr(NULL, NULL, NULL))
RET(get_request_null, rdma_get_request(NULL, NULL))
RET(get_request_not_listening, ({
        struct rdma_cm_id *x;
        rdma_get_request(id_unbound, &x);
    }))
RET(create_ep_null, rdma_create_ep(NULL, NULL, NULL, NULL))
RET(getaddrinfo_null, rdma_getaddrinfo(NULL, NULL, NULL, NULL))
RET(establish_null, rdma_establish(NULL))
RET(notify_null, rdma_notify(NULL, IBV_EVENT_COMM_EST))
RET(join_mc_null, rdma_join_multicast(NULL, NULL, NULL))
RET(leave_mc_null, rdma_leave_multicast(NULL, NULL))
RET(create_srq_null, rdma_create_srq(NULL, NULL, NULL))
RET(destroy_srq_null, (rdma_destroy_srq(NULL), 0))
RET(destroy_ep_null, (rdma_destroy_ep(NULL), 0))
RET(freeaddrinfo_null, (rdma_freeaddrinfo(NULL), 0))
RET(free_devices_null, (rdma_free_devices(NULL), 0))
RET(src_port_null, rdma_get_src_port(NULL))
RET(dst_port_null, rdma_get_dst_port(NULL))
RET(event_str_bad, strlen(rdma_event_str((enum rdma_cm_event_type)999)) ? 0 : 1)
RET(reg_msgs_null_id, rdma_reg_msgs(id_unbound, NULL, 0) ? 0 : errno)

RET(create_qp_ex_null, rdma_create_qp_ex(NULL, NULL))
RET(create_qp_ex_null_attr, rdma_create_qp_ex(id_unbound, NULL))
RET(create_srq_ex_null, rdma_create_srq_ex(NULL, NULL))
RET(set_local_ece, rdma_set_local_ece(NULL, NULL))
RET(get_remote_ece, rdma_get_remote_ece(NULL, NULL))
RET(reject_ece, rdma_reject_ece(NULL, NULL, 0))
RET(join_mc_ex_null, rdma_join_multicast_ex(NULL, NULL, NULL))
RET(bind_twice, ({
        struct sockaddr_in a = eng_loop4(0);
        rdma_bind_addr(id, (struct sockaddr *)&a);
    }))
RET(getaddrinfo_bad_host, ({
        struct rdma_addrinfo *res = NULL, hints;
        int r;
        memset(&hints, 0, sizeof(hints));
        hints.ai_flags = RAI_NUMERICHOST; /* no resolver: fails at once */
        r = rdma_getaddrinfo("not-a-number", "1", &hints, &res);
        if (!r)
            rdma_freeaddrinfo(res);
        r == 0 ? 0 : -1;
    }))
RET(get_devices_null, ({
        struct ibv_context **l = rdma_get_devices(NULL);
        if (l)
            rdma_free_devices(l);
        l ? 0 : 1;
    }))

static const struct row rows[] = {
    ROW(K_NEG, EINVAL, create_id_null_out),
    ROW(K_NEG, EOPNOTSUPP, create_id_bad_ps),
    ROW(K_NEG, EINVAL, destroy_id_null),
    ROW(K_RET, 0, destroy_channel_null),
    ROW(K_NEG, EINVAL, bind_null_id),
    ROW(K_NEG, EINVAL, bind_null_addr),
    ROW(K_NEG, EAFNOSUPPORT, bind_bad_family),
    ROW(K_NEG, EINVAL, listen_null),
    ROW(K_RET, 0, listen_unbound) /* the kernel binds to the wildcard */,
    ROW(K_NEG, EINVAL, resolve_addr_null_id),
    ROW(K_NEG, EINVAL, resolve_addr_null_dst),
    ROW(K_NEG, EINVAL, resolve_route_null),
    ROW(K_NEG, EINVAL, resolve_route_unresolved),
    ROW(K_NEG, EINVAL, connect_null),
    ROW(K_NEG, EINVAL, connect_unresolved),
    ROW(K_NEG, EINVAL, accept_null),
    ROW(K_NEG, EINVAL, accept_not_request),
    ROW(K_NEG, EINVAL, reject_null),
    ROW(K_NEG, EINVAL, reject_not_request),
    ROW(K_NEG, EINVAL, disconnect_null),
    ROW(K_NEG, EINVAL, disconnect_unconnected),
    ROW(K_NEG, EINVAL, create_qp_null_id),
    ROW(K_NEG, EINVAL, create_qp_null_attr),
    ROW(K_NEG, EINVAL, create_qp_no_device),
    ROW(K_RET, 0, destroy_qp_null),
    ROW(K_NEG, EINVAL, get_event_null_ch),
    ROW(K_NEG, EINVAL, get_event_null_out),
    ROW(K_NEG, EAGAIN, get_event_empty),
    ROW(K_NEG, EINVAL, ack_null),
    ROW(K_NEG, EINVAL, set_option_null),
    ROW(K_NEG, ENOSYS, set_option_bad),
    ROW(K_NEG, EINVAL, set_option_short),
    ROW(K_NEG, EINVAL, migrate_null),
    ROW(K_NEG, EINVAL, init_qp_attr_null),
    ROW(K_NEG, EINVAL, get_request_null),
    ROW(K_NEG, EINVAL, get_request_not_listening),
    ROW(K_NEG, EINVAL, create_ep_null),
    ROW(K_NEG, EINVAL, getaddrinfo_null),
    ROW(K_NEG, EINVAL, establish_null),
    ROW(K_NEG, EINVAL, notify_null),
    ROW(K_NEG, ENOSYS, join_mc_null),
    ROW(K_NEG, ENOSYS, leave_mc_null),
    ROW(K_NEG, EINVAL, create_srq_null),
    ROW(K_RET, 0, destroy_srq_null),
    ROW(K_RET, 0, destroy_ep_null),
    ROW(K_RET, 0, freeaddrinfo_null),
    ROW(K_RET, 0, free_devices_null),
    ROW(K_RET, 0, src_port_null),
    ROW(K_RET, 0, dst_port_null),
    ROW(K_RET, 0, event_str_bad),
    ROW(K_RET, EINVAL, reg_msgs_null_id),
    ROW(K_NEG, EINVAL, create_qp_ex_null),
    ROW(K_NEG, EINVAL, create_qp_ex_null_attr),
    ROW(K_NEG, EINVAL, create_srq_ex_null),
    ROW(K_NEG, EOPNOTSUPP, set_local_ece),
    ROW(K_NEG, EOPNOTSUPP, get_remote_ece),
    ROW(K_NEG, EOPNOTSUPP, reject_ece),
    ROW(K_NEG, ENOSYS, join_mc_ex_null),
    ROW(K_NEG, EINVAL, bind_twice),
    ROW(K_RET, -1, getaddrinfo_bad_host),
    ROW(K_RET, 0, get_devices_null),
};

int main(void)
{
    unsigned n = sizeof(rows) / sizeof(rows[0]);
    struct sockaddr_in a = eng_loop4(0);

    ch = rdma_create_event_channel();
    CHECK(ch != NULL);
    CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(ch, &id_unbound, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_bind_addr(id, (struct sockaddr *)&a), 0);
    if (misuse_fork_diag(rows, n))
        return 0;
    misuse_run(rows, n, "rdmacm misuse");
    CHECK_EQ(rdma_destroy_id(id_unbound), 0);
    CHECK_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
    TEST_MAIN_END();
}
