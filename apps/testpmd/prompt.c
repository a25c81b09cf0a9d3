/* droce-testpmd's interactive prompt: show port stats, show qp [N], set fwd,
 * set mtu, start, stop, clear stats, quit. It runs on the main thread; the
 * engine runs on the dataplane thread (see runner.h). */
#include "apps/testpmd/prompt.h"

#include <stddef.h>
#include <stdio.h>

#include <cmdline.h>
#include <cmdline_parse.h>
#include <cmdline_parse_num.h>
#include <cmdline_parse_string.h>
#include <cmdline_socket.h>

static const struct droce_prompt_ops *g_ops;

/* show port stats | show qp */
struct cmd_show {
  cmdline_fixed_string_t show;
  cmdline_fixed_string_t what;
};
static void cmd_show_port_parsed(void *r, struct cmdline *cl, void *data) {
  (void)r, (void)cl, (void)data;
  g_ops->show_port_stats(g_ops->ctx);
}
static void cmd_show_qp_parsed(void *r, struct cmdline *cl, void *data) {
  (void)r, (void)cl, (void)data;
  g_ops->show_qp(g_ops->ctx, -1);
}
struct cmd_show_qp_n {
  cmdline_fixed_string_t show, qp;
  uint32_t qpn;
};
static void cmd_show_qp_n_parsed(void *r, struct cmdline *cl, void *data) {
  (void)cl, (void)data;
  g_ops->show_qp(g_ops->ctx, (int)((struct cmd_show_qp_n *)r)->qpn);
}
static cmdline_parse_token_string_t tok_sq_show = TOKEN_STRING_INITIALIZER(struct cmd_show_qp_n, show, "show");
static cmdline_parse_token_string_t tok_sq_qp = TOKEN_STRING_INITIALIZER(struct cmd_show_qp_n, qp, "qp");
static cmdline_parse_token_num_t tok_sq_qpn = TOKEN_NUM_INITIALIZER(struct cmd_show_qp_n, qpn, RTE_UINT32);
static cmdline_parse_token_string_t tok_show = TOKEN_STRING_INITIALIZER(struct cmd_show, show, "show");
static cmdline_parse_token_string_t tok_qp = TOKEN_STRING_INITIALIZER(struct cmd_show, what, "qp");
struct cmd_show_port {
  cmdline_fixed_string_t show, port, stats;
};
static cmdline_parse_token_string_t tok_sp_show = TOKEN_STRING_INITIALIZER(struct cmd_show_port, show, "show");
static cmdline_parse_token_string_t tok_sp_port = TOKEN_STRING_INITIALIZER(struct cmd_show_port, port, "port");
static cmdline_parse_token_string_t tok_sp_stats = TOKEN_STRING_INITIALIZER(struct cmd_show_port, stats, "stats");
static cmdline_parse_inst_t cmd_show_port_stats = {
    cmd_show_port_parsed, NULL, "show port stats: port and device counters",
    {(void *)&tok_sp_show, (void *)&tok_sp_port, (void *)&tok_sp_stats, NULL}};
static cmdline_parse_inst_t cmd_show_qp = {
    cmd_show_qp_parsed, NULL, "show qp: every QP's state and counters", {(void *)&tok_show, (void *)&tok_qp, NULL}};
static cmdline_parse_inst_t cmd_show_qp_n = {
    cmd_show_qp_n_parsed, NULL, "show qp N: one QP's state and counters (N: 17 or 0x11)",
    {(void *)&tok_sq_show, (void *)&tok_sq_qp, (void *)&tok_sq_qpn, NULL}};

/* set fwd ENGINE */
struct cmd_set_fwd {
  cmdline_fixed_string_t set, fwd, engine;
};
static void cmd_set_fwd_parsed(void *r, struct cmdline *cl, void *data) {
  (void)cl, (void)data;
  g_ops->set_fwd(g_ops->ctx, ((struct cmd_set_fwd *)r)->engine);
}
static cmdline_parse_token_string_t tok_sf_set = TOKEN_STRING_INITIALIZER(struct cmd_set_fwd, set, "set");
static cmdline_parse_token_string_t tok_sf_fwd = TOKEN_STRING_INITIALIZER(struct cmd_set_fwd, fwd, "fwd");
static cmdline_parse_token_string_t tok_sf_engine = TOKEN_STRING_INITIALIZER(
    struct cmd_set_fwd, engine, "write_bw#read_bw#send_bw#atomic_bw#write_lat#raw_lat#raw_stream");
static cmdline_parse_inst_t cmd_set_fwd = {
    cmd_set_fwd_parsed, NULL, "set fwd write_bw|read_bw|send_bw|atomic_bw|write_lat|raw_lat|raw_stream",
    {(void *)&tok_sf_set, (void *)&tok_sf_fwd, (void *)&tok_sf_engine, NULL}};

/* set mtu N */
struct cmd_set_mtu {
  cmdline_fixed_string_t set, mtu;
  uint32_t value;
};
static void cmd_set_mtu_parsed(void *r, struct cmdline *cl, void *data) {
  (void)cl, (void)data;
  g_ops->set_mtu(g_ops->ctx, ((struct cmd_set_mtu *)r)->value);
}
static cmdline_parse_token_string_t tok_sm_set = TOKEN_STRING_INITIALIZER(struct cmd_set_mtu, set, "set");
static cmdline_parse_token_string_t tok_sm_mtu = TOKEN_STRING_INITIALIZER(struct cmd_set_mtu, mtu, "mtu");
static cmdline_parse_token_num_t tok_sm_value = TOKEN_NUM_INITIALIZER(struct cmd_set_mtu, value, RTE_UINT32);
static cmdline_parse_inst_t cmd_set_mtu = {
    cmd_set_mtu_parsed, NULL, "set mtu 256|512|1024|2048|4096 (before the first start)",
    {(void *)&tok_sm_set, (void *)&tok_sm_mtu, (void *)&tok_sm_value, NULL}};

/* start | stop | quit | clear stats */
struct cmd_word {
  cmdline_fixed_string_t word;
};
static void cmd_start_parsed(void *r, struct cmdline *cl, void *data) {
  (void)r, (void)cl, (void)data;
  g_ops->start(g_ops->ctx);
}
static void cmd_stop_parsed(void *r, struct cmdline *cl, void *data) {
  (void)r, (void)cl, (void)data;
  g_ops->stop(g_ops->ctx);
}
static void cmd_quit_parsed(void *r, struct cmdline *cl, void *data) {
  (void)r, (void)data;
  cmdline_quit(cl);
}
static cmdline_parse_token_string_t tok_start = TOKEN_STRING_INITIALIZER(struct cmd_word, word, "start");
static cmdline_parse_token_string_t tok_stop = TOKEN_STRING_INITIALIZER(struct cmd_word, word, "stop");
static cmdline_parse_token_string_t tok_quit = TOKEN_STRING_INITIALIZER(struct cmd_word, word, "quit");
static cmdline_parse_inst_t cmd_start = {cmd_start_parsed, NULL, "start: run the engine in the background", {(void *)&tok_start, NULL}};
static cmdline_parse_inst_t cmd_stop = {cmd_stop_parsed, NULL, "stop: end the engine, print its result", {(void *)&tok_stop, NULL}};
static cmdline_parse_inst_t cmd_quit = {cmd_quit_parsed, NULL, "quit", {(void *)&tok_quit, NULL}};
struct cmd_clear {
  cmdline_fixed_string_t clear, stats;
};
static void cmd_clear_parsed(void *r, struct cmdline *cl, void *data) {
  (void)r, (void)cl, (void)data;
  g_ops->clear_stats(g_ops->ctx);
}
static cmdline_parse_token_string_t tok_cl_clear = TOKEN_STRING_INITIALIZER(struct cmd_clear, clear, "clear");
static cmdline_parse_token_string_t tok_cl_stats = TOKEN_STRING_INITIALIZER(struct cmd_clear, stats, "stats");
static cmdline_parse_inst_t cmd_clear = {
    cmd_clear_parsed, NULL, "clear stats", {(void *)&tok_cl_clear, (void *)&tok_cl_stats, NULL}};

static cmdline_parse_ctx_t main_ctx[] = {
    &cmd_show_port_stats, &cmd_show_qp, &cmd_show_qp_n, &cmd_set_fwd, &cmd_set_mtu,
    &cmd_start,           &cmd_stop,    &cmd_quit,      &cmd_clear,   NULL,
};

void droce_prompt_run(const struct droce_prompt_ops *ops) {
  g_ops = ops;
  setvbuf(stdout, NULL, _IONBF, 0); /* answers in order with the echoed commands */
  struct cmdline *cl = cmdline_stdin_new(main_ctx, "droce> ");
  if (cl == NULL) {
    fprintf(stderr, "droce-testpmd: cannot start the prompt\n");
    return;
  }
  cmdline_interact(cl);
  cmdline_stdin_exit(cl);
}
