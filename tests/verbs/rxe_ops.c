/* Copied from the workplace lab (shared/rocelab/rxe_ops.c), unchanged below this line, so CI
 * compiles the same program the rxe interop lab runs. */
/* rxe_ops: exercise RC opcodes that perftest 4.5-0.17 cannot generate.
 * server: rxe_ops [-d dev] [-g gidx] [-m mtu]
 * client: rxe_ops [-d dev] [-g gidx] [-m mtu] <server-ip>
 * Client posts, in order (each waited for before the next):
 *   1 SEND_WITH_IMM 61 B (Send Only w/ Imm, pad 3, solicited)
 *   2 SEND_WITH_IMM 2999 B (Send First/Middle/Last w/ Imm)
 *   3 RDMA_WRITE_WITH_IMM 61 B (Write Only w/ Imm)
 *   4 RDMA_WRITE_WITH_IMM 2999 B (Write First/Middle/Last w/ Imm)
 *   5 SEND 0 B (Send Only, zero length)
 *   6 RDMA_WRITE 0 B (Write Only, zero length, no recv consumed)
 *   7 RDMA_WRITE 2999 B (plain write, pad 1 on Last)
 *   8 RDMA_READ 2999 B (Read Response First/Middle/Last, pad)
 *   9 RDMA_READ 0 B
 *  10 ATOMIC_FETCH_AND_ADD, 11 ATOMIC_CMP_AND_SWP
 *  12 SEND 61 B (inline)
 * -R <ms> (server): post receives only <ms> after RTS -> RNR NAKs.
 * Server posts 8 receives, reports completions (opcode, byte_len, imm) and exits 1 if any differs from what
 * the client sent (immediate values in wire order, SEND lengths).
 */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <getopt.h>
#include <sys/socket.h>

#define BUFSZ 65536
#define PORT 18600
struct info { uint32_t qpn, psn, rkey; uint64_t addr; uint8_t gid[16]; };

static void die(const char *m) { perror(m); exit(1); }

static int sock_connect(const char *host) {
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	inet_pton(AF_INET, host, &a.sin_addr);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	for (int i = 0; i < 50; i++) { if (!connect(s, (void *)&a, sizeof a)) return s; usleep(200000); }
	die("connect");
	return -1;
}
static int sock_listen(void) {
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(s, (void *)&a, sizeof a) || listen(s, 1)) die("bind/listen");
	int c = accept(s, NULL, NULL);
	close(s);
	return c;
}
static void xchg(int s, struct info *me, struct info *peer) {
	if (write(s, me, sizeof *me) != sizeof *me) die("write");
	size_t got = 0;
	while (got < sizeof *peer) { ssize_t r = read(s, (char *)peer + got, sizeof *peer - got); if (r <= 0) die("read"); got += r; }
}
static void sync_sock(int s) { char c = 'x'; if (write(s, &c, 1) != 1 || read(s, &c, 1) != 1) die("sync"); }

static struct ibv_wc wait_cq(struct ibv_cq *cq, const char *what) {
	struct ibv_wc wc;
	int n;
	for (long spin = 0;; spin++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0) die("poll_cq");
		if (n) break;
		if (spin > 2000000) usleep(100);
		if (spin > 2000000 + 300000) { fprintf(stderr, "timeout waiting for %s\n", what); exit(2); }
	}
	if (wc.status) { fprintf(stderr, "%s: wc status %s (%d)\n", what, ibv_wc_status_str(wc.status), wc.status); exit(3); }
	return wc;
}

int main(int argc, char **argv) {
	const char *devname = "rxe0"; int gidx = 1, mtu = 1024, c, rnr_delay_ms = 0;
	while ((c = getopt(argc, argv, "d:g:m:R:")) != -1) {
		if (c == 'R') rnr_delay_ms = atoi(optarg); else if (c == 'd') devname = optarg; else if (c == 'g') gidx = atoi(optarg); else if (c == 'm') mtu = atoi(optarg);
	}
	const char *server = optind < argc ? argv[optind] : NULL;
	enum ibv_mtu imtu = mtu == 256 ? IBV_MTU_256 : mtu == 512 ? IBV_MTU_512 : mtu == 2048 ? IBV_MTU_2048 : mtu == 4096 ? IBV_MTU_4096 : IBV_MTU_1024;

	struct ibv_device **dl = ibv_get_device_list(NULL), *dev = NULL;
	for (int i = 0; dl && dl[i]; i++) if (!strcmp(ibv_get_device_name(dl[i]), devname)) dev = dl[i];
	if (!dev) die("no device");
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = aligned_alloc(4096, BUFSZ);
	for (int i = 0; i < BUFSZ; i++) buf[i] = server ? (char)(0x41 + i % 26) : (char)(0x61 + i % 26);
	memset(buf + 60000, 0, 64); /* atomic target area on server */
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUFSZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr qia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!mr || !cq || !qp) die("setup");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");

	/* server pre-posts receives (into offset 8192, each 4096 B slot); with -R <ms> it posts them only
	 * <ms> after reaching RTS, so the first SENDs hit RNR NAKs */
	if (!server && !rnr_delay_ms) for (int i = 0; i < 8; i++) {
		struct ibv_sge sg = { .addr = (uintptr_t)buf + 8192 + i * 4096, .length = 4096, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 100 + i, .sg_list = &sg, .num_sge = 1 }, *bad;
		if (ibv_post_recv(qp, &rw, &bad)) die("post_recv");
	}
	struct info me = { .qpn = qp->qp_num, .psn = lrand48() & 0xffffff, .rkey = mr->rkey, .addr = (uintptr_t)buf };
	srand48(getpid()); me.psn = lrand48() & 0xffffff;
	union ibv_gid g; if (ibv_query_gid(ctx, 1, gidx, &g)) die("gid");
	memcpy(me.gid, g.raw, 16);
	int s = server ? sock_connect(server) : sock_listen();
	struct info peer; xchg(s, &me, &peer);
	char gs[64]; inet_ntop(AF_INET6, peer.gid, gs, sizeof gs);
	printf("local QPN 0x%06x PSN 0x%06x rkey 0x%x | remote QPN 0x%06x PSN 0x%06x rkey 0x%x addr 0x%lx GID %s\n",
	       me.qpn, me.psn, me.rkey, peer.qpn, peer.psn, peer.rkey, (unsigned long)peer.addr, gs);

	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = imtu, .dest_qp_num = peer.qpn, .rq_psn = peer.psn,
		.max_dest_rd_atomic = 4, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .sgid_index = gidx, .hop_limit = 64 } } };
	memcpy(r.ah_attr.grh.dgid.raw, peer.gid, 16);
	if (ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) die("RTR");
	struct ibv_qp_attr t = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .sq_psn = me.psn, .max_rd_atomic = 4 };
	if (ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) die("RTS");
	sync_sock(s);
	if (!server && rnr_delay_ms) {
		usleep(rnr_delay_ms * 1000);
		for (int i = 0; i < 8; i++) {
			struct ibv_sge sg = { .addr = (uintptr_t)buf + 8192 + i * 4096, .length = 4096, .lkey = mr->lkey };
			struct ibv_recv_wr rw = { .wr_id = 100 + i, .sg_list = &sg, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp, &rw, &bad)) die("post_recv");
		}
		printf("server posted receives after %d ms\n", rnr_delay_ms);
	}

	if (server) {
		struct { enum ibv_wr_opcode op; int len; int flags; const char *name; } ops[] = {
			{ IBV_WR_SEND_WITH_IMM, 61, IBV_SEND_SOLICITED, "SEND_WITH_IMM 61B (solicited)" },
			{ IBV_WR_SEND_WITH_IMM, 2999, 0, "SEND_WITH_IMM 2999B" },
			{ IBV_WR_RDMA_WRITE_WITH_IMM, 61, 0, "RDMA_WRITE_WITH_IMM 61B" },
			{ IBV_WR_RDMA_WRITE_WITH_IMM, 2999, 0, "RDMA_WRITE_WITH_IMM 2999B" },
			{ IBV_WR_SEND, 0, 0, "SEND 0B" },
			{ IBV_WR_RDMA_WRITE, 0, 0, "RDMA_WRITE 0B" },
			{ IBV_WR_RDMA_WRITE, 2999, 0, "RDMA_WRITE 2999B" },
			{ IBV_WR_RDMA_READ, 2999, 0, "RDMA_READ 2999B" },
			{ IBV_WR_RDMA_READ, 0, 0, "RDMA_READ 0B" },
			{ IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 0, "ATOMIC_FETCH_AND_ADD +5" },
			{ IBV_WR_ATOMIC_CMP_AND_SWP, 8, 0, "ATOMIC_CMP_AND_SWP 5->0x1122334455667788" },
			{ IBV_WR_SEND, 61, IBV_SEND_INLINE, "SEND 61B inline" },
		};
		for (unsigned i = 0; i < sizeof ops / sizeof ops[0]; i++) {
			struct ibv_sge sg = { .addr = (uintptr_t)buf + (ops[i].op == IBV_WR_RDMA_READ ? 32768 : ops[i].op >= IBV_WR_ATOMIC_CMP_AND_SWP ? 40000 : 0),
					      .length = ops[i].len, .lkey = mr->lkey };
			struct ibv_send_wr w = { .wr_id = i, .sg_list = &sg, .num_sge = ops[i].len ? 1 : 0, .opcode = ops[i].op,
						 .send_flags = IBV_SEND_SIGNALED | ops[i].flags }, *bad;
			w.imm_data = htonl(0xA0000000u + i);
			if (ops[i].op == IBV_WR_RDMA_WRITE || ops[i].op == IBV_WR_RDMA_WRITE_WITH_IMM || ops[i].op == IBV_WR_RDMA_READ) {
				w.wr.rdma.remote_addr = peer.addr + (ops[i].op == IBV_WR_RDMA_READ ? 0 : 4096 * 10 + 0);
				w.wr.rdma.rkey = peer.rkey;
			} else if (ops[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD || ops[i].op == IBV_WR_ATOMIC_CMP_AND_SWP) {
				w.wr.atomic.remote_addr = peer.addr + 60000; w.wr.atomic.rkey = peer.rkey;
				w.wr.atomic.compare_add = 5; w.wr.atomic.swap = 0x1122334455667788ULL;
			}
			if (ibv_post_send(qp, &w, &bad)) die("post_send");
			struct ibv_wc wc = wait_cq(cq, ops[i].name);
			printf("client op %2u %-42s -> wc opcode %d byte_len %u", i + 1, ops[i].name, wc.opcode, wc.byte_len);
			if (ops[i].op >= IBV_WR_ATOMIC_CMP_AND_SWP && ops[i].op <= IBV_WR_ATOMIC_FETCH_AND_ADD)
				printf(" orig=0x%llx", (unsigned long long)*(uint64_t *)(buf + 40000));
			if (ops[i].op == IBV_WR_RDMA_READ && ops[i].len) printf(" data[0..3]=%.4s", buf + 32768);
			printf("\n");
			usleep(20000);
		}
	} else {
		/* what the client's ops 1-5 and 12 must deliver, in order: opcode, imm (0 = none), SEND byte_len (-1 = any) */
		static const struct { int opcode; uint32_t imm; int len; } want[6] = {
			{ IBV_WC_RECV, 0xA0000000u, 61 }, { IBV_WC_RECV, 0xA0000001u, 2999 },
			{ IBV_WC_RECV_RDMA_WITH_IMM, 0xA0000002u, -1 }, { IBV_WC_RECV_RDMA_WITH_IMM, 0xA0000003u, -1 },
			{ IBV_WC_RECV, 0, 0 }, { IBV_WC_RECV, 0, 61 } };
		int bad = 0;
		for (int n = 0; n < 6; n++) {
			struct ibv_wc wc = wait_cq(cq, "recv");
			uint32_t imm = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
			printf("server recv wc: opcode %d byte_len %u wc_flags 0x%x imm 0x%08x\n", wc.opcode, wc.byte_len, wc.wc_flags, imm);
			if ((int)wc.opcode != want[n].opcode || imm != want[n].imm || (want[n].len >= 0 && (int)wc.byte_len != want[n].len)) {
				printf("MISMATCH on receive %d: want opcode %d imm 0x%08x byte_len %d\n", n + 1, want[n].opcode, want[n].imm, want[n].len);
				bad = 1;
			}
		}
		if (bad) { sync_sock(s); return 1; }
	}
	sync_sock(s);
	if (!server) printf("server atomic target now 0x%llx, write target[0..3]=%.4s\n", (unsigned long long)*(uint64_t *)(buf + 60000), buf + 40960);
	printf("done\n");
	return 0;
}
