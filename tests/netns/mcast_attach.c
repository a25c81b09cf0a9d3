// ibv_attach_mcast / ibv_detach_mcast on a netdev-bound device, as a program
// sees them (tests/netns/netns.sh, doc/netdev.md "Multicast"):
//
//   mcast_attach DEV GROUP SECONDS
//
// GROUP: an IPv4 or IPv6 multicast address. Prints GID 1's interface index
// as ibv_query_gid_ex reads it ("gid 1 ndev_ifindex N gid_type T"). A UD QP: attaching it to the
// device's GID 1 (a unicast address) must fail with EINVAL, and detaching it
// from GROUP before any attach too; then it attaches to GROUP (a second QP too), prints "attached", holds the
// membership SECONDS seconds, detaches the first QP and prints "one left",
// holds it SECONDS more, detaches the second and prints "detached". Exits 0
// when every call did what it should.
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static int fail(const char* what, int got, int want) {
  fprintf(stderr, "%s: %d (%s), expected %d\n", what, got, strerror(got), want);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DEV GROUP SECONDS\n", argv[0]);
    return 2;
  }
  const int seconds = atoi(argv[3]);
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list != NULL && i < n && ctx == NULL; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0) ctx = ibv_open_device(list[i]);
  }
  if (ctx == NULL) {
    fprintf(stderr, "no device %s\n", argv[1]);
    return 1;
  }
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp[2] = {cq ? ibv_create_qp(pd, &init) : NULL, cq ? ibv_create_qp(pd, &init) : NULL};
  if (qp[0] == NULL || qp[1] == NULL) {
    fprintf(stderr, "no UD QP\n");
    return 1;
  }
  int rc;
  union ibv_gid unicast, group;
  if (ibv_query_gid(ctx, 1, 1, &unicast) != 0) return fail("ibv_query_gid 1", errno, 0);
  // The GID's network interface as rdma-core reports it (its sysfs view).
  struct ibv_gid_entry entry;
  if ((rc = ibv_query_gid_ex(ctx, 1, 1, &entry, 0)) != 0) return fail("ibv_query_gid_ex 1", rc, 0);
  printf("gid 1 ndev_ifindex %u gid_type %u\n", entry.ndev_ifindex, entry.gid_type);
  memset(&group, 0, sizeof group);
  if (inet_pton(AF_INET6, argv[2], group.raw) != 1) {
    group.raw[10] = group.raw[11] = 0xff;
    if (inet_pton(AF_INET, argv[2], &group.raw[12]) != 1) return fail("group address", EINVAL, 0);
  }
  if ((rc = ibv_attach_mcast(qp[0], &unicast, 0)) != EINVAL) return fail("attach to a unicast GID", rc, EINVAL);
  if ((rc = ibv_detach_mcast(qp[0], &group, 0)) != EINVAL) return fail("detach before attach", rc, EINVAL);
  for (int i = 0; i < 2; ++i) {
    if ((rc = ibv_attach_mcast(qp[i], &group, 0)) != 0) return fail("attach", rc, 0);
  }
  printf("attached\n");
  fflush(stdout);
  sleep(seconds);
  if ((rc = ibv_detach_mcast(qp[0], &group, 0)) != 0) return fail("detach", rc, 0);
  if ((rc = ibv_detach_mcast(qp[0], &group, 0)) != EINVAL) return fail("detach twice", rc, EINVAL);
  printf("one left\n");
  fflush(stdout);
  sleep(seconds);
  if ((rc = ibv_detach_mcast(qp[1], &group, 0)) != 0) return fail("detach the last", rc, 0);
  printf("detached\n");
  fflush(stdout);
  sleep(seconds);
  ibv_destroy_qp(qp[0]);
  ibv_destroy_qp(qp[1]);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
